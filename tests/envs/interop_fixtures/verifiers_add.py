"""A verifiers 0.4 taskset written with its own API: TaskData, @vf.reward/@vf.metric, a Toolset."""

import verifiers.v1 as vf


class AddData(vf.TaskData):
    answer: int


class AddTask(vf.Task[AddData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def correct(self, task, trace) -> float:
        return float(trace.last_reply.strip() == str(task.answer))

    @vf.metric
    async def turns(self, trace) -> float:
        return float(trace.num_turns)


class AddTaskset(vf.Taskset[AddTask, vf.TasksetConfig]):
    def load(self):
        for a, b in [(2, 3), (10, 7)]:
            yield AddTask(
                AddData(
                    prompt=f"What is {a} + {b}? Reply with the number only.",
                    system_prompt="Be terse.",
                    answer=a + b,
                ),
                self.config.task,
            )


class CalcToolset(vf.Toolset):
    @vf.tool
    async def add(self, a: int, b: int) -> int:
        """Add two integers."""
        return a + b


class ToolTask(AddTask):
    @classmethod
    def toolsets(cls, config):
        return [CalcToolset(vf.ToolsetConfig())]


class ToolTaskset(vf.Taskset[ToolTask, vf.TasksetConfig]):
    def load(self):
        yield ToolTask(AddData(prompt="Use add: what is 123 + 456?", answer=579), self.config.task)

"""skyrl-gym envs (`skyrl_gym` package) as agentrl envs: `skyrl:gsm8k`, `skyrl:text2sql`, ...

A skyrl-gym env is built per sample from a dataset row (its `extras`: `reward_spec`,
`extra_info`, ... in SkyRL's verl-style parquet layout) and reads the model's raw reply text
(`step(action: str)`), parsing its own tool tags. So here:

* `reset(options=row)` builds the env from `row` (the trainer passes each dataset row as
  `options`); without a row, one of the `rows=` given at construction is picked by the seed.
  The row's `prompt` (chat messages) goes through the env's `init` and is the first
  observation.
* `step` hands the reply text to the env; its observations (chat dicts) become the next
  messages, its reward is the step's reward, its `done` terminates. skyrl's `metadata` and
  `get_metrics()` land in `info`.
* `env_config` (a dict) reaches the env as the OmegaConf node skyrl envs expect.

`postprocessed_action` (SkyRL trims text after a stop tag from its own token record) is kept in
`info`; agentrl's recorded tokens are what the model sampled, whatever the env reads.
"""

from __future__ import annotations

import copy
from typing import Any

from agentrl.rows import read_dataset
from agentrl.types import Message

from ..core import AgentEnv, Observation
from .text import reply_text


def _load_rows(path: str) -> list[dict[str, Any]]:
    """`data_path` rows, read by the one dataset reader (parquet, JSONL, HF folder)."""
    return [row.data for row in read_dataset(path).rows]


class SkyRLGymEnv(AgentEnv):
    family = "skyrl"
    description = "A skyrl-gym text env over dataset rows (reward_spec, extra_info)."
    max_turns = 8

    def __init__(
        self,
        name: str,
        rows: list[dict[str, Any]] | None = None,
        data_path: str | None = None,
        env_config: dict[str, Any] | None = None,
        reward_range: tuple[float, float] = (0.0, 1.0),
        max_turns: int | None = None,
    ) -> None:
        import skyrl_gym
        from omegaconf import OmegaConf

        if name not in skyrl_gym.envs.registration.registry:
            known = ", ".join(sorted(skyrl_gym.envs.registration.registry))
            raise KeyError(f"skyrl-gym has no env {name!r}; known: {known}")
        self.name, self._make = name, skyrl_gym.make
        self.rows = list(rows or []) + (_load_rows(data_path) if data_path else [])
        self.env_config = OmegaConf.create(env_config or {})
        self.reward_range = reward_range
        if max_turns is not None:
            self.max_turns = max_turns
        self.env: Any = None
        self.turn = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        row = options if options and "prompt" in options else self._pick()
        if self.env is not None:
            self.env.close()
        extras = {k: copy.deepcopy(v) for k, v in row.items() if k not in ("prompt", "env_class")}
        self.env = self._make(self.name, env_config=self.env_config, extras=extras)
        prompt, meta = self.env.init(_chat(row["prompt"]))
        self.turn = 0
        return Observation([_message(m) for m in prompt]), dict(meta or {})

    def _pick(self) -> dict[str, Any]:
        if not self.rows:
            raise ValueError(
                f"skyrl:{self.name}: no task: pass dataset rows (data.path=..., each row given "
                "to reset as options) or rows=/data_path= in env_kwargs"
            )
        return self.rows[int(self.np_random.integers(len(self.rows)))]

    def step(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self.env is None:
            raise RuntimeError("step() before reset()")
        self.turn += 1
        out = self.env.step(reply_text(action))
        done = bool(out["done"])
        info = {"metadata": out.get("metadata") or {}}
        if out.get("postprocessed_action") is not None:
            info["postprocessed_action"] = out["postprocessed_action"]
        if done:
            info["metrics"] = self.env.get_metrics()
        obs = Observation([_message(m) for m in out.get("observations") or []])
        truncated = not done and self.turn >= self.max_turns
        return obs, float(out["reward"]), done, truncated, info

    def close(self) -> None:
        if self.env is not None:
            self.env.close()


def _chat(prompt: Any) -> list[dict[str, Any]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [dict(m) for m in prompt]


def _message(m: dict[str, Any]) -> Message:
    role = m.get("role", "user")
    if role not in ("system", "user", "assistant", "tool"):
        raise ValueError(f"skyrl env returned a message with role {role!r}: {m!r:.200}")
    return Message(role, str(m.get("content", "")))

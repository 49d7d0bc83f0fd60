"""Running one checked request against the engine: n choices, constraints, streaming, recording.

Kept apart from the HTTP routes so the same path serves the streaming and the plain response:
both prepare the session's ids under its lock, run the `n` choices concurrently (each its own
segment branch, its own grammar state and seed), parse each turn the same way and record it
the moment it finishes. A choice that fails, times out or whose client disconnects closes its
segment as `engine_error` with the reason, so a half-done turn is never mistaken for one.
Rendering, tokenising and grammar compiling run in worker threads (`check`, `_start`): the
event loop only moves bytes, so one huge prompt cannot stall the other clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from agentrl.chat.format import ChatFormat
from agentrl.chat.parsers import parse, split_reasoning
from agentrl.engines.base import Engine, GenerateResult, SamplingParams
from agentrl.serve.constrain import (
    GrammarConstraint,
    answer_or_call,
    check_grammar,
    request_grammar,
)
from agentrl.serve.limits import ServeLimits, cheap_token_floor
from agentrl.serve.messages import choice_json, from_openai, logprob_entries, usage
from agentrl.serve.recorder import Session, SessionRecorder
from agentrl.serve.request import ChatRequest, RequestError
from agentrl.serve.stream import ChoiceStream, ChunkWriter, sse
from agentrl.types import Message, Trajectory

# How a turn the server forced is named in `metadata["constrained_turns"]`.
FORCED_NOTE = "forced by the server: force_first_tool_call"


@dataclass
class Prepared:
    messages: list[Message]
    grammar: str | None
    constrained: str | None  # which request field the grammar enforces
    tool_format: str  # "none" with tool_choice="none": nothing is parsed as a call
    max_new: int | None = None  # max_tokens clamped to the context left (set by `_start`)


@dataclass
class Choice:
    result: GenerateResult
    text: str
    message: Message


@dataclass
class Completion:
    choices: list[Choice]
    prompt_ids: list[int]

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def completion_tokens(self) -> int:
        return sum(len(c.result.token_ids) for c in self.choices)


def assistant_message(text: str, tool_format: str, turn: int, index: int) -> Message:
    """The message the client sees. Calls that failed to parse stay in the content as text,
    so the client never gets an unusable call."""
    _, rest = split_reasoning(text)
    content, calls = parse(rest, tool_format)
    good = [c for c in calls if not c.parse_error]
    if len(good) != len(calls):
        content = text.strip()
    for i, c in enumerate(good):
        c.id = f"call_{turn}_{index}_{i}_{uuid.uuid4().hex[:6]}"
    return Message("assistant", content, tool_calls=good)


class ContextLengthError(RequestError):
    """The prompt (history included) does not fit the context: a 400 with the code
    `context_length_exceeded` (as OpenAI and vLLM send it), so SDKs do not retry it."""

    code = "context_length_exceeded"


def choices_json(chat: ChatFormat, req: ChatRequest, done: Completion) -> list[dict[str, Any]]:
    out = []
    for i, c in enumerate(done.choices):
        r = c.result
        lps = (
            logprob_entries(chat, r.token_ids, r.logprobs, r.top_logprobs) if req.logprobs else None
        )
        body = choice_json(i, c.message, r.finish_reason, lps)
        if req.return_token_ids:  # vLLM's names
            body["token_ids"] = list(r.token_ids)
        out.append(body)
    return out


def _failure(result: GenerateResult | BaseException) -> str | None:
    if isinstance(result, BaseException):
        return f"{type(result).__name__}: {result}"
    if result.finish_reason in ("error", "abort"):
        return result.error or result.finish_reason
    return None


class Server:
    """The request path shared by the routes."""

    def __init__(
        self,
        engine: Engine,
        chat: ChatFormat,
        recorder: SessionRecorder,
        timeout_s: float,
        limits: ServeLimits | None = None,
    ) -> None:
        self.engine, self.chat, self.recorder, self.timeout_s = engine, chat, recorder, timeout_s
        self.limits = limits or ServeLimits()

    def _budget(self, tokens: int, what: str) -> None:
        cap = self.limits.max_prompt_tokens
        if tokens > cap:
            raise ContextLengthError(
                f"{what} of {tokens} tokens is over the cap of {cap} tokens (context length exceeded)"
            )

    def precheck(self, req: ChatRequest) -> None:
        """The token budget from the text's length alone (no rendering, no tokenising):
        cheap enough for the event loop, and it refuses a hopeless prompt before any work."""
        floor, cap = (
            cheap_token_floor(req.text_chars, self.chat.tokenizer),
            self.limits.max_prompt_tokens,
        )
        if floor > cap:
            raise ContextLengthError(
                f"the prompt's {req.text_chars} characters make at least {floor} tokens, "
                f"over the cap of {cap} tokens (context length exceeded)"
            )

    def check(self, req: ChatRequest) -> Prepared:
        """What can be refused before touching the session (400s): the messages, the
        engine's features, the grammar (compiled: call it in a worker thread). The prompt is
        not rendered here: `_start` renders what the request adds to its session (under the
        lock, also in a worker thread) and checks the budget with the history, so a
        continued session costs the new messages' render, never the whole history's again."""
        feats = self.engine.features
        if req.top_logprobs and "top_logprobs" not in feats:
            raise RequestError(f"top_logprobs: the {type(self.engine).__name__} engine has none")
        try:
            messages = from_openai(req.messages)
        except (ValueError, TypeError, AttributeError) as e:
            raise RequestError(f"messages: unsupported content: {e}") from e
        grammar = request_grammar(req, self.chat)
        field = "response_format" if req.response_format and not req.forced_call else "tool_choice"
        if grammar is not None:
            if "constraint" not in feats:
                raise RequestError(
                    f"{field}: the {type(self.engine).__name__} engine has no constrained "
                    "decoding (use the plain hf engine: agentrl serve --fast off)"
                )
            check_grammar(grammar, self.chat, field)
        # A JSON answer is never a tool call (the `json` format would parse one out of it),
        # unless the grammar was a call or the answer (`answer_or_call`) or a forced call.
        answer_only = req.response_format is not None and not req.forced_call
        unparsed = req.tool_choice == "none" or (answer_only and not answer_or_call(req, self.chat))
        fmt = "none" if unparsed else self.chat.tool_format
        constrained = None
        if grammar is not None:
            constrained = field if field == "response_format" else f"tool_choice={req.tool_choice}"
            if req.forced_by_server:
                constrained += f" ({FORCED_NOTE})"
        return Prepared(messages, grammar, constrained, fmt)

    def _params(self, req: ChatRequest, prep: Prepared, i: int, on_token: Any) -> SamplingParams:
        seed = None if req.params.seed is None else req.params.seed + i
        constraint = GrammarConstraint(prep.grammar, self.chat) if prep.grammar else None
        cap = min(req.params.max_new_tokens, prep.max_new or req.params.max_new_tokens)
        return dataclasses.replace(
            req.params, seed=seed, constraint=constraint, on_token=on_token, max_new_tokens=cap
        )

    async def _start(
        self, req: ChatRequest, prep: Prepared, session: Session
    ) -> tuple[list[int], list[Trajectory]]:
        """Plan in a worker thread (render, tokenise), then record on the loop; a request
        refused here (cannot render, over the budget with its history) records nothing."""
        try:
            plan = await asyncio.to_thread(self.recorder.plan, session, prep.messages, req.tools)
        except Exception as e:  # noqa: BLE001 - e.g. an observation the template rejects
            raise RequestError(f"cannot render messages: {e}") from e
        history = len(plan.traj.input_ids) if plan.traj is not None else 0
        self._budget(history + len(plan.ids), "the session's prompt")
        # max_tokens past the context is clamped to what is left, as vLLM does (its
        # `get_max_tokens`: min(max_tokens, max_model_len - prompt)); the context is the
        # prompt cap plus one (`agentrl serve` sets the cap to the model's context less one)
        prep.max_new = self.limits.max_prompt_tokens + 1 - (history + len(plan.ids))
        ids, traj = self.recorder.apply(session, plan, req.tools)
        return ids, self.recorder.branch(session, traj, req.n)

    def _commit(
        self, traj: Trajectory, result: GenerateResult, prep: Prepared, i: int, temp: float
    ) -> Choice:
        text = self.chat.sampled_text(result.token_ids)
        message = assistant_message(text, prep.tool_format, len(traj.turns), i)
        self.recorder.commit(traj, result, text, message, prep.constrained, temp)
        return Choice(result, text, message)

    async def complete(self, req: ChatRequest, prep: Prepared, sid: str) -> Completion | Exception:
        session = self.recorder.session(sid)
        try:
            return await self._complete(req, prep, sid, session)
        finally:
            self.recorder.release(session)

    async def _complete(
        self, req: ChatRequest, prep: Prepared, sid: str, session: Session
    ) -> Completion | Exception:
        async with session.lock:  # a session's turns are sequential by nature
            try:
                ids, trajs = await self._start(req, prep, session)
            except RequestError as e:
                return e
            runs = [
                self.engine.generate(ids, self._params(req, prep, i, None), session_id=sid)
                for i in range(req.n)
            ]
            try:
                results: list[Any] = await asyncio.wait_for(
                    asyncio.gather(*runs, return_exceptions=True), self.timeout_s
                )
            except asyncio.TimeoutError:
                results = [TimeoutError(f"no result in {self.timeout_s}s")] * req.n
            errors = [_failure(r) for r in results]
            if any(errors):
                error = next(e for e in errors if e)
                for traj, err in zip(trajs, errors, strict=True):
                    self.recorder.fail(traj, err or f"another choice failed: {error}")
                return RuntimeError(error)
            choices = [
                self._commit(t, r, prep, i, req.params.temperature)
                for i, (t, r) in enumerate(zip(trajs, results, strict=True))
            ]
        return Completion(choices, list(ids))

    async def open_stream(
        self, req: ChatRequest, prep: Prepared, sid: str, model: str
    ) -> AsyncIterator[str]:
        """The SSE events of one streamed completion, once its prompt is planned and
        recorded: a request refused there (context overflow, a template that cannot render
        it) raises `RequestError` here, before any byte of the stream is sent, so it is a
        plain 400 and not an HTTP 200 carrying an error event."""
        events = self.stream(req, prep, sid, model)
        try:
            started = await events.__anext__()
        except StopAsyncIteration:  # pragma: no cover - `_stream` always yields once
            started = ""
        assert started == "", "the first event of `_stream` marks its start"
        return events

    async def stream(
        self, req: ChatRequest, prep: Prepared, sid: str, model: str
    ) -> AsyncIterator[str]:
        """SSE events of one streamed completion (see `stream`); after the start, errors are
        an error event. The first item is "" (the start; see `open_stream`)."""
        session = self.recorder.session(sid)
        try:  # closed explicitly: a client that leaves must fail its choices now, not at GC
            async with contextlib.aclosing(self._stream(req, prep, sid, model, session)) as events:
                async for event in events:
                    yield event
        finally:
            self.recorder.release(session)

    async def _stream(
        self, req: ChatRequest, prep: Prepared, sid: str, model: str, session: Session
    ) -> AsyncGenerator[str, None]:
        writer = ChunkWriter(model, req.logprobs, self.chat, req.return_token_ids)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[int, Any, float, Any]] = asyncio.Queue()
        live = "stream" in self.engine.features
        async with session.lock:
            ids, trajs = await self._start(req, prep, session)  # a RequestError: no stream
            writer.prompt_ids = list(ids) if req.return_token_ids else None
            yield ""

            def hook(i: int) -> Any:
                def on_token(tok: int, lp: float, top: list[tuple[int, float]]) -> None:
                    loop.call_soon_threadsafe(queue.put_nowait, (i, tok, lp, top))

                return on_token if live else None

            tasks = [
                asyncio.ensure_future(
                    self.engine.generate(ids, self._params(req, prep, i, hook(i)), session_id=sid)
                )
                for i in range(req.n)
            ]

            def finished(i: int, _: object) -> None:
                queue.put_nowait((i, None, 0.0, None))

            for i, t in enumerate(tasks):
                t.add_done_callback(functools.partial(finished, i))
            open_ = set(range(req.n))
            committed: list[Choice] = []
            errors: dict[int, str] = {}
            try:
                async for event in self._events(
                    req, prep, writer, queue, tasks, trajs, open_, committed, errors
                ):
                    yield event
                if req.include_usage and not open_:  # every choice finished and committed
                    done = sum(len(c.result.token_ids) for c in committed)
                    yield writer.usage_chunk(usage(len(ids), done))
                yield sse("[DONE]")
            finally:
                for t in tasks:
                    t.cancel()
                for i in sorted(open_):  # a choice failed, or the client left
                    self.recorder.fail(trajs[i], errors.get(i, "stream ended before it finished"))

    async def _events(
        self,
        req: ChatRequest,
        prep: Prepared,
        writer: ChunkWriter,
        queue: asyncio.Queue[tuple[int, Any, float, Any]],
        tasks: Sequence[asyncio.Future[GenerateResult]],
        trajs: list[Trajectory],
        open_: set[int],
        committed: list[Choice],
        errors: dict[int, str],
    ) -> AsyncIterator[str]:
        """Chunks until every choice is done; on a failure, an error event and stop (the
        failed and the unfinished choices stay in `open_`, so `stream` closes them)."""
        loop = asyncio.get_running_loop()
        streams = [ChoiceStream(self.chat, prep.tool_format) for _ in tasks]
        seen: list[list[tuple[int, float, list[tuple[int, float]]]]] = [[] for _ in tasks]
        for i in range(len(tasks)):
            yield writer.chunk(i, {"role": "assistant", "content": ""})
        deadline = loop.time() + self.timeout_s
        while open_:
            wait = max(deadline - loop.time(), 0.0)
            try:
                i, tok, lp, top = await asyncio.wait_for(queue.get(), wait)
            except asyncio.TimeoutError:
                msg = f"no result in {self.timeout_s}s"
                errors.update({j: msg for j in open_})
                yield sse({"error": {"message": msg, "type": "server_error"}})
                return
            if tok is not None:
                seen[i].append((tok, lp, top or []))
                piece = streams[i].delta([s[0] for s in seen[i]])
                if piece or req.logprobs or req.return_token_ids:
                    yield writer.chunk(i, {"content": piece} if piece else {}, tokens=seen[i][-1:])
                continue
            task = tasks[i]
            result: Any = task.exception() or task.result() if not task.cancelled() else None
            error = _failure(result) if result is not None else "cancelled"
            if error:
                errors[i] = error
                yield sse({"error": {"message": f"engine failed: {error}", "type": "server_error"}})
                return
            choice = self._commit(trajs[i], result, prep, i, req.params.temperature)
            committed.append(choice)
            open_.discard(i)
            rest, calls = streams[i].final(choice.message)
            r = result
            tops = r.top_logprobs or [[] for _ in r.token_ids]
            left = list(zip(r.token_ids, r.logprobs, tops, strict=True))[len(seen[i]) :]
            if rest or (left and (req.logprobs or req.return_token_ids)):
                yield writer.chunk(i, {"content": rest} if rest else {}, tokens=left)
            for c in calls:
                yield writer.chunk(i, {"tool_calls": [c]})
            yield writer.finish_chunk(i, r.finish_reason, choice.message)

"""Realistic multi-turn trajectories built token-exactly from the tiny tokenizer and a real env.

Each episode is assembled the way a token-in/token-out rollout does it: the prompt is the
chat template with tools, each assistant turn is tokenized on its own (the "sampled" span,
mask 1) and each tool answer is the template's tool turn plus the next generation prompt
(mask 0). The calculator really runs, so tool results and errors are genuine.
"""

from __future__ import annotations

import base64
import io
import json
import math
import random
from typing import Any

from agentrl.envs import make
from agentrl.types import Message, ToolCall, Trajectory, Turn


def _ids(tok: Any, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


def _png_b64() -> str:
    from PIL import Image

    img = Image.new("RGB", (24, 16), (30, 120, 200))
    for x in range(8):
        img.putpixel((x * 3, 8), (250, 250, 0))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def build_episode(
    tok: Any,
    seed: int,
    *,
    correct: bool = True,
    compact_json: bool = False,
    bad_expression: bool = False,
    termination: str = "done",
    trainer_logprobs: bool = False,
    image: bool = False,
    env_id: str = "math/calc-easy-v0",
) -> Trajectory:
    rng = random.Random(seed)
    env = make(env_id)
    obs, _ = env.reset(seed=seed)
    tools = obs.tools
    messages = list(obs.messages)
    prompt_text = tok.apply_chat_template(
        [m.to_chat() for m in messages], tools=tools, tokenize=False, add_generation_prompt=True
    )
    traj = Trajectory(prompt_ids=_ids(tok, prompt_text), env_id=env_id, group_id=f"g{seed // 2}")
    traj.metadata["tools"] = tools
    expr = env.task.info["expression"]
    n_turns = 3 if bad_expression else 2
    reward = 0.0
    for k in range(n_turns):
        final = k == n_turns - 1 and termination == "done"
        if final:
            answer = env.task.answer if correct else "999"
            msg = Message("assistant", f"The answer is \\boxed{{{answer}}}.")
            sampled = msg.content + "<|im_end|>"
        else:
            args = {"expression": expr + (" +" if bad_expression else "")}
            call = ToolCall("calculator", args, id=f"call_{k}")
            body = json.dumps({"name": "calculator", "arguments": args})
            if compact_json:
                body = json.dumps({"name": "calculator", "arguments": args}, separators=(",", ":"))
            msg = Message("assistant", "", tool_calls=[call])
            sampled = f"<tool_call>{body}</tool_call><|im_end|>"
        ids = _ids(tok, sampled)
        start = len(traj.response_ids)
        traj.append(ids, trained=True, logprobs=[-abs(rng.gauss(0.3, 0.4)) for _ in ids])
        messages.append(msg)
        o, r, term, trunc, info = env.step(msg)
        turn = Turn(
            start=start,
            end=len(traj.response_ids),
            obs_end=0,
            text=sampled,
            tool_calls=msg.tool_calls,
        )
        turn.finish_reason = "stop"
        if not final:
            turn.tool_results = list(info.get("tool_results", []))
            chat = [m.to_chat() for m in o.messages]
            obs_text = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
            traj.append(_ids(tok, "\n" + obs_text), trained=False)
            messages += o.messages
        turn.obs_end = len(traj.response_ids)
        turn.reward = float(r)
        reward = float(r)
        traj.turns.append(turn)
    traj.messages = messages
    traj.reward = reward
    traj.termination = termination
    if termination == "env_error":
        traj.metadata["error"] = "RuntimeError: calculator backend went away"
    if trainer_logprobs:
        traj.metadata["trainer_logprobs"] = [
            lp + (rng.gauss(0, 0.05) if m else 0.0)
            for lp, m in zip(traj.logprobs, traj.loss_mask, strict=True)
        ]
    if image:
        traj.multimodal["images"] = [_png_b64(), {"data": _png_b64(), "turn": 1}]
    traj.validate()
    assert all(math.isfinite(x) for x in traj.logprobs)
    env.close()
    return traj


def standard_episodes(tok: Any) -> list[Trajectory]:
    """Six episodes covering every badge the viewer draws."""
    return [
        build_episode(tok, 0, trainer_logprobs=True),
        build_episode(tok, 1, correct=False),
        build_episode(tok, 2, compact_json=True, trainer_logprobs=True),
        build_episode(tok, 3, bad_expression=True, termination="max_turns"),
        build_episode(tok, 4, termination="env_error"),
        build_episode(tok, 5, image=True, env_id="math/calc-v0"),
    ]


def stamp_versions(t: Trajectory, old: int, new: int, landed: int) -> Trajectory:
    """Stamp the versions a pipelined run records (`trainer.async` with partial rollouts):
    sampled tokens before response token `landed` came from policy `old`, the rest from `new`
    (the update landed mid-episode); env/tool tokens carry -1."""
    t.weight_versions = [
        -1 if not m else (old if k < landed else new) for k, m in enumerate(t.loss_mask)
    ]
    t.validate()
    return t

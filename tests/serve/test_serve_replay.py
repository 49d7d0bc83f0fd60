"""`agentrl serve --replay`: a session recorded by the real server (real engine, tiny calc agent,
greedy) replayed against checkpoints.

- the same checkpoint: every sampled token's log-prob within float rounding, no divergence;
- a perturbed checkpoint (saved with `save_pretrained`): the embedding of one token that first
  appears in an observation is replaced, so by causality nothing before it changes. Where the
  replay says the checkpoint diverges is checked independently: the perturbed checkpoint is
  served greedily to the same client and the first turn (and token) where its answers differ
  from the recorded ones must be the replay's;
- another chat template or vocabulary is refused by name; bad files are one clear error.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.tools.calculator import calculator
from agentrl.tools.core import build_schema
from agentrl.types import Trajectory, read_jsonl

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi", reason="agentrl serve needs the serve extra")

from agentrl.cli.replay import load_checkpoint, render  # noqa: E402
from agentrl.serve import replay  # noqa: E402
from agentrl.serve.replay import ReplayError, replay_file  # noqa: E402

TOOLS = [build_schema(calculator)]
# Measured: the same float32 checkpoint on CPU, the engine's KV-cached decode against the
# replay's one-pass forward, differs by at most 1.9e-6 nats per token on this session.
ROUNDING = 1e-5


def record(
    model_dir: Path, out: Path, turns: int = 3, first: dict[str, Any] | None = None
) -> Trajectory:
    """A greedy 3-turn session through the real server and hf engine; the client's next
    message depends only on the assistant's last one (a tool result or a follow-up).
    `first`: extra request fields of the first turn."""
    from live_server import live_server

    from agentrl.cli.rollout import load_engine
    from agentrl.serve import create_app

    engine, chat = load_engine(str(model_dir), "cpu", 4, fast=False)
    app = create_app(engine, chat, out=out, tokenizer_name=str(model_dir))
    with live_server(app) as url:
        client = openai.OpenAI(base_url=f"{url}/s/s1/v1", api_key="unused", max_retries=0)
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "What is 12 + 30 * 2?"}]
        for k in range(turns):
            reply = client.chat.completions.create(
                model="m",
                messages=msgs,
                tools=TOOLS,
                max_tokens=40,
                temperature=0,
                **((first or {}) if k == 0 else {}),
            )
            message = reply.choices[0].message
            msgs.append(message.model_dump(exclude_none=True))
            if message.tool_calls:
                msgs.append(
                    {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "72"}
                )
            else:
                msgs.append({"role": "user", "content": "Check it again."})
    (seg,) = list(read_jsonl(out))
    return seg


def perturbed(src: Path, token: int, out: Path) -> Path:
    """`src` with token `token`'s input embedding replaced by a large random vector (the
    output head untied first, so only inputs at and after that token change)."""
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb[token] = torch.randn(emb.shape[1], generator=gen) * emb.norm(dim=1).mean() * 4
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The recorded session (a.jsonl), the perturbation and the perturbed model's own session."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))
    from agent_model import agent_path

    tmp = tmp_path_factory.mktemp("replay")
    model_dir = agent_path()
    seg = record(model_dir, tmp / "a.jsonl")
    first = seg.turns[0]
    seen = set(seg.prompt_ids) | set(seg.response_ids[: first.end])
    at = next(j for j in range(first.end, len(seg.response_ids)) if seg.response_ids[j] not in seen)
    other = perturbed(model_dir, seg.response_ids[at], tmp / "perturbed")
    return {
        "dir": model_dir,
        "file": tmp / "a.jsonl",
        "seg": seg,
        "changed_at": at,  # the first response position whose input differs
        "perturbed": other,
        "perturbed_seg": record(other, tmp / "b.jsonl"),
        "tmp": tmp,
    }


def test_recorded_turn_sampling(served: dict[str, Any]) -> None:
    seg = served["seg"]
    info = seg.metadata["turn_sampling"]
    assert [i["temperature"] for i in info] == [0.0] * len(seg.turns)
    at = [i["message"] for i in info]
    assert at == sorted(set(at)) and all(seg.messages[i].role == "assistant" for i in at)
    assert len(seg.metadata["vocab_sha256"]) == 64


def test_same_checkpoint_no_divergence(served: dict[str, Any]) -> None:
    net, chat = load_checkpoint(str(served["dir"]), "cpu", "float32")
    result = replay_file(served["file"], net, chat)
    (seg,) = result.segments
    assert seg.sampled == sum(served["seg"].loss_mask) and seg.turns == 3
    assert seg.max_abs_delta < ROUNDING and seg.divergence is None
    assert abs(seg.kl_k3) < ROUNDING
    assert result.notes == []  # template and vocab checked, every temperature recorded


def test_perturbed_checkpoint_diverges_where_it_would_have(
    served: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = served["seg"], served["perturbed_seg"]
    net, chat = load_checkpoint(str(served["perturbed"]), "cpu", "float32")
    result = replay_file(served["file"], net, chat, model_name="perturbed")
    (seg,) = result.segments
    monkeypatch.setattr(replay, "ROWS", 7)  # the log-softmax in row chunks: the same answer
    assert replay_file(served["file"], net, chat, model_name="perturbed") == result
    assert seg.max_abs_delta > 0.1 and seg.kl_k3 > 0
    # causality: tokens before the changed input are scored as recorded
    early = [t for t in seg.tokens if t["position"] < served["changed_at"]]
    assert early and max(abs(t["delta"]) for t in early) < ROUNDING
    # independently: where the perturbed checkpoint, served greedily to the same client,
    # first answered differently
    differs = [
        (k, next((i for i, (x, y) in enumerate(zip(sa, sb, strict=False)) if x != y), None))
        for k, (ta, tb) in enumerate(zip(a.turns, b.turns, strict=True))
        if (sa := a.response_ids[ta.start : ta.end]) != (sb := b.response_ids[tb.start : tb.end])
    ]
    assert differs, "the perturbation changed no greedy answer"
    turn, offset = differs[0]
    d = seg.divergence
    assert d is not None and d.turn == turn
    assert turn >= 1  # the perturbed input comes after turn 0
    assert d.position - a.turns[turn].start == offset
    assert d.checkpoint_token == b.response_ids[b.turns[turn].start + offset]
    assert d.recorded_token == a.response_ids[d.position]
    assert a.messages[d.message].role == "assistant"
    assert d.message == a.metadata["turn_sampling"][turn]["message"]
    assert a.turns[turn].text[: d.char_offset].endswith(d.before)
    # the prob criterion: the first sampled token the checkpoint gives p < threshold
    by_prob = replay_file(served["file"], net, chat, criterion="prob", threshold=0.05)
    low = [t for t in seg.tokens if math.exp(t["checkpoint"]) < 0.05]
    got = by_prob.segments[0].divergence
    assert (got.position if got else None) == (low[0]["position"] if low else None)


def test_cli_table_and_json(served: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "replay.json"
    cmd = [sys.executable, "-m", "agentrl.cli", "serve", "--replay", str(served["file"])]
    cmd += ["--model", str(served["perturbed"]), "--device", "cpu", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    (seg,) = data["segments"]
    assert f"session {seg['session']}" in proc.stdout and "divergence" in proc.stdout
    assert f"turn {seg['divergence']['turn']}," in proc.stdout
    assert seg["divergence"]["turn"] >= 1 and len(seg["tokens"]) == seg["sampled"]
    assert data["criterion"] == "argmax" and seg["temperatures"] == [0.0, 0.0, 0.0]


def _variant(
    src: Path, out: Path, *, template: str | None = None, token: str | None = None
) -> Path:
    tok = AutoTokenizer.from_pretrained(src)
    if template is not None:
        tok.chat_template = template
    if token is not None:
        tok.add_tokens([token])
    AutoModelForCausalLM.from_pretrained(src).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_other_template_or_vocab_refused(served: dict[str, Any], tmp_path: Path) -> None:
    src = served["dir"]
    chat_template = AutoTokenizer.from_pretrained(src).chat_template
    other = _variant(src, tmp_path / "tpl", template=chat_template + "{# changed #}")
    net, chat = load_checkpoint(str(other), "cpu", "float32")
    with pytest.raises(ReplayError, match=r"chat template differs.*--force") as e:
        replay_file(served["file"], net, chat)
    assert "\n" not in str(e.value) and "s1/0" in str(e.value)
    forced = replay_file(served["file"], net, chat, force=True)
    assert forced.notes[0].startswith("forced: ") and "chat template differs" in forced.notes[0]
    assert forced.segments[0].max_abs_delta < ROUNDING  # same weights, same ids
    vocab = _variant(src, tmp_path / "vocab", token="<not_recorded>")
    net, chat = load_checkpoint(str(vocab), "cpu", "float32")
    with pytest.raises(ReplayError, match="vocabulary differs"):
        replay_file(served["file"], net, chat)
    cmd = [sys.executable, "-m", "agentrl.cli", "serve", "--replay", str(served["file"])]
    proc = subprocess.run(
        [*cmd, "--model", str(other), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    (line,) = proc.stdout.strip().splitlines()
    assert line.startswith("agentrl serve --replay: ") and "chat template differs" in line


def test_bad_files_are_one_clear_error(served: dict[str, Any], tmp_path: Path) -> None:
    net, chat = load_checkpoint(str(served["dir"]), "cpu", "float32")
    good = served["file"].read_text().splitlines()[0]
    cases = {
        "garbage.jsonl": (good + "\n{not json\n", r"garbage.jsonl:2: bad trajectory line"),
        "empty.jsonl": ("", "no recorded segment holds a sampled token"),
        "prompt.jsonl": (Trajectory(prompt_ids=[1, 2]).to_json() + "\n", "no recorded segment"),
        "missing.jsonl": (None, "no such file"),
    }
    broken = Trajectory.from_json(good)
    broken.loss_mask[broken.turns[0].start] = 0
    cases["untiled.jsonl"] = (broken.to_json() + "\n", r"segment .*s1/0: turn 0: loss mask")
    for name, (text, msg) in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(ReplayError, match=msg):
            replay_file(path, net, chat)
    outside = Trajectory.from_json(good)
    outside.prompt_ids[0] = 10**6
    (tmp_path / "outside.jsonl").write_text(outside.to_json() + "\n")
    with pytest.raises(ReplayError, match="outside the checkpoint's vocabulary"):
        replay_file(tmp_path / "outside.jsonl", net, chat)


def test_older_file_replays_with_notes(served: dict[str, Any], tmp_path: Path) -> None:
    """A file from before the server recorded hashes and temperatures: not checked, and
    replayed at the given temperature (here the one it was sampled at)."""
    old = Trajectory.from_json(served["file"].read_text().splitlines()[0])
    for key in ("turn_sampling", "vocab_sha256", "chat_template_sha256"):
        old.metadata.pop(key)
    (tmp_path / "old.jsonl").write_text(old.to_json() + "\n")
    net, chat = load_checkpoint(str(served["dir"]), "cpu", "float32")
    result = replay_file(tmp_path / "old.jsonl", net, chat, default_temperature=0.0)
    assert any("no template or vocabulary hash" in n for n in result.notes)
    assert any("3 turn(s) record no temperature" in n for n in result.notes)
    (seg,) = result.segments
    assert seg.max_abs_delta < ROUNDING and seg.divergence is None
    render(result)  # the table renders without a terminal


def test_constrained_turn_not_a_divergence(served: dict[str, Any], tmp_path: Path) -> None:
    """A turn sampled under a grammar is scored (its logprobs are the unmasked model's) but
    not checked for divergence: the grammar, not the model, chose tokens the same checkpoint's
    unmasked argmax would not."""
    pytest.importorskip("llguidance", reason="response_format needs the serve extra")
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema, "strict": True}}
    # tool_choice none: with tools under auto the grammar would allow the call this model
    # makes greedily (`answer_or_call`), and change no token
    first = {"response_format": fmt, "tool_choice": "none"}
    seg = record(served["dir"], tmp_path / "c.jsonl", turns=2, first=first)
    assert seg.metadata["constrained_turns"] == {"0": "response_format"}
    net, chat = load_checkpoint(str(served["dir"]), "cpu", "float32")
    (got,) = replay_file(tmp_path / "c.jsonl", net, chat).segments
    masked = [t for t in got.tokens if t["turn"] == 0 and t["argmax"] != t["token"]]
    assert masked, "the grammar changed no greedy token: the test shows nothing"
    assert got.divergence is None and got.max_abs_delta < ROUNDING

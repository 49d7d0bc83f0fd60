"""Viewer data, page assembly, template-drift diff and the `agentrl view` CLI (no browser)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from viewer_trajs import build_episode, stamp_versions

from agentrl.cli import main
from agentrl.types import Message, Trajectory, write_jsonl
from agentrl.viewer import build_records, render_page, template_drift, write_view
from agentrl.viewer.episodes import summary


def test_records_carry_mask_logprobs_and_text(episodes: list[Trajectory], tokenizer: Any) -> None:
    recs = build_records(episodes, tokenizer)
    for t, r in zip(episodes, recs, strict=True):
        assert r["resp"]["mask"] == t.loss_mask
        assert len(r["resp"]["text"]) == len(t.response_ids)
        assert "".join(r["prompt"]["text"]).startswith("<|im_start|>system")
    assert recs[0]["resp"]["tlp"] is not None and recs[1]["resp"]["tlp"] is None
    assert recs[0]["turns"][0]["calls"][0]["name"] == "calculator"
    assert (
        recs[0]["turns"][0]["results"][0]["content"] == episodes[0].turns[0].tool_results[0].content
    )
    assert "tools" not in recs[0]["meta"] and "trainer_logprobs" not in recs[0]["meta"]
    assert any("failed" in e for e in recs[3]["errors"])  # calculator errors on "a - b +"
    assert recs[4]["errors"][0].startswith("env_error: RuntimeError")
    assert [im["turn"] for im in recs[5]["images"]] == [None, 1]
    assert all(im["src"].startswith("data:image/png;base64,") for im in recs[5]["images"])


def test_records_carry_weight_versions(episodes: list[Trajectory]) -> None:
    t = episodes[0]
    versions = [3 if m else -1 for m in t.loss_mask]
    with_versions = Trajectory.from_json(t.to_json())
    with_versions.weight_versions = versions
    recs = build_records([with_versions, t], None)
    assert recs[0]["resp"]["ver"] == versions and recs[1]["resp"]["ver"] is None


def test_records_show_where_an_update_landed(episodes: list[Trajectory]) -> None:
    """An episode whose second turn was sampled partly by the next policy: the record names
    both versions, the response token and the turn where the update landed."""
    t = episodes[3]  # three turns
    landed = t.turns[1].start + 2
    stamp_versions(t, 3, 4, landed)
    one = stamp_versions(episodes[0], 5, 5, 0)
    recs = build_records([t, one, episodes[1]], None)
    assert recs[0]["resp"]["ver"] == t.weight_versions
    assert recs[0]["versions"] == {
        "lo": 3,
        "hi": 4,
        "list": [3, 4],
        "updates": [{"token": landed, "turn": 1, "from": 3, "to": 4}],
    }
    assert recs[1]["versions"] == {"lo": 5, "hi": 5, "list": [5], "updates": []}
    assert recs[2]["versions"] is None and recs[2]["resp"]["ver"] is None
    s = summary(recs)
    assert s["versioned"] == 2 and s["mixed_versions"] == 1
    unstamped = Trajectory.from_json(episodes[1].to_json())
    unstamped.weight_versions = [-1] * len(unstamped.response_ids)  # env tokens only
    assert build_records([unstamped], None)[0]["versions"] is None


def test_records_without_tokenizer_show_ids(episodes: list[Trajectory]) -> None:
    rec = build_records(episodes[:1], None)[0]
    assert rec["resp"]["text"] is None and rec["resp"]["ids"] == episodes[0].response_ids


def test_page_is_self_contained_and_escapes_tool_output(tokenizer: Any) -> None:
    t = build_episode(tokenizer, 7)
    evil = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"
    t.turns[0].tool_results[0].content = evil
    t.messages[2].content = evil
    page = render_page(build_records([t], tokenizer), title="x <b>")
    assert len(re.findall(r"</script>", page, re.I)) == 2  # the data block and the code block
    assert "alert(1)" in page and "<img src=x" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page and "@import" not in page
    assert "<title>x &lt;b&gt;</title>" in page


def test_drift_statuses(episodes: list[Trajectory], tokenizer: Any) -> None:
    canonical = template_drift(episodes[0], tokenizer)
    # the template appends "\n" after the final <|im_end|>: harmless, not drift
    assert canonical.status == "prefix" and canonical.first is None
    compact = template_drift(episodes[2], tokenizer)  # model wrote {"name":"calculator",...}
    assert compact.status == "drift" and compact.where == "turn 0 (sampled)"
    full, n_prompt = episodes[2].input_ids, len(episodes[2].prompt_ids)
    assert tokenizer.decode(full[n_prompt : compact.first]) == '<tool_call>{"name":'
    assert compact.ops and all(op[0] != "equal" for op in compact.ops)
    assert template_drift(episodes[3], tokenizer).status == "match"  # ends on a tool turn
    env_tools = Trajectory(**{**episodes[0].__dict__, "metadata": {}})
    assert template_drift(env_tools, tokenizer).status == "prefix"  # tools from the env id
    no_tools = Trajectory(**{**episodes[0].__dict__, "metadata": {}, "env_id": ""})
    assert template_drift(no_tools, tokenizer).where == "prompt"  # tools list missing
    empty = Trajectory(prompt_ids=[1, 2], messages=[])
    assert template_drift(empty, tokenizer).status == "error"


def test_drift_from_dropped_separator(tokenizer: Any) -> None:
    """The classic bug: a rollout that drops the newline at a tool boundary."""
    t = build_episode(tokenizer, 8)
    nl = tokenizer("\n", add_special_tokens=False)["input_ids"]
    end = t.turns[0].end
    assert t.response_ids[end : end + len(nl)] == nl
    del t.response_ids[end : end + len(nl)], t.loss_mask[end : end + len(nl)]
    del t.logprobs[end : end + len(nl)]
    for u in t.turns:
        u.obs_end -= len(nl) if u.obs_end > end else 0
        u.start -= len(nl) if u.start > end else 0
        u.end -= len(nl) if u.end > end else 0
    t.validate()
    d = template_drift(t, tokenizer)
    assert d.status == "drift" and d.where == "turn 0 (env/tool)"
    assert d.first == len(t.prompt_ids) + end


def test_write_view_and_cli(
    episodes: list[Trajectory], tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "traj.jsonl"
    for t in episodes:
        t.metadata["tokenizer"] = str(tiny_dir)
    write_jsonl(src, episodes)
    res = write_view(src)  # tokenizer found in metadata
    assert res.out == tmp_path / "traj.html" and res.tokenizer == str(tiny_dir)
    assert res.summary["trained_tokens"] == sum(sum(t.loss_mask) for t in episodes)
    assert main(["view", str(src), "--diff", "--out", str(tmp_path / "d.html")]) == 0
    out = capsys.readouterr().out
    assert "template drift" in out and "turn 0 (sampled)" in out
    assert main(["view", str(src), "--diff", "--fail-on-drift"]) == 1
    capsys.readouterr()
    for t in episodes:
        t.metadata.pop("tokenizer")
    write_jsonl(src, episodes)
    assert main(["view", str(src), "-o", str(tmp_path / "ids.html")]) == 0
    assert "no tokenizer" in capsys.readouterr().out
    assert main(["view", str(src), "--diff"]) == 2
    assert main(["view", str(tmp_path / "missing.jsonl")]) == 2


def test_messages_only_episode(tokenizer: Any) -> None:
    """Single-shot data without turn records still renders (one pseudo-turn)."""
    t = Trajectory(prompt_ids=[1, 2, 3], messages=[Message("user", "hi")])
    t.append([5, 6], trained=True, logprobs=[-0.1, -0.2])
    rec = build_records([t], tokenizer)[0]
    assert rec["turns"] == [{"start": 0, "end": 2, "obs_end": 2, "reward": 0.0, "finish": ""}]

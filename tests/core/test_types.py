import json

import pytest

from agentrl.types import Message, ToolCall, ToolResult, Trajectory, Turn, read_jsonl, write_jsonl


def make_traj() -> Trajectory:
    t = Trajectory(prompt_ids=[1, 2, 3], env_id="math/calc-v0", group_id="g0")
    t.append([10, 11], trained=True, logprobs=[-0.5, -1.25])
    t.append([20, 21, 22], trained=False)
    t.turns.append(
        Turn(
            start=0,
            end=2,
            obs_end=5,
            text="call",
            tool_calls=[ToolCall("calc", {"x": 1.5}, id="c0")],
            tool_results=[ToolResult("c0", "calc", "3")],
            reward=0.0,
            finish_reason="stop",
        )
    )
    t.append([12], trained=True, logprobs=[-0.1])
    t.turns.append(Turn(start=5, end=6, obs_end=6, text="ans", reward=1.0, finish_reason="stop"))
    t.messages = [
        Message("user", "héllo"),
        Message("assistant", "", tool_calls=[ToolCall("calc", {"x": 1.5})]),
    ]
    t.reward = 1.0
    t.metadata = {"seed": 3, "nested": {"a": [1, 2.5, None]}}
    return t


def test_roundtrip_byte_exact(tmp_path):
    t = make_traj()
    t.validate()
    line = t.to_json()
    again = Trajectory.from_json(line)
    assert again == t
    assert again.to_json() == line
    p = tmp_path / "t.jsonl"
    write_jsonl(p, [t, t])
    data = p.read_bytes()
    q = tmp_path / "u.jsonl"
    write_jsonl(q, list(read_jsonl(p)))
    assert q.read_bytes() == data
    assert t.turn_rewards == [0.0, 1.0]


def test_float_precision_survives():
    t = make_traj()
    t.logprobs[0] = -0.1234567890123456789
    assert Trajectory.from_json(t.to_json()).logprobs[0] == t.logprobs[0]


def test_validate_catches_mask_errors():
    t = make_traj()
    t.loss_mask[3] = 1
    with pytest.raises(ValueError, match="turn 0"):
        t.validate()
    with pytest.raises(ValueError, match="logprob"):
        Trajectory([1]).append([1, 2], trained=True, logprobs=[0.0])


def test_bad_line_names_line_number(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(make_traj().to_json() + "\n" + json.dumps({"prompt_ids": [1], "bogus": 1}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        list(read_jsonl(p))


def test_termination_is_a_termination_reason_and_old_names_still_read():
    """`Trajectory.termination` is typed `TerminationReason` (mypy checks every writer); a
    file from an older version with another name reads back and rewrites byte-exact."""
    from typing import get_args

    from agentrl.types import TerminationReason

    reasons = set(get_args(TerminationReason))
    assert Trajectory([1]).termination in reasons
    assert {"done", "truncated", "max_turns", "timeout", "env_error", "engine_error"} <= reasons
    old = make_traj().to_json().replace('"termination":"done"', '"termination":"stopped_early"')
    back = Trajectory.from_json(old)
    assert back.termination == "stopped_early"
    assert back.to_json() == old


def test_turn_fields_are_keyword_only():
    with pytest.raises(TypeError):
        Turn(0, 2, 2)  # type: ignore[misc]
    assert Turn(start=0, end=2, obs_end=3).obs_end == 3


def test_weight_versions_round_trip_and_old_lines_unchanged(tmp_path):
    """Per-token weight versions (trainer.async) survive JSONL byte-exactly; a trajectory
    without them writes the same line as before the field existed (old files load and
    rewrite unchanged)."""
    old = make_traj()
    assert "weight_versions" not in json.loads(old.to_json())
    t = Trajectory(prompt_ids=[1])
    t.append([10, 11], trained=True, logprobs=[-0.5, -0.25], versions=[3, 4])
    t.append([20], trained=False)
    t.append([12], trained=True, logprobs=[-0.1], versions=[4])
    t.validate()
    assert t.weight_versions == [3, 4, -1, 4]
    p, q = tmp_path / "t.jsonl", tmp_path / "u.jsonl"
    write_jsonl(p, [t, old])
    write_jsonl(q, list(read_jsonl(p)))
    assert q.read_bytes() == p.read_bytes()
    late = make_traj()  # versions start mid-episode: earlier tokens read as unrecorded (-1)
    late.append([13], trained=True, logprobs=[-0.2], versions=[9])
    assert late.weight_versions == [-1] * 6 + [9]
    late.weight_versions.pop()
    with pytest.raises(ValueError, match="weight_versions"):
        late.validate()

"""The judge's frames (``_wire._recv``) read in chunks: whatever way the bytes arrive, one
call returns one frame, bytes past it wait for the next call, and a malformed or cut frame
raises (ValueError / EOFError), never returns a partial value."""

from __future__ import annotations

import os
import threading

import pytest

from agentrl.sandboxes import _wire


def frame(text: str) -> bytes:
    body = text.encode()
    return str(len(body)).encode() + b"\n" + body


@pytest.fixture()
def pipe():
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass
    _wire._PAST.pop(r, None)


def test_two_frames_in_one_write_come_back_one_per_call(pipe):
    r, w = pipe
    os.write(w, frame('["ok",1]') + frame('["ready"]'))
    assert _wire._recv(r, judge=True) == ["ok", 1]
    assert _wire._recv(r, judge=True) == ["ready"]


def test_a_frame_written_byte_by_byte_is_read_whole(pipe):
    r, w = pipe
    data = frame('["ok","' + "a" * 70_000 + '"]')  # past one chunk read (64 KiB)

    def trickle() -> None:
        for i in range(0, len(data), 997):
            os.write(w, data[i : i + 997])

    t = threading.Thread(target=trickle)
    t.start()
    got = _wire._recv(r, judge=True)
    t.join()
    assert got == ["ok", "a" * 70_000]


def test_a_head_without_newline_is_malformed(pipe):
    r, w = pipe
    os.write(w, b"1" * 13)
    with pytest.raises(ValueError):
        _wire._recv(r, judge=True)


def test_a_frame_cut_by_eof_raises_eof(pipe):
    r, w = pipe
    os.write(w, b'20\n["ok"')
    os.close(w)
    with pytest.raises(EOFError):
        _wire._recv(r, judge=True)


def test_bytes_past_a_frame_are_the_next_frame_not_lost(pipe):
    r, w = pipe
    os.write(w, frame('["a"]') + b"9\n")  # the next frame's head only
    assert _wire._recv(r, judge=True) == ["a"]
    os.write(w, b'["bcdef"]')
    assert _wire._recv(r, judge=True) == ["bcdef"]


@pytest.mark.parametrize("body", ["", " ", '["ok"] ', '["ok"]["ok"]', '["ok"', "nul", "\xff"])
def test_a_frame_that_is_not_one_json_value_is_malformed(pipe, body: str):
    """The judge reads the player's JSON on json's C scanner: exactly one value, nothing
    around it (the player writes none), else ValueError, never a partial value."""
    r, w = pipe
    os.write(w, frame(body))
    with pytest.raises(ValueError):
        _wire._recv(r, judge=True)

"""The run's init cannot be read by the program, and a forged or duplicate report is refused.

Why (issue 39, item 4): on docker the init is pid 1 of the container and runs as the same uid
as the program. It used to turn non-dumpable only after forking the program, so a program
whose first statement opened ``/proc/1/mem`` sometimes won that race, later read the report
token and the tests' nonce from the init's memory, and printed a passing report ahead of the
real one (a wrong solution passed in 2-15% of runs). The adversary below has full Python: it
hammers the init from its first line, scans whatever memory it gets for both secrets and
forges the report; it must never open the init's memory nor be verified. The host side is
checked directly too: a report that is not the single, last line of stderr is no report.
"""

from __future__ import annotations

import marshal

from agentrl.sandboxes import ExecRequest, _io
from agentrl.sandboxes.docker_backend import _take_report

HAMMER = r"""
import os, re, sys, time, marshal
mem = maps = None
end = time.monotonic() + 0.5
while time.monotonic() < end and mem is None:
    try:
        maps = open('/proc/1/maps').read()
        mem = os.open('/proc/1/mem', os.O_RDONLY)
    except OSError:
        pass
if mem is not None:
    print('OPENED the init', flush=True)
    tok = non = None
    end = time.monotonic() + 3
    while time.monotonic() < end and not (tok and non):
        for line in open('/proc/1/maps'):
            a, b = (int(x, 16) for x in line.split()[0].split('-'))
            if 'rw' not in line.split()[1] or b - a > 1 << 26:
                continue
            try:
                data = os.pread(mem, b - a, a)
            except OSError:
                continue
            tok = tok or re.search(rb'token[z\xda] ([0-9a-f]{32})', data)
            non = non or re.search(rb'nonces \x00\x00\x00([0-9a-f]{32})', data)
    if tok and non:
        rep = {'wait': 0, 'cpu': 0.0, 'verdict': b'\x1e' + non.group(1), 'full': False}
        os.write(2, b'\x1e' + tok.group(1) + marshal.dumps(rep).hex().encode() + b'\n')
        print('FORGED', flush=True)

def add(a, b):
    return a - b
"""


def test_the_program_never_reads_the_init(backend):
    seen = []
    for check in (None, "assert add(1, 2) == 3") * 8:  # the program itself, then a judged one
        res = backend.run(ExecRequest(HAMMER, check=check, timeout_s=10))
        seen += [(check is not None, res.stdout, res.verified)] if "OPENED" in res.stdout else []
        assert not res.verified, res.stdout
    assert seen == []


def _pumped(err: bytes) -> _io.Pumped:
    return _io.Pumped(bytearray(), bytearray(err))


def test_forged_or_duplicate_reports_are_refused():
    token = "ab" * 16
    line = b"\x1e" + token.encode() + marshal.dumps({"wait": 0}).hex().encode() + b"\n"
    got = _pumped(b"program output\n" + line)
    assert _take_report(got, token) == {"wait": 0} and got.err == b"program output\n"
    for err in (line + line, line + b"written after the report\n", line[:-1]):
        assert _take_report(_pumped(err), token) == {}, err

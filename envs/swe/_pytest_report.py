"""A pytest plugin (``-p agentrl_swe_report``, copied under that name) writing one JSON line per test outcome.

Why not parse pytest's terminal summary: node ids may contain spaces and the summary folds
long lines, so ids parsed from it do not round-trip. The file named by
``AGENTRL_SWE_REPORT`` gets ``{"id": nodeid, "outcome": "passed|failed|skipped"}`` per test,
worst phase wins (a failing setup or teardown fails the test). A test is ``passed`` only with
a passed *call* report from a session that finished normally: pytest re-raises
``KeyboardInterrupt`` from the call phase before any call report exists, so a passed setup
alone once read as a pass. ``AGENTRL_SWE_COLLECT`` names a file for the collected node ids.

Trust: this plugin runs in the same process as the package code, so it is only as honest as
that code lets it be; the grader accepts only source changes that cannot reach it
(``envs/swe/edits.py``).
"""

import json
import os

_RANK = {"passed": 0, "skipped": 1, "failed": 2}
_seen: dict = {}
_called: set = set()


def pytest_runtest_logreport(report):
    old = _seen.get(report.nodeid, "passed")
    if report.when == "call" and report.outcome == "passed":
        _called.add(report.nodeid)
    new = report.outcome if report.when == "call" or report.outcome != "passed" else old
    _seen[report.nodeid] = max(old, new, key=_RANK.__getitem__)


def pytest_collection_finish(session):
    path = os.environ.get("AGENTRL_SWE_COLLECT")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            for item in session.items:
                f.write(json.dumps({"id": item.nodeid, "outcome": "collected"}) + "\n")


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("AGENTRL_SWE_REPORT")
    normal = int(exitstatus) in (0, 1)  # OK or some tests failed; not interrupted or crashed
    if path:
        with open(path, "w", encoding="utf-8") as f:
            for nodeid, outcome in _seen.items():
                if outcome == "passed" and not (normal and nodeid in _called):
                    outcome = "failed"
                f.write(json.dumps({"id": nodeid, "outcome": outcome}) + "\n")

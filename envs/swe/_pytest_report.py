"""A pytest plugin (``-p agentrl_swe_report``, copied under that name) writing one JSON line per test outcome.

Why not parse pytest's terminal summary: node ids may contain spaces and the summary folds
long lines, so ids parsed from it do not round-trip. The file named by
``AGENTRL_SWE_REPORT`` gets ``{"id": nodeid, "outcome": "passed|failed|skipped"}`` per test,
worst phase wins (a failing setup or teardown fails the test).
"""

import json
import os

_RANK = {"passed": 0, "skipped": 1, "failed": 2}
_seen: dict = {}


def pytest_runtest_logreport(report):
    old = _seen.get(report.nodeid, "passed")
    new = report.outcome if report.when == "call" or report.outcome != "passed" else old
    _seen[report.nodeid] = max(old, new, key=_RANK.__getitem__)


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("AGENTRL_SWE_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            for nodeid, outcome in _seen.items():
                f.write(json.dumps({"id": nodeid, "outcome": outcome}) + "\n")

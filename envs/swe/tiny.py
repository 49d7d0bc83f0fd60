"""``minilib``: a generated-size repository for SWE episodes at CPU-quickstart scale.

Why a repo of our own beside the real sdists: a tiny model at quickstart scale cannot read a
400-line module, and CI needs a suite that runs in well under a second. The repo is small but
shaped like a real one (a package, a tests folder, pytest), so every SWE code path (workspace,
tools, hidden tests, grading) is the same as for ``swe/pyrepo-v0``; bugs are injected into it by
the same mutation machinery (``mutate.py``) and kept only when its tests go from green to red.
"""

CORE = '''"""Small numeric helpers."""


def clamp(x, lo, hi):
    """x limited to [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def mean(values):
    """Arithmetic mean of a non-empty list."""
    return sum(values) / len(values)


def gcd(a, b):
    """Greatest common divisor of two non-negative ints."""
    while b:
        a, b = b, a % b
    return a


def chunk(items, size):
    """items split into lists of at most ``size``."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def count_if(items, pred):
    """How many items satisfy pred."""
    n = 0
    for item in items:
        if pred(item):
            n += 1
    return n
'''

TEXT = '''"""Small text helpers."""


def is_palindrome(text):
    """True if text reads the same backwards, ignoring case and spaces."""
    s = text.replace(" ", "").lower()
    return s == s[::-1]


def word_count(text):
    """Number of whitespace-separated words."""
    return len(text.split())


def initials(name):
    """'ada lovelace' -> 'A.L.'"""
    return "".join(part[0].upper() + "." for part in name.split() if part)


def pad_left(text, width, fill=" "):
    """text right-aligned in ``width`` characters."""
    if len(text) >= width:
        return text
    return fill * (width - len(text)) + text
'''

TESTS_CORE = """from minilib.core import chunk, clamp, count_if, gcd, mean


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_low():
    assert clamp(-3, 0, 10) == 0


def test_clamp_high():
    assert clamp(12, 0, 10) == 10


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_gcd():
    assert gcd(12, 18) == 6
    assert gcd(7, 0) == 7


def test_chunk():
    assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]


def test_count_if():
    assert count_if(range(10), lambda x: x % 3 == 0) == 4
"""

TESTS_TEXT = """from minilib.text import initials, is_palindrome, pad_left, word_count


def test_palindrome():
    assert is_palindrome("Never odd or even")


def test_not_palindrome():
    assert not is_palindrome("agentrl")


def test_word_count():
    assert word_count("  one two   three ") == 3


def test_initials():
    assert initials("ada lovelace") == "A.L."


def test_pad_left():
    assert pad_left("7", 3, "0") == "007"
    assert pad_left("1234", 3) == "1234"
"""

FILES = {
    "minilib/__init__.py": '"""minilib: tiny helpers."""\n',
    "minilib/core.py": CORE,
    "minilib/text.py": TEXT,
    "tests/__init__.py": "",
    "tests/test_core.py": TESTS_CORE,
    "tests/test_text.py": TESTS_TEXT,
    "README.md": "# minilib\n\nRun the tests with `python -m pytest -q tests`.\n",
}

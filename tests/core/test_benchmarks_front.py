"""The benchmarks' front door stays one: BENCHMARKS.md opens with a short "where it stands"
table and stays a summary, every link from it (and from README's headline numbers) lands on a
file and heading that exist, and every diagnostic script says in its README what it answered.
Why: the page grew into a 1,592-line run-by-run notebook with no summary (issue 38); the run
logs now live in benchmarks/notes/, so a renamed heading there would silently break a link."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FRONT = ROOT / "BENCHMARKS.md"
COLUMNS = ["workload", "machine", "agentrl", "baseline", "ratio", "date", "section"]
LINK = re.compile(r"\]\(([^)\s]+)\)|^\[[^\]]+\]:\s*(\S+)", re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    lines = path.read_text().splitlines()
    return {_slug(line.lstrip("#")) for line in lines if re.match(r"#{1,6} ", line)}


def test_benchmarks_md_opens_with_a_short_table_and_stays_a_summary() -> None:
    lines = FRONT.read_text().splitlines()
    assert len(lines) < 300, f"BENCHMARKS.md has {len(lines)} lines: move run logs to notes/"
    first = next(i for i, line in enumerate(lines) if line.startswith("## "))
    assert lines[first] == "## Where it stands", lines[first]
    start = next(i for i in range(first, len(lines)) if lines[i].startswith("|"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    assert header == COLUMNS
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line)
    assert 0 < len(rows) <= 20, f"{len(rows)} rows: keep at most 20"
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == len(COLUMNS), row
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", cells[5]), f"no date: {row}"
        assert re.search(r"\]\[[\w-]+\]|\]\(", cells[6]), f"no link to its run log: {row}"


def test_front_door_links_land_on_files_and_headings() -> None:
    pages = [FRONT, ROOT / "README.md", *sorted((ROOT / "benchmarks").glob("*/README.md"))]
    broken = []
    for page in pages:
        for match in LINK.finditer(page.read_text()):
            target = match.group(1) or match.group(2)
            if re.match(r"[a-z]+:", target):
                continue  # an external URL
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            if not path.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_diagnostic_says_what_it_answered() -> None:
    folder = ROOT / "benchmarks" / "diagnostics"
    readme = (folder / "README.md").read_text()
    scripts = sorted(p.name for p in folder.glob("*.py") if p.name != "__init__.py")
    assert scripts
    missing = [name for name in scripts if not re.search(rf"^- `{re.escape(name)}`", readme, re.M)]
    assert not missing, f"add a line to benchmarks/diagnostics/README.md for {missing}"

"""Assemble the single-file HTML report: page skeleton + inline CSS/JS + embedded episode JSON.

The output must open from a laptop's disk, an artifact store, or an air-gapped cluster, so it
has no external references at all: styles and script are inlined from `assets/`, images are
data URIs, and the data sits in a `<script type="application/json">` block (with `<` escaped
so no tool output can close the tag). The script only ever sets `textContent`, never
`innerHTML`, so model or tool text that looks like HTML is shown, not executed.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.types import Trajectory, read_jsonl

from .diff import template_drift
from .episodes import episode_record, load_tokenizer, make_decoder, summary, tokenizer_hint

ASSETS = Path(__file__).parent / "assets"


@dataclass
class ViewResult:
    out: Path
    episodes: int
    tokenizer: str | None
    summary: dict[str, Any]
    records: list[dict[str, Any]]


def build_records(
    trajectories: list[Trajectory], tokenizer: Any | None, diff: bool = False
) -> list[dict[str, Any]]:
    """One JSON record per episode; with `diff`, each also gets the template re-render diff."""
    decode = make_decoder(tokenizer)
    records = []
    for i, t in enumerate(trajectories):
        rec = episode_record(t, i, decode)
        if diff and tokenizer is not None:
            d = template_drift(t, tokenizer)
            rec["diff"] = {
                **d.to_dict(),
                "rendered": {"ids": d.rendered_ids, "text": decode(d.rendered_ids)},
            }
        records.append(rec)
    return records


def _special_ids(tokenizer: Any | None) -> list[int]:
    return sorted(set(getattr(tokenizer, "all_special_ids", []) or [])) if tokenizer else []


def render_page(
    records: list[dict[str, Any]],
    *,
    title: str,
    source: str = "",
    tokenizer_name: str | None = None,
    special_ids: list[int] | None = None,
    diff: bool = False,
) -> str:
    """The complete HTML document as a string."""
    payload = {
        "title": title,
        "source": source,
        "tokenizer": tokenizer_name,
        "special": special_ids or [],
        "diff": diff,
        "summary": summary(records),
        "episodes": records,
    }
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    skeleton = (ASSETS / "page.html").read_text(encoding="utf-8")
    return (
        skeleton.replace("{{TITLE}}", html.escape(title))
        .replace("/*{{CSS}}*/", (ASSETS / "viewer.css").read_text(encoding="utf-8"))
        .replace("/*{{JS}}*/", (ASSETS / "viewer.js").read_text(encoding="utf-8"))
        .replace("{{DATA}}", data)
    )


def write_view(
    path: str | Path,
    out: str | Path | None = None,
    *,
    tokenizer_path: str | None = None,
    diff: bool = False,
    limit: int | None = None,
    cache_dir: str | None = None,
) -> ViewResult:
    """Read a trajectory JSONL and write the HTML report next to it (or to `out`).

    The tokenizer comes from `tokenizer_path`, else from the trajectories' metadata; without
    one, tokens are shown as ids (and `diff` is impossible, so it raises).
    """
    path = Path(path)
    trajectories = list(read_jsonl(path))
    if limit is not None:
        trajectories = trajectories[:limit]
    tok_name = tokenizer_path or tokenizer_hint(trajectories)
    tokenizer = load_tokenizer(tok_name, cache_dir) if tok_name else None
    if diff and tokenizer is None:
        raise ValueError("--diff needs a tokenizer: pass --tokenizer PATH")
    records = build_records(trajectories, tokenizer, diff)
    out = Path(out) if out else path.with_suffix(".diff.html" if diff else ".html")
    page = render_page(
        records,
        title=f"agentrl · {path.name}" + (" · template diff" if diff else ""),
        source=str(path),
        tokenizer_name=tok_name,
        special_ids=_special_ids(tokenizer),
        diff=diff,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return ViewResult(out, len(records), tok_name, summary(records), records)

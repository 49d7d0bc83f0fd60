"""The viewer page in real headless Chromium (Debian's /usr/bin/chromium, driven by playwright).

Checks what a user relies on: the page loads offline with no console errors, exactly the
trained tokens are highlighted, filters hide what they should, the tooltip shows logprobs and
the IS ratio, and the diff page points at the first divergence. Screenshots go to the test's
tmp dir; set AGENTRL_UPDATE_DOCS_IMG=1 (or delete docs/img/viewer.png) to refresh the docs copy.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from viewer_trajs import stamp_versions

from agentrl.types import Trajectory, write_jsonl
from agentrl.viewer import write_view

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason=f"{CHROMIUM} absent: apt-get install -y chromium (scripts/setup-web.sh)",
    ),
]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    profile = tmp_path_factory.mktemp("chromium-profile")  # fresh user-data-dir
    with sync_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1280, "height": 900},
        )
        yield ctx
        ctx.close()


def open_page(browser: Any, html: Path) -> tuple[Any, list[str]]:
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on(
        "request",
        lambda r: errors.append(f"network: {r.url}") if r.url.startswith("http") else None,
    )
    page.goto(html.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)
    return page, errors


def visible_episodes(page: Any) -> list[int]:
    return page.eval_on_selector_all(
        "details.ep", "els => els.filter(e => !e.hidden).map(e => Number(e.dataset.i))"
    )


def save_shot(page: Any, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    docs = DOCS_IMG / name
    if os.environ.get("AGENTRL_UPDATE_DOCS_IMG") or not docs.exists():
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, docs)
    return shot


def test_report_in_chromium(
    browser: Any, episodes: list[Trajectory], tiny_dir: Path, tmp_path: Path
) -> None:
    src = tmp_path / "traj.jsonl"
    first = episodes[0]  # as trainer.async records it: the sampling policy's version
    first.weight_versions = [7 if m else -1 for m in first.loss_mask]
    write_jsonl(src, episodes)
    html = write_view(src, tokenizer_path=str(tiny_dir)).out
    page, errors = open_page(browser, html)
    assert len(visible_episodes(page)) == len(episodes)

    page.click("#expand-all")
    trained = page.locator("#episodes .tok.m1").count()
    env_tokens = page.locator("#episodes .tok.m0").count()
    assert trained == sum(sum(t.loss_mask) for t in episodes)
    assert env_tokens == sum(len(t.loss_mask) - sum(t.loss_mask) for t in episodes)
    assert page.locator("#episodes .imgs img").count() == 2
    assert page.locator("#episodes .results li.error").count() >= 3

    page.locator("details.ep[data-i='0'] .tok.m1").nth(3).hover()
    tip = page.locator("#tip").inner_text()
    assert "rollout logprob" in tip and "IS ratio" in tip
    assert "weight version  7" in tip

    page.select_option("#colour", "ratio")
    painted = page.eval_on_selector_all(
        "details.ep[data-i='0'] .tok.m1", "els => els.filter(e => e.style.background).length"
    )
    assert painted == sum(episodes[0].loss_mask)
    page.select_option("#colour", "mask")

    page.select_option("#f-term", "max_turns")
    assert visible_episodes(page) == [
        i for i, t in enumerate(episodes) if t.termination == "max_turns"
    ]
    assert page.locator("#count").inner_text() == f"showing 1 of {len(episodes)}"
    page.select_option("#f-term", "")
    page.fill("#f-rmin", "0.5")
    assert visible_episodes(page) == [i for i, t in enumerate(episodes) if t.reward >= 0.5]
    page.fill("#f-rmin", "")
    page.check("#f-err")
    assert visible_episodes(page) == [3, 4]
    page.uncheck("#f-err")
    page.select_option("#f-env", "math/calc-v0")
    assert visible_episodes(page) == [5]
    page.select_option("#f-env", "")

    page.click("#collapse-all")
    page.locator("details.ep[data-i='0'] > summary").click()
    page.locator("details.ep[data-i='0'] .tok.m1").nth(3).hover()
    save_shot(page, tmp_path, "viewer.png")
    assert not errors, errors


def test_diff_page_in_chromium(
    browser: Any, episodes: list[Trajectory], tiny_dir: Path, tmp_path: Path
) -> None:
    src = tmp_path / "traj.jsonl"
    write_jsonl(src, episodes)
    html = write_view(src, tokenizer_path=str(tiny_dir), diff=True).out
    page, errors = open_page(browser, html)
    page.check("#f-drift")
    assert visible_episodes(page) == [2]
    page.click("#expand-all")
    first = page.locator("#drift-2")
    assert first.count() == 1 and "first-drift" in (first.get_attribute("class") or "")
    assert page.locator("details.ep[data-i='2'] .tok.drift").count() >= 1
    page.locator("details.ep[data-i='2'] .diff button").click()
    assert "first divergence" in page.locator("details.ep[data-i='2'] .diff").inner_text()
    page.evaluate("window.scrollTo(0, 0)")
    save_shot(page, tmp_path, "viewer-diff.png")
    assert not errors, errors


def test_ids_only_page_in_chromium(
    browser: Any, episodes: list[Trajectory], tmp_path: Path
) -> None:
    src = tmp_path / "traj.jsonl"
    write_jsonl(src, episodes[:2])
    page, errors = open_page(browser, write_view(src).out)
    page.click("#expand-all")
    first = page.locator("#episodes .tok.m1").first.inner_text()
    assert first == str(episodes[0].response_ids[0])
    assert page.locator("#episodes .tok.m1").count() == sum(sum(t.loss_mask) for t in episodes[:2])
    assert not errors, errors


def test_version_colouring_in_chromium(
    browser: Any, episodes: list[Trajectory], tiny_dir: Path, tmp_path: Path
) -> None:
    """An episode a weight update landed in (turn 1 partly sampled by version 4): colouring by
    policy version paints the two groups of sampled tokens differently, hatches the older
    group, leaves env tokens blank, and the legend and the badge name both versions."""
    t = episodes[3]  # three turns
    landed = t.turns[1].start + 2
    stamp_versions(t, 3, 4, landed)
    src = tmp_path / "traj.jsonl"
    write_jsonl(src, [t, episodes[1]])  # the second episode has no versions
    page, errors = open_page(browser, write_view(src, tokenizer_path=str(tiny_dir)).out)
    badge = page.locator("details.ep[data-i='0'] .badge.ver").inner_text()
    assert badge == f"versions 3–4, update landed at token {landed}, turn 1"
    assert page.locator("details.ep[data-i='1'] .badge.ver").count() == 0
    assert page.locator("#ver-legend").is_hidden()

    page.click("#expand-all")
    page.select_option("#colour", "ver")
    assert page.locator("#ver-legend").is_visible()
    heads = page.locator("details.ep[data-i='0'] .turn h3").all_inner_texts()
    assert [h.rsplit(" · ", 1)[1] for h in heads] == ["version 3", "versions 3→4", "version 4"]
    legend = page.locator("#ver-legend .ver-sw").all_inner_texts()
    assert legend == ["v3", "v4"]
    toks = page.eval_on_selector_all(
        "details.ep[data-i='0'] .tok.m1, details.ep[data-i='0'] .tok.m0",
        """els => els.map(e => [Number(e.dataset.k), getComputedStyle(e).backgroundColor,
                                e.classList.contains('v-old'), e.classList.contains('v-env')])""",
    )
    assert len(toks) == len(t.response_ids)
    by_version: dict[int, set[str]] = {}
    for k, colour, old, env in toks:
        v = t.weight_versions[k]
        assert env == (v < 0) and old == (v == 3), (k, v)
        if v >= 0:
            by_version.setdefault(v, set()).add(colour)
    assert set(by_version) == {3, 4}
    assert len(by_version[3]) == 1 and len(by_version[4]) == 1
    assert by_version[3] != by_version[4]
    swatches = page.eval_on_selector_all(
        "#ver-legend .ver-sw", "els => els.map(e => getComputedStyle(e).backgroundColor)"
    )
    assert swatches == [*by_version[3], *by_version[4]]
    # the episode without versions keeps its tokens unpainted
    painted = page.eval_on_selector_all(
        "details.ep[data-i='1'] .tok.m1", "els => els.filter(e => e.style.background).length"
    )
    assert painted == 0
    page.locator(f"details.ep[data-i='0'] .tok[data-k='{landed - 1}']").hover()
    assert "weight version  3  (episode's newest: 4)" in page.locator("#tip").inner_text()
    page.locator(f"details.ep[data-i='0'] .tok[data-k='{landed}']").hover()
    assert page.locator("#tip").inner_text().endswith("weight version  4")
    save_shot(page, tmp_path, "viewer-versions.png")
    page.select_option("#colour", "mask")
    assert page.locator("details.ep[data-i='0'] .tok.v-old").count() == 0
    assert page.locator("#ver-legend").is_hidden()
    assert not errors, errors


def test_version_colouring_disabled_without_versions(
    browser: Any, episodes: list[Trajectory], tmp_path: Path
) -> None:
    src = tmp_path / "traj.jsonl"
    write_jsonl(src, episodes[:2])
    page, errors = open_page(browser, write_view(src).out)
    opt = page.locator("#colour option[value='ver']")
    assert opt.is_disabled()
    assert "weight_versions" in (opt.get_attribute("title") or "")
    assert "weight_versions" in (page.locator("#colour").get_attribute("title") or "")
    assert not errors, errors

"""Search env: the retrieval service's protocol, the search tool, rewards, and an episode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

pytest.importorskip("bm25s")

from agentrl.envs import make  # noqa: E402
from agentrl.envs.search.corpus import Corpus  # noqa: E402
from agentrl.envs.search.qa import exact_match, f1  # noqa: E402
from agentrl.envs.search.retriever import shared_server  # noqa: E402
from agentrl.tools.search import SearchTools  # noqa: E402
from agentrl.types import Message, ToolCall  # noqa: E402


@pytest.fixture(scope="module")
def corpus_url() -> tuple[Corpus, str]:
    corpus = Corpus(30, seed=0)
    return corpus, shared_server(("synthetic", 30, 0), corpus.docs)


def test_retrieve_protocol(corpus_url: tuple[Corpus, str]) -> None:
    corpus, url = corpus_url
    country, facts = next(iter(corpus.facts.items()))
    r = httpx.post(url, json={"queries": [f"capital of {country}", "zzz"], "topk": 2})
    hits, none = r.json()["result"]
    assert len(hits) == 2 and none == []
    assert (
        hits[0]["document"]["contents"]
        == f'"{country}"\nThe capital of {country} is {facts["capital"]}.'
    )
    assert httpx.post(url, json={"topk": 2}).status_code == 400
    assert httpx.post(url.replace("/retrieve", "/nope"), json={}).status_code == 404


def test_gold_doc_is_retrieved_for_every_one_hop_question(corpus_url: tuple[Corpus, str]) -> None:
    corpus, url = corpus_url
    tools = SearchTools(url, topk=3)
    rng = np.random.default_rng(0)
    for _ in range(40):
        q = corpus.question(rng, hops=1)
        assert q.answer in tools.search(q.question)
    tools.close()


def test_rewards() -> None:
    assert exact_match("The Vexa.", ["vexa"]) == 1.0
    assert exact_match("Vexa city", ["Vexa"]) == 0.0
    assert f1("Vexa city", ["Vexa"]) == pytest.approx(2 / 3)
    assert f1("nothing", ["Vexa", "nothing at all"]) == pytest.approx(0.5)


def test_two_hop_episode() -> None:
    env = make("search/qa-2hop-v0")
    obs, info = env.reset(seed=7)
    assert "Question:" in obs.messages[0].content and len(info["queries"]) == 2
    for q in info["queries"]:
        call = ToolCall("search", {"query": q}, id="c")
        out, reward, done, _, _ = env.step(Message("assistant", "", tool_calls=[call]))
        assert not done and reward == 0.0 and out.messages[0].content.startswith("Doc 1(Title:")
    assert env.task.answer[0] in out.messages[0].content
    out = env.step(Message("assistant", f"<answer>{env.task.answer[0]}</answer>"))
    assert out[1:3] == (1.0, True)
    env.close()


def test_user_qa_file_with_own_retriever(tmp_path: Path, corpus_url: tuple[Corpus, str]) -> None:
    corpus, url = corpus_url
    country, facts = next(iter(corpus.facts.items()))
    rows = [{"question": f"Who founded {country}?", "golden_answers": [facts["founder"]]}]
    path = tmp_path / "qa.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    env = make("search/qa-f1-v0", qa_path=str(path), retriever_url=url)
    env.reset(seed=0)
    env.step(env.oracle_action())
    assert env.step(env.oracle_action())[1] == 1.0
    path.write_text(json.dumps({"question": "q"}))
    with pytest.raises(ValueError, match="qa.jsonl: row 1: column 'reward_model.ground_truth'"):
        make("search/qa-v0", qa_path=str(path), retriever_url=url)


FAKE_JAX = """\
# A named fake of an installed JAX (the real one is not installed here): on a GPU machine
# `import jax` plus one op starts XLA's client, which preallocates 75% of the GPU's memory.
import os
with open(os.environ["FAKE_JAX_MARK"], "a") as f:
    f.write("jax imported\\n")
"""


def test_retriever_never_imports_jax(tmp_path: Path) -> None:
    """bm25s imports jax at import time when it is installed (and runs a top-k on JAX's
    default backend: 59 GiB of an H100 held by XLA in the search cell, issue #42); the
    retriever hides it, so bm25s selects with numpy, and a jax the process had is kept."""
    fake = tmp_path / "site" / "jax"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(FAKE_JAX)
    (fake / "lax.py").write_text("def top_k(x, k):\n    raise AssertionError('jax used')\n")
    mark = tmp_path / "mark"
    probe = (
        "import sys\n"
        "from agentrl.envs.search.corpus import Corpus\n"
        "from agentrl.envs.search.retriever import BM25Index\n"
        "import bm25s.selection\n"
        "corpus = Corpus(30, seed=0)\n"
        "country, facts = next(iter(corpus.facts.items()))\n"
        "hit = BM25Index(corpus.docs).search([f'capital of {country}'], 2)[0][0]\n"
        "assert facts['capital'] in hit['document']['contents'], hit\n"
        "assert 'jax' not in sys.modules and not bm25s.selection.JAX_IS_AVAILABLE\n"
        "import jax\n"  # the process's own jax still imports afterwards
        "print('ok')\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")]),
        "FAKE_JAX_MARK": str(mark),
    }
    run = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
    assert mark.read_text() == "jax imported\n"  # only by the probe's own `import jax`

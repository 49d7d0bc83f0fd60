"""Search envs: multi-turn QA with a `search` tool over a local BM25 retrieval service."""

from ..registration import register

register(
    "search/qa-v0",
    "agentrl.envs.search.qa:SearchQAEnv",
    description="Search-R1 style QA over a synthetic corpus, BM25 search tool, exact match",
)
register(
    "search/qa-2hop-v0",
    "agentrl.envs.search.qa:SearchQAEnv",
    description="Two-hop QA: find the country from one fact, then search its other fact",
    hops=2,
)
register(
    "search/qa-f1-v0",
    "agentrl.envs.search.qa:SearchQAEnv",
    description="Search QA over a larger synthetic corpus (100 countries), token-F1 reward",
    n_countries=100,
    reward="f1",
)

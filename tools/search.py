"""A `search` tool backed by a retrieval server speaking Search-R1's `/retrieve` protocol.

The tool is only an HTTP client (`httpx`), so the index can live anywhere: the local BM25
service in `agentrl.envs.search.retriever`, or a user's own dense/BM25 server given as
`retriever_url`. Results are formatted the way Search-R1 shows them to the model:
`Doc 1(Title: ...) text`.
"""

from __future__ import annotations

from typing import Any

import httpx

from .core import ToolSet, tool


def format_results(hits: list[dict[str, Any]]) -> str:
    """Search-R1's text rendering of one query's hits."""
    if not hits:
        return "No results."
    lines = []
    for i, hit in enumerate(hits, 1):
        contents = hit["document"]["contents"]
        title, _, text = contents.partition("\n")
        title = title.strip('"')
        lines.append(f"Doc {i}(Title: {title}) {text}")
    return "\n".join(lines)


class SearchTools(ToolSet):
    """`search(query)` against `retriever_url`, returning the top `topk` documents."""

    def __init__(self, retriever_url: str, topk: int = 3, http_timeout_s: float = 5.0) -> None:
        super().__init__()
        self.retriever_url, self.topk = retriever_url, topk
        self._client = httpx.Client(timeout=http_timeout_s)

    @tool(timeout_s=10.0)
    def search(self, query: str) -> str:
        """Search the knowledge base and return the most relevant documents.

        Args:
            query: What to look for, e.g. a question or a few keywords.
        """
        if not query.strip():
            raise ValueError("query is empty")
        body = {"queries": [query], "topk": self.topk, "return_scores": True}
        response = self._client.post(self.retriever_url, json=body)
        response.raise_for_status()
        return format_results(response.json()["result"][0])

    def close(self) -> None:
        self._client.close()

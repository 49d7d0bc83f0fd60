"""A BM25 retrieval service on localhost, speaking Search-R1's `/retrieve` protocol.

Request: `POST /retrieve {"queries": [str], "topk": int, "return_scores": bool}`.
Response: `{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}` with
`contents` = `"<title>"\\n<text>`, as Search-R1's retriever server returns. Because the
search tool only speaks this protocol, pointing `retriever_url` at a Search-R1 (or any
compatible) server swaps in a real corpus without code changes.

The index is `bm25s`; the server is stdlib `http.server` in a daemon thread bound to
127.0.0.1 on a free port, shared per process and corpus (`shared_server`).

bm25s is imported with `jax` hidden: when JAX is installed, `import bm25s` imports it and runs
a top-k on JAX's default backend at import time, which on a GPU machine starts XLA's client,
and XLA preallocates 75% of the GPU's memory. In the training process that was the search
cell's OOM on an H100 (issue #42): 78.6 GiB in use by the process, 18.1 GiB of it PyTorch's
and 0.75 x 79.2 = 59.4 GiB JAX's, held for a CPU top-k over a few hundred documents. With
jax hidden bm25s selects with numpy (its own fallback) and jax is never imported here.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _import_bm25s_without_jax() -> Any:
    """`import bm25s` with `jax` unimportable for the duration (see the module docstring);
    a jax the process imported before is put back untouched."""
    held = sys.modules.get("jax")
    sys.modules["jax"] = None  # type: ignore[assignment]  # `import jax...` raises ImportError
    try:
        import bm25s
    finally:
        if held is None:
            del sys.modules["jax"]
        else:
            sys.modules["jax"] = held
    return bm25s


bm25s = _import_bm25s_without_jax()


class BM25Index:
    """BM25 over documents `{'id', 'title', 'text'}`."""

    def __init__(self, docs: list[dict[str, str]]) -> None:
        self.docs = docs
        self.retriever = bm25s.BM25()
        corpus = [f"{d['title']} {d['text']}" for d in docs]
        self.retriever.index(
            bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False
        )
        self._lock = threading.Lock()  # bm25s retrieval is not documented as thread-safe

    def search(self, queries: list[str], k: int) -> list[list[dict[str, Any]]]:
        k = max(1, min(k, len(self.docs)))
        tokens = bm25s.tokenize(queries, stopwords="en", show_progress=False)
        with self._lock:
            ids, scores = self.retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [
            [
                {
                    "document": {
                        "id": self.docs[i]["id"],
                        "contents": f'"{self.docs[i]["title"]}"\n{self.docs[i]["text"]}',
                    },
                    "score": float(s),
                }
                for i, s in zip(row_ids, row_scores, strict=True)
                if s > 0
            ]
            for row_ids, row_scores in zip(ids, scores, strict=True)
        ]


class RetrievalServer:
    """Serve a `BM25Index` at `self.url` (e.g. http://127.0.0.1:40123/retrieve)."""

    def __init__(self, index: BM25Index) -> None:
        handler = type("Handler", (_Handler,), {"index": index})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/retrieve"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    index: BM25Index

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        if self.path != "/retrieve":
            return self._reply(404, {"error": f"no route {self.path}"})
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            queries, topk = body["queries"], int(body.get("topk", 3))
            if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
                raise ValueError("'queries' must be a list of strings")
        except (ValueError, KeyError, TypeError) as e:
            return self._reply(400, {"error": f"bad request: {e}"})
        self._reply(200, {"result": self.index.search(queries, topk)})

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per search
        pass


_servers: dict[Any, RetrievalServer] = {}
_servers_lock = threading.Lock()


def shared_server(key: Any, docs: list[dict[str, str]]) -> str:
    """URL of this process's server for corpus `key`, starting it on first use."""
    with _servers_lock:
        if key not in _servers:
            _servers[key] = RetrievalServer(BM25Index(docs))
        return _servers[key].url

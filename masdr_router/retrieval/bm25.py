"""BM25 over one shard, with bm25s (sparse-matrix BM25, well kept and fast)."""

from __future__ import annotations

import logging

import numpy as np


class BM25Shard:
    """Lexical top-k search over the texts of one shard.

    >>> s = BM25Shard(["the cat sat", "dogs bark loudly"])
    >>> s.search(["barking dogs"], k=1)[1].tolist()
    [[1]]
    """

    def __init__(self, texts: list[str]) -> None:
        from ..extras import require

        bm25s = require("bm25s")

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every index build at DEBUG
        self.n = len(texts)
        self._retriever = None
        if self.n:
            tokens = bm25s.tokenize(texts, stopwords="en", show_progress=False)
            self._retriever = bm25s.BM25()
            self._retriever.index(tokens, show_progress=False)

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(scores, rows)`` of shape ``(nq, min(k, n))``; rows with score 0 are -1."""
        from ..extras import require

        bm25s = require("bm25s")

        k = min(k, self.n)
        if k == 0 or self._retriever is None:
            return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
        q_tokens = bm25s.tokenize(queries, stopwords="en", show_progress=False, allow_empty=True)
        rows, scores = self._retriever.retrieve(q_tokens, k=k, show_progress=False, n_threads=1)
        rows = rows.astype(np.int64)
        rows[scores <= 0] = -1  # a zero BM25 score means no query term matched: not a hit
        return scores.astype(np.float32), rows

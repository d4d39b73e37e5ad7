"""Retrieval-informed routing: a router's scope probabilities combined with the scopes of what a
global search finds.

The chunks nearest to a query are evidence of its scope (their P@10 is the global baseline's
precision), and that evidence is largely independent of the router's own errors. The combination
``p(s) ∝ p_router(s) · (vote(s) + eps) ** beta`` with a rank-weighted vote over the global top-k
corrects many confident misroutes. It costs one global search per query.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..config import SearchConfig
from .base import RouteDecision, Router


class RetrievalVoteRouter(Router):
    """Wrap ``base`` (any router with per-scope scores) with the scope vote of a global search.

    >>> voted = RetrievalVoteRouter(LoraRouter.from_pretrained(d), ScopedIndex.load(i))  # doctest: +SKIP
    """

    name = "vote"

    def __init__(self, base: Router, index: Any, *, k: int = 10, beta: float = 1.0, eps: float = 0.02,
                 threshold: float | None = None, search: SearchConfig | None = None) -> None:
        super().__init__(base.taxonomy)
        self.base, self.index, self.k, self.beta, self.eps = base, index, k, beta, eps
        # the base router's calibrated threshold unless fitted (``fit``) or given
        self.threshold = threshold if threshold is not None else float(getattr(base, "threshold", 0.0))
        self.search = search or SearchConfig()
        self.name = f"{base.name}+vote"

    def combined(self, queries: list[str]) -> tuple[np.ndarray, list[RouteDecision]]:
        """Combined probabilities ``(n, n_scopes)`` and the base decisions."""
        names = self.taxonomy.names
        base = self.base.route_batch(queries)
        p = np.array([[d.scores.get(s, 0.0) for s in names] for d in base], dtype=float)
        p = np.where(p.sum(1, keepdims=True) > 0, p, 1.0)  # no scores: the vote alone decides
        p /= p.sum(1, keepdims=True)
        vote = np.zeros_like(p)
        for i, hits in enumerate(self.index.search_many(queries, [None] * len(queries), self.k, self.search)):
            for rank, h in enumerate(hits):
                for s in h.scopes:
                    vote[i, names.index(s)] += 1.0 / ((rank + 1) * len(h.scopes))
        vote /= np.maximum(vote.sum(1, keepdims=True), 1e-12)
        c = p * (vote + self.eps) ** self.beta
        return c / c.sum(1, keepdims=True), base

    def _decide(self, probs: np.ndarray, base: RouteDecision) -> RouteDecision:
        names = self.taxonomy.names
        best = int(probs.argmax())
        conf = float(probs[best])
        scores = {s: float(v) for s, v in zip(names, probs)}
        trace = (*base.trace, {"stage": self.name, "scope": names[best], "confidence": round(conf, 4)})
        if conf >= self.threshold:
            return RouteDecision(scope=names[best], scores=scores, stage=self.name, confidence=conf, trace=trace)
        return RouteDecision(scope=None, scores=scores, stage=self.name, confidence=conf, trace=trace,
                             fallback=base.fallback)

    def _route(self, query: str) -> RouteDecision:
        probs, base = self.combined([query])
        return self._decide(probs[0], base[0])

    def route_batch(self, queries: list[str]) -> list[RouteDecision]:
        import time

        t0 = time.perf_counter()
        probs, base = self.combined(list(queries))
        ms = (time.perf_counter() - t0) * 1000 / max(len(queries), 1)
        return [dataclasses.replace(self._decide(p, b), latency_ms=ms) for p, b in zip(probs, base)]

    def fit(self, queries: list[Any], *, target_accuracy: float = 0.95) -> dict[str, float]:
        """Choose the threshold on labelled (validation) queries for a target accuracy-when-answered."""
        from ..training.calibration import choose_threshold

        probs, _ = self.combined([q.query for q in queries])
        gold = np.array([self.taxonomy.index(q.scope) for q in queries])
        self.threshold, stats = choose_threshold(probs.max(1), probs.argmax(1) == gold,
                                                 target_accuracy=target_accuracy)
        return stats

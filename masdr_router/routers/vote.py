"""Retrieval-informed routing: a router's scope probabilities combined with the scopes of what a
global search finds.

The chunks nearest to a query are evidence of its scope (their P@10 is the global baseline's
precision), and that evidence is largely independent of the router's own errors. The combination
``p(s) ∝ p_router(s) · (vote(s) + eps) ** beta`` with a rank-weighted vote over the global top-k
corrects many confident misroutes. It costs one global search per query.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..config import SearchConfig
from ..taxonomy import Taxonomy
from .base import RouteDecision, Router

if TYPE_CHECKING:
    from ..retrieval.index import Hit


class SearchIndex(Protocol):
    """What the vote router (and the answer path) need from an index: its taxonomy and batched
    search. :class:`~masdr_router.retrieval.index.ScopedIndex` is the implementation."""

    taxonomy: Taxonomy

    def search_many(self, queries: Sequence[str], scopes: Sequence[Sequence[str] | None], k: int = 10,
                    cfg: SearchConfig | None = None, *, qvecs: np.ndarray | None = None,
                    weights: Sequence[Sequence[float] | None] | None = None) -> list[list[Hit]]: ...


def vote_probabilities(probs: np.ndarray, hits: Sequence[Sequence[Hit]], names: Sequence[str], *,
                       beta: float = 1.0, eps: float = 0.02) -> np.ndarray:
    """``p(s) ∝ p_router(s) · (vote(s) + eps) ** beta``, the vote rank-weighted over each query's
    global hits (a chunk in several scopes shares its vote). Rows without router scores are
    decided by the vote alone.

    >>> from types import SimpleNamespace as H
    >>> vote_probabilities(np.array([[0.5, 0.5]]), [[H(scopes=("b",))]], ["a", "b"]).round(3)
    array([[0.019, 0.981]])
    """
    p = np.asarray(probs, dtype=float)
    p = np.where(p.sum(1, keepdims=True) > 0, p, 1.0)
    p = p / p.sum(1, keepdims=True)
    index = {s: i for i, s in enumerate(names)}
    vote = np.zeros_like(p)
    for i, row in enumerate(hits):
        for rank, h in enumerate(row):
            for s in h.scopes:
                vote[i, index[s]] += 1.0 / ((rank + 1) * len(h.scopes))
    vote /= np.maximum(vote.sum(1, keepdims=True), 1e-12)
    c = p * (vote + eps) ** beta
    return c / c.sum(1, keepdims=True)


class RetrievalVoteRouter(Router):
    """Wrap ``base`` (any router with per-scope scores) with the scope vote of a global search.

    ``search`` should be the configuration the results are searched with, so the vote sees what
    retrieval sees (the CLI passes the same one). ``threshold``: abstain below it; by default the
    base router's calibrated threshold (``training.calibration.fit_vote_threshold`` fits one).

    >>> voted = RetrievalVoteRouter(LoraRouter.from_pretrained(d), ScopedIndex.load(i))  # doctest: +SKIP
    """

    name = "vote"

    def __init__(self, base: Router, index: SearchIndex, *, k: int = 10, beta: float | None = None,
                 eps: float = 0.02, threshold: float | None = None, search: SearchConfig | None = None) -> None:
        super().__init__(base.taxonomy)
        # a trained router may carry a vote fitted for retrieval (`masdr train --index`)
        fitted = (getattr(base, "meta", None) or {}).get("vote") or {}
        self.base, self.index, self.k, self.eps = base, index, k, eps
        self.beta = beta if beta is not None else float(fitted.get("beta", 1.0))
        if threshold is None:
            threshold = fitted.get("threshold", getattr(base, "threshold", 0.0))
        self.threshold = float(threshold)
        self.search = search or SearchConfig()
        self.name = f"{base.name}+vote"
        self.max_llm_calls = base.max_llm_calls

    def combined(self, queries: list[str]) -> tuple[np.ndarray, list[RouteDecision]]:
        """Combined probabilities ``(n, n_scopes)`` and the base decisions."""
        names = self.taxonomy.names
        base = self.base.route_batch(queries)
        p = np.array([[d.scores.get(s, 0.0) for s in names] for d in base], dtype=float)
        hits = self.index.search_many(queries, [None] * len(queries), self.k, self.search)
        return vote_probabilities(p, hits, names, beta=self.beta, eps=self.eps), base

    def decide(self, probs: np.ndarray, base: RouteDecision) -> RouteDecision:
        """The decision for combined probabilities ``probs`` of one query at this threshold."""
        names = self.taxonomy.names
        best = int(probs.argmax())
        conf = float(probs[best])
        scores = {s: float(v) for s, v in zip(names, probs)}
        trace = (*base.trace, {"stage": self.name, "scope": names[best], "confidence": round(conf, 4)})
        if conf >= self.threshold:
            return RouteDecision(scope=names[best], scores=scores, stage=self.name, confidence=conf, trace=trace,
                                 llm_calls=base.llm_calls)
        return RouteDecision(scope=None, scores=scores, stage=self.name, confidence=conf, trace=trace,
                             fallback=base.fallback, llm_calls=base.llm_calls)

    def _route(self, query: str) -> RouteDecision:
        probs, base = self.combined([query])
        return self.decide(probs[0], base[0])

    def route_batch(self, queries: list[str]) -> list[RouteDecision]:
        t0 = time.perf_counter()
        probs, base = self.combined(list(queries))
        ms = (time.perf_counter() - t0) * 1000 / max(len(queries), 1)
        return [dataclasses.replace(self.decide(p, b), latency_ms=ms) for p, b in zip(probs, base)]

"""Reciprocal-rank fusion (Cormack et al., 2009) of several ranked lists."""

from __future__ import annotations

from collections.abc import Sequence


def rrf_fuse(rankings: Sequence[Sequence[int]], weights: Sequence[float] | None = None, *,
             k: int = 60, top: int | None = None) -> list[tuple[int, float]]:
    """Fuse ranked id lists: ``score(d) = sum_i w_i / (k + rank_i(d))`` with 1-based ranks.

    Ids ``< 0`` are padding and ignored. Ties break by first appearance, so the result is
    deterministic.

    >>> rrf_fuse([[1, 2, 3], [3, 1]], k=0)
    [(1, 1.5), (3, 1.3333333333333333), (2, 0.5)]
    """
    weights = list(weights) if weights is not None else [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(rankings)} rankings but {len(weights)} weights")
    scores: dict[int, float] = {}
    for ranking, w in zip(rankings, weights):
        if w == 0:
            continue
        for rank, doc in enumerate(ranking, start=1):
            if doc < 0:
                continue
            scores[doc] = scores.get(doc, 0.0) + w / (k + rank)
    fused = sorted(scores.items(), key=lambda kv: -kv[1])  # stable: ties keep insertion order
    return fused[:top] if top is not None else fused

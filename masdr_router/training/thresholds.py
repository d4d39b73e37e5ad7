"""Abstention thresholds chosen for retrieval, not for classification.

The classification target (answer only at 95 % accuracy) makes a router abstain on many queries
it would have routed well enough: an abstention costs nothing in accuracy but searches the whole
corpus, so routing's precision gain is lost. What retrieval wants is the threshold that gives the
highest P@k while keeping R@k at least that of global search, measured on held-out queries with
the same index and search settings that will be used. The same holds for the retrieval vote
(``DIR+vote``): its threshold and its weight ``beta`` are chosen together.

Everything here works from held-out *probabilities* (the final model's on a validation split, or
out-of-fold ones in the cross-validated regime), so it needs no router object.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import SearchConfig
from ..data import LabelledQuery

if TYPE_CHECKING:
    from ..routers.vote import SearchIndex

VOTE_BETAS = (0.5, 1.0, 2.0)


def best_threshold(confidence: np.ndarray, routed_p: np.ndarray, routed_r: np.ndarray, global_p: np.ndarray,
                   global_r: np.ndarray) -> dict[str, float]:
    """The threshold (route when ``confidence >= t``, else search globally) with the highest mean
    P@k among those whose mean R@k is at least global search's; ties go to the lower threshold
    (more routing, less searched). Per-query P and R of both choices are given.

    >>> conf = np.array([0.9, 0.6, 0.3])
    >>> round(best_threshold(conf, np.array([1., 1., 0.]), np.array([1., 1., 0.]), np.array([.5, .5, .5]),
    ...                      np.array([1., 1., 1.]))["threshold"], 3)  # routes the two it gets right
    0.45
    """
    g_r = float(global_r.mean())
    # routing nothing is global search itself: always feasible, the baseline to beat
    best = {"threshold": 1.0 + 1e-9, "p_at_k": float(global_p.mean()), "r_at_k": g_r, "routed_rate": 0.0}
    levels = np.unique(confidence)[::-1]  # descending
    for j, c in enumerate(levels):
        routed = confidence >= c
        p = float(np.where(routed, routed_p, global_p).mean())
        r = float(np.where(routed, routed_r, global_r).mean())
        if r + 1e-12 >= g_r and p > best["p_at_k"] + 1e-12:
            # halfway to the next lower confidence: not on a fitted query's own value (see choose_threshold)
            t = (c + levels[j + 1]) / 2 if j + 1 < len(levels) else 0.0
            best = {"threshold": float(t), "p_at_k": p, "r_at_k": r, "routed_rate": float(routed.mean())}
    return {**best, "global_p_at_k": float(global_p.mean()), "global_r_at_k": g_r}


def fit_retrieval_thresholds(index: SearchIndex, queries: Sequence[LabelledQuery], probs: np.ndarray, *,
                             k: int = 10, search: SearchConfig | None = None,
                             vote: bool = True) -> dict[str, Any]:
    """Thresholds for the router alone and (with ``vote``) for router x retrieval vote, from the
    router's calibrated held-out ``probs`` (one row per query, in taxonomy order).

    Returns ``{"router": {...}, "vote": {..., "beta": b}, "n_queries": n, "k": k, "search": ...}``;
    ``None`` when no query carries ``relevant_ids`` (R@k cannot be measured: keep the
    classification threshold).
    """
    from ..evaluation.retrieval import precision_at_k, recall_at_k
    from ..routers.vote import vote_probabilities

    search = search or SearchConfig()
    names = index.taxonomy.names
    rows = [i for i, q in enumerate(queries) if q.relevant_ids]
    if not rows:
        return {}
    qs = [queries[i] for i in rows]
    probs = np.asarray(probs, dtype=float)[rows]
    texts = [q.query for q in qs]
    global_hits = index.search_many(texts, [None] * len(qs), k, search)
    g_p = np.array([precision_at_k(h, q.scope) for h, q in zip(global_hits, qs)])
    g_r = np.array([recall_at_k(h, q.relevant_ids)[0] for h, q in zip(global_hits, qs)])
    scoped_cache: dict[tuple[int, int], tuple[float, float]] = {}

    def routed_scores(top: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        todo = [i for i in range(len(qs)) if (i, int(top[i])) not in scoped_cache]
        hits = index.search_many([texts[i] for i in todo], [[names[int(top[i])]] for i in todo], k, search)
        for i, h in zip(todo, hits):
            scoped_cache[(i, int(top[i]))] = (precision_at_k(h, qs[i].scope), recall_at_k(h, qs[i].relevant_ids)[0])
        pr = np.array([scoped_cache[(i, int(top[i]))] for i in range(len(qs))])
        return pr[:, 0], pr[:, 1]

    p, r = routed_scores(probs.argmax(1))
    out: dict[str, Any] = {"n_queries": len(qs), "k": k, "search": search.to_dict(),
                           "router": best_threshold(probs.max(1), p, r, g_p, g_r)}
    if vote:
        best = None
        for beta in VOTE_BETAS:
            combined = vote_probabilities(probs, global_hits, names, beta=beta)
            vp, vr = routed_scores(combined.argmax(1))
            fit = {**best_threshold(combined.max(1), vp, vr, g_p, g_r), "beta": beta}
            if best is None or fit["p_at_k"] > best["p_at_k"] + 1e-12:
                best = fit
        out["vote"] = best
    return out


def fit_router_threshold(router: Any, index: SearchIndex, queries: Sequence[LabelledQuery], *, k: int = 10,
                         search: SearchConfig | None = None) -> dict[str, Any]:
    """Set the abstention threshold of a router that decides from its per-scope probabilities (a
    trained router, or one voted by retrieval) to the one best for retrieval on labelled held-out
    ``queries``; returns the fit (empty, threshold unchanged, when no query has relevant_ids).

    >>> fit_router_threshold(build_router("DIR+vote", index=idx), idx, val_queries)  # doctest: +SKIP
    """
    from ..errors import UsageError

    if not hasattr(router, "threshold") or not hasattr(router, "decide"):
        raise UsageError(f"router '{router.name}' has no threshold to fit (a trained router or DIR+vote has one)")
    names = index.taxonomy.names
    decisions = router.route_batch([q.query for q in queries])
    probs = np.array([[d.scores.get(s, 0.0) for s in names] for d in decisions])
    fit = fit_retrieval_thresholds(index, queries, probs, k=k, search=search, vote=False)
    if fit:
        fit["previous_threshold"] = float(router.threshold)
        router.threshold = fit["router"]["threshold"]
    return fit


def fit_system_thresholds(systems: dict[str, tuple[Any, str]], index: SearchIndex,
                          queries: Sequence[LabelledQuery], *, k: int = 10,
                          search: SearchConfig | None = None) -> dict[str, dict[str, Any]]:
    """:func:`fit_router_threshold` for every system whose router has a threshold; a router
    shared by several policies is fitted once."""
    fits: dict[int, dict[str, Any]] = {}
    out = {}
    for name, (router, _) in systems.items():
        if hasattr(router, "threshold") and hasattr(router, "decide"):
            if id(router) not in fits:
                fits[id(router)] = fit_router_threshold(router, index, queries, k=k, search=search)
            out[name] = fits[id(router)]
    return out

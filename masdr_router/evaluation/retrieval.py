"""What routing does to retrieval: P@k, R@k, hit@k, dilution and source confusion.

Definitions (as in the MASDR-RAG paper):

- P@k: share of the retrieved chunks that belong to the query's gold scope.
- R@k: share of the query's ``relevant_ids`` documents found among the top-k chunks.
- hit@k: 1 when at least one relevant document is among the top-k chunks.
- Dilution δ(q) = 1 − P_global(q) / P_oracle(q), averaged per scope, with Spearman ρ of
  log(scope chunk count) against mean δ.
- Source confusion: P(retrieved chunk's scope | gold scope), one row per gold scope.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..config import SearchConfig
from ..data import LabelledQuery
from ..retrieval.index import Hit, ScopedIndex
from ..routers import Router
from ..routers.policy import search_plan
from ..routers.reference import GlobalRouter, OracleRouter

NONE_SCOPE = "(none)"


def precision_at_k(hits: Sequence[Hit], gold: str) -> float:
    """Share of the retrieved chunks that belong to the gold scope (0 when nothing was retrieved)."""
    return sum(gold in h.scopes for h in hits) / len(hits) if hits else 0.0


def recall_at_k(hits: Sequence[Hit], relevant: Sequence[str]) -> tuple[float, float]:
    """``(R@k, hit@k)``: the share of the relevant documents found, and whether any was."""
    found = {h.doc_id for h in hits} & set(relevant)
    return len(found) / len(set(relevant)), float(bool(found))


def _attribute(h: Hit, gold: str) -> dict[str, float]:
    """Which scope a retrieved chunk counts for: the gold one when it is among its scopes,
    otherwise its scopes share the chunk equally."""
    if gold in h.scopes:
        return {gold: 1.0}
    if not h.scopes:
        return {NONE_SCOPE: 1.0}
    return {s: 1.0 / len(h.scopes) for s in h.scopes}


def confusion_matrix(index: ScopedIndex, queries: Sequence[LabelledQuery],
                     results: Sequence[list[Hit]]) -> dict[str, Any]:
    names = index.taxonomy.names
    cols = [*names, NONE_SCOPE]
    col = {n: i for i, n in enumerate(cols)}
    m = np.zeros((len(names), len(cols)))
    n_per = np.zeros(len(names))
    for q, hits in zip(queries, results):
        if not hits:
            continue
        r = names.index(q.scope)
        n_per[r] += 1
        for h in hits:
            for s, w in _attribute(h, q.scope).items():
                m[r, col[s]] += w / len(hits)
    with np.errstate(invalid="ignore"):
        m = np.where(n_per[:, None] > 0, m / np.maximum(n_per[:, None], 1), np.nan)
    diag = [m[i, i] for i in range(len(names)) if n_per[i] > 0]
    return {"labels": names, "columns": cols,
            "matrix": [[None if math.isnan(v) else round(float(v), 4) for v in row] for row in m],
            "diagonal_mean": round(float(np.mean(diag)), 4) if diag else None}


def evaluate_retrieval(index: ScopedIndex, queries: Sequence[LabelledQuery],
                       routers: Mapping[str, Router | tuple[Router, str]], *, k: int = 10,
                       cfg: SearchConfig | None = None, progress: bool = False) -> dict[str, Any]:
    """Evaluate retrieval for several routing systems over the same index and queries.

    A system is a router, or ``(router, policy)`` with a policy from
    :mod:`masdr_router.routers.policy` (default ``router``: its own decision; an abstention
    searches the global view). ``global`` and
    ``oracle`` are always run as well, since dilution is defined by them; ``systems`` in the report
    holds the requested routers only.

    >>> report = evaluate_retrieval(index, queries, {"regex": RegexRouter(tax)})  # doctest: +SKIP
    >>> report["systems"]["regex"]["p_at_k"]                                       # doctest: +SKIP
    """
    cfg = cfg or SearchConfig()
    tax = index.taxonomy
    for q in queries:
        tax.check_scope(q.scope)
    texts = [q.query for q in queries]
    t0 = time.perf_counter()
    qvecs = index.encode_queries(texts, progress=progress)
    encode_ms = (time.perf_counter() - t0) * 1000 / max(len(texts), 1)
    gold = {q.query: q.scope for q in queries}
    systems = {name: (r if isinstance(r, tuple) else (r, "router")) for name, r in routers.items()}
    internal = {"global": (GlobalRouter(tax), "router"), "oracle": (OracleRouter(tax, gold), "router")}
    for name, (r, policy) in list(systems.items()):
        if isinstance(r, OracleRouter):
            systems[name] = (internal["oracle"][0], policy)  # the CLI builds an oracle without gold labels
    all_systems = {**internal, **systems}
    decided: dict[int, list[Any]] = {}
    n_total = len(index)
    out: dict[str, Any] = {"k": k, "search": cfg.to_dict(), "n_queries": len(queries),
                           "index": {"chunks": n_total, "per_scope": {s: len(index.shard_rows[s])
                                                                        for s in tax.names}},
                           "query_encode_ms": round(encode_ms, 3), "systems": {}}
    results: dict[str, list[list[Hit]]] = {}
    for name, (router, policy) in all_systems.items():
        if id(router) not in decided:  # several policies of one router share its decisions
            decided[id(router)] = router.route_batch(texts)
        decisions = decided[id(router)]
        plans = [search_plan(d, policy) for d in decisions]
        scopes = [p[0] for p in plans]
        t0 = time.perf_counter()
        res = index.search_many(texts, scopes, k, cfg, qvecs=qvecs, weights=[p[1] for p in plans])
        search_ms = (time.perf_counter() - t0) * 1000 / max(len(texts), 1)
        results[name] = res
        if name not in systems:
            continue
        p = [precision_at_k(h, q.scope) for h, q in zip(res, queries)]
        rec = [recall_at_k(h, q.relevant_ids) for h, q in zip(res, queries) if q.relevant_ids]
        routed = [sc for sc in scopes if sc]
        searched = [sum(len(index.shard_rows[s]) for s in sc) / n_total if sc else 1.0 for sc in scopes]
        out["systems"][name] = {
            "p_at_k": round(statistics.fmean(p), 4),
            "r_at_k": round(statistics.fmean(r for r, _ in rec), 4) if rec else None,
            "hit_at_k": round(statistics.fmean(h for _, h in rec), 4) if rec else None,
            "n_queries": len(queries),
            "n_with_relevant": len(rec),
            "policy": policy,
            "routed_rate": round(len(routed) / len(decisions), 4),
            "routing_accuracy": round(sum(d.scope == q.scope for d, q in zip(decisions, queries))
                                      / len(queries), 4),
            "gold_scope_searched": round(sum(q.scope in (sc or tax.names) for sc, q in zip(scopes, queries))
                                         / len(queries), 4),
            "searched_fraction": round(statistics.fmean(searched), 4),
            "route_ms_p50": round(statistics.median(d.latency_ms for d in decisions), 4),
            "search_ms_mean": round(search_ms, 3),
        }
    out["dilution"] = dilution(index, queries, results["global"], results["oracle"])
    out["confusion"] = {name: confusion_matrix(index, queries, results[name])
                        for name in out["systems"]}
    return out


def dilution(index: ScopedIndex, queries: Sequence[LabelledQuery], global_res: Sequence[list[Hit]],
             oracle_res: Sequence[list[Hit]]) -> dict[str, Any]:
    """Per-scope mean δ and Spearman ρ(log chunk count, mean δ)."""
    from scipy.stats import spearmanr

    per: dict[str, list[float]] = {}
    for q, g, o in zip(queries, global_res, oracle_res):
        po = precision_at_k(o, q.scope)
        if po > 0:
            per.setdefault(q.scope, []).append(1 - precision_at_k(g, q.scope) / po)
    per_scope = {s: {"delta": round(statistics.fmean(v), 4), "n_queries": len(v),
                     "chunks": len(index.shard_rows[s])} for s, v in per.items()}
    per_scope = {s: per_scope[s] for s in index.taxonomy.names if s in per_scope}
    rho = None
    if len(per_scope) >= 3:
        xs = [math.log(v["chunks"]) for v in per_scope.values()]
        ys = [v["delta"] for v in per_scope.values()]
        if len(set(xs)) > 1 and len(set(ys)) > 1:
            rho = round(float(spearmanr(xs, ys).statistic), 4)
    return {"per_scope": per_scope, "spearman_rho": rho,
            "mean_delta": round(statistics.fmean(v["delta"] for v in per_scope.values()), 4) if per_scope else None}

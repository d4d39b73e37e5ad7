"""Router evaluation: accuracy, macro-F1, per-scope P/R/F1, confusion, calibration, abstention,
latency and throughput.

Accuracy and macro-F1 count an abstention as a miss (the query was not routed to its scope), so
routers that abstain a lot cannot look good by answering only the easy queries; abstention is
reported next to them, with the accuracy on the answered queries.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..data import LabelledQuery
from ..routers import Router

ABSTAIN = "(abstain)"


def _percentile(xs: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs, dtype=float), q)) if len(xs) else float("nan")


def evaluate_router(router: Router, queries: Sequence[LabelledQuery], *, throughput_batch: int = 64,
                    progress: bool = False) -> dict[str, Any]:
    """Evaluate ``router`` on labelled queries.

    Latency is measured one query at a time through :meth:`Router.route` (the serving pattern);
    throughput through :meth:`Router.route_batch` in batches of ``throughput_batch``.

    >>> evaluate_router(RegexRouter(tax), read_queries("test.jsonl", tax))["macro_f1"]  # doctest: +SKIP
    """
    from sklearn.metrics import f1_score, precision_recall_fscore_support

    from ..progress import progress_bar
    from .calibration import expected_calibration_error, reliability

    labels = router.taxonomy.names
    texts = [q.query for q in queries]
    gold = [q.scope for q in queries]
    router.route(texts[0])  # warm-up (lazy loads, first-call allocations) is not latency
    decisions = []
    with progress_bar(f"routing ({router.name})", len(texts), enabled=progress) as bar:
        for t in texts:
            decisions.append(router.route(t))
            bar.advance()
    latencies = [d.latency_ms for d in decisions]
    t0 = time.perf_counter()
    for i in range(0, len(texts), throughput_batch):
        router.route_batch(texts[i:i + throughput_batch])
    throughput = len(texts) / max(time.perf_counter() - t0, 1e-9)

    pred = [d.scope if d.scope is not None else ABSTAIN for d in decisions]
    answered = [i for i, d in enumerate(decisions) if not d.abstained]
    top1 = [max(d.scores, key=d.scores.get) if d.scores and max(d.scores.values()) > 0 else ABSTAIN
            for d in decisions]
    p, r, f, s = precision_recall_fscore_support(gold, pred, labels=labels, zero_division=0)
    per_scope = {lab: {"precision": round(float(p[i]), 4), "recall": round(float(r[i]), 4),
                       "f1": round(float(f[i]), 4), "support": int(s[i])} for i, lab in enumerate(labels)}
    cols = [*labels, ABSTAIN]
    cm = np.zeros((len(labels), len(cols)), dtype=int)
    for g, pr in zip(gold, pred):
        cm[labels.index(g), cols.index(pr)] += 1
    conf = np.array([d.confidence if d.confidence is not None else 0.0 for d in decisions])
    top1_correct = np.array([t == g for t, g in zip(top1, gold)])
    has_conf = any(d.confidence is not None for d in decisions)
    return {
        "router": router.name,
        "n_queries": len(queries),
        "accuracy": round(float(np.mean([a == b for a, b in zip(pred, gold)])), 4),
        "macro_f1": round(float(f1_score(gold, pred, labels=labels, average="macro", zero_division=0)), 4),
        "top1_accuracy": round(float(top1_correct.mean()), 4),
        "top1_macro_f1": round(float(f1_score(gold, top1, labels=labels, average="macro", zero_division=0)), 4),
        "per_scope": per_scope,
        "confusion": {"labels": labels, "columns": cols, "matrix": cm.tolist()},
        "ece": round(expected_calibration_error(conf, top1_correct), 4) if has_conf else None,
        "reliability": reliability(conf, top1_correct) if has_conf else None,
        "abstain_rate": round(1 - len(answered) / len(decisions), 4),
        "accuracy_when_answered": round(float(np.mean([pred[i] == gold[i] for i in answered])), 4)
        if answered else None,
        "latency_ms": {"p50": round(_percentile(latencies, 50), 4), "p95": round(_percentile(latencies, 95), 4),
                       "p99": round(_percentile(latencies, 99), 4),
                       "mean": round(statistics.fmean(latencies), 4)},
        "throughput_qps": round(throughput, 1),
        "throughput_batch": throughput_batch,
        "llm_calls_per_query": round(statistics.fmean(d.llm_calls for d in decisions), 4),
        "decided_by": dict(Counter(d.stage for d in decisions)),
    }

"""Calibration (temperature scaling) and the abstention threshold.

A router that is wrong sends the query to the wrong shard, where its answer cannot be found. So
the router must know when it does not know: temperature scaling (Guo et al., 2017) makes its
confidence honest, and a threshold chosen on validation data decides when to abstain.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..evaluation.calibration import expected_calibration_error
from ..routers.lora import softmax

if TYPE_CHECKING:
    from ..data import LabelledQuery
    from ..routers.vote import RetrievalVoteRouter

__all__ = ["choose_threshold", "expected_calibration_error", "fit_temperature", "fit_vote_threshold", "softmax"]


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """The temperature T > 0 that minimises the negative log-likelihood of ``softmax(logits / T)``.

    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, 500); logits = np.eye(3)[y] * 8 + rng.normal(0, 3, (500, 3))
    >>> fit_temperature(logits, y) > 1   # over-confident logits get cooled down
    True
    """
    import torch

    x = torch.tensor(logits, dtype=torch.float64)
    y = torch.tensor(labels, dtype=torch.long)
    log_t = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([log_t], lr=0.1, max_iter=200, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(x / log_t.exp(), y)
        loss.backward()
        return loss

    opt.step(closure)
    t = float(log_t.detach().exp())
    return float(np.clip(t, 0.05, 20.0))


def choose_threshold(confidence: np.ndarray, correct: np.ndarray, *, target_accuracy: float = 0.95,
                     target_abstain_rate: float | None = None) -> tuple[float, dict[str, float]]:
    """Pick the confidence threshold: answer when ``confidence >= threshold``.

    By default, the lowest threshold whose answered set reaches ``target_accuracy`` (answer as
    much as possible at that accuracy). With ``target_abstain_rate``, the quantile that abstains
    on that share instead. Returns the threshold and what it gives on the data it was fitted on.

    >>> choose_threshold(np.array([.9, .8, .7, .6]), np.array([1, 1, 0, 1]), target_accuracy=1.0)[0]
    0.75
    """
    confidence = np.asarray(confidence, dtype=float)
    correct = np.asarray(correct, dtype=bool)
    if target_abstain_rate is not None:
        thr = float(np.quantile(confidence, target_abstain_rate)) if target_abstain_rate > 0 else 0.0
    else:
        order = np.argsort(-confidence, kind="stable")
        acc_prefix = np.cumsum(correct[order]) / np.arange(1, len(order) + 1)
        ok = np.nonzero(acc_prefix >= target_accuracy)[0]
        if len(ok) == 0:
            thr = 1.0 + 1e-9  # unreachable: always abstain rather than pretend
        elif ok[-1] == len(order) - 1:
            thr = 0.0
        else:
            m = ok[-1]
            cut, rest = float(confidence[order[m]]), confidence[order[m + 1:]]
            # Ties at the cut would let in answers the target excludes: go just above them. Else
            # halfway to the next confidence, not on a fitted query's own value, where a rounding
            # difference (another runtime, a reload) would flip its decision.
            tie = bool(np.any(rest >= cut))
            thr = float(np.nextafter(cut, 2.0)) if tie else (cut + float(rest.max())) / 2
    answered = confidence >= thr
    stats = {"threshold": thr, "abstain_rate": float(1 - answered.mean()),
             "accuracy_when_answered": float(correct[answered].mean()) if answered.any() else float("nan")}
    return thr, stats


def fit_vote_threshold(router: RetrievalVoteRouter, queries: Sequence[LabelledQuery], *,
                       target_accuracy: float = 0.95) -> dict[str, float]:
    """Choose ``router.threshold`` on labelled (validation) queries for a target
    accuracy-when-answered of the combined (router x retrieval vote) decision; returns the stats.

    >>> fit_vote_threshold(RetrievalVoteRouter(lora, index), val_queries)  # doctest: +SKIP
    {'threshold': 0.62, 'abstain_rate': 0.08, 'accuracy_when_answered': 0.951}
    """
    probs, _ = router.combined([q.query for q in queries])
    gold = np.array([router.taxonomy.index(q.scope) for q in queries])
    router.threshold, stats = choose_threshold(probs.max(1), probs.argmax(1) == gold,
                                               target_accuracy=target_accuracy)
    return stats

"""Decisions made on a few held-out predictions, with their noise measured: the epoch count
(``cv_choice: one_se``) and the export guard (``guard_margin_se``).

With 8-16 queries per scope the out-of-fold macro-F1 of neighbouring epoch counts differs by a
query or two, and its argmax over 40-60 candidates is partly noise. The classical remedy is the
one-standard-error rule (Breiman et al., CART): take the simplest candidate, here the fewest
epochs, whose score is within one standard error of the best one's. The standard error is that of
the *paired* difference to the best, by bootstrap over the held-out queries: both scores come
from the same queries, so their difference is far less noisy than either score.

It is an option, not the default. On the learning curves it changed the choice in 3 of 7 cells
at 8-16 per scope (BBC 16: 0 epochs instead of 4; composite 16: 1 instead of 11; Django 8: 7
instead of 11), and on the test queries (``bench/finetune_curve.py``) the fewer epochs were worth
+0.005 on BBC but -0.031 on composite: the out-of-fold curve's plateau hid a test curve that
kept rising.

The export guard has the same problem the other way round: a frozen head that leads the fine-tuned
model by two queries of 64 is not better. On Django docs at 8 per scope the frozen probe led
out-of-fold 0.200 to 0.184 and was exported (test 0.238); the fine-tuned model it displaced
scored 0.278 on the test queries. So a frozen head is exported only when its lead is larger than
``guard_margin_se`` bootstrap standard errors of the paired difference (:func:`guard_evidence`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


def bootstrap_macro_f1(true: np.ndarray, preds: Mapping[int, np.ndarray], n_labels: int, *, n_boot: int = 200,
                       seed: int = 0) -> dict[int, np.ndarray]:
    """Macro-F1 (every label counted, as :func:`~.trainer.macro_f1`) of each candidate's
    predictions on the same ``n_boot`` resamples of the queries.

    >>> t = np.array([0, 0, 1, 1]); f = bootstrap_macro_f1(t, {0: t, 1: 1 - t}, 2, n_boot=5)
    >>> f[0].shape, bool(f[0].min() >= 0.5), float(f[1].max())   # a label a resample lacks scores 0
    ((5,), True, 0.0)
    """
    n = len(true)
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    offset = (np.arange(n_boot) * n_labels * n_labels)[:, None]
    out = {}
    for key, pred in preds.items():
        cells = np.bincount((offset + true[idx] * n_labels + pred[idx]).ravel(),
                            minlength=n_boot * n_labels * n_labels).reshape(n_boot, n_labels, n_labels)
        tp = np.diagonal(cells, axis1=1, axis2=2)
        denominator = cells.sum(1) + cells.sum(2)  # 2 tp + fp + fn
        out[key] = np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0).mean(1)
    return out


def fewest_within_one_se(true: np.ndarray, preds: Mapping[int, np.ndarray], scores: Mapping[int, float],
                         n_labels: int, *, n_boot: int = 200, seed: int = 0) -> tuple[int, dict[str, float]]:
    """The smallest key of ``preds`` (an epoch count) whose score is within one bootstrap standard
    error of the paired difference to the best-scoring key; returns it and what decided it.

    >>> t = np.array([0, 0, 0, 1, 1, 1]); almost = np.array([0, 0, 1, 1, 1, 1])
    >>> from masdr_router.training.trainer import macro_f1
    >>> preds = {0: almost, 5: t}; scores = {k: macro_f1(t, p, 2) for k, p in preds.items()}
    >>> fewest_within_one_se(t, preds, scores, 2)[0]   # one query of six apart: within the noise
    0
    >>> big = np.tile(t, 50); preds = {0: np.tile(almost, 50), 5: big}
    >>> fewest_within_one_se(big, preds, {k: macro_f1(big, p, 2) for k, p in preds.items()}, 2)[0]
    5
    """
    best = max(scores, key=lambda k: (scores[k], -k))
    boot = bootstrap_macro_f1(true, preds, n_labels, n_boot=n_boot, seed=seed)
    for key in sorted(preds):
        se = float(np.std(boot[best] - boot[key], ddof=1)) if key != best else 0.0
        if scores[best] - scores[key] <= se:
            return key, {"best": best, "best_score": scores[best], "chosen_score": scores[key], "se": se}
    return best, {"best": best, "best_score": scores[best], "chosen_score": scores[best], "se": 0.0}


def beyond_noise(lead: float, se: float, margin_se: float) -> bool:
    """Whether a held-out lead is evidence: positive and larger than ``margin_se`` bootstrap standard
    errors of the paired difference (what the export guard and the contrastive check ask).

    >>> beyond_noise(0.016, 0.03, 1.0), beyond_noise(0.5, 0.05, 1.0), beyond_noise(0.01, 0.0, 0.0)
    (False, True, True)
    """
    return lead > 1e-9 and lead > margin_se * se + 1e-9


def guard_evidence(true: np.ndarray, preds: Mapping[str, np.ndarray], n_labels: int, *, against: str = "lora",
                   n_boot: int = 200, seed: int = 0) -> dict[str, dict[str, float]]:
    """For every candidate in ``preds`` but ``against``: its held-out macro-F1 (``f1``), its lead over
    ``against`` (``lead``, negative when behind) and the bootstrap standard error of that paired
    difference (``se``).

    >>> t = np.tile([0, 0, 0, 1, 1, 1], 2); lora = t.copy(); lora[[0, 6]] = 1
    >>> e = guard_evidence(t, {"lora": lora, "probe": t}, 2)["probe"]
    >>> round(e["lead"], 3), bool(e["lead"] < 2 * e["se"])   # two queries of twelve: barely noise
    (0.171, True)
    """
    from .trainer import macro_f1

    keys = list(preds)
    boot = bootstrap_macro_f1(true, dict(enumerate(preds[k] for k in keys)), n_labels, n_boot=n_boot, seed=seed)
    base = keys.index(against)
    ref = macro_f1(true, preds[against], n_labels)
    out = {}
    for i, k in enumerate(keys):
        if k != against:
            f1 = macro_f1(true, preds[k], n_labels)
            out[k] = {"f1": f1, "lead": f1 - ref, "se": float(np.std(boot[i] - boot[base], ddof=1))}
    return out

"""Calibration metrics: how far a router's confidence is from its accuracy."""

from __future__ import annotations

import numpy as np


def expected_calibration_error(confidence: np.ndarray, correct: np.ndarray, n_bins: int = 15) -> float:
    """ECE with equal-width bins: sum over bins of |accuracy - confidence| weighted by bin size.

    >>> expected_calibration_error(np.array([0.9, 0.9, 0.6, 0.6]), np.array([1, 1, 1, 0]))
    0.1
    """
    confidence, correct = np.asarray(confidence, float), np.asarray(correct, float)
    bins = np.minimum((confidence * n_bins).astype(int), n_bins - 1)
    ece = 0.0
    for b in range(n_bins):
        m = bins == b
        if m.any():
            ece += m.mean() * abs(correct[m].mean() - confidence[m].mean())
    return round(float(ece), 12)


def reliability(conf: np.ndarray, correct: np.ndarray, n_bins: int = 10) -> dict[str, list[float | int | None]]:
    """Per-bin accuracy, mean confidence and count: the data of a reliability diagram."""
    bins = np.minimum((conf * n_bins).astype(int), n_bins - 1)
    acc: list[float | None] = []
    mean_conf: list[float | None] = []
    count: list[int] = []
    for b in range(n_bins):
        m = bins == b
        count.append(int(m.sum()))
        acc.append(round(float(correct[m].mean()), 4) if m.any() else None)
        mean_conf.append(round(float(conf[m].mean()), 4) if m.any() else None)
    return {"bin_upper": [round((b + 1) / n_bins, 2) for b in range(n_bins)], "accuracy": acc,
            "confidence": mean_conf, "count": count}

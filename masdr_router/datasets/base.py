"""What a data set loader returns, and how it is written out in the data contracts."""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .._version import __version__
from ..atomic import atomic_directory
from ..data import Document, LabelledQuery, write_corpus, write_queries
from ..taxonomy import Taxonomy
from .splits import stratified_split


@dataclass
class Dataset:
    """A real data set in the package's contracts: a taxonomy, a corpus, labelled queries."""

    name: str
    taxonomy: Taxonomy
    documents: list[Document]
    queries: list[LabelledQuery]
    provenance: dict[str, Any] = field(default_factory=dict)

    def save(self, out: str | Path, *, seed: int = 0, val: float = 0.1, test: float = 0.2,
             overwrite: bool = False) -> dict[str, Any]:
        """Write ``taxonomy.yaml``, ``corpus.jsonl``, ``{train,val,test}.jsonl``, ``dataset.json``."""
        splits = stratified_split(self.queries, val=val, test=test, seed=seed)
        scope_of_doc = Counter(s for d in self.documents for s in self.taxonomy.scopes_of(d.metadata))
        info = {
            "name": self.name, "package_version": __version__, "seed": seed,
            "taxonomy": {"name": self.taxonomy.name, "fingerprint": self.taxonomy.fingerprint},
            "documents": len(self.documents), "documents_per_scope": dict(scope_of_doc),
            "queries": {k: len(v) for k, v in splits.items()},
            "queries_per_scope": dict(Counter(q.scope for q in self.queries)),
            "provenance": self.provenance,
        }
        with atomic_directory(out, overwrite=overwrite) as tmp:
            self.taxonomy.to_yaml(tmp / "taxonomy.yaml")
            write_corpus(tmp / "corpus.jsonl", self.documents)
            for split, qs in splits.items():
                write_queries(tmp / f"{split}.jsonl", qs)
            (tmp / "dataset.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        return info


def packaged_taxonomy(name: str) -> Taxonomy:
    """A taxonomy shipped with the package (``masdr_router/datasets/taxonomies/NAME.yaml``)."""
    path = resources.files("masdr_router.datasets") / "taxonomies" / f"{name}.yaml"
    with resources.as_file(path) as p:
        return Taxonomy.from_yaml(p)


def subsample_per_scope(docs: Sequence[Document], key: str, limit: int | dict[str, int] | None,
                        seed: int) -> list[Document]:
    """Keep at most ``limit`` documents per value of ``metadata[key]`` (seeded), in input order."""
    if limit is None:
        return list(docs)
    groups: dict[Any, list[int]] = defaultdict(list)
    for i, d in enumerate(docs):
        groups[d.metadata[key]].append(i)
    rng = random.Random(seed)
    keep: set[int] = set()
    for value in sorted(groups, key=str):
        idx = groups[value]
        n = limit.get(value, 0) if isinstance(limit, dict) else limit
        keep.update(idx if len(idx) <= n else rng.sample(idx, n))
    return [d for i, d in enumerate(docs) if i in keep]

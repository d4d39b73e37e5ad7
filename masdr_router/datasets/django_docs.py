"""Django 5.2 documentation: eight parts of one manual, from the reference to the FAQ, ~50x apart in size.

Read from the ``Django==5.2.8`` source distribution (``docs/<part>/**/*.txt``, reStructuredText,
BSD-3-Clause), which is downloaded, never installed. A document is one section of a page (its
heading removed); the query is the heading when it is unique in the manual and 2-12 words long
(``Limiting the maximum number of forms``), and the section is its one relevant document. The
scopes are the manual's parts: reference, topic guides, how-to guides, the tutorial and
introduction, FAQ, internals and contributing, release notes, miscellany.
"""

from __future__ import annotations

from .base import Dataset, packaged_taxonomy
from .fetch import DJANGO_SDIST, fetch_sdist
from .rst import Section, build_corpus, read_pages, sections_of

PARTS = ("intro", "topics", "howto", "ref", "faq", "internals", "releases", "misc")


def read_django_sections() -> list[Section]:
    """Every section of ``docs/<part>/**/*.txt``, in file-path order. (Pages that are only a table
    of contents leave no section long enough to keep.)"""
    root = f"django-{DJANGO_SDIST.version}/docs/"
    pages = read_pages(fetch_sdist(DJANGO_SDIST), root, ".txt",
                       lambda rel: rel.partition("/")[0] in PARTS and bool(rel.partition("/")[2]))
    return [s for rel in sorted(pages) for s in sections_of(rel, rel.partition("/")[0], pages[rel])]


def load_django_docs(*, max_docs_per_scope: int | None = None, seed: int = 0) -> Dataset:
    docs, queries, stats = build_corpus(read_django_sections(), prefix="django", source="django-docs",
                                        max_docs_per_scope=max_docs_per_scope, seed=seed)
    provenance = {"source": "Django 5.2 documentation (docs/ of the sdist)", "licence": "BSD-3-Clause",
                  "package": DJANGO_SDIST.requirement, "file": DJANGO_SDIST.filename,
                  "sha256": DJANGO_SDIST.sha256, **stats}
    return Dataset("django-docs", packaged_taxonomy("django-docs"), docs, queries, provenance)

"""pytest 9.2 documentation: a Diátaxis manual (how-to guides, reference, explanation) with examples,
release notes and deprecation history, ~11x apart in size.

Read from the ``pytest==9.2.0`` source distribution (``doc/en/**/*.rst``, MIT licence), which is
downloaded, never built or installed. A document is one section (heading removed); the query is the
heading when it is unique in the manual and 2-12 words long (``Control skipping of tests according
to command line option``), and the section is its one relevant document. The scopes are the kinds of
page, not their subjects: fixtures, marks and plugins are in every one of them, which makes routing
by topic words alone unreliable. A release's heading (``2.3.0 (2012-10-19)``, ``Changes between
2.0.0 and 2.0.1``) is cut to its version, so release logs are documents without queries, while
announcements' titles (``pytest-2.7.0: fixes, features, speed improvements``) are queries.

This set was added after the trainer's defaults were chosen, to measure them on a taxonomy they were
not tuned on.
"""

from __future__ import annotations

import re

from .base import Dataset, packaged_taxonomy
from .fetch import PYTEST_SDIST, fetch_sdist
from .rst import Section, build_corpus, read_pages, sections_of

# page (its directory, or its file name at the top level) -> the scope it is routed to; the top-level
# pages not listed (talks, contact, licence, sponsors, contents) hold no sections to route to
PARTS = {"how-to": "how-to", "reference": "reference", "builtin": "reference",
         "explanation": "explanation", "getting-started": "explanation", "index": "explanation",
         "adopt": "explanation", "example": "examples", "changelog": "releases", "announce": "releases",
         "deprecations": "history", "historical-notes": "history", "backwards-compatibility": "history",
         "funcarg_compare": "history", "funcargs": "history", "yieldfixture": "history", "naming20": "history",
         "proposals": "history"}
_VERSION = r"\d+(?:\.\d+)+\w*"
_RELEASE = re.compile(rf"^(?:({_VERSION}) +\(.*\)|Changes between {_VERSION} and ({_VERSION}))[ \t]*$", re.M)


def _release_versions(rst: str) -> str:
    r"""``2.3.0 (2012-10-19)``, ``2.9.1 (compared to 2.9.0)`` and ``Changes between 2.0.0 and 2.0.1``
    headings become ``2.3.0``, ``2.9.1`` and ``2.0.1`` (the underline stays long enough: it was
    written for the longer heading).

    >>> _release_versions("Changes between 2.0.0 and 2.0.1\n-------------------------------\n")
    '2.0.1\n-------------------------------\n'
    """
    return _RELEASE.sub(lambda m: m.group(1) or m.group(2), rst)


def read_pytest_sections() -> list[Section]:
    root = f"pytest-{PYTEST_SDIST.version}/doc/en/"
    pages = read_pages(fetch_sdist(PYTEST_SDIST), root, ".rst", lambda rel: rel.partition("/")[0] in PARTS)
    return [s for rel in sorted(pages)
            for s in sections_of(rel, PARTS[rel.partition("/")[0]], _release_versions(pages[rel]))]


def load_pytest_docs(*, max_docs_per_scope: int | None = None, seed: int = 0) -> Dataset:
    docs, queries, stats = build_corpus(read_pytest_sections(), prefix="pytest", source="pytest-docs",
                                        max_docs_per_scope=max_docs_per_scope, seed=seed)
    provenance = {"source": "pytest 9.2 documentation (doc/en/ of the sdist)", "licence": "MIT",
                  "package": PYTEST_SDIST.requirement, "file": PYTEST_SDIST.filename,
                  "sha256": PYTEST_SDIST.sha256, **stats}
    return Dataset("pytest-docs", packaged_taxonomy("pytest-docs"), docs, queries, provenance)

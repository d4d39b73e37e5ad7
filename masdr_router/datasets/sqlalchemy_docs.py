"""SQLAlchemy 2.1 documentation: ORM, Core, dialects, tutorial, FAQ, error guide, changelog.

Read from the ``SQLAlchemy==2.1.9`` source distribution (``doc/build/**/*.rst``, MIT licence), which
is downloaded, never built or installed. The dialect pages are mostly the dialect modules'
docstrings (``.. automodule::``), read from ``lib/sqlalchemy/dialects/`` as Sphinx would. A
document is one section (heading removed); the query is the heading when it is unique in the
manual and 2-12 words long, and the section is its one relevant document. Each release in the
changelog files is one section (``1.4.54``), so release logs are documents without queries, while
the migration notes' headings (``New KeyedTuple implementation dramatically faster``) are queries.
"""

from __future__ import annotations

import ast
import re
import tarfile

from ..errors import DatasetError
from .base import Dataset, packaged_taxonomy
from .fetch import SQLALCHEMY_SDIST, fetch_sdist
from .rst import Section, build_corpus, sections_of

# part of the manual -> the scope it is routed to; top-level pages by file name
PARTS = {"tutorial": "tutorial", "intro": "tutorial", "orm": "orm", "core": "core", "dialects": "dialects",
         "faq": "faq", "errors": "errors", "changelog": "changelog"}
# glossary (one definition list), copyright, index and contents pages have no sections to route to
_AUTOMODULE = re.compile(r"^\.\. automodule:: (sqlalchemy\.dialects\.[\w.]+)[ \t]*$", re.M)
_CHANGELOG = re.compile(r"^\.\. changelog::[ \t]*\n[ \t]+:version: (\S+)[ \t]*$", re.M)
_SQL_MARKERS = re.compile(r"\{(?:execsql|printsql|opensql|stop)\}")


def _docstring(source: str) -> str:
    return ast.get_docstring(ast.parse(source)) or ""


def _release_headings(rst: str) -> str:
    """``.. changelog::`` / ``:version: 1.4.54`` blocks become sections headed ``1.4.54``."""
    return _CHANGELOG.sub(lambda m: f"{m.group(1)}\n{'~' * len(m.group(1))}", rst)


def read_sqlalchemy_sections() -> list[Section]:
    sdist = fetch_sdist(SQLALCHEMY_SDIST)
    top = f"sqlalchemy-{SQLALCHEMY_SDIST.version}/"
    pages: dict[str, str] = {}
    modules: dict[str, str] = {}
    with tarfile.open(sdist, "r:gz") as tf:
        for m in tf:  # one sequential pass: seeking backwards in a gzip stream is slow
            if not m.isfile():
                continue
            name = m.name[len(top):] if m.name.startswith(top) else ""
            if name.startswith("doc/build/") and name.endswith(".rst"):
                rel = name[len("doc/build/"):-len(".rst")]
                if rel.partition("/")[0] not in PARTS or "/unreleased_" in rel:  # unreleased: change fragments
                    continue
            elif name.startswith("lib/sqlalchemy/dialects/") and name.endswith(".py"):
                rel = name[len("lib/"):-len(".py")].replace("/", ".")
            else:
                continue
            f = tf.extractfile(m)
            if f is None:  # a regular file always has content; anything else is a broken archive
                raise DatasetError(f"{m.name}: unreadable member of the downloaded archive")
            text = f.read().decode("utf-8")
            if rel.startswith("sqlalchemy."):
                modules[rel] = text
            else:
                pages[rel] = text
    sections: list[Section] = []
    for rel in sorted(pages):
        rst = _AUTOMODULE.sub(lambda m: _docstring(modules.get(m.group(1), "")), pages[rel])
        if rel.startswith("changelog/"):
            rst = _release_headings(rst)
        sections.extend(sections_of(rel, PARTS[rel.partition("/")[0]], _SQL_MARKERS.sub("", rst)))
    return sections


def load_sqlalchemy_docs(*, max_docs_per_scope: int | None = None, seed: int = 0) -> Dataset:
    docs, queries, stats = build_corpus(read_sqlalchemy_sections(), prefix="sqlalchemy", source="sqlalchemy-docs",
                                        max_docs_per_scope=max_docs_per_scope, seed=seed)
    provenance = {"source": "SQLAlchemy 2.1 documentation (doc/build/ and dialect docstrings of the sdist)",
                  "licence": "MIT", "package": SQLALCHEMY_SDIST.requirement, "file": SQLALCHEMY_SDIST.filename,
                  "sha256": SQLALCHEMY_SDIST.sha256, **stats}
    return Dataset("sqlalchemy-docs", packaged_taxonomy("sqlalchemy-docs"), docs, queries, provenance)

"""Documentation trees written in reStructuredText, cut into labelled sections (stdlib only).

A *document* is one section: the text between a heading and the next heading of any level, the
heading itself removed. Its *query* is the heading, when that heading is unique in the corpus and
2-12 words long, so a query names what its one relevant document is about without being a copy of
a line of it. Documents are kept in source order; exact duplicates (same normalised text) are
dropped after the first and counted.
"""

from __future__ import annotations

import re
import tarfile
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data import Document, LabelledQuery
from ..errors import DatasetError
from .base import subsample_per_scope

MIN_WORDS = 25
QUERY_WORDS = (2, 12)

_ADORN = re.compile(r"""^([=\-~^"'*+#<>:._`])\1{2,}\s*$""")
_ROLE = re.compile(r":[\w:.+-]+:`(?:[^`<]*?<)?~?!?([^`>]+?)>?`")  # :mod:`os`, :ref:`text <label>`
_LITERAL = re.compile(r"``([^`]+)``")
_TICK = re.compile(r"`([^`<]+?)(?:\s*<[^>]+>)?`_{0,2}")
_MARKUP_LINE = re.compile(r"^\s*\.\. [\w:-]+::.*$"      # a directive: .. code-block:: python
                          r"|^\s*\.\. _[^:]*:.*$"         # a label or link target: .. _queryset-api:
                          r"|^\s*\.\. \|[^|]+\|.*$"       # a substitution definition
                          r"|^\s*:[\w-]+:(?:\s.*)?$"      # a directive option or field: :tags: orm
                          r"|^\s*[=\-+|~^:*#]+(?:\s+[=\-+|~^:*#]+)*\s*$")  # adornments, table rules


def clean_inline(s: str) -> str:
    """Inline markup removed: roles keep their text, literals and links their words."""
    s = _ROLE.sub(r"\1", s)
    s = _LITERAL.sub(r"\1", s)
    s = _TICK.sub(r"\1", s)
    s = s.replace("\\", "").replace("**", "").replace("*", "")
    return re.sub(r"\s+", " ", s).strip()


def split_sections(text: str) -> list[tuple[str, str]]:
    """``(title, raw body)`` of every section, in order. Text before the first heading is dropped.

    >>> split_sections("Intro\\n=====\\n\\nHello *world*.\\n\\nSub part\\n--------\\nMore.\\n")
    [('Intro', '\\nHello *world*.\\n'), ('Sub part', 'More.')]
    """
    lines = text.splitlines()
    heads: list[tuple[int, int, str]] = []  # (first line of the heading, first body line, title)
    i, n = 0, len(lines)
    while i < n - 1:
        t, u = lines[i], lines[i + 1]
        if (_ADORN.match(t) and i + 2 < n and u.strip() and _ADORN.match(lines[i + 2])
                and lines[i + 2].strip()[0] == t.strip()[0]):  # overline, title, underline
            heads.append((i, i + 3, u.strip()))
            i += 3
        elif (t.strip() and not t[0].isspace() and not t.startswith(".. ") and not _ADORN.match(t)
              and _ADORN.match(u) and len(u.rstrip()) >= len(t.rstrip()) - 1):  # title, underline
            heads.append((i, i + 2, t.strip()))
            i += 2
        else:
            i += 1
    return [(clean_inline(title), "\n".join(lines[body:heads[k + 1][0] if k + 1 < len(heads) else n]))
            for k, (_, body, title) in enumerate(heads)]


def body_to_text(body: str) -> str:
    """Prose and code of a section body, without directive, label, option and table-rule lines."""
    return clean_inline(" ".join(ln.strip() for ln in body.splitlines()
                                 if ln.strip() and not _MARKUP_LINE.match(ln)))


def slug(title: str, limit: int = 80) -> str:
    """``'The QuerySet API'`` -> ``'the-queryset-api'`` (lower-case ASCII words joined by ``-``)."""
    s = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return s[:limit].rstrip("-") or "section"


def normalised(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


@dataclass(frozen=True)
class Section:
    """One section of a documentation source file."""

    file: str   # the source file, relative to the docs root, without extension: "ref/models/fields"
    part: str   # the top-level part of the documentation it belongs to: the scope key
    title: str
    text: str   # the body as plain text


def read_pages(sdist: Path, root: str, suffix: str, keep: Callable[[str], bool]) -> dict[str, str]:
    """The text of every file ``root<rel><suffix>`` in the archive whose ``rel`` passes ``keep``, by ``rel``."""
    pages: dict[str, str] = {}
    with tarfile.open(sdist, "r:gz") as tf:
        for m in tf:  # one sequential pass: seeking backwards in a gzip stream is slow
            if not (m.isfile() and m.name.startswith(root) and m.name.endswith(suffix)):
                continue
            rel = m.name[len(root):-len(suffix)]
            if not keep(rel):
                continue
            f = tf.extractfile(m)
            if f is None:  # a regular file always has content; anything else is a broken archive
                raise DatasetError(f"{m.name}: unreadable member of the downloaded archive")
            pages[rel] = f.read().decode("utf-8")
    return pages


def sections_of(file: str, part: str, rst: str) -> list[Section]:
    return [Section(file, part, title, body_to_text(body)) for title, body in split_sections(rst)]


def build_corpus(sections: Iterable[Section], *, prefix: str, source: str, max_docs_per_scope: int | None,
                 seed: int) -> tuple[list[Document], list[LabelledQuery], dict[str, Any]]:
    """Documents, heading queries and counts from sections (see the module docstring).

    A document's id is ``PREFIX:FILE:SLUG`` (the heading's slug, ``_2``, ``_3``... when a file repeats
    a heading), so ids do not depend on the order of files or on the other sections of a release.
    Headings are judged unique over the whole deduplicated corpus, before any subsampling.
    """
    docs: list[Document] = []
    titles: dict[str, str] = {}
    seen_text: set[str] = set()
    slugs_in_file: Counter[tuple[str, str]] = Counter()
    n_sections = n_short = n_dup = 0
    for s in sections:
        n_sections += 1
        base = slug(s.title)
        slugs_in_file[(s.file, base)] += 1
        k = slugs_in_file[(s.file, base)]
        if len(s.text.split()) < MIN_WORDS:
            n_short += 1
            continue
        key = normalised(s.text)
        if key in seen_text:  # the same text twice would be a second relevant document the labels miss
            n_dup += 1
            continue
        seen_text.add(key)
        doc_id = f"{prefix}:{s.file}:{base}" + (f"_{k}" if k > 1 else "")  # "_" is never in a slug
        docs.append(Document(id=doc_id, text=s.text, metadata={"source": source, "part": s.part, "file": s.file}))
        titles[doc_id] = s.title
    heading_count = Counter(normalised(t) for t in titles.values())

    def is_query(title: str) -> bool:
        return heading_count[normalised(title)] == 1 and QUERY_WORDS[0] <= len(title.split()) <= QUERY_WORDS[1]

    n_queries_full = sum(1 for t in titles.values() if is_query(t))
    docs = subsample_per_scope(docs, "part", max_docs_per_scope, seed)
    queries = [LabelledQuery(query=titles[d.id], scope=d.metadata["part"], relevant_ids=(d.id,))
               for d in docs if is_query(titles[d.id])]
    stats = {"sections": n_sections, "skipped_short": n_short, "skipped_duplicates": n_dup,
             "documents_before_subsampling": len(titles), "queries_before_subsampling": n_queries_full,
             "min_words": MIN_WORDS, "query_words": list(QUERY_WORDS), "max_docs_per_scope": max_docs_per_scope}
    return docs, queries, stats

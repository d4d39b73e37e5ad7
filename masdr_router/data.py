"""Corpus and labelled-query files (JSONL), and chunking.

Corpus rows: ``{"id": str, "text": str, "metadata": {str: scalar}}``.
Query rows:  ``{"query": str, "scope": str, "relevant_ids"?: [str], "answer"?: str}``.
Readers report the file, line and field of the first bad row and never drop rows silently.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .atomic import write_text_atomic
from .errors import ValidationError
from .taxonomy import Taxonomy

_SCALARS = (str, int, float, bool)


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Chunk:
    """A piece of a document. It inherits the document's id (as ``doc_id``) and metadata."""

    id: str
    doc_id: str
    text: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class LabelledQuery:
    query: str
    scope: str
    relevant_ids: tuple[str, ...] = ()
    answer: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"query": self.query, "scope": self.scope}
        if self.relevant_ids:
            d["relevant_ids"] = list(self.relevant_ids)
        if self.answer is not None:
            d["answer"] = self.answer
        return d


def _iter_json_rows(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    path = Path(path)
    if not path.is_file():
        raise ValidationError("file not found", path=str(path))
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ValidationError("line is not UTF-8", path=str(path), line=lineno) from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValidationError(f"invalid JSON: {e.msg} (column {e.colno})", path=str(path),
                                      line=lineno) from None
            if not isinstance(row, dict):
                raise ValidationError(f"expected a JSON object, got {type(row).__name__}", path=str(path),
                                      line=lineno)
            yield lineno, row


def _require_str(row: dict[str, Any], key: str, path: Path | str, lineno: int) -> str:
    if key not in row:
        raise ValidationError("missing required field", path=str(path), line=lineno, field=key)
    v = row[key]
    if not isinstance(v, str) or not v.strip():
        raise ValidationError(f"must be a non-empty string, got {v!r}"[:200], path=str(path), line=lineno,
                              field=key)
    return v


def read_corpus(path: str | Path) -> list[Document]:
    """Read a corpus JSONL file; duplicate ids and malformed rows are errors."""
    docs: list[Document] = []
    seen: dict[str, int] = {}
    for lineno, row in _iter_json_rows(path):
        doc_id = _require_str(row, "id", path, lineno)
        text = _require_str(row, "text", path, lineno)
        md = row.get("metadata", {})
        if not isinstance(md, dict):
            raise ValidationError(f"must be an object, got {type(md).__name__}", path=str(path), line=lineno,
                                  field="metadata")
        for k, v in md.items():
            if not isinstance(v, _SCALARS) and v is not None:
                raise ValidationError(f"must be a scalar, got {type(v).__name__}", path=str(path), line=lineno,
                                      field=f"metadata.{k}")
        if doc_id in seen:
            raise ValidationError(f"duplicate document id '{doc_id}' (first seen on line {seen[doc_id]})",
                                  path=str(path), line=lineno, field="id")
        seen[doc_id] = lineno
        docs.append(Document(id=doc_id, text=text, metadata=md))
    if not docs:
        raise ValidationError("corpus has no documents", path=str(path))
    return docs


def read_queries(path: str | Path, taxonomy: Taxonomy | None = None) -> list[LabelledQuery]:
    """Read labelled queries; with a taxonomy, every ``scope`` must be one of its scopes."""
    out: list[LabelledQuery] = []
    for lineno, row in _iter_json_rows(path):
        query = _require_str(row, "query", path, lineno)
        scope = _require_str(row, "scope", path, lineno)
        if taxonomy is not None and scope not in taxonomy:
            raise ValidationError(taxonomy.unknown_scope_message(scope), path=str(path), line=lineno,
                                  field="scope")
        rel = row.get("relevant_ids", [])
        if not isinstance(rel, list) or not all(isinstance(x, str) for x in rel):
            raise ValidationError("must be a list of document id strings", path=str(path), line=lineno,
                                  field="relevant_ids")
        answer = row.get("answer")
        if answer is not None and not isinstance(answer, str):
            raise ValidationError("must be a string", path=str(path), line=lineno, field="answer")
        out.append(LabelledQuery(query=query, scope=scope, relevant_ids=tuple(rel), answer=answer))
    if not out:
        raise ValidationError("file has no queries", path=str(path))
    return out


def _jsonl(rows: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def write_corpus(path: str | Path, docs: Iterable[Document]) -> None:
    write_text_atomic(path, _jsonl(asdict(d) for d in docs))


def write_queries(path: str | Path, queries: Iterable[LabelledQuery]) -> None:
    write_text_atomic(path, _jsonl(q.to_dict() for q in queries))


def chunk_document(doc: Document, size: int = 200, overlap: int = 40, *,
                   token_counts: Callable[[list[str]], list[int]] | None = None,
                   max_tokens: int | None = None) -> list[Chunk]:
    """Split a document into windows of at most ``size`` words that overlap by ``overlap`` words.

    With ``token_counts`` (the encoder's tokens per word) and ``max_tokens``, a window also ends
    before it would exceed ``max_tokens`` encoder tokens, so no chunk is cut short by the encoder:
    what the dense index embeds is the whole chunk BM25 indexes. Chunk ids stay ``DOC#i``. A short
    final window is merged into the previous one (when the token budget allows) rather than left
    as a stub.

    >>> [c.id for c in chunk_document(Document("d", "w " * 420), size=200, overlap=0)]
    ['d#0', 'd#1']
    >>> [len(c.text.split()) for c in chunk_document(Document("d", "w " * 100), size=200, overlap=0,
    ...                                              token_counts=lambda ws: [2] * len(ws), max_tokens=60)]
    [30, 30, 30, 10]
    """
    if size <= 0 or not 0 <= overlap < size:
        raise ValueError(f"need size > 0 and 0 <= overlap < size, got size={size}, overlap={overlap}")
    words = doc.text.split()
    if not words:
        return []
    if token_counts is None or max_tokens is None:
        stride = size - overlap
        starts = list(range(0, max(len(words) - overlap, 1), stride))
        # Fold a tail shorter than a quarter window into the previous chunk.
        if len(starts) > 1 and len(words) - starts[-1] < size // 4:
            starts.pop()
        ends = [len(words) if i == len(starts) - 1 else s + size for i, s in enumerate(starts)]
        spans = list(zip(starts, ends))
    else:
        spans = _token_spans(token_counts(words), size, overlap, max_tokens)
    return [Chunk(id=f"{doc.id}#{i}", doc_id=doc.id, text=" ".join(words[s:e]), metadata=dict(doc.metadata))
            for i, (s, e) in enumerate(spans)]


def _token_spans(counts: list[int], size: int, overlap: int, budget: int) -> list[tuple[int, int]]:
    """Word spans of at most ``size`` words and ``budget`` tokens, overlapping by up to ``overlap``
    words; a word longer than the budget on its own gets a span of its own."""
    n, spans, start = len(counts), [], 0
    while start < n:
        end, used = start, 0
        while end < n and end - start < size and (used + counts[end] <= budget or end == start):
            used += counts[end]
            end += 1
        spans.append((start, end))
        if end >= n:
            break
        start = max(end - overlap, start + 1)
    if len(spans) > 1:  # fold a short tail into the previous span when it still fits
        (ps, pe), (_, te) = spans[-2], spans[-1]
        if te - pe < size // 4 and te - ps <= size and sum(counts[ps:te]) <= budget:
            spans[-2:] = [(ps, te)]
    return spans

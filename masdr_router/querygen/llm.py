"""Optional LLM generation: one constrained call per batch of documents, answering with a few
short questions per document.

The answer is JSON constrained by a schema (``{"doc1": [question, ...], "doc2": [...]}``, every
key required, lengths bounded), so a server with structured outputs cannot answer off-format and
a small model cannot ramble past the token limit. Documents are named ``doc1``… in the prompt,
not by their ids: the ids mean nothing to the model and can be long.

An endpoint that is down, times out or answers something unusable costs that batch only: the
error is logged and counted, and generation goes on with the next batch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import LLMError
from ..progress import progress_bar
from .candidate import Candidate

if TYPE_CHECKING:
    from ..data import Document
    from ..llm.protocol import ChatClient

log = logging.getLogger(__name__)

SYSTEM_PROMPT = ("You write search queries for a document search engine. For each document, write short "
                 "questions that a user could type and that the document answers. Use the document's own "
                 "subject words. Answer only with the requested JSON.")
_CHARS_PER_WORD = 5  # turns max_words into a string length bound (English averages ~4.7 letters + a space,
# so a string cut at the bound rarely has more than max_words words)


@dataclass
class LLMStats:
    """What the LLM generation did: calls made, failed, and questions it kept or rejected."""

    batches: int = 0
    failed: int = 0
    questions: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"batches": self.batches, "batches_failed": self.failed, "questions": self.questions,
                "questions_rejected": self.rejected, "errors": self.errors}


def answer_schema(n_docs: int, questions: int, max_words: int) -> dict[str, Any]:
    """The JSON schema of one batch's answer: a list of 1..``questions`` strings per document.

    >>> s = answer_schema(2, 3, 10)
    >>> s["required"], s["properties"]["doc1"]["maxItems"]
    (['doc1', 'doc2'], 3)
    """
    keys = [f"doc{i + 1}" for i in range(n_docs)]
    item = {"type": "string", "minLength": 8, "maxLength": max_words * _CHARS_PER_WORD}
    questions_list = {"type": "array", "items": item, "minItems": 1, "maxItems": questions}
    return {"type": "object", "properties": {k: questions_list for k in keys}, "required": keys,
            "additionalProperties": False}


def batch_messages(texts: Sequence[str], questions: int, max_words: int) -> list[dict[str, str]]:
    """The chat messages for one batch of document texts.

    >>> batch_messages(["Shares in Cairn rose."], 2, 12)[1]["content"].splitlines()[0]
    'Write up to 2 questions of at most 12 words for each document.'
    """
    docs = "\n\n".join(f"doc{i + 1}:\n{t}" for i, t in enumerate(texts))
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Write up to {questions} questions of at most {max_words} words for "
                                        f"each document.\n\n{docs}"}]


def parse_answer(content: str, n_docs: int) -> list[list[str]]:
    """The questions per document of a batch's answer; :class:`LLMError` when it is not the
    requested JSON (a server without structured outputs, a truncated answer).

    >>> parse_answer('{"doc1": ["What did Cairn find?"], "doc2": []}', 2)
    [['What did Cairn find?'], []]
    >>> parse_answer('Sure! Here are', 1)
    Traceback (most recent call last):
    ...
    masdr_router.errors.LLMError: answer is not the requested JSON object: 'Sure! Here are'
    """
    try:
        obj = json.loads(content)
    except json.JSONDecodeError:
        raise LLMError(f"answer is not the requested JSON object: {content[:80]!r}") from None
    if not isinstance(obj, dict):
        raise LLMError(f"answer is JSON but not an object: {content[:80]!r}")
    out = []
    for i in range(n_docs):
        qs = obj.get(f"doc{i + 1}", [])
        out.append([q for q in qs if isinstance(q, str)] if isinstance(qs, list) else [])
    return out


def _excerpt(text: str, words: int) -> str:
    return " ".join(text.split()[:words])


def llm_candidates(client: ChatClient, documents: Sequence[tuple[Document, tuple[str, ...]]], *,
                   batch_size: int = 4, questions: int = 2, min_words: int = 2, max_words: int = 20,
                   doc_words: int = 150, progress: bool = False) -> tuple[list[Candidate], LLMStats]:
    """Questions for each ``(document, scopes)`` pair, asked ``batch_size`` documents per call
    (with the client's concurrency), with ``method="llm"`` provenance. Questions outside
    ``min_words``..``max_words`` words are rejected and counted.

    >>> from masdr_router.data import Document
    >>> class Stub:  # a stand-in for a ChatClient that answers every batch with one question
    ...     endpoint = ("stub", "stub")
    ...     def chat_json(self, messages, schema, **kw): return '{"doc1": ["Why did Cairn shares jump?"]}'
    ...     def map(self, fn, items): return [fn(x) for x in items]
    >>> cands, stats = llm_candidates(Stub(), [(Document("d1", "Shares in Cairn jumped."), ("business",))])
    >>> [(c.text, c.doc_id, c.scope, c.method) for c in cands], stats.failed
    ([('Why did Cairn shares jump?', 'd1', 'business', 'llm')], 0)
    """
    batches = [list(documents[i:i + batch_size]) for i in range(0, len(documents), batch_size)]
    stats = LLMStats(batches=len(batches))
    # room for every question at its longest (~2 characters a token) plus the JSON around it; an
    # answer cut short by the limit is invalid JSON and would cost the whole batch
    # (the grammar lets a small model pad with up to ~20 whitespace tokens between JSON items)
    max_tokens = 64 + batch_size * (32 + questions * (max_words * _CHARS_PER_WORD // 2 + 24))

    with progress_bar("LLM pseudo-queries", len(batches), enabled=progress) as bar:
        def ask(batch: list[tuple[Document, tuple[str, ...]]]) -> list[list[str]] | LLMError:
            texts = [_excerpt(d.text, doc_words) for d, _ in batch]
            try:
                content = client.chat_json(batch_messages(texts, questions, max_words),
                                           answer_schema(len(batch), questions, max_words), name="questions",
                                           max_tokens=max_tokens)
                return parse_answer(content, len(batch))
            except LLMError as e:  # one bad batch must not end the run
                return e
            finally:
                bar.advance()

        answers = client.map(ask, batches)

    out: list[Candidate] = []
    for n, (batch, answer) in enumerate(zip(batches, answers), start=1):
        if isinstance(answer, LLMError):
            stats.failed += 1
            if str(answer) not in stats.errors:
                stats.errors.append(str(answer))
            log.warning("LLM batch %d/%d (%d documents) skipped: %s", n, len(batches), len(batch), answer)
            continue
        for (doc, scopes), qs in zip(batch, answer):
            for q in qs:
                text = " ".join(q.split())
                if not min_words <= len(text.split()) <= max_words:
                    stats.rejected += 1
                    continue
                stats.questions += 1
                out.append(Candidate(text, doc.id, scopes, "llm"))
    return out, stats

"""Scope-first RAG: route -> scoped hybrid retrieval -> ONE synthesis call that answers only from
the retrieved chunks and cites them.

The answer is requested as constrained JSON whose ``citations`` may only name the ids of the
chunks that were retrieved, so a citation can never point outside the searched scope. When the
router is unsure, the routing policy decides what is searched (global, top-2 fused, ...) and the
trace says so.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config import SearchConfig
from ..errors import LLMError, UsageError
from ..query import validate_query
from ..routers.base import RouteDecision, Router
from ..routers.policy import POLICIES, search_plan

if TYPE_CHECKING:
    from ..llm.protocol import ChatClient
    from ..retrieval.index import Hit
    from ..routers.vote import SearchIndex

log = logging.getLogger(__name__)

# The reply's shape is spelled out although the server enforces it: a grammar only masks tokens,
# and a small model that was not told it is writing {"citations", "answer"} fills the answer string
# with junk (SmolLM2-135M on BBC: digits and id fragments without this line, sentences with it).
SYNTHESIS_PROMPT = """Answer the question using only the sources below. Cite the ids of the sources \
you used. If the sources do not contain the answer, say that you do not know.
Reply with JSON: {{"citations": ["<source id>", ...], "answer": "<one or two sentences in plain English>"}}

{sources}"""


@dataclass
class Answer:
    """What ``ScopedRAG.ask`` returns: the answer, its citations, and how it was found."""

    question: str
    answer: str
    citations: list[str]
    decision: RouteDecision
    searched_scopes: list[str] | None
    hits: list[Hit]
    trace: list[dict[str, Any]] = field(default_factory=list)
    llm_calls: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "answer": self.answer, "citations": self.citations,
                "scope": self.decision.scope, "searched_scopes": self.searched_scopes,
                "retrieved": [{"chunk_id": h.chunk_id, "doc_id": h.doc_id, "scopes": list(h.scopes),
                               "score": round(h.score, 6)} for h in self.hits],
                "router": self.decision.to_dict(), "trace": self.trace, "llm_calls": self.llm_calls}


def answer_schema(chunk_ids: list[str], max_answer_chars: int = 600) -> dict[str, Any]:
    """JSON schema of a synthesis answer whose citations can only be retrieved chunk ids.

    Citations come first: grammar-constrained servers generate properties in schema order, so the
    sources are committed before the free text, and a long answer cut off by the token limit still
    leaves valid citations. The answer's length is bounded for the same reason."""
    return {"type": "object", "additionalProperties": False, "required": ["citations", "answer"],
            "properties": {"citations": {"type": "array", "items": {"type": "string", "enum": chunk_ids},
                                         "minItems": 1, "maxItems": len(chunk_ids)},
                           # a floor too: a tiny model otherwise satisfies the schema with "a"
                           "answer": {"type": "string", "minLength": 20, "maxLength": max_answer_chars}}}


def format_sources(hits: list[Hit], words: int) -> str:
    """``[chunk id] text`` blocks, each cut to ``words`` words, as the LLM sees retrieved chunks."""
    return "\n\n".join(f"[{h.chunk_id}] {' '.join(h.text.split()[:words])}" for h in hits) or "no results"


def synthesise(client: ChatClient, question: str, hits: list[Hit], *, max_chunk_words: int = 120,
               max_answer_tokens: int = 256) -> tuple[str, list[str], dict[str, Any]]:
    """One constrained synthesis call over ``hits``: ``(answer, citations, trace entry)``. The
    citations are retrieved chunk ids only; a failed endpoint gives an apology, not an exception."""
    if not hits:
        return "I do not know: nothing was retrieved for this question.", [], {"stage": "synthesis",
                                                                              "skipped": "nothing retrieved"}
    ids = [h.chunk_id for h in hits]
    messages = synthesis_messages(question, hits, max_chunk_words)
    t0 = time.perf_counter()
    entry: dict[str, Any] = {"stage": "synthesis"}
    try:
        raw = client.chat_json(messages, answer_schema(ids), max_tokens=max_answer_tokens)
        text, cited = parse_answer(raw, ids)
        entry["citations"] = len(cited)
    except LLMError as e:
        log.warning("synthesis failed: %s", e)
        text, cited = "The answer could not be generated (the LLM endpoint failed).", []
        entry.update(citations=0, error=str(e))
    entry["latency_ms"] = round((time.perf_counter() - t0) * 1000, 3)
    return text, cited, entry


def synthesis_messages(question: str, hits: list[Hit], max_chunk_words: int = 120) -> list[dict[str, Any]]:
    """The chat messages of one synthesis call: the sources in the system message, the question."""
    return [{"role": "system", "content": SYNTHESIS_PROMPT.format(sources=format_sources(hits, max_chunk_words))},
            {"role": "user", "content": question}]


JSON_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class AnswerFieldStream:
    r"""Incrementally decode the ``"answer"`` string of a streamed synthesis reply.

    The reply is JSON ``{"citations": [...], "answer": "..."}`` generated token by token; the
    citations come first (schema order), so the answer text can be passed on as it is generated,
    unescaped, while the whole reply is kept for :func:`parse_answer` at the end.

    >>> s = AnswerFieldStream()
    >>> [s.feed(p) for p in ['{"citations": ["a#0"], "ans', 'wer": "Profits', ' fell \\u00e9', '\\n."}']]
    ['', 'Profits', ' fell é', '\n.']
    >>> s.raw
    '{"citations": ["a#0"], "answer": "Profits fell \\u00e9\\n."}'
    """

    def __init__(self, key: str = "answer") -> None:
        self.raw = ""
        self._start = re.compile(r'"' + re.escape(key) + r'"\s*:\s*"')
        self._pos: int | None = None  # where the undecoded part of the string starts
        self.done = False

    @property
    def started(self) -> bool:
        """Whether the answer's value has begun (the reply follows the schema)."""
        return self._pos is not None

    def feed(self, piece: str) -> str:
        self.raw += piece
        if self.done:
            return ""
        if self._pos is None:
            m = self._start.search(self.raw)
            if m is None:
                return ""
            self._pos = m.end()
        out, i, raw = [], self._pos, self.raw
        while i < len(raw):
            c = raw[i]
            if c == '"':
                self.done = True
                i += 1
                break
            if c != "\\":
                out.append(c)
                i += 1
                continue
            if i + 1 >= len(raw):
                break  # the escape is completed by the next piece
            e = raw[i + 1]
            if e == "u":
                if i + 6 > len(raw):
                    break
                try:
                    out.append(chr(int(raw[i + 2:i + 6], 16)))
                except ValueError:
                    out.append(raw[i:i + 6])
                i += 6
            else:
                out.append(JSON_ESCAPES.get(e, e))
                i += 2
        self._pos = i
        return "".join(out)


def stream_synthesis(client: ChatClient, question: str, hits: list[Hit], *, max_chunk_words: int = 120,
                     max_answer_tokens: int = 256) -> Iterator[str | tuple[str, list[str], dict[str, Any]]]:
    """:func:`synthesise`, streamed: yields the answer's text pieces as the LLM writes them, then
    one ``(answer, citations, trace entry)`` tuple. Raises :class:`LLMError` when the endpoint
    fails (a caller that already sent part of an answer must be told, not handed an apology).

    >>> for piece in stream_synthesis(client, "Who won?", hits):   # doctest: +SKIP
    ...     print(piece if isinstance(piece, str) else piece[1])
    """
    if not hits:
        text = "I do not know: nothing was retrieved for this question."
        yield text
        yield text, [], {"stage": "synthesis", "skipped": "nothing retrieved"}
        return
    from ..llm.client import json_constraint

    ids = [h.chunk_id for h in hits]
    t0 = time.perf_counter()
    dialect = getattr(getattr(client, "config", None), "dialect", "openai")
    parser = AnswerFieldStream()
    for piece in client.stream(synthesis_messages(question, hits, max_chunk_words), max_tokens=max_answer_tokens,
                               **json_constraint(dialect, answer_schema(ids))):
        text = parser.feed(piece)
        if text:
            yield text
    answer, cited = parse_answer(parser.raw, ids)
    if answer and not parser.started:
        yield answer  # a server that ignored the schema: what parse_answer salvaged
    yield answer, cited, {"stage": "synthesis", "citations": len(cited), "streamed": True,
                          "latency_ms": round((time.perf_counter() - t0) * 1000, 3)}


class ScopedRAG:
    """The answer path.

    >>> rag = ScopedRAG(ScopedIndex.load("runs/idx"), RegexRouter(tax), LLMClient(LLMConfig()))  # doctest: +SKIP
    >>> rag.ask("Who won the cup final?").citations                                              # doctest: +SKIP
    ['bbc-sport-042#0']
    """

    def __init__(self, index: SearchIndex, router: Router, client: ChatClient, *, k: int = 4,
                 search: SearchConfig | None = None, policy: str = "router", max_chunk_words: int = 120,
                 max_answer_tokens: int = 256) -> None:
        if policy not in POLICIES:
            raise UsageError(f"routing policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self.index, self.router, self.client = index, router, client
        self.k, self.search, self.policy = k, search or SearchConfig(), policy
        self.max_chunk_words, self.max_answer_tokens = max_chunk_words, max_answer_tokens

    def retrieve(self, question: str) -> tuple[RouteDecision, list[str] | None, list[Hit], list[dict[str, Any]]]:
        question = validate_query(question)
        decision = self.router.route(question)
        scopes, weights = search_plan(decision, self.policy)
        t0 = time.perf_counter()
        hits = self.index.search_many([question], [scopes], self.k, self.search,
                                      weights=[weights] if weights else None)[0]
        trace = [*decision.trace] if decision.trace else [{"stage": decision.stage, "scope": decision.scope}]
        trace.append({"stage": "retrieve", "scopes": scopes or "global", "policy": self.policy,
                      "mode": self.search.mode,
                      "reason": "routed" if decision.scope else "router abstained",
                      "hits": len(hits), "latency_ms": round((time.perf_counter() - t0) * 1000, 3)})
        return decision, scopes, hits, trace

    def ask(self, question: str) -> Answer:
        """Route, retrieve, and answer with one LLM call (plus the router's own call, if any)."""
        decision, scopes, hits, trace = self.retrieve(question)
        text, cited, entry = synthesise(self.client, question, hits, max_chunk_words=self.max_chunk_words,
                                        max_answer_tokens=self.max_answer_tokens)
        trace.append(entry)
        return Answer(question, text, cited, decision, scopes, hits, trace,
                      decision.llm_calls + (0 if "skipped" in entry else 1))


def parse_answer(raw: str, ids: list[str]) -> tuple[str, list[str]]:
    """Answer text and the cited ids that really were retrieved (anything else is dropped).

    >>> parse_answer('{"citations": ["d1#0", "x#9"], "answer": "Profits fell."}', ["d1#0"])
    ('Profits fell.', ['d1#0'])
    """
    try:
        obj = json.loads(raw)
        text, cited = str(obj.get("answer", "")).strip(), [str(c) for c in obj.get("citations", [])]
    except (json.JSONDecodeError, AttributeError):
        # cut off by the token limit, or a server that ignored the schema: salvage what is there
        m = re.search(r'"answer"\s*:\s*"((?:[^"\\]|\\.)*)', raw)
        text = m.group(1).strip() if m else raw.strip()
        cited = re.findall(r'"([^"]+)"', raw.split('"answer"')[0]) + re.findall(r"\[([^\[\]]+)\]", raw)
    allowed = set(ids)
    return text, list(dict.fromkeys(c for c in cited if c in allowed))

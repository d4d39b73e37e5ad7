"""The MASDR-RAG orchestrator baseline: the LLM gets one search tool per scope (function calling)
and decides what to search, for at most ``max_rounds`` tool rounds, then answers.

It is here to be measured against the single-call pipeline: the paper saw multi-round
orchestration cut faithfulness from 0.61 to 0.35, which is why :class:`ScopedRAG` is the default.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

from .config import SearchConfig
from .pipeline import Answer
from .query import validate_query
from .retrieval.index import Hit, ScopedIndex
from .routers.base import RouteDecision

log = logging.getLogger(__name__)

SYSTEM = """You answer questions from an organisation's documents. Each tool searches one part of the \
organisation. Call the tools you need, then answer using only what they returned, citing the ids of \
the passages you used in square brackets, like [doc-1#0]."""


def scope_tools(index: ScopedIndex) -> list[dict[str, Any]]:
    """One OpenAI function-calling tool per scope: ``search_<scope>(query)``."""
    return [{"type": "function", "function": {
        "name": f"search_{s.name}", "description": f"Search {s.name}: {s.description}",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
        for s in index.taxonomy.scopes]


class Orchestrator:
    """``ask(question) -> Answer`` by tool-calling rounds.

    >>> Orchestrator(index, LLMClient(LLMConfig())).ask("Why was the launch delayed?")  # doctest: +SKIP
    """

    def __init__(self, index: ScopedIndex, client: Any, *, k: int = 3, max_rounds: int = 5,
                 search: SearchConfig | None = None, max_chunk_words: int = 120,
                 first_tool_choice: str = "required") -> None:
        # "required" in the first round: left to "auto", small models answer from memory without
        # searching at all, which measures nothing about retrieval.
        self.index, self.client, self.k, self.max_rounds = index, client, k, max_rounds
        self.first_tool_choice = first_tool_choice
        self.search, self.max_chunk_words = search or SearchConfig(), max_chunk_words

    def ask(self, question: str) -> Answer:
        from .llm.client import LLMError

        question = validate_query(question)
        tools = scope_tools(self.index)
        by_name = {t["function"]["name"]: t["function"]["name"][len("search_"):] for t in tools}
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        hits: dict[str, Hit] = {}
        searched: list[str] = []
        trace: list[dict[str, Any]] = []
        calls = 0
        text = ""
        for round_no in range(1, self.max_rounds + 2):
            final = round_no > self.max_rounds  # the last call gets no tools: it must answer
            t0 = time.perf_counter()
            try:
                choice = self.first_tool_choice if round_no == 1 else "auto"
                msg = self.client.message(messages, **({} if final else {"tools": tools, "tool_choice": choice}))
            except LLMError as e:
                log.warning("orchestrator round %d failed: %s", round_no, e)
                trace.append({"stage": "orchestrator", "round": round_no, "error": str(e)})
                text = "The answer could not be generated (the LLM endpoint failed)."
                break
            calls += 1
            tool_calls = [] if final else list(getattr(msg, "tool_calls", None) or [])
            entry: dict[str, Any] = {"stage": "orchestrator", "round": round_no,
                                     "latency_ms": round((time.perf_counter() - t0) * 1000, 3),
                                     "tool_calls": [c.function.name for c in tool_calls]}
            trace.append(entry)
            if not tool_calls:
                text = (msg.content or "").strip()
                break
            messages.append({"role": "assistant", "content": msg.content or "",
                             "tool_calls": [{"id": c.id, "type": "function",
                                             "function": {"name": c.function.name,
                                                          "arguments": c.function.arguments}} for c in tool_calls]})
            for c in tool_calls:
                scope = by_name.get(c.function.name)
                try:
                    query = str(json.loads(c.function.arguments or "{}").get("query") or question)
                except (json.JSONDecodeError, AttributeError):
                    query = question
                if scope is None:
                    result = f"unknown tool {c.function.name!r}"
                else:
                    searched.append(scope)
                    found = self.index.search(query.strip() or question, [scope], self.k, self.search)
                    hits.update({h.chunk_id: h for h in found})
                    result = "\n\n".join(f"[{h.chunk_id}] {' '.join(h.text.split()[: self.max_chunk_words])}"
                                         for h in found) or "no results"
                messages.append({"role": "tool", "tool_call_id": c.id, "content": result})
        cited = [c for c in dict.fromkeys(re.findall(r"\[([^\[\]]+)\]", text)) if c in hits]
        decision = RouteDecision(scope=searched[0] if len(set(searched)) == 1 else None, stage="orchestrator",
                                 trace=tuple(trace))
        return Answer(question, text, cited, decision, sorted(set(searched)) or None, list(hits.values()), trace,
                      calls)

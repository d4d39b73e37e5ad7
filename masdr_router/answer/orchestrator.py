"""The MASDR-RAG orchestrator baseline: the LLM gets one search tool per scope and decides what to
search, for at most ``max_rounds`` tool rounds, then answers.

It is here to be measured against the single-call pipeline: the paper saw multi-round
orchestration cut faithfulness from 0.61 to 0.35, which is why :class:`ScopedRAG` is the default.

Two tool protocols:

- ``native``: OpenAI function calling (``tools`` + ``tool_choice``), for servers and models that
  support it (vLLM with a tool parser and a tool-trained model, OpenAI).
- ``json``: the same tools offered in the prompt and called through constrained JSON
  (``{"tool": "search_<scope>", "query": ...}`` or ``{"tool": "answer"}``); works on any server
  with structured output, including the embedded llama.cpp + SmolLM2 server, whose chat template
  has no tool calling.
- ``auto`` (default): native first; if the endpoint ignores a *required* tool call, the question
  goes on with ``json``. The switch is logged and reported in the answer's trace
  (``protocol_switch``); the orchestrator itself never changes its configured protocol.

Either way the final answer is one constrained synthesis whose citations can only be chunk ids
that the tools returned, exactly like :class:`ScopedRAG`, so the two differ only in how the
context was gathered.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import TYPE_CHECKING, Any, Literal, get_args

from ..config import SearchConfig
from ..errors import LLMError, UsageError
from ..query import validate_query
from ..routers.base import RouteDecision
from .rag import Answer, format_sources, synthesise

if TYPE_CHECKING:
    from ..llm.protocol import ChatClient
    from ..retrieval.index import Hit
    from ..routers.vote import SearchIndex

log = logging.getLogger(__name__)

SYSTEM = """You answer questions from an organisation's documents. Each tool searches one part of the \
organisation. Call the tools you need; when you have enough, stop calling tools."""

JSON_SYSTEM = """You answer questions from an organisation's documents. Each tool searches one part of \
the organisation:
{tools}
- answer: stop searching and answer from what the tools returned.
Reply with JSON: the tool to call and, for a search, the query to search for."""

ToolProtocol = Literal["auto", "native", "json"]
PROTOCOLS: tuple[str, ...] = get_args(ToolProtocol)


def scope_tools(index: SearchIndex) -> list[dict[str, Any]]:
    """One OpenAI function-calling tool per scope: ``search_<scope>(query)``. Strict schemas
    (``strict``, no additional properties, every property required): vLLM constrains a required
    call's arguments only for strict functions (without, SmolLM2 on vLLM 0.32 filled ``arguments``
    with a copy of the schema). The query's length is bounded too: unbounded, a small model writes
    a URL until the token limit, the call is cut off and vLLM returns no tool call at all."""
    return [{"type": "function", "function": {
        "name": f"search_{s.name}", "description": f"Search {s.name}: {s.description}", "strict": True,
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "maxLength": 200}},
                       "required": ["query"], "additionalProperties": False}}}
        for s in index.taxonomy.scopes]


def tool_call_schema(tool_names: list[str], *, allow_answer: bool) -> dict[str, Any]:
    """Schema of one JSON-protocol step: a search tool and its query, or (when allowed) ``answer``."""
    names = [*tool_names, "answer"] if allow_answer else list(tool_names)
    return {"type": "object", "additionalProperties": False, "required": ["tool", "query"],
            "properties": {"tool": {"type": "string", "enum": names},
                           "query": {"type": "string", "maxLength": 120}}}


class Orchestrator:
    """``ask(question) -> Answer`` by tool-calling rounds, then one constrained synthesis.

    >>> orch = Orchestrator(index, LLMClient(LLMConfig()), protocol="json")   # doctest: +SKIP
    >>> orch.ask("Why was the launch delayed?").citations                     # doctest: +SKIP
    """

    def __init__(self, index: SearchIndex, client: ChatClient, *, k: int = 3, max_rounds: int = 5,
                 search: SearchConfig | None = None, max_chunk_words: int = 120, protocol: str = "auto",
                 max_answer_tokens: int = 256, tool_result_words: int = 60) -> None:
        if protocol not in PROTOCOLS:
            raise UsageError(f"tool protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        if max_rounds < 1:
            raise UsageError(f"max_rounds must be >= 1, got {max_rounds}")
        self.index, self.client, self.k, self.max_rounds = index, client, k, max_rounds
        self.search, self.max_chunk_words, self.protocol = search or SearchConfig(), max_chunk_words, protocol
        # tool results are shown shorter than the synthesis sources: five rounds of full chunks
        # would overflow a small model's context window
        self.max_answer_tokens, self.tool_result_words = max_answer_tokens, tool_result_words
        self.tools = scope_tools(index)
        self._scope_of = {t["function"]["name"]: t["function"]["name"][len("search_"):] for t in self.tools}

    # -- one tool round -------------------------------------------------------------------------
    def _native_round(self, messages: list[dict[str, Any]], first: bool) -> list[tuple[str, str, str]] | None:
        """Tool calls as (call id, tool name, query); ``None`` when the model answered instead."""
        # "required" in the first round: left to "auto", small models answer from memory without
        # searching at all, which measures nothing about retrieval.
        msg = self.client.message(messages, tools=self.tools, tool_choice="required" if first else "auto")
        calls = list(getattr(msg, "tool_calls", None) or [])
        if not calls:
            return None
        messages.append({"role": "assistant", "content": msg.content or "",
                         "tool_calls": [{"id": c.id, "type": "function",
                                         "function": {"name": c.function.name, "arguments": c.function.arguments}}
                                        for c in calls]})
        out = []
        for c in calls:
            try:
                query = str(json.loads(c.function.arguments or "{}").get("query") or "")
            except (json.JSONDecodeError, AttributeError):
                query = ""
            out.append((c.id, c.function.name, query))
        return out

    def _json_round(self, messages: list[dict[str, Any]], first: bool) -> list[tuple[str, str, str]] | None:
        schema = tool_call_schema(list(self._scope_of), allow_answer=not first)
        raw = self.client.chat_json(messages, schema, name="tool_call", max_tokens=128)
        try:
            step = json.loads(raw)
            tool, query = str(step["tool"]), str(step.get("query") or "")
        except (json.JSONDecodeError, KeyError, TypeError):
            # cut off by the token limit inside the query: the tool name is already complete
            m = re.search(r'"tool"\s*:\s*"([^"]+)"(?:\s*,\s*"query"\s*:\s*"((?:[^"\\]|\\.)*))?', raw)
            if m is None:
                log.warning("orchestrator: unusable tool step %r; answering with what was found", raw[:120])
                return None
            tool, query = m.group(1), m.group(2) or ""
        if tool == "answer":
            return None
        messages.append({"role": "assistant", "content": json.dumps({"tool": tool, "query": query})})
        return [("", tool, query)]

    def _run_tool(self, name: str, query: str, question: str) -> tuple[str | None, list[Hit]]:
        scope = self._scope_of.get(name)
        if scope is None:
            return None, []
        return scope, self.index.search_many([query.strip() or question], [[scope]], self.k, self.search)[0]

    # -- the loop -------------------------------------------------------------------------------
    def ask(self, question: str) -> Answer:
        """Tool rounds, then one synthesis. With ``protocol="auto"`` a question whose first native
        round is answered without the required tool call goes on with the JSON protocol; the trace
        says so (``protocol_switch``)."""
        question = validate_query(question)
        catalogue = "\n".join(f"- {t['function']['name']}: {t['function']['description']}" for t in self.tools)
        native = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        prompted = [{"role": "system", "content": JSON_SYSTEM.format(tools=catalogue)},
                    {"role": "user", "content": question}]
        hits: dict[str, Hit] = {}
        searched: list[str] = []
        trace: list[dict[str, Any]] = []
        calls = 0
        protocol = "json" if self.protocol == "json" else "native"
        for round_no in range(1, self.max_rounds + 1):
            t0 = time.perf_counter()
            try:
                if protocol == "native":
                    steps = self._native_round(native, round_no == 1)
                    calls += 1
                    if steps is None and round_no == 1 and self.protocol == "auto":
                        log.warning("the LLM endpoint ignored a required tool call (no tool calling in its "
                                    "chat template?); this question goes on with the JSON tool protocol")
                        trace.append({"stage": "orchestrator", "round": round_no, "protocol_switch": "native -> json",
                                      "reason": "required tool call ignored"})
                        protocol = "json"
                if protocol == "json":
                    steps = self._json_round(prompted, round_no == 1)
                    calls += 1
            except LLMError as e:
                log.warning("orchestrator round %d failed: %s", round_no, e)
                trace.append({"stage": "orchestrator", "round": round_no, "error": str(e)})
                break
            trace.append({"stage": "orchestrator", "round": round_no, "protocol": protocol,
                          "tool_calls": [f"{name}({query!r})" for _, name, query in steps or []],
                          "latency_ms": round((time.perf_counter() - t0) * 1000, 3)})
            if not steps:
                break
            for call_id, name, query in steps:
                scope, found = self._run_tool(name, query, question)
                if scope is not None:
                    searched.append(scope)
                hits.update({h.chunk_id: h for h in found})
                result = f"unknown tool {name!r}" if scope is None else format_sources(found, self.tool_result_words)
                if protocol == "native":
                    native.append({"role": "tool", "tool_call_id": call_id, "content": result})
                else:
                    prompted.append({"role": "user", "content": f"Results of {name}:\n{result}"})
        # the same constrained synthesis as ScopedRAG, over everything the tools found
        text, cited, entry = synthesise(self.client, question, list(hits.values()),
                                        max_chunk_words=self.max_chunk_words, max_answer_tokens=self.max_answer_tokens)
        trace.append(entry)
        calls += 0 if "skipped" in entry else 1
        decision = RouteDecision(scope=searched[0] if len(set(searched)) == 1 else None, stage="orchestrator",
                                 trace=tuple(trace))
        return Answer(question, text, cited, decision, sorted(set(searched)) or None, list(hits.values()), trace,
                      calls)

"""The native API: ``/v1/route``, ``/v1/search``, ``/v1/answer`` (SSE with ``stream``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from ..auth import Caller
from ..http import CallerDep, service
from ..schemas import AnswerRequest, RouteRequest, SearchRequest
from ..state import LLMUnavailable, hit_dict

if TYPE_CHECKING:
    from ...retrieval.index import Hit
    from ...routers.base import RouteDecision
    from ..service import Service

router = APIRouter(tags=["native"])


def decision_body(d: RouteDecision, labels: list[str], *, top_k: int | None = None,
                  trace: bool = False) -> dict[str, Any]:
    """One routing decision as the API returns it; ``probabilities`` covers every scope the
    caller may see (0 where the router gave none)."""
    probs = {s: round(float(d.scores.get(s, 0.0)), 6) for s in labels}
    out: dict[str, Any] = {"scope": d.scope, "abstained": d.abstained,
                           "confidence": None if d.confidence is None else round(float(d.confidence), 6),
                           "stage": d.stage, "probabilities": probs, "fallback": list(d.fallback),
                           "search_scopes": d.search_scopes, "llm_calls": d.llm_calls,
                           "latency_ms": round(d.latency_ms, 3)}
    if top_k:
        ranked = sorted(probs.items(), key=lambda kv: -kv[1])[:top_k]
        out["top_k"] = [{"scope": s, "score": v} for s, v in ranked]
    if trace:
        out["trace"] = list(d.trace)
    return out


def visible_labels(svc: Service, who: Caller) -> list[str]:
    names = svc.state.loaded()[1].names
    return names if who.scopes is None else [s for s in names if s in who.scopes]


@router.post("/v1/route", summary="Route one query or a batch to scopes", response_model=None)
async def route(body: RouteRequest, request: Request, who: CallerDep) -> JSONResponse:
    svc = service(request)
    texts = svc.check_queries([body.query] if isinstance(body.query, str) else list(body.query))
    decisions = await svc.timed(svc.route(texts))
    labels = visible_labels(svc, who)
    current, _ = svc.state.loaded()
    # a JSONResponse skips FastAPI's generic encoder: the hot path of a router service
    return JSONResponse({"router": current.name, "results": [
        {"query": q, **decision_body(svc.state.restrict(d, who), labels, top_k=body.top_k, trace=body.return_trace)}
        for q, d in zip(texts, decisions)]})


async def retrieve(svc: Service, query: str, scope: str | None, k: int,
                   who: Caller) -> tuple[RouteDecision | None, list[str] | None, list[Hit]]:
    """Route (unless ``scope`` is given) and search, within what ``who`` may see."""
    svc.require_ready()
    decision = None
    if scope is None:
        decision = svc.state.restrict((await svc.route([query]))[0], who)
    current, _ = svc.state.loaded()
    scopes, weights, search = svc.state.plan(decision, who, scope, current.policy)
    hits = await run_in_threadpool(svc.state.search_one, query, scopes, weights, search, k, who)
    return decision, scopes, hits


@router.post("/v1/search", summary="Route, then search the scope (hybrid, with the recall guards)")
async def search(body: SearchRequest, request: Request, who: CallerDep) -> dict[str, Any]:
    svc = service(request)
    query = svc.check_queries([body.query])[0]
    decision, scopes, hits = await svc.timed(retrieve(svc, query, body.scope, body.k, who))
    labels = visible_labels(svc, who)
    return {"query": query, "decision": decision_body(decision, labels) if decision else None,
            "searched_scopes": scopes, "hits": [hit_dict(h, text=body.return_text) for h in hits]}


def synthesis(svc: Service, query: str, hits: list[Hit], max_tokens: int | None = None) -> tuple[str | None, list[str],
                                                                                                  dict[str, Any]]:
    """One synthesis call; an LLM failure is a 503 or a retrieval-only answer (``llm_down``)."""
    from ...answer.rag import synthesise

    text, cited, entry = synthesise(svc.state.client, query, hits, max_answer_tokens=max_tokens or 256)
    if "error" in entry:
        svc.metrics.llm_failures.labels(where="synthesis").inc()
        if svc.cfg.llm_down == "error":
            raise LLMUnavailable(f"the LLM endpoint failed: {entry['error']}")
        return None, [], entry
    return text, cited, entry


def answer_body(query: str, text: str | None, cited: list[str], decision: RouteDecision | None,
                scopes: list[str] | None, hits: list[Hit], entry: dict[str, Any], labels: list[str]) -> dict[str, Any]:
    out = {"query": query, "answer": text, "citations": cited,
           "decision": decision_body(decision, labels) if decision else None, "searched_scopes": scopes,
           "retrieved": [hit_dict(h, text=False) for h in hits], "synthesis": entry,
           "llm_calls": (decision.llm_calls if decision else 0) + (0 if "skipped" in entry else 1)}
    if text is None:
        out["llm_error"] = entry.get("error")
    return out


@router.post("/v1/answer", summary="Route, search, and answer with one LLM call (SSE with stream)")
async def answer(body: AnswerRequest, request: Request, who: CallerDep) -> Any:
    svc = service(request)
    query = svc.check_queries([body.query])[0]
    k = body.k or svc.cfg.k
    decision, scopes, hits = await svc.timed(retrieve(svc, query, body.scope, k, who))
    labels = visible_labels(svc, who)
    if body.stream:
        return StreamingResponse(answer_events(svc, query, decision, scopes, hits, labels),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    text, cited, entry = await svc.timed(run_in_threadpool(synthesis, svc, query, hits))
    return answer_body(query, text, cited, decision, scopes, hits, entry, labels)


def sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def answer_events(svc: Service, query: str, decision: RouteDecision | None, scopes: list[str] | None,
                  hits: list[Hit], labels: list[str]) -> Iterator[str]:
    """``decision`` first, then ``delta`` events with the answer's text as the LLM writes it, then
    ``answer`` (the whole answer, as the non-streaming body) or ``error``."""
    from ...answer.rag import stream_synthesis
    from ...errors import LLMError

    yield sse("decision", {"decision": decision_body(decision, labels) if decision else None,
                           "searched_scopes": scopes, "retrieved": [hit_dict(h, text=False) for h in hits]})
    try:
        for piece in stream_synthesis(svc.state.client, query, hits):
            if isinstance(piece, str):
                yield sse("delta", {"text": piece})
            else:
                text, cited, entry = piece
                yield sse("answer", answer_body(query, text, cited, decision, scopes, hits, entry, labels))
    except LLMError as e:
        svc.metrics.llm_failures.labels(where="synthesis").inc()
        yield sse("error", {"message": str(e), "type": "llm_unavailable"})

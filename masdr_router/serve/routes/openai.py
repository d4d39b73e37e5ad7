"""OpenAI-compatible ``POST /v1/chat/completions`` and ``GET /v1/models``.

``model: "auto"`` (or the served name) routes the last user message, retrieves from its scope and
synthesises through the configured LLM endpoint; the decision is in the response headers
(``x-masdr-scope``, ``x-masdr-confidence``, ``x-masdr-stage``, like vLLM semantic-router's
``x-vsr-selected-*``) and in the body's ``masdr`` field. ``stream: true`` sends
``chat.completion.chunk`` events and ``[DONE]``, as the OpenAI SDK expects.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from ...errors import QueryError
from ..http import CallerDep, ModelNotFound, service
from ..schemas import ChatCompletionRequest
from .native import answer_body, retrieve, synthesis, visible_labels

if TYPE_CHECKING:
    from ...retrieval.index import Hit
    from ...routers.base import RouteDecision
    from ..service import Service

router = APIRouter(tags=["openai"])
AUTO = "auto"
UNAVAILABLE = ("The answer could not be generated (the LLM endpoint failed); the retrieved sources are in "
               "masdr.retrieved.")


def last_user_text(body: ChatCompletionRequest) -> str:
    for m in reversed(body.messages):
        if m.role == "user":
            if isinstance(m.content, str):
                return m.content
            if isinstance(m.content, list):  # content parts: the text ones
                return " ".join(str(p.get("text", "")) for p in m.content if p.get("type") == "text")
    raise QueryError("messages: no user message to answer")


def check_model(svc: Service, model: str) -> str:
    if model not in (AUTO, svc.cfg.served_model_name):
        raise ModelNotFound(f"model '{model}' is not served here; use '{AUTO}' or '{svc.cfg.served_model_name}'")
    return svc.cfg.served_model_name


def decision_headers(decision: RouteDecision | None, scopes: list[str] | None) -> dict[str, str]:
    if decision is None:
        return {}
    return {"x-masdr-scope": decision.scope or "", "x-masdr-abstained": str(decision.abstained).lower(),
            "x-masdr-confidence": "" if decision.confidence is None else f"{decision.confidence:.6f}",
            "x-masdr-stage": decision.stage, "x-masdr-searched-scopes": ",".join(scopes or ["*"])}


@router.get("/v1/models", summary="The served model (and 'auto')")
async def models(request: Request, _who: CallerDep) -> dict[str, Any]:
    svc = service(request)
    created = int(svc.state.current.loaded_at if svc.state.current else time.time())
    return {"object": "list", "data": [{"id": name, "object": "model", "created": created, "owned_by": "masdr-router"}
                                       for name in (svc.cfg.served_model_name, AUTO)]}


@router.post("/v1/chat/completions", summary="OpenAI chat completions: route, retrieve, answer")
async def chat_completions(body: ChatCompletionRequest, request: Request, who: CallerDep) -> Any:
    svc = service(request)
    model = check_model(svc, body.model)
    query = svc.check_queries([last_user_text(body)])[0]
    decision, scopes, hits = await svc.timed(retrieve(svc, query, None, svc.cfg.k, who))
    labels = visible_labels(svc, who)
    headers = decision_headers(decision, scopes)
    cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    max_tokens = body.max_completion_tokens or body.max_tokens
    if body.stream:
        return StreamingResponse(chunks(svc, query, decision, scopes, hits, labels, model, cid, created, max_tokens),
                                 media_type="text/event-stream", headers={**headers, "Cache-Control": "no-cache"})
    text, cited, entry = await svc.timed(run_in_threadpool(synthesis, svc, query, hits, max_tokens))
    masdr = answer_body(query, text, cited, decision, scopes, hits, entry, labels)
    return JSONResponse({
        "id": cid, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text if text is not None else UNAVAILABLE},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "masdr": masdr}, headers=headers)


def chunks(svc: Service, query: str, decision: RouteDecision | None, scopes: list[str] | None, hits: list[Hit],
           labels: list[str], model: str, cid: str, created: int, max_tokens: int | None) -> Iterator[str]:
    from ...answer.rag import stream_synthesis
    from ...errors import LLMError

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        obj = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
               "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra}
        return f"data: {json.dumps(obj)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    try:
        for piece in stream_synthesis(svc.state.client, query, hits, max_answer_tokens=max_tokens or 256):
            if isinstance(piece, str):
                yield chunk({"content": piece})
            else:
                text, cited, entry = piece
                yield chunk({}, "stop", masdr=answer_body(query, text, cited, decision, scopes, hits, entry, labels))
    except LLMError as e:
        svc.metrics.llm_failures.labels(where="synthesis").inc()
        entry = {"stage": "synthesis", "error": str(e)}
        yield chunk({"content": UNAVAILABLE}, "stop",
                    masdr={**answer_body(query, None, [], decision, scopes, hits, entry, labels)})
    yield "data: [DONE]\n\n"


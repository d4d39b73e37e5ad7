"""HTTP plumbing shared by the endpoints: errors in each API family's own shape, the body size
limit, per-endpoint metrics, and the caller dependency."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import (
    ArtifactError,
    ConfigError,
    LLMError,
    MasdrError,
    QueryError,
    TaxonomyMismatchError,
    UnknownScopeError,
    ValidationError,
)
from ..routers.spec import RouterSpecError
from .auth import Caller
from .service import Service, TooMany, Unauthorized
from .state import Forbidden, LLMUnavailable, NotReady

log = logging.getLogger("masdr_router.serve")


class ModelNotFound(MasdrError):
    """A ``model`` / ``{name}`` the service does not serve (HTTP 404)."""


class ReloadRefused(MasdrError):
    """A new router that failed to load or does not fit the index (HTTP 409; the old one serves on)."""


# (status, error type) by exception class; the first match wins, so subclasses come first
STATUS: list[tuple[type[BaseException], int, str]] = [
    (TooMany, 413, "too_many_queries"),
    (UnknownScopeError, 422, "unknown_scope"),
    (QueryError, 422, "invalid_query"),
    (Unauthorized, 401, "unauthorized"),
    (Forbidden, 403, "forbidden"),
    (ModelNotFound, 404, "model_not_found"),
    (ReloadRefused, 409, "reload_refused"),
    (NotReady, 503, "not_ready"),
    (LLMUnavailable, 503, "llm_unavailable"),
    (LLMError, 503, "llm_unavailable"),
    (TimeoutError, 504, "timeout"),
    (asyncio.TimeoutError, 504, "timeout"),
    ((RouterSpecError, ArtifactError, TaxonomyMismatchError, ConfigError), 409, "reload_refused"),  # type: ignore[list-item]
    (ValidationError, 422, "invalid_request"),
    (MasdrError, 400, "bad_request"),
]
# TEI's error_type values (text-embeddings-inference router/src/http/types.rs: ErrorType)
TEI_TYPES = {413: "Validation", 422: "Validation", 401: "Unauthorized", 403: "Unauthorized", 429: "Overloaded",
             503: "Unhealthy", 504: "Backend"}


def status_of(exc: BaseException) -> tuple[int, str]:
    for cls, status, kind in STATUS:
        if isinstance(exc, cls):
            return status, kind
    return 500, "internal_error"


def error_response(request: Request, status: int, kind: str, message: str) -> JSONResponse:
    """The error body in the shape the endpoint's clients parse: TEI for ``/predict``, KServe v2
    for ``/v2``, OpenAI's ``{"error": {message, type, code}}`` elsewhere."""
    path = request.url.path
    if path.startswith("/predict"):
        body: dict[str, Any] = {"error": message, "error_type": TEI_TYPES.get(status, "Backend")}
    elif path.startswith("/v2"):
        body = {"error": message}
    else:
        body = {"error": {"message": message, "type": kind, "code": status}}
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body, status_code=status, headers=headers)


def install_error_handlers(app: Any) -> None:
    async def on_error(request: Request, exc: Exception) -> JSONResponse:
        status, kind = status_of(exc)
        message = str(exc) or type(exc).__name__
        if status == 500:
            log.exception("unexpected error on %s", request.url.path, exc_info=exc)
            message = "internal server error"
        elif status == 504:
            message = "the request took longer than the service's request_timeout_s"
        return error_response(request, status, kind, message)

    async def on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        message = f"{where}: {first.get('msg', 'invalid request')}"
        if first.get("type") == "json_invalid":
            message = "the body is not valid JSON (or not UTF-8)"
        return error_response(request, 422, "invalid_request", message)

    async def on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = str(exc.detail) if exc.detail else "error"
        if exc.status_code == 400 and "parsing the body" in message:
            message = "the body is not valid JSON (or not UTF-8)"
        return error_response(request, exc.status_code, "http_error", message)

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    # expected errors are handled inside the app; only a true bug reaches the catch-all (which
    # Starlette's error middleware also logs with its traceback)
    for cls in (MasdrError, Unauthorized, TimeoutError, asyncio.TimeoutError, Exception):
        app.add_exception_handler(cls, on_error)


def service(request: Request) -> Service:
    return request.app.state.service  # type: ignore[no-any-return]


def caller(request: Request) -> Caller:
    """FastAPI dependency: who is calling (401 without a valid key when keys are configured)."""
    return service(request).caller(request.headers.get("authorization"))


CallerDep = Annotated[Caller, Depends(caller)]


class BodyLimit:
    """Pure-ASGI middleware: a body over ``max_bytes`` (declared or streamed) is a 413 before any
    handler parses it."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, send)
            return
        seen = 0
        too_large = False

        async def limited() -> dict[str, Any]:
            nonlocal seen, too_large
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    too_large = True
                    raise _BodyTooLarge
            return message  # type: ignore[no-any-return]

        try:
            await self.app(scope, limited, send)
        except _BodyTooLarge:
            await self._too_large(scope, send)

    async def _too_large(self, scope: dict[str, Any], send: Any) -> None:
        body = json.dumps({"error": {"message": f"request body over {self.max_bytes} bytes", "type": "too_large",
                                     "code": 413}}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class _BodyTooLarge(Exception):
    pass


class RequestMetrics:
    """Pure-ASGI middleware: request count by endpoint and status, latency to the last byte (so a
    stream counts whole). The endpoint is the route's path template, never the raw path, so the
    label set stays bounded."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 500

        async def tracked(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "unmatched"
            metrics = scope["app"].state.service.metrics
            metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()
            metrics.latency.labels(endpoint=endpoint).observe(time.perf_counter() - t0)

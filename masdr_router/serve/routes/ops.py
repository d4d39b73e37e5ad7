"""Operations: liveness, readiness, Prometheus metrics, hot reload of the router."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from ...errors import MasdrError
from ..http import CallerDep, ReloadRefused, service
from ..schemas import ReloadRequest
from ..state import Forbidden

router = APIRouter(tags=["operations"])


@router.get("/health", summary="Liveness: the process answers")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready", summary="Readiness: 503 until the router (and index) are loaded")
async def ready(request: Request) -> JSONResponse:
    svc = service(request)
    st = svc.state
    if not st.ready:
        return JSONResponse({"status": "loading" if st.error is None else "failed", "error": st.error},
                            status_code=503)
    current, taxonomy = st.loaded()
    return JSONResponse({"status": "ready", "router": current.name, "router_spec": current.spec,
                         "policy": current.policy, "taxonomy": taxonomy.name,
                         "taxonomy_fingerprint": taxonomy.fingerprint, "scopes": taxonomy.names,
                         "index": svc.cfg.index, "chunks": len(st.index) if st.index is not None else None,
                         "batching": svc.cfg.batching, "auth": st.keys is not None})


@router.get("/metrics", summary="Prometheus metrics")
async def metrics(request: Request) -> Response:
    body, content_type = service(request).metrics.render()
    return Response(body, media_type=content_type)


@router.post("/admin/reload", summary="Load a router artifact and swap it in (admin key)")
async def reload(request: Request, who: CallerDep, body: ReloadRequest | None = None) -> dict[str, Any]:
    svc = service(request)
    if svc.state.keys is None:
        raise Forbidden("admin endpoints are off: start the service with an API keys file that has an admin key "
                        "(or send SIGHUP to reload)")
    if not who.admin:
        raise Forbidden("this API key is not an admin key")
    svc.require_ready()
    spec = body.router if body is not None else None
    try:
        new = await run_in_threadpool(svc.state.reload, spec)
    except Exception as e:  # a corrupt file raises what its reader raises: refused all the same
        svc.metrics.reloads.labels(outcome="refused").inc()
        why = str(e) if isinstance(e, MasdrError) else f"{type(e).__name__}: {e}"
        raise ReloadRefused(f"the new router was refused, the old one keeps serving: {why}") from None
    svc.metrics.reloads.labels(outcome="ok").inc()
    return {"status": "reloaded", "router": new.name, "router_spec": new.spec, "policy": new.policy}

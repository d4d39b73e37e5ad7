"""The router as a classifier, in the shapes of two serving stacks:

- text-embeddings-inference ``POST /predict`` (``{"inputs": str | [str], "raw_scores"}`` ->
  ``[{"label", "score"}]`` sorted by score, a list of lists for a batch);
- KServe / Triton open inference protocol v2: a BYTES input tensor of queries -> ``scope`` (BYTES,
  ``""`` when abstaining), ``confidence`` (FP32), ``probabilities`` (FP32, ``[n, scopes]``, in the
  order of the ``labels`` parameter), ``abstained`` (BOOL).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ..._version import __version__
from ...errors import QueryError
from ..http import CallerDep, ModelNotFound, service
from ..schemas import InferRequest, PredictRequest
from .native import visible_labels

if TYPE_CHECKING:
    from ..service import Service

router = APIRouter()
OUTPUTS = ("scope", "confidence", "probabilities", "abstained")


# ---- text-embeddings-inference ---------------------------------------------------------------------
@router.post("/predict", tags=["tei"], summary="text-embeddings-inference classifier API", response_model=None)
async def predict(body: PredictRequest, request: Request, who: CallerDep) -> Any:
    svc = service(request)
    single = isinstance(body.inputs, str)
    raw = [body.inputs] if single else list(body.inputs)
    if any(isinstance(x, list) for x in raw):
        raise QueryError("sentence-pair inputs are not supported: a router classifies single queries")
    texts = svc.check_queries([str(x) for x in raw])
    decisions = await svc.timed(svc.route(texts))
    labels = visible_labels(svc, who)
    logits = None
    if body.raw_scores:  # TEI: scores before the softmax, when the router has them
        current, taxonomy = svc.state.loaded()
        router_ = current.router
        if hasattr(router_, "logits"):
            all_labels = taxonomy.names
            rows = await svc.timed(run_in_threadpool(router_.logits, texts))
            logits = [{s: float(r[all_labels.index(s)]) for s in labels} for r in rows]
    out = []
    for i, d in enumerate(decisions):
        d = svc.state.restrict(d, who)
        scores = logits[i] if logits is not None else {s: float(d.scores.get(s, 0.0)) for s in labels}
        out.append([{"label": s, "score": v} for s, v in sorted(scores.items(), key=lambda kv: -kv[1])])
    return JSONResponse(out[0] if single else out)


# ---- KServe open inference protocol v2 ---------------------------------------------------------------
def model_metadata(svc: Service) -> dict[str, Any]:
    labels = svc.state.taxonomy.names if svc.state.taxonomy else []
    return {"name": svc.cfg.served_model_name, "versions": ["1"], "platform": "masdr-router",
            "inputs": [{"name": "text", "datatype": "BYTES", "shape": [-1]}],
            "outputs": [{"name": "scope", "datatype": "BYTES", "shape": [-1]},
                        {"name": "confidence", "datatype": "FP32", "shape": [-1]},
                        {"name": "probabilities", "datatype": "FP32", "shape": [-1, len(labels)]},
                        {"name": "abstained", "datatype": "BOOL", "shape": [-1]}],
            "parameters": {"labels": labels}}


def served(svc: Service, name: str) -> None:
    if name != svc.cfg.served_model_name:
        raise ModelNotFound(f"model '{name}' is not served here (this server serves '{svc.cfg.served_model_name}')")


@router.get("/v2", tags=["kserve"], summary="Server metadata")
async def server_metadata() -> dict[str, Any]:
    return {"name": "masdr-router", "version": __version__, "extensions": []}


@router.get("/v2/health/live", tags=["kserve"])
async def v2_live() -> dict[str, bool]:
    return {"live": True}


@router.get("/v2/health/ready", tags=["kserve"])
async def v2_ready(request: Request) -> JSONResponse:
    ready = service(request).state.ready
    return JSONResponse({"ready": ready}, status_code=200 if ready else 503)


@router.get("/v2/models/{name}", tags=["kserve"], summary="Model metadata")
async def v2_model(name: str, request: Request) -> dict[str, Any]:
    svc = service(request)
    served(svc, name)
    return model_metadata(svc)


@router.get("/v2/models/{name}/ready", tags=["kserve"])
async def v2_model_ready(name: str, request: Request) -> JSONResponse:
    svc = service(request)
    served(svc, name)
    return JSONResponse({"name": name, "ready": svc.state.ready}, status_code=200 if svc.state.ready else 503)


@router.post("/v2/models/{name}/infer", tags=["kserve"], summary="Route a BYTES tensor of queries")
async def v2_infer(name: str, body: InferRequest, request: Request, who: CallerDep) -> dict[str, Any]:
    svc = service(request)
    served(svc, name)
    tensor = body.inputs[0]
    if len(body.inputs) != 1 or tensor.datatype != "BYTES":
        raise QueryError("expects exactly one input tensor of datatype BYTES (the queries)")
    if math.prod(tensor.shape) != len(tensor.data) or len(tensor.shape) != 1:
        raise QueryError(f"input '{tensor.name}': shape {tensor.shape} does not match its {len(tensor.data)} "
                         "elements (expected [n])")
    texts = svc.check_queries(list(tensor.data))
    wanted = [o.name for o in body.outputs] if body.outputs else list(OUTPUTS)
    unknown = [w for w in wanted if w not in OUTPUTS]
    if unknown:
        raise QueryError(f"unknown output(s) {unknown}; this model has {', '.join(OUTPUTS)}")
    decisions = [svc.state.restrict(d, who) for d in await svc.timed(svc.route(texts))]
    labels = visible_labels(svc, who)
    n = len(texts)
    tensors = {
        "scope": {"datatype": "BYTES", "shape": [n], "data": [d.scope or "" for d in decisions]},
        "confidence": {"datatype": "FP32", "shape": [n],
                       "data": [float(d.confidence) if d.confidence is not None else 0.0 for d in decisions]},
        "probabilities": {"datatype": "FP32", "shape": [n, len(labels)],
                          "data": [float(d.scores.get(s, 0.0)) for d in decisions for s in labels]},
        "abstained": {"datatype": "BOOL", "shape": [n], "data": [d.abstained for d in decisions]},
    }
    out: dict[str, Any] = {"model_name": name, "model_version": "1",
                           "outputs": [{"name": w, **tensors[w]} for w in wanted], "parameters": {"labels": labels}}
    if body.id is not None:
        out["id"] = body.id
    return out

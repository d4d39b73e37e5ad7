"""The ASGI app factory: ``create_app(ServeConfig)``; nothing lives at module level, so tests and
workers each get their own models, metrics and batcher."""

from __future__ import annotations

import json
import os
from typing import Any

from .config import ServeConfig
from .state import ServiceState

ENV_CONFIG = "MASDR_SERVE_CONFIG"  # how `masdr serve --workers N` hands its config to each worker


def create_app(cfg: ServeConfig | None = None, *, state: ServiceState | None = None) -> Any:
    """The service as a FastAPI app. Models load in the background at start-up (``/ready`` is 503
    until then) unless a loaded ``state`` is passed.

    >>> app = create_app(ServeConfig(router="checkpoints/bbc-router", index="runs/demo/bbc-index"))  # doctest: +SKIP
    >>> uvicorn.run(app, port=8000)                                                                 # doctest: +SKIP
    """
    from ..extras import require

    require("fastapi")
    from fastapi import FastAPI

    from .._version import __version__
    from .http import BodyLimit, RequestMetrics, install_error_handlers
    from .routes import compat, native, openai, ops
    from .service import Service

    cfg = cfg or ServeConfig()
    svc = Service(cfg, state)
    app = FastAPI(title="masdr-router", version=__version__, lifespan=svc.lifespan,
                  description="Scope-first RAG: route a query to an organisational scope, search only there, "
                              "answer in one call. Native API, OpenAI chat completions, TEI /predict, KServe v2.")
    app.state.service = svc
    install_error_handlers(app)
    for module in (native, openai, compat, ops):
        app.include_router(module.router)
    app.add_middleware(BodyLimit, max_bytes=cfg.max_body_bytes)
    app.add_middleware(RequestMetrics)  # outermost: counts the 413s of the body limit too
    return app


def app_from_env() -> Any:
    """Factory for uvicorn workers (``uvicorn --factory masdr_router.serve.app:app_from_env``)."""
    raw = os.environ.get(ENV_CONFIG)
    cfg = ServeConfig.from_dict(json.loads(raw), source=ENV_CONFIG) if raw else ServeConfig()
    return create_app(cfg)

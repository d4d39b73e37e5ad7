"""``masdr eval``: routers, retrieval and answers, offline. A repeated ``--router`` compares systems."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer

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
    OneRouter,
    SearchConfigFile,
    SearchDevice,
    Systems,
    connect_llm,
    emit_json,
    err,
    fmt,
    human,
    one_router,
    search_config,
    taxonomy_and_index,
)
from .report import print_retrieval_report, print_router_reports

app = typer.Typer(help="Offline evaluation. A repeated --router compares systems side by side.",
                  no_args_is_help=True)

Plot = Annotated[Path | None, typer.Option(help="write the plots as a PNG")]


@app.command("retrieval")
def retrieval(
    index: Annotated[Path, typer.Option(help="index directory")],
    queries: Annotated[Path, typer.Option(help="labelled queries JSONL")],
    router: Systems,
    device: SearchDevice = None,
    k: Annotated[int, typer.Option(min=1, help="cut-off for P@k, R@k, hit@k")] = 10,
    taxonomy: Annotated[Path | None, typer.Option(help="check the index against this taxonomy")] = None,
    search_cfg: SearchConfigFile = None,
    mode: Mode = None,
    global_head: GlobalHead = None,
    global_in_scope: GlobalInScope = None,
    llm_cfg: LLMConfigFile = None,
    llm_url: LLMUrl = None,
    llm_model: LLMModel = None,
    llm_dialect: LLMDialect = None,
    local: Local = False,
    fit_thresholds: Annotated[Path | None, typer.Option(
        help="labelled held-out queries (e.g. val.jsonl, never the evaluated ones): before evaluating, set each "
             "trained or +vote router's threshold to the one with the highest P@k there whose R@k is at least "
             "global search's")] = None,
    json_out: JsonOut = None,
    plot: Plot = None,
) -> None:
    """Global vs routed vs oracle retrieval: P@k, R@k, hit@k, dilution δ per scope, source confusion.
    The +vote routers search with the same configuration as the evaluation."""
    from ..data import read_queries
    from ..evaluation.retrieval import evaluate_retrieval
    from ..retrieval.index import ScopedIndex
    from ..routers import build_systems, parse_router_spec
    from ..taxonomy import Taxonomy
    from ..training.thresholds import fit_system_thresholds

    cfg = search_config(search_cfg, mode=mode, global_head=global_head, global_in_scope=global_in_scope)
    specs = [parse_router_spec(s) for s in router]
    idx = ScopedIndex.load(index, taxonomy=Taxonomy.from_yaml(taxonomy) if taxonomy else None, device=device)
    qs = read_queries(queries, idx.taxonomy)
    with contextlib.ExitStack() as stack:
        client = connect_llm(stack, config=llm_cfg, url=llm_url, model=llm_model, dialect=llm_dialect,
                             local=local) if any(s.needs_llm for s in specs) else None
        systems = build_systems(router, index=idx, llm=client, search=cfg)
        fits = fit_system_thresholds(systems, idx, read_queries(fit_thresholds, idx.taxonomy), k=k, search=cfg) \
            if fit_thresholds else {}
        report = evaluate_retrieval(idx, qs, systems, k=k, cfg=cfg, progress=True)
    for name, fit in fits.items():
        report["systems"][name]["threshold_fit"] = fit
    report["queries_file"] = str(queries)
    print_retrieval_report(human(json_out), report)
    emit_json(json_out, report)
    if plot:
        from ..evaluation.plots import plot_retrieval_report

        human(json_out).print(f"wrote {plot_retrieval_report(report, plot)}")


@app.command("router")
def router_(
    router: Systems,
    queries: Annotated[Path, typer.Option(help="labelled queries JSONL")],
    taxonomy: Annotated[Path | None, typer.Option(help="taxonomy YAML (default: the --index's)")] = None,
    index: Annotated[Path | None, typer.Option(help="index directory (needed by +vote routers)")] = None,
    search_cfg: SearchConfigFile = None,
    llm_cfg: LLMConfigFile = None,
    llm_url: LLMUrl = None,
    llm_model: LLMModel = None,
    llm_dialect: LLMDialect = None,
    local: Local = False,
    json_out: JsonOut = None,
    plot: Annotated[Path | None, typer.Option(help="confusion matrix + reliability diagram PNG (one router; "
                                                   "with several, each router's name is inserted)")] = None,
) -> None:
    """Accuracy, macro-F1, per-scope P/R/F1, confusion, ECE, abstention, latency p50/p95/p99, throughput,
    LLM calls per query."""
    from ..data import read_queries
    from ..errors import UsageError
    from ..evaluation.router import evaluate_router
    from ..routers import build_systems, parse_router_spec

    specs = [parse_router_spec(s) for s in router]
    if any(s.policy != "router" for s in specs):
        raise UsageError("a routing policy (':POLICY') decides what retrieval searches; "
                         "evaluate it with `masdr eval retrieval`")
    tax, idx = taxonomy_and_index(taxonomy, index, specs)
    qs = read_queries(queries, tax)
    with contextlib.ExitStack() as stack:
        client = connect_llm(stack, config=llm_cfg, url=llm_url, model=llm_model, dialect=llm_dialect,
                             local=local) if any(s.needs_llm for s in specs) else None
        systems = build_systems(router, taxonomy=tax, index=idx, llm=client, search=search_config(search_cfg))
        reports = {name: evaluate_router(r, qs, progress=True) for name, (r, _) in systems.items()}
    print_router_reports(human(json_out), reports, title=f"router evaluation, {len(qs)} queries")
    emit_json(json_out, reports)
    if plot:
        from ..evaluation.plots import plot_router_report

        for name, rep in reports.items():
            p = plot if len(reports) == 1 else plot.with_name(f"{plot.stem}-{name.replace('/', '_')}{plot.suffix}")
            human(json_out).print(f"wrote {plot_router_report(rep, p)}")


@app.command("answers")
def answers(
    index: Annotated[Path, typer.Option(help="index directory")],
    router: OneRouter,
    queries: Annotated[Path, typer.Option(help="labelled queries JSONL (an `answer` field enables correctness)")],
    judge_url: Annotated[str, typer.Option(help="OpenAI-compatible base URL of the judge (not the generator)")],
    judge_model: Annotated[str, typer.Option(help="judge model name")] = "judge",
    limit: Annotated[int, typer.Option(min=1, help="answer at most this many queries")] = 20,
    k: Annotated[int, typer.Option(min=1, help="chunks given to the synthesis call")] = 4,
    search_cfg: SearchConfigFile = None,
    llm_cfg: LLMConfigFile = None,
    llm_url: LLMUrl = None,
    llm_model: LLMModel = None,
    llm_dialect: LLMDialect = None,
    llm_timeout: LLMTimeout = None,
    json_out: JsonOut = None,
) -> None:
    """Judge answers with a second LLM: faithfulness (claims supported by the retrieved chunks) and,
    where queries carry an `answer`, correctness. Off by default: it needs an explicit judge."""
    from ..answer.rag import ScopedRAG
    from ..data import read_queries
    from ..evaluation.answers import evaluate_answers
    from ..llm.client import LLMClient
    from ..llm.config import LLMConfig
    from ..retrieval.index import ScopedIndex
    from ..routers import build_router, parse_router_spec

    spec = parse_router_spec(one_router(router))
    cfg = search_config(search_cfg)
    idx = ScopedIndex.load(index)
    qs = read_queries(queries, idx.taxonomy)[:limit]
    judge = LLMClient(LLMConfig(base_url=judge_url, model=judge_model, timeout_s=llm_timeout or 300.0))
    with contextlib.ExitStack() as stack:
        client = connect_llm(stack, config=llm_cfg, url=llm_url, model=llm_model, dialect=llm_dialect,
                             timeout=llm_timeout)
        rag = ScopedRAG(idx, build_router(spec, index=idx, llm=client, search=cfg), client, k=k, search=cfg,
                        policy=spec.policy)
        with err.status(f"answering and judging {len(qs)} queries"):
            report = evaluate_answers(rag, qs, judge)
    human(json_out).print(
        f"faithfulness {fmt(report['faithfulness'])} ({report['n_judged_faithfulness']} answers judged), "
        f"correctness {fmt(report['correctness'])} ({report['n_judged_correctness']}), "
        f"answers with citations {fmt(report['cited_rate'], True)}, LLM calls/query {report['llm_calls_per_query']}")
    emit_json(json_out, report)

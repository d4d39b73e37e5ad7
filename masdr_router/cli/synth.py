"""``masdr synth-queries``: pseudo-queries per scope from the corpus itself (cold-start training data)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from .common import (
    JsonOut,
    LLMConfigFile,
    LLMDialect,
    LLMModel,
    LLMTimeout,
    LLMUrl,
    Local,
    connect_llm,
    emit_json,
    human,
)

_METHODS_HELP = ("comma-separated extractors: title, heading, lead, keyphrase (no LLM), llm (questions from an LLM); "
                 "default: the config's, title,heading,lead,keyphrase")


# parameter name -> its flag: the options that say where the LLM is
_LLM_FLAGS = {"llm_cfg": "--llm-config", "llm_url": "--llm-url", "llm_model": "--llm-model",
              "llm_dialect": "--llm-dialect", "llm_timeout": "--llm-timeout"}


def _given_on_command_line(ctx: typer.Context, name: str) -> bool:
    # --llm-url and friends also come from environment variables; only a flag typed on this command
    # line shows intent to use the LLM, so an exported MASDR_LLM_BASE_URL never switches it on
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def synth_queries(
    ctx: typer.Context,
    taxonomy: Annotated[Path, typer.Option(help="taxonomy YAML")],
    corpus: Annotated[Path, typer.Option(help="corpus JSONL (each document's metadata gives its scope)")],
    out: Annotated[Path, typer.Option("--out", help="labelled-queries JSONL to write (atomically); each row "
                                                     "also carries its provenance")],
    exclude: Annotated[list[Path] | None, typer.Option(
        help="held-out labelled queries (e.g. test.jsonl), repeatable: no pseudo-query may equal, contain, be "
             "contained in or nearly match one, nor come from one's relevant document")] = None,
    per_scope: Annotated[int | None, typer.Option(
        min=1, help="target pseudo-queries per scope, the same for every scope and capped by what the scope has "
                    "(default: the config's, 1000)")] = None,
    methods: Annotated[str | None, typer.Option(help=_METHODS_HELP)] = None,
    llm: Annotated[bool, typer.Option("--llm", help="also ask an LLM for questions (adds 'llm' to the methods). "
                                                    "The LLM runs only with --llm, --local or 'llm' in --methods; "
                                                    "the --llm-* options below only say where, and given alone "
                                                    "they are an error")] = False,
    exclude_relevant_docs: Annotated[bool | None, typer.Option(
        "--exclude-relevant-docs/--keep-relevant-docs",
        help="drop pseudo-queries made from the held-out queries' relevant documents (default: on when they "
             "carry relevant_ids)")] = None,
    seed: Annotated[int | None, typer.Option(help="sampling seed (default: the config's, 0)")] = None,
    config: Annotated[Path | None, typer.Option(help="SynthConfig YAML (configs/synth/default.yaml); the flags "
                                                     "above override it")] = None,
    overwrite: Annotated[bool, typer.Option(help="replace an existing output file")] = False,
    llm_cfg: LLMConfigFile = None,
    llm_url: LLMUrl = None,
    llm_model: LLMModel = None,
    llm_dialect: LLMDialect = None,
    llm_timeout: LLMTimeout = None,
    local: Local = False,
    json_out: JsonOut = None,
) -> None:
    """Pseudo-queries for every scope from the corpus itself: cold-start training data for a router.

    Extracts titles, headings, lead sentences and TF-IDF keyphrases (with --llm or --local, also an
    LLM's questions), drops ambiguous, duplicate and held-out-leaking ones, and gives every scope the
    same target (capped by what it has). Prints a table per scope; --json writes the provenance report
    (counts, seed, corpus sha256). Each output row carries its provenance (doc_id, scope, method)."""
    from ..atomic import check_output
    from ..errors import UsageError
    from ..querygen import SynthConfig, load_inputs, synthesize_queries, write_pseudo_queries

    check_output(out, overwrite=overwrite)
    base = SynthConfig.load(config)
    method_list = [m.strip() for m in methods.split(",") if m.strip()] if methods is not None else list(base.methods)
    if (llm or local) and "llm" not in method_list:
        method_list.append("llm")
    cfg = base.with_overrides(per_scope=per_scope, seed=seed, methods=method_list,
                              exclude_relevant_docs=exclude_relevant_docs)
    llm_flags = [flag for name, flag in _LLM_FLAGS.items() if _given_on_command_line(ctx, name)]
    if llm_flags and not cfg.uses_llm:  # an endpoint given and silently unused would be a surprise
        raise UsageError(f"{', '.join(llm_flags)} given but no LLM is used; add --llm (or 'llm' to --methods)")
    inputs = load_inputs(taxonomy, corpus, exclude or [])
    with contextlib.ExitStack() as stack:
        client = connect_llm(stack, config=llm_cfg, url=llm_url, model=llm_model, dialect=llm_dialect,
                             timeout=llm_timeout, local=local) if cfg.uses_llm else None
        result = synthesize_queries(inputs.taxonomy, inputs.documents, config=cfg, held_out=inputs.held_out,
                                    client=client, progress=True, source=inputs.source)
    console = human(json_out)
    print_synth_report(console, result.report, out)
    write_pseudo_queries(out, result.candidates)
    console.print(f"wrote {result.report['queries']} pseudo-queries to {out}")
    emit_json(json_out, {"out": str(out), **result.report})


def print_synth_report(console: Console, report: dict[str, Any], out: Path) -> None:
    """The per-scope table (generated, dropped by reason, kept) and one line per method."""
    from rich import box

    # a light box and short headers: the table fits an 80-column terminal
    per_scope = report["config"]["per_scope"]
    t = Table(title=f"pseudo-queries -> {out}", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
              caption="dropped: ambig(uous, several scopes), contam(inated, leaks a held-out query), dup(licate); "
                      f"avail: left after them; kept: up to {per_scope if per_scope is not None else 'all'} a scope")
    cols = ("documents", "generated", "ambiguous", "contaminated", "duplicate", "available", "kept")
    headers = ("docs", "generated", "ambig.", "contam.", "dup.", "avail", "kept")
    t.add_column("scope", no_wrap=True)
    for h in headers:
        t.add_column(h, justify="right")
    for scope, r in report["per_scope"].items():
        t.add_row(scope, *(str(r[c]) for c in cols))
    multi = report.get("multi_scope")
    if multi:
        t.add_row("(several scopes)", "", str(multi["generated"]), str(multi["ambiguous"]), "", "", "", "0")
    console.print(t)
    methods = ", ".join(f"{m} {r['kept']}/{r['generated']}" for m, r in report["per_method"].items())
    console.print(f"kept/generated by method: {methods}", highlight=False)
    held = report["held_out"]
    if held["queries"]:
        how = ", ".join(f"{k} {v}" for k, v in report["contaminated_by"].items()) or "none"
        console.print(f"held-out: {held['queries']} queries, {held['excluded_documents']} relevant documents "
                      f"excluded; contaminated: {how}", highlight=False)
    llm = report["llm"]
    if llm.get("used"):
        console.print(f"LLM: {llm['batches'] - llm['batches_failed']}/{llm['batches']} batches answered, "
                      f"{llm['questions']} questions ({llm['questions_rejected']} rejected by length)",
                      highlight=False)
    if report["source"]["unscoped_documents"]:
        console.print(f"{report['source']['unscoped_documents']} documents belong to no scope and were skipped")

"""Tables for people: index manifests, retrieval and router reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from .common import fmt


def print_manifest(console: Console, m: dict[str, Any], path: Path) -> None:
    c = m["counts"]
    t = Table(title=f"scoped index {path}  ({m['taxonomy']['name']}, {m['taxonomy']['fingerprint']})")
    t.add_column("shard")
    t.add_column("chunks", justify="right")
    t.add_column("share", justify="right")
    for s, n in c["per_scope"].items():
        t.add_row(s, str(n), f"{100 * n / max(c['chunks'], 1):.1f}%")
    t.add_row("[bold]global", f"[bold]{c['chunks']}", "100%")
    console.print(t)
    bs = m.get("build_stats") or {}
    console.print(f"documents: {c['documents']}  unscoped chunks: {c['unscoped_chunks']}  encoder: "
                  f"{m['encoder']['name']} ({m['encoder']['dim']}-d)"
                  + (f"  embedding: {bs['chunks_per_s']} chunks/s on {bs['device']}" if "chunks_per_s" in bs else ""))


def print_retrieval_report(console: Console, report: dict[str, Any]) -> None:
    k = report["k"]
    t = Table(title=f"retrieval, {report['n_queries']} queries, k={k}, {report['search']['mode']} search")
    # the system names are what the table is about: never cut them on an 80-column terminal
    t.add_column("system", no_wrap=True, min_width=max(len(n) for n in report["systems"]))
    for col in [f"P@{k}", f"R@{k}", f"hit@{k}", "routed", "acc", "searched", "diag"]:
        t.add_column(col, justify="right")
    t.caption = "acc: routing accuracy; searched: share of the corpus; diag: source-confusion diagonal"
    for name, s in report["systems"].items():
        t.add_row(name, fmt(s["p_at_k"]), fmt(s["r_at_k"]), fmt(s["hit_at_k"]), fmt(s["routed_rate"], True),
                  fmt(s["routing_accuracy"], True), fmt(s["searched_fraction"], True),
                  fmt(report["confusion"][name]["diagonal_mean"]))
    console.print(t)
    d = report["dilution"]
    t = Table(title=f"dilution δ = 1 − P_global/P_oracle per scope (Spearman ρ vs log chunks: "
                    f"{fmt(d['spearman_rho'])})")
    t.add_column("scope")
    t.add_column("chunks", justify="right")
    t.add_column("queries", justify="right")
    t.add_column("δ", justify="right")
    for s, v in sorted(d["per_scope"].items(), key=lambda kv: kv[1]["chunks"]):
        t.add_row(s, str(v["chunks"]), str(v["n_queries"]), fmt(v["delta"]))
    console.print(t)


def print_router_reports(console: Console, reports: dict[str, dict[str, Any]], *, title: str) -> None:
    from rich import box

    with_llm = any(r.get("llm_calls_per_query") for r in reports.values())
    # a light box and short headers: the table fits an 80-column terminal
    t = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
              caption="acc/F1 count abstentions as misses; top-1 ignores the threshold; ans. = accuracy "
                      "when answered; p50/p99: latency of one query in ms")
    cols = ["router", "acc", "F1", "top-1", "abstain", "ans.", "ECE", "p50", "p99", "QPS"]
    for col in [*cols, *(["LLM/q"] if with_llm else [])]:
        t.add_column(col, justify="left" if col == "router" else "right", no_wrap=True)
    for name, r in reports.items():
        t.add_row(name, fmt(r["accuracy"]), fmt(r["macro_f1"]), fmt(r["top1_accuracy"]),
                  fmt(r["abstain_rate"], True), fmt(r["accuracy_when_answered"]), fmt(r["ece"]),
                  f"{r['latency_ms']['p50']:.2f}", f"{r['latency_ms']['p99']:.2f}", _qps(r["throughput_qps"]),
                  *([f"{r['llm_calls_per_query']:.2f}"] if with_llm else []))
    console.print(t)


def _qps(v: float) -> str:
    return f"{v / 1000:.1f}k" if v >= 10_000 else f"{v:.0f}"


def print_decision(console: Console, d: Any) -> None:
    fallback = f"search {', '.join(d.fallback)}" if d.fallback else "global search"
    scope = d.scope or f"[yellow]abstain -> {fallback}[/]"
    console.print(f"scope: [bold]{scope}[/]  stage: {d.stage}  confidence: {fmt(d.confidence)}  "
                  f"latency: {d.latency_ms:.3f} ms  LLM calls: {d.llm_calls}")
    for s, v in sorted(d.scores.items(), key=lambda kv: -kv[1])[:5]:
        if v > 0:
            console.print(f"  {s:30s} {v:.3f}")


def print_answer(console: Console, ans: Any) -> None:
    import json

    console.print(f"[bold]Q:[/] {ans.question}")
    console.print(f"[bold]A:[/] {ans.answer}", highlight=False)
    console.print(f"[bold]citations:[/] {', '.join(ans.citations) or '-'}")
    console.print(f"[bold]scope:[/] {ans.decision.scope or 'none (router abstained)'}  searched: "
                  f"{', '.join(ans.searched_scopes) if ans.searched_scopes else 'whole corpus'}  "
                  f"LLM calls: {ans.llm_calls}")
    for t in ans.trace:
        console.print("  " + json.dumps(t), highlight=False)

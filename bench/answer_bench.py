"""Answer-path benchmark: the single-call scoped pipeline against the MASDR-RAG orchestrator.

Both run on the same index, the same test questions and the same LLM endpoint (the embedded
llama.cpp + SmolLM2 server, or with --engine vllm the development vLLM serving the same model with
real tool calling, unless --llm-url is given), and both end with the same constrained
synthesis call, so the difference is how the context was gathered:

- ``single-call``: router -> scoped hybrid search (k chunks) -> one synthesis call;
- ``orchestrator``: the LLM calls search_<scope> tools for up to --max-rounds rounds (k chunks per
  call), then one synthesis call over everything the tools returned.

Reported per system: gold_in_context (the question's own document is among the chunks given to
the synthesis), gold_cited (a citation points into it), context_in_scope (share of those chunks
from the question's scope), citation_valid (every citation is a retrieved chunk id), LLM calls per
question and latency. With --judge-url, faithfulness by a distinct judge endpoint as well.

    python bench/answer_bench.py --index runs/demo/bbc-index --queries runs/demo/bbc/test.jsonl \\
        --router checkpoints/bbc-router [--n 40] [--engine vllm --tool-protocol native] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _row(ans: Any, q: Any, seconds: float) -> dict[str, Any]:
    gold = set(q.relevant_ids)
    ids = {h.chunk_id for h in ans.hits}
    by_id = {h.chunk_id: h for h in ans.hits}
    return {"query": q.query, "scope": q.scope, "searched": ans.searched_scopes,
            "gold_in_context": bool(gold & {h.doc_id for h in ans.hits}),
            "gold_cited": any(by_id[c].doc_id in gold for c in ans.citations if c in by_id),
            "context_in_scope": (sum(q.scope in h.scopes for h in ans.hits) / len(ans.hits)) if ans.hits else 0.0,
            "citation_valid": all(c in ids for c in ans.citations), "cited": bool(ans.citations),
            "context_chunks": len(ans.hits), "llm_calls": ans.llm_calls, "seconds": seconds,
            "tool_rounds": sum(1 for t in ans.trace if t.get("stage") == "orchestrator" and "protocol" in t),
            "protocols": sorted({t["protocol"] for t in ans.trace if "protocol" in t}),
            "answer": ans.answer, "citations": ans.citations}


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def mean(key: str) -> float:
        return round(statistics.fmean(float(r[key]) for r in rows), 4)

    secs = sorted(r["seconds"] for r in rows)
    return {"n": len(rows), **{k: mean(k) for k in ("gold_in_context", "gold_cited", "context_in_scope",
                                                     "citation_valid", "cited", "context_chunks", "llm_calls",
                                                     "tool_rounds")},
            "latency_s_p50": round(statistics.median(secs), 3),
            "latency_s_p95": round(secs[min(len(secs) - 1, int(0.95 * len(secs)))], 3)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--queries", type=Path, required=True, help="labelled test queries JSONL (with relevant_ids)")
    ap.add_argument("--router", required=True, help="router spec for the single-call system (as in `masdr ask`)")
    ap.add_argument("--n", type=int, default=40, help="questions (a seeded random sample)")
    ap.add_argument("--k", type=int, default=3, help="chunks per search")
    ap.add_argument("--max-rounds", type=int, default=5)
    ap.add_argument("--tool-protocol", default="auto", choices=["auto", "native", "json"])
    ap.add_argument("--llm-url", default=None, help="OpenAI-compatible endpoint (default: the --engine server)")
    ap.add_argument("--llm-model", default=None, help="model name at --llm-url")
    ap.add_argument("--llm-dialect", default="openai", choices=["openai", "vllm", "vllm-legacy"])
    ap.add_argument("--engine", default="llama.cpp", choices=["llama.cpp", "vllm"],
                    help="without --llm-url: start the embedded llama.cpp server, or the development vLLM "
                         "(scripts/vllm-cpu-server.sh --setup first), with native tool calling")
    ap.add_argument("--judge-url", default=None, help="a distinct judge endpoint for faithfulness")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    import contextlib

    from rich.console import Console
    from rich.table import Table

    from masdr_router.answer import Orchestrator, ScopedRAG
    from masdr_router.data import read_queries
    from masdr_router.llm.client import LLMClient
    from masdr_router.llm.config import LLMConfig
    from masdr_router.llm.connect import open_client
    from masdr_router.progress import progress_bar
    from masdr_router.retrieval.index import ScopedIndex
    from masdr_router.routers import build_router, parse_router_spec

    index = ScopedIndex.load(args.index)
    queries = [q for q in read_queries(args.queries, taxonomy=index.taxonomy) if q.relevant_ids]
    sample = random.Random(0).sample(queries, min(args.n, len(queries)))
    report: dict[str, Any] = {"index": str(args.index), "queries": str(args.queries), "n": len(sample),
                              "k": args.k, "max_rounds": args.max_rounds, "systems": {}}
    spec = parse_router_spec(args.router)
    with contextlib.ExitStack() as stack:
        # no --llm-url: the embedded server, with the client settings `masdr ask --local` uses
        if args.llm_url:
            cfg = LLMConfig(base_url=args.llm_url, timeout_s=300, dialect=args.llm_dialect,
                            **({"model": args.llm_model} if args.llm_model else {}))
            client = LLMClient(cfg)
        elif args.engine == "vllm":
            from masdr_router.llm.connect import EMBEDDED_CLIENT_SETTINGS
            from masdr_router.llm.vllm_server import VLLMServer

            srv = stack.enter_context(VLLMServer(log=args.out / "vllm.log"))
            client = LLMClient(LLMConfig(base_url=srv.base_url, model=srv.model, dialect="vllm",
                                         **EMBEDDED_CLIENT_SETTINGS))
        else:
            client = stack.enter_context(open_client(None, local=True))
        report["llm"] = dict(zip(("base_url", "model"), client.endpoint))
        router = build_router(spec, index=index, llm=client)
        systems = {"single-call": ScopedRAG(index, router, client, k=args.k, policy=spec.policy),
                   "orchestrator": Orchestrator(index, client, k=args.k, max_rounds=args.max_rounds,
                                                protocol=args.tool_protocol)}
        judge = LLMClient(LLMConfig(base_url=args.judge_url, model="judge", timeout_s=300)) if args.judge_url else None
        for name, system in systems.items():
            rows = []
            with progress_bar(name, len(sample)) as bar:
                for q in sample:
                    t0 = time.perf_counter()
                    ans = system.ask(q.query)
                    row = _row(ans, q, time.perf_counter() - t0)
                    if judge is not None:
                        from masdr_router.evaluation.answers import judge_answer

                        row.update(judge_answer(judge, ans))
                    rows.append(row)
                    bar.advance()
            summary = _summary(rows)
            if judge is not None:
                faith = [r["faithfulness"] for r in rows if r.get("faithfulness") is not None]
                summary["faithfulness"] = round(statistics.fmean(faith), 4) if faith else None
            if name == "orchestrator":
                summary["tool_protocols"] = dict(Counter(p for r in rows for p in r["protocols"]))
            report["systems"][name] = {"summary": summary, "rows": rows}

    table = Table(title=f"answer path on {len(sample)} questions ({args.queries})")
    cols = {"gold_in_context": "gold in ctx", "gold_cited": "gold cited", "context_in_scope": "ctx in scope",
            "citation_valid": "valid cites", "context_chunks": "chunks", "llm_calls": "LLM calls",
            "latency_s_p50": "p50 s", **({"faithfulness": "faithful"} if judge is not None else {})}
    table.add_column("system", no_wrap=True)
    for title in cols.values():
        table.add_column(title, justify="right")
    for name, res in report["systems"].items():
        s = res["summary"]
        table.add_row(name, *("-" if s.get(c) is None else f"{s[c]:.3f}" for c in cols))
    Console().print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"answer_bench{'' if args.llm_url or args.engine == 'llama.cpp' else '-vllm'}.json"
    path.write_text(json.dumps(report, indent=2))
    print(f"wrote {path}")
    return report


if __name__ == "__main__":
    main()

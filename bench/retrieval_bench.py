"""Retrieval benchmark: index build throughput and search QPS, global vs scoped, same index.

Scoped search scans only the chunks of one scope, so it must be faster than a global search over
all chunks; this measures by how much, one query at a time (the serving pattern) and batched.

    python bench/retrieval_bench.py [--dataset composite] [--max-docs-per-scope N] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def qps(fn, queries, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for q in queries:
            fn(q)
        best = min(best, time.perf_counter() - t0)
    return len(queries) / best


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="composite", help="bbc, 20ng or composite (default)")
    ap.add_argument("--max-docs-per-scope", type=int, default=None)
    ap.add_argument("--queries", type=int, default=200, help="queries timed per system")
    ap.add_argument("--repeat", type=int, default=3, help="timing repeats (best is kept)")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)

    import numpy as np
    import torch
    from rich.console import Console
    from rich.table import Table

    from masdr_router import IndexConfig, ScopedIndex, SearchConfig
    from masdr_router.datasets import load_dataset

    console = Console()
    ds = load_dataset(args.dataset, max_docs_per_scope=args.max_docs_per_scope, seed=0)
    t0 = time.perf_counter()
    index = ScopedIndex.build(ds.taxonomy, ds.documents, IndexConfig(), progress=True)
    build_s = time.perf_counter() - t0
    queries = ds.queries[: args.queries]
    texts = [q.query for q in queries]
    qvecs = index.encode_queries(texts)
    index.warm()
    n = len(index)
    searched = statistics.fmean(len(index.shard_rows[q.scope]) / n for q in queries)

    rows = []
    for mode in ("dense", "bm25", "hybrid"):
        cfg = SearchConfig(mode=mode)
        # one query at a time; query vectors precomputed so only the search itself is timed
        def one(i, scoped, cfg=cfg):
            scope = queries[i].scope if scoped else None
            index.search_shard(scope, [texts[i]], qvecs[i:i + 1], 10, cfg)

        g = qps(lambda i: one(i, False), range(len(queries)), args.repeat)
        s = qps(lambda i: one(i, True), range(len(queries)), args.repeat)
        rows.append({"mode": mode, "global_qps": round(g, 1), "scoped_qps": round(s, 1), "ratio": round(s / g, 2)})

    # dense search batched per scope vs one global batch, as in offline evaluation
    def batched(scoped: bool) -> float:
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            if scoped:
                by: dict[str, list[int]] = {}
                for i, q in enumerate(queries):
                    by.setdefault(q.scope, []).append(i)
                for scope, idx in by.items():
                    index.dense_shard(scope).search(qvecs[idx], 10)
            else:
                index.dense_shard(None).search(qvecs, 10)
            best = min(best, time.perf_counter() - t0)
        return len(queries) / best

    gb, sb = batched(False), batched(True)
    rows.append({"mode": "dense-batched", "global_qps": round(gb, 1), "scoped_qps": round(sb, 1),
                 "ratio": round(sb / gb, 2)})

    result = {
        "benchmark": "retrieval", "dataset": args.dataset, "max_docs_per_scope": args.max_docs_per_scope,
        "documents": len(ds.documents), "chunks": n, "scopes": len(ds.taxonomy),
        "build": {"seconds": round(build_s, 2), "chunks_per_s": round(n / build_s, 2),
                  "embed_chunks_per_s": index.stats["chunks_per_s"], "device": index.stats["device"]},
        "queries_timed": len(queries), "mean_searched_fraction": round(searched, 4),
        "search": rows, "backend": index.backend,
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count(),
                    "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                    "numpy": np.__version__},
    }
    t = Table(title=f"retrieval bench: {args.dataset}, {n} chunks, {len(ds.taxonomy)} scopes, "
                    f"scoped search scans {100 * searched:.1f}% of chunks on average")
    for c in ("mode", "global QPS", "scoped QPS", "scoped / global"):
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(r["mode"], f"{r['global_qps']:.1f}", f"{r['scoped_qps']:.1f}", f"{r['ratio']:.2f}x")
    console.print(t)
    console.print(f"index build: {n} chunks in {build_s:.1f} s = {n / build_s:.1f} chunks/s "
                  f"(embedding {index.stats['chunks_per_s']} chunks/s on {index.stats['device']})")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"retrieval_{args.dataset}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()

"""One-command GPU check: the same three steps on CPU and on CUDA, with the speed-ups.

1. embed the chunks of a BBC subset with MiniLM (sentence-transformers; fp16 on CUDA);
2. search them (exact torch search; global and scoped) for the test headlines;
3. train the default LoRA router on the headlines (a fixed number of epochs, no early stopping).

Each step is checked, not only timed: GPU and CPU must agree (top-1 search results, router
macro-F1 within a few points). Without CUDA it runs the CPU half and says so. Budget: under 8
minutes on one GPU with the default sizes.

    python bench/gpu_check.py [--docs-per-scope 200] [--epochs 3] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")


def run_on(device: str, ds: Any, split: dict[str, list[Any]], args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from masdr_router import IndexConfig, ScopedIndex, TrainConfig, evaluate_router, train_router

    out: dict[str, Any] = {"device": device}
    index = ScopedIndex.build(ds.taxonomy, ds.documents, IndexConfig(device=device, backend="torch"))
    out["embed_s"] = round(index.stats["embed_s"], 2)
    out["chunks_per_s"] = index.stats["chunks_per_s"]
    queries = [q.query for q in split["test"]]
    index.warm()
    qvecs = index.encode_queries(queries)
    t0 = time.perf_counter()
    for _ in range(args.search_repeats):
        hits = index.search_many(queries, [None] * len(queries), 10, qvecs=qvecs)
        index.search_many(queries, [[q.scope] for q in split["test"]], 10, qvecs=qvecs)
    out["search_qps"] = round(2 * args.search_repeats * len(queries) / (time.perf_counter() - t0), 1)
    out["top1"] = [h[0].chunk_id if h else None for h in hits]
    cfg = TrainConfig(progress=False, device=device, regime="holdout", epochs=args.epochs, min_steps=0,
                      early_stopping_patience=args.epochs, keep_probe=False)
    t0 = time.perf_counter()
    res = train_router(ds.taxonomy, split["train"], split["val"], cfg)
    out["train_s"] = round(time.perf_counter() - t0, 1)
    out["macro_f1"] = evaluate_router(res.router, split["test"])["top1_macro_f1"]
    out["unit_vectors"] = bool(np.allclose(np.linalg.norm(index.embeddings, axis=1), 1.0, atol=1e-2))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs-per-scope", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--search-repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)

    import torch

    from masdr_router.datasets import load_dataset
    from masdr_router.datasets.splits import stratified_split

    ds = load_dataset("bbc", max_docs_per_scope=args.docs_per_scope, seed=0)
    split = stratified_split(ds.queries, val=0.1, test=0.2, seed=0)
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    rows = {d: run_on(d, ds, split, args) for d in devices}
    report: dict[str, Any] = {"cuda": torch.cuda.is_available(), "rows": {d: {k: v for k, v in r.items() if k != "top1"}
                                                                         for d, r in rows.items()}}
    if "cuda" in rows:
        cpu, gpu = rows["cpu"], rows["cuda"]
        same = sum(a == b for a, b in zip(cpu["top1"], gpu["top1"])) / len(cpu["top1"])
        report["speedup"] = {"embed": round(gpu["chunks_per_s"] / cpu["chunks_per_s"], 2),
                             "search": round(gpu["search_qps"] / cpu["search_qps"], 2),
                             "train": round(cpu["train_s"] / gpu["train_s"], 2)}
        report["agreement"] = {"search_top1_same": round(same, 4),
                               "macro_f1_gap": round(abs(cpu["macro_f1"] - gpu["macro_f1"]), 4)}
        report["device_name"] = torch.cuda.get_device_name(0)
    print(json.dumps(report, indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")
    if "cuda" not in rows:
        print("no CUDA device here: ran the CPU half only")
        return report
    ok = report["agreement"]["search_top1_same"] >= 0.95 and report["agreement"]["macro_f1_gap"] <= 0.05
    if not ok:
        raise SystemExit(f"GPU and CPU disagree: {report['agreement']}")
    return report


if __name__ == "__main__":
    main()

"""Which head: mean pooling (the default) or the encoder's pooler (the head of the standard
``*ForSequenceClassification`` models, which makes the artifact a plain transformers classifier)?

Same data sets and splits as `masdr data prepare` (train, val for early stopping and calibration,
test for the scores), the default TrainConfig with only ``pooling`` changed. Reports top-1
macro-F1 and accuracy, ECE after calibration, and training time.

    python bench/head_compare.py [--datasets bbc 20ng composite] [--work runs/bench]

Routers are cached under --work (``DATASET-router`` is the mean-pooling one bench/new_taxonomy.py
also trains); results are resumable.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from masdr_router.datasets import DATASETS  # --datasets names a built-in set, or argparse says which exist

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=["bbc", "20ng", "composite"])
    ap.add_argument("--work", type=Path, default=Path("runs/bench"))
    ap.add_argument("--out", type=Path, default=Path("bench/results/head_compare.json"))
    args = ap.parse_args(argv)

    from new_taxonomy import labelled_router, load

    from masdr_router import LoraRouter, TrainConfig, evaluate_router

    report: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    for name in args.datasets:
        ds, split = load(name)
        for pooling in ("mean", "pooler"):
            key = f"{name}/{pooling}"
            if key in report:
                continue
            cfg = TrainConfig(progress=False, device="cpu", pooling=pooling)
            path, _, train_s = labelled_router(ds, split, args.work, cfg, "" if pooling == "mean" else "-pooler")
            rep = evaluate_router(LoraRouter.from_pretrained(path, taxonomy=ds.taxonomy), split["test"])
            report[key] = {"macro_f1": rep["top1_macro_f1"], "accuracy": rep["top1_accuracy"], "ece": rep["ece"],
                           "train_s": round(train_s, 1), "n_test": len(split["test"])}
            print(key, report[key], flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=2))

    from rich.console import Console
    from rich.table import Table

    t = Table(title="mean-pooling head vs the standard pooler head (test split, top-1)")
    for c in ("set", "head", "macro-F1", "accuracy", "ECE", "train s"):
        t.add_column(c, justify="left" if c in ("set", "head") else "right")
    for key, r in report.items():
        s, head = key.split("/")
        t.add_row(s, head, f"{r['macro_f1']:.3f}", f"{r['accuracy']:.3f}", f"{r['ece']:.3f}", f"{r['train_s']:.0f}")
    Console().print(t)
    return report


if __name__ == "__main__":
    main()

"""Which linear probe on frozen MiniLM features: the router's head and its LP-FT starting point.

The probe is logistic regression on the encoder's mean-pooled features. This compares what it
sees and how it is regularised, on the learning curve's samples (the same split and sample seeds
as ``learning_curve.py``; 3 samples per size below "all"), test top-1 macro-F1:

- ``standardized-cv``: z-scored features, C from {0.01 ... 1} by 3-fold CV (the earlier default)
- ``normalized-C1`` / ``-C3`` / ``-C10``: L2-normalised features (the sentence embeddings), fixed C
- ``normalized-cv``: L2-normalised features, C from {0.3 ... 100} by 3-fold CV

    python bench/probe_features.py --datasets bbc composite django-docs sqlalchemy-docs 20ng
"""

from __future__ import annotations

import argparse
import json
import os
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
from learning_curve import sample_per_scope

MAX_DOCS = {"20ng": 100}
VARIANTS = ("standardized-cv", "normalized-C1", "normalized-C3", "normalized-C10", "normalized-cv")


def predictions(ftr: np.ndarray, ytr: np.ndarray, fte: np.ndarray, n_labels: int) -> dict[str, np.ndarray]:
    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV

    from masdr_router.training.probe import fit_probe

    def unit(f: np.ndarray) -> np.ndarray:
        return f / np.linalg.norm(f, axis=1, keepdims=True)

    out = {"standardized-cv": fit_probe(ftr, ytr, n_labels, normalize=False).logits(fte).argmax(1)}
    for c in (1, 3, 10):
        clf = LogisticRegression(C=c, max_iter=3000, class_weight="balanced").fit(unit(ftr), ytr)
        out[f"normalized-C{c}"] = clf.predict(unit(fte))
    if np.bincount(ytr).min() >= 3:
        clf = LogisticRegressionCV(Cs=[0.3, 1, 3, 10, 30, 100], cv=3, max_iter=3000, class_weight="balanced")
        out["normalized-cv"] = clf.fit(unit(ftr), ytr).predict(unit(fte))
    return out


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    from masdr_router.datasets import DATASETS  # --datasets names a built-in set, or argparse says which exist

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS),
                    default=["bbc", "composite", "django-docs", "sqlalchemy-docs", "20ng"])
    ap.add_argument("--sizes", nargs="+", default=["8", "16", "32", "64", "all"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--out", type=Path, default=Path("bench/results/probe_features.json"))
    args = ap.parse_args(argv)
    from sklearn.metrics import f1_score
    from transformers import AutoModel, AutoTokenizer

    from masdr_router.datasets import load_dataset
    from masdr_router.datasets.splits import stratified_split
    from masdr_router.retrieval.embedder import resolve_encoder_path
    from masdr_router.training.probe import pooled_features

    warnings.simplefilter("ignore")  # convergence chatter of the regressions on tiny samples
    path = resolve_encoder_path("minilm")
    tokenizer, encoder = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    rows: list[dict[str, Any]] = []
    for name in args.datasets:
        ds = load_dataset(name, max_docs_per_scope=MAX_DOCS.get(name), seed=0)
        split = stratified_split(ds.queries, val=0.1, test=0.2, seed=0)
        pool, test, labels = split["train"] + split["val"], split["test"], ds.taxonomy.names
        feats = pooled_features(encoder, tokenizer, [q.query for q in pool + test], max_length=64, pooling="mean")
        fpool, fte = feats[:len(pool)], feats[len(pool):]
        yte = np.array([labels.index(q.scope) for q in test])
        row_of = {id(q): i for i, q in enumerate(pool)}
        for size in args.sizes:
            for seed in args.seeds if size != "all" else args.seeds[:1]:
                sample = sample_per_scope(pool, None if size == "all" else int(size), seed)
                idx = [row_of[id(q)] for q in sample]
                ytr = np.array([labels.index(q.scope) for q in sample])
                pred = predictions(fpool[idx], ytr, fte, len(labels))
                rows.append({"dataset": name, "size": size, "seed": seed, "n_train": len(sample),
                             **{k: round(float(f1_score(yte, p, average="macro")), 4) for k, p in pred.items()}})
                print(json.dumps(rows[-1]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2))
    print(table(rows))
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """Per set and size the mean over sample seeds, then the mean over sets per size."""
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["dataset"], r["size"]), []).append(r)

    def mean(rs: list[dict[str, Any]], k: str) -> float:
        vals = [r[k] for r in rs if k in r]
        return float(np.mean(vals)) if vals else float("nan")

    out = ["| set | per scope | " + " | ".join(VARIANTS) + " |", "|" + "---|" * (len(VARIANTS) + 2)]
    by_size: dict[str, list[dict[str, float]]] = {}
    for (name, size), rs in cells.items():
        means = {k: mean(rs, k) for k in VARIANTS}
        by_size.setdefault(size, []).append(means)
        out.append(f"| {name} | {size} | " + " | ".join(f"{means[k]:.3f}" for k in VARIANTS) + " |")
    for size, ms in by_size.items():
        out.append(f"| **mean of {len(ms)} sets** | {size} | "
                   + " | ".join(f"{np.nanmean([m[k] for m in ms]):.3f}" for k in VARIANTS) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    main()

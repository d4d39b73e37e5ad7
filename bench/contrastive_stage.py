"""The contrastive stage in isolation: how much does it do on its own, and at which learning rate?

On the learning curves SetFit (contrastive fine-tuning of the whole encoder on sampled same/other
scope pairs, then logistic regression) beats the default `masdr train` at 8-64 queries per scope on
BBC, and at some sizes on composite and the docs sets. This isolates the ingredient: the trainer's
contrastive stage (``masdr_router.training.contrastive``: cosine-similarity loss on 20 pair
iterations, at most 600 steps, as the learning curve's SetFit) on the MiniLM encoder, either
through the router's LoRA adapters or on all weights (SetFit itself), then the router's own probe
(``fit_probe``, as the default TrainConfig sets it) on the tuned encoder's features; no
classification fine-tuning: this is the trainer's "0 epochs" candidate. ``none`` is the probe on the
frozen encoder. Same samples and test split as ``learning_curve.py``.

    python bench/contrastive_stage.py --datasets bbc sqlalchemy-docs --sizes 8 32 --modes none lora full
    python bench/contrastive_stage.py --datasets bbc composite --sizes 8 --modes lora --lr 3e-4
    python bench/contrastive_stage.py --datasets bbc composite --sizes 8 --modes full --head-c 0.3 1 3 10

``--head-c`` also scores the probe at other regularisation strengths on the same tuned features
(SetFit's head is C = 1; the router's is ``NORMALIZED_C``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from learning_curve import sample_per_scope, scores

MAX_DOCS = {"20ng": 100}
WEIGHTS = {"lora": "lora", "full": "all"}  # the mode's TrainConfig.contrastive_weights


@functools.cache
def load(name: str) -> tuple[Any, dict[str, list[Any]]]:
    """A data set and its split, once per set for all its sizes and modes."""
    from masdr_router.datasets import load_dataset
    from masdr_router.datasets.splits import stratified_split

    ds = load_dataset(name, max_docs_per_scope=MAX_DOCS.get(name), seed=0)
    return ds, stratified_split(ds.queries, val=0.1, test=0.2, seed=0)


def run(name: str, size: int, mode: str, seed: int, lr: float | None = None, max_steps: int = 600,
        batch_size: int = 32, head_cs: tuple[float, ...] = ()) -> dict[str, Any]:
    import torch
    from transformers import AutoModel, AutoTokenizer

    from masdr_router import TrainConfig
    from masdr_router.retrieval.embedder import resolve_encoder_path
    from masdr_router.training.contrastive import contrastive_stage, tuned_features
    from masdr_router.training.model import build_lora_model
    from masdr_router.training.probe import fit_probe
    from masdr_router.training.trainer import encode

    ds, split = load(name)
    train, test, labels = sample_per_scope(split["train"] + split["val"], size, seed), split["test"], ds.taxonomy.names
    cfg = TrainConfig(contrastive_weights=WEIGHTS.get(mode, "all"), contrastive_learning_rate=lr)
    lr = cfg.stage_learning_rate if mode != "none" else 0.0
    path = resolve_encoder_path("minilm")
    tokenizer = AutoTokenizer.from_pretrained(path)
    frozen = AutoModel.from_pretrained(path).eval()
    tr, te = encode(cfg, labels, train, tokenizer, frozen), encode(cfg, labels, test, tokenizer, frozen)
    t0 = time.perf_counter()
    torch.manual_seed(seed)  # the LoRA initialisation
    # the router's own model, as TrainConfig sets it: the stage tunes its adapters or all its weights
    model = build_lora_model(path, len(labels), pooling=cfg.pooling, head_dropout=cfg.head_dropout, lora_r=cfg.lora_r,
                             lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                             target_modules=cfg.target_modules, normalize=cfg.normalize)
    steps = {}
    if mode != "none":
        steps = contrastive_stage(model, tr.ids, tr.mask, tr.y, iterations=20, learning_rate=lr, batch_size=batch_size,
                                  max_steps=max_steps, seed=seed, device="cpu", autocast=contextlib.nullcontext,
                                  weights=cfg.contrastive_weights)
    ftr = tuned_features(model, tr.ids, tr.mask, device="cpu")
    fte = tuned_features(model, te.ids, te.mask, device="cpu")
    probe = fit_probe(ftr, tr.y.numpy(), len(labels), seed=seed, normalize=cfg.normalize)
    pred = [labels[i] for i in probe.logits(fte).argmax(1)]
    gold = [q.scope for q in test]
    # the same features under the other regularisation strengths of the head (fit_probe's is NORMALIZED_C)
    by_c = {}
    for c in head_cs:
        p = fit_probe(ftr, tr.y.numpy(), len(labels), seed=seed, normalize=cfg.normalize, C=c)
        by_c[str(c)] = round(scores(gold, [labels[i] for i in p.logits(fte).argmax(1)], labels)["macro_f1"], 4)
    return {"dataset": name, "size": size, "seed": seed, "mode": mode, "lr": lr, "max_steps": max_steps,
            "n_train": len(train), "steps": steps.get("contrastive_steps", 0),
            **scores(gold, pred, labels), "train_s": round(time.perf_counter() - t0, 1),
            "batch_size": batch_size, **({"macro_f1_by_head_c": by_c} if by_c else {})}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    from masdr_router.datasets import DATASETS  # --datasets names a built-in set, or argparse says which exist

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=["bbc", "sqlalchemy-docs"])
    ap.add_argument("--sizes", nargs="+", type=int, default=[8, 32])
    ap.add_argument("--modes", nargs="+", default=["none", "lora", "full"], choices=["none", "lora", "full"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=None, help="the stage's peak learning rate (default: per mode, "
                    "as TrainConfig.stage_learning_rate)")
    ap.add_argument("--max-steps", type=int, default=600, help="cap on the stage's batches (the trainer's "
                    "contrastive_max_steps; 600 as the learning curve's SetFit)")
    ap.add_argument("--batch-size", type=int, default=32, help="pairs per step (the trainer's "
                    "contrastive_batch_size)")
    ap.add_argument("--head-c", type=float, nargs="*", default=[], help="also score the head at these C")
    ap.add_argument("--out", type=Path, default=Path("bench/results/contrastive_stage.json"))
    args = ap.parse_args(argv)
    rows = json.loads(args.out.read_text()) if args.out.exists() else []
    done = {(r["dataset"], r["size"], r["mode"], r["seed"], r.get("lr"), r.get("max_steps", 600),
             r.get("batch_size", 32)) for r in rows}
    from masdr_router import TrainConfig

    default_lr = {"none": 0.0, **{m: TrainConfig(contrastive_weights=w).stage_learning_rate
                                  for m, w in WEIGHTS.items()}}
    for name in args.datasets:
        for size in args.sizes:
            for mode in args.modes:
                if (name, size, mode, args.seed, args.lr or default_lr[mode], args.max_steps,
                        args.batch_size) in done:
                    continue
                rows.append(run(name, size, mode, args.seed, args.lr, args.max_steps, args.batch_size,
                                tuple(args.head_c)))
                print(json.dumps(rows[-1]), flush=True)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(rows, indent=2))
    print("| set | per scope | seed | mode | learning rate | steps (cap) | macro-F1 (accuracy) | head C: macro-F1 "
          "| seconds |\n|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        by_c = ", ".join(f"{c}: {f:.3f}" for c, f in r.get("macro_f1_by_head_c", {}).items())
        print(f"| {r['dataset']} | {r['size']} | {r['seed']} | {r['mode']} | {r.get('lr', '')} "
              f"| {r['steps']} ({r.get('max_steps', 600)}) "
              f"| {r['macro_f1']:.3f} ({r['accuracy']:.3f}) | {by_c or '–'} "
              f"| {r['train_s']} |")
    return rows


if __name__ == "__main__":
    main()

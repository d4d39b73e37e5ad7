"""Would a SetFit-style contrastive stage close the small-data gap? A measurement before it goes into
the trainer.

On the learning curves SetFit (contrastive fine-tuning of the whole encoder on sampled same/other
scope pairs, then logistic regression) beats the default `masdr train` at 8-64 queries per scope on
BBC, and at some sizes on composite and the docs sets. This isolates the ingredient: the same
contrastive stage (cosine-similarity loss on 20 pair iterations, one epoch, at most 600 steps, as the
learning curve's SetFit) on the MiniLM encoder, either through LoRA adapters (what the router's
artifact carries) or on all weights (SetFit itself), then the router's own probe (``fit_probe``) on
the tuned encoder's mean-pooled features. ``none`` is the probe on the frozen encoder. Same samples
and test split as ``learning_curve.py``.

    python bench/contrastive_stage.py --datasets bbc sqlalchemy-docs --sizes 8 32 --modes none lora full
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
from learning_curve import sample_per_scope, scores

MAX_DOCS = {"20ng": 100}
LEARNING_RATES = {"lora": 1e-4, "full": 2e-5}  # full: SetFit's body learning rate


def sample_pairs(texts: list[str], labels: list[int], iterations: int,
                 rng: random.Random) -> list[tuple[str, str, float]]:
    """Per iteration and query, one pair with a query of its scope (1.0) and one with another scope's (0.0)."""
    by: dict[int, list[str]] = {}
    for t, y in zip(texts, labels, strict=True):
        by.setdefault(y, []).append(t)
    out = []
    for _ in range(iterations):
        for t, y in zip(texts, labels, strict=True):
            out.append((t, rng.choice(by[y]), 1.0))
            other = rng.choice([k for k in by if k != y])
            out.append((t, rng.choice(by[other]), 0.0))
    rng.shuffle(out)
    return out


def contrastive_stage(encoder: Any, tokenizer: Any, texts: list[str], labels: list[int], *, lr: float,
                      iterations: int = 20, batch_size: int = 32, max_steps: int = 600, seed: int = 0) -> None:
    import torch

    from masdr_router.routers.lora.model import RouterModel

    pairs = sample_pairs(texts, labels, iterations, random.Random(seed))
    opt = torch.optim.AdamW([p for p in encoder.parameters() if p.requires_grad], lr=lr)
    encoder.train()
    for s in range(min(max_steps, -(-len(pairs) // batch_size))):
        batch = pairs[s * batch_size:(s + 1) * batch_size]
        sides = []
        for j in (0, 1):
            enc = tokenizer([b[j] for b in batch], padding=True, truncation=True, max_length=64, return_tensors="pt")
            sides.append(RouterModel.pool_outputs(encoder(**enc), enc["attention_mask"], "mean"))
        cos = torch.nn.functional.cosine_similarity(*sides)
        loss = torch.nn.functional.mse_loss(cos, torch.tensor([b[2] for b in batch]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    encoder.eval()


@functools.cache
def load(name: str) -> tuple[Any, dict[str, list[Any]]]:
    """A data set and its split, once per set for all its sizes and modes."""
    from masdr_router.datasets import load_dataset
    from masdr_router.datasets.splits import stratified_split

    ds = load_dataset(name, max_docs_per_scope=MAX_DOCS.get(name), seed=0)
    return ds, stratified_split(ds.queries, val=0.1, test=0.2, seed=0)


def run(name: str, size: int, mode: str, seed: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModel, AutoTokenizer

    from masdr_router.retrieval.embedder import resolve_encoder_path
    from masdr_router.training.probe import fit_probe, pooled_features

    ds, split = load(name)
    train, test, labels = sample_per_scope(split["train"] + split["val"], size, seed), split["test"], ds.taxonomy.names
    xtr, ytr = [q.query for q in train], [labels.index(q.scope) for q in train]
    path = resolve_encoder_path("minilm")
    tokenizer, encoder = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path)
    t0 = time.perf_counter()
    torch.manual_seed(seed)  # the LoRA initialisation and the dropout masks
    if mode == "lora":
        from peft import LoraConfig, get_peft_model

        encoder = get_peft_model(encoder, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.1,
                                                     target_modules=["query", "key", "value", "dense"]))
    if mode != "none":
        contrastive_stage(encoder, tokenizer, xtr, ytr, lr=LEARNING_RATES[mode], seed=seed)
    encoder.eval()
    ftr = pooled_features(encoder, tokenizer, xtr, max_length=64, pooling="mean")
    fte = pooled_features(encoder, tokenizer, [q.query for q in test], max_length=64, pooling="mean")
    probe = fit_probe(ftr, np.array(ytr), len(labels), seed=seed)
    pred = [labels[i] for i in probe.logits(fte).argmax(1)]
    return {"dataset": name, "size": size, "seed": seed, "mode": mode, "n_train": len(train),
            **scores([q.scope for q in test], pred, labels), "train_s": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["bbc", "sqlalchemy-docs"])
    ap.add_argument("--sizes", nargs="+", type=int, default=[8, 32])
    ap.add_argument("--modes", nargs="+", default=["none", "lora", "full"], choices=["none", "lora", "full"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("bench/results/contrastive_stage.json"))
    args = ap.parse_args(argv)
    rows = json.loads(args.out.read_text()) if args.out.exists() else []
    done = {(r["dataset"], r["size"], r["mode"], r["seed"]) for r in rows}
    for name in args.datasets:
        for size in args.sizes:
            for mode in args.modes:
                if (name, size, mode, args.seed) in done:
                    continue
                rows.append(run(name, size, mode, args.seed))
                print(json.dumps(rows[-1]), flush=True)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(rows, indent=2))
    print("| set | per scope | mode | macro-F1 (accuracy) | seconds |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dataset']} | {r['size']} | {r['mode']} | {r['macro_f1']:.3f} ({r['accuracy']:.3f}) "
              f"| {r['train_s']} |")
    return rows


if __name__ == "__main__":
    main()

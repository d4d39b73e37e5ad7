"""Does classification fine-tuning help after the contrastive stage? The test curve of one training.

The cv regime picks the epoch count (0 = the probe on the contrastively tuned encoder, SetFit's
model) on out-of-fold predictions of the training sample. This shows what that choice is up
against: one model built as the refit is (contrastive stage on the whole sample, the probe on the
tuned features as the head), fine-tuned for the whole epoch budget, with the test queries'
macro-F1 after each epoch (epoch 0: before any fine-tuning). Same samples and test split as
``learning_curve.py``; ``--set KEY=VALUE`` overrides the TrainConfig (e.g. ``learning_rate=2e-4``).

A cell ``SET:PER_SCOPE:EPOCHS`` trains that many epochs on their own schedule instead of the budget
(the refit the cv regime makes after choosing EPOCHS); ``--alphas`` then also scores the weight-space
ensemble of the two ends (WiSE-FT, Wortsman et al. 2022): the LoRA update scaled by alpha, the head
interpolated from the probe (alpha 0, epoch 0's model) to the fine-tuned head (alpha 1).

    python bench/finetune_curve.py --cells bbc:8 composite:8 composite:16 sqlalchemy-docs:8
    python bench/finetune_curve.py --cells composite:8:10 bbc:8:13 --alphas 0 0.25 0.5 0.75 1
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

from contrastive_stage import load
from learning_curve import sample_per_scope


def set_alpha(m: Any, a: float, lora_b: dict[str, Any], head0: tuple[Any, Any], head1: tuple[Any, Any]) -> None:
    """The weight-space ensemble at ``a``: LoRA's update (B @ A) scaled by scaling B, the head interpolated."""
    import torch

    with torch.no_grad():
        for n, p in m.named_parameters():
            if n in lora_b:
                p.copy_(a * lora_b[n])
        m.head.weight.copy_(a * head1[0] + (1 - a) * head0[0])
        m.head.bias.copy_(a * head1[1] + (1 - a) * head0[1])


def interpolated_scores(run: Any, head0: tuple[Any, Any], test: Any, n_labels: int,
                        alphas: list[float]) -> dict[str, float]:
    """Test macro-F1 of the weight-space ensemble at each alpha; the model is left as trained."""
    from masdr_router.training.trainer import macro_f1

    m = run.unwrapped
    head1 = (m.head.weight.detach().clone(), m.head.bias.detach().clone())
    lora_b = {n: p.detach().clone() for n, p in m.named_parameters() if "lora_B" in n}
    out = {}
    for a in alphas:
        set_alpha(m, a, lora_b, head0, head1)
        out[f"{a:g}"] = round(macro_f1(test.y.numpy(), run.predict_logits(test.ids, test.mask).argmax(1), n_labels), 4)
    set_alpha(m, 1.0, lora_b, head0, head1)
    return out


def curve(name: str, size: int, overrides: dict[str, Any], seed: int, epochs: int | None = None,
          alphas: list[float] | None = None) -> dict[str, Any]:
    from transformers import AutoModel, AutoTokenizer

    from masdr_router import TrainConfig
    from masdr_router.retrieval.embedder import resolve_encoder_path
    from masdr_router.training.probe import fit_probe
    from masdr_router.training.trainer import (
        FitState,
        build_run,
        encode,
        epoch_budget,
        fit_epochs,
        macro_f1,
        run_scope,
        use_contrastive,
    )

    ds, split = load(name)
    train, test, labels = sample_per_scope(split["train"] + split["val"], size, seed), split["test"], ds.taxonomy.names
    cfg = TrainConfig.from_dict({**TrainConfig().to_dict(), "progress": False, **overrides})
    path = resolve_encoder_path(cfg.base_model)
    tokenizer, frozen = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    t0 = time.perf_counter()
    with run_scope(cfg, "cpu"):
        tr, te = encode(cfg, labels, train, tokenizer, frozen), encode(cfg, labels, test, tokenizer, frozen)
        probe = fit_probe(tr.features, tr.y.numpy(), len(labels), normalize=cfg.normalize)
        stage = use_contrastive(cfg, "cv", len(train) / len(labels))  # as the cv regime decides
        run = build_run(cfg, labels, path, tokenizer, tr, te, key="curve",
                        epochs=epochs if epochs is not None else epoch_budget(cfg, len(train)),
                        head_init=probe, contrastive=stage)
        head0 = (run.unwrapped.head.weight.detach().clone(), run.unwrapped.head.bias.detach().clone())
        f1 = [macro_f1(te.y.numpy(), run.predict_logits(te.ids, te.mask).argmax(1), len(labels))]
        f1 += [h["val_macro_f1"] for h in fit_epochs(run, FitState()).history]
        wise = interpolated_scores(run, head0, te, len(labels), alphas) if alphas else {}
    return {"dataset": name, "size": size, "seed": seed, "overrides": overrides, "epochs": len(f1) - 1,
            "contrastive": stage, "test_macro_f1_by_epoch": [round(x, 4) for x in f1],
            "best_epoch": max(range(len(f1)), key=f1.__getitem__), "test_macro_f1_by_alpha": wise,
            "train_s": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", nargs="+", default=["bbc:8", "composite:8"], metavar="SET:PER_SCOPE[:EPOCHS]")
    ap.add_argument("--alphas", nargs="+", type=float, default=[],
                    help="score the weight-space ensemble of the probe and the fine-tuned model at these alphas")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="TrainConfig override")
    ap.add_argument("--out", type=Path, default=Path("bench/results/finetune_curve.json"))
    args = ap.parse_args(argv)
    from masdr_router.training.run import parse_overrides

    rows = json.loads(args.out.read_text()) if args.out.exists() else []
    for cell in args.cells:
        name, size, *epochs = cell.split(":")
        rows.append(curve(name, int(size), parse_overrides(args.set), args.seed,
                          epochs=int(epochs[0]) if epochs else None, alphas=args.alphas))
        print(json.dumps(rows[-1]), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=2))
    print("| set | per scope | overrides | epoch 0 | best (epoch) | last | epochs 1-5 |\n|---|---|---|---|---|---|---|")
    for r in rows:
        f = r["test_macro_f1_by_epoch"]
        print(f"| {r['dataset']} | {r['size']} | {r['overrides'] or '-'} | {f[0]:.3f} "
              f"| {max(f):.3f} ({r['best_epoch']}) | {f[-1]:.3f} | {' '.join(f'{x:.3f}' for x in f[1:6])} |")
    wise = [r for r in rows if r.get("test_macro_f1_by_alpha")]
    if wise:
        alphas = list(wise[0]["test_macro_f1_by_alpha"])
        print("\n| set | per scope | epochs | " + " | ".join(f"alpha {a}" for a in alphas) + " |\n|---|---|---|"
              + "---|" * len(alphas))
        for r in wise:
            print(f"| {r['dataset']} | {r['size']} | {r['epochs']} | "
                  + " | ".join(f"{r['test_macro_f1_by_alpha'].get(a, float('nan')):.3f}" for a in alphas) + " |")
    return rows


if __name__ == "__main__":
    main()

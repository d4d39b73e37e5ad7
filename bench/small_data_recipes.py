"""Which fixed small-data recipe holds against SetFit, across sets, sizes and samples?

The cv regime chooses the fine-tuning epoch count after the contrastive stage on out-of-fold
predictions of a few dozen queries: a noisy choice among 60 candidates. This measures, on the
test queries, what fixed recipes would give instead, for several sample seeds per cell, against
SetFit trained on the same sample in the same run:

- ``stage+probe``: the contrastive stage on the whole sample, then the router's probe (C = 3,
  balanced) on the tuned features: the trainer's "0 epochs" candidate;
- ``stage+lr1``: the same features, SetFit's own head (logistic regression, C = 1, unweighted);
- ``ft@E``: LoRA fine-tuning for E epochs on its own schedule, from the stage and the probe head
  (what the cv regime's refit trains after choosing E), for E a fraction of the epoch budget;
- ``ft@E/a``: the weight-space ensemble of ``stage+probe`` (a = 0) and ``ft@E`` (a = 1): the LoRA
  update scaled by a, the head interpolated (WiSE-FT, Wortsman et al. 2022).

One stage per cell; every fine-tuning starts from a copy of it. Same samples and test split as
``learning_curve.py``. ``--report`` averages the sample seeds of each recipe and shows its mean
difference to SetFit.

    python bench/small_data_recipes.py --datasets bbc composite django-docs sqlalchemy-docs --sizes 8 --seeds 0 1 2
    python bench/small_data_recipes.py --report
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

from contrastive_stage import load
from finetune_curve import set_alpha
from learning_curve import run_setfit, sample_per_scope

FRACTIONS = (0.125, 0.25, 0.5, 1.0)
BULKY = ("oof", "oof_true", "test_pred", "test_true")


def recipe_logits(cfg: Any, labels: list[str], path: str, tokenizer: Any, tr: Any, evals: list[Any],
                  alphas: list[float], budget: int) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """Every recipe's logits on each of ``evals``, trained on ``tr``: one stage, then each
    fine-tuning from a copy of it."""
    from masdr_router.training.contrastive import tuned_features
    from masdr_router.training.probe import fit_probe
    from masdr_router.training.trainer import FitState, build_run, fit_epochs, make_optimizer

    info: dict[str, Any] = {}
    probe = fit_probe(tr.features, tr.y.numpy(), len(labels), normalize=cfg.normalize)
    t0 = time.perf_counter()
    run = build_run(cfg, labels, path, tokenizer, tr, None, key="recipes", epochs=budget, head_init=probe,
                    contrastive=True)
    info.update(stage_s=round(time.perf_counter() - t0, 1), stage=run.contrastive)
    out: dict[str, list[Any]] = {"probe": [probe.logits(e.features) for e in evals],
                                 "stage+probe": [run.predict_logits(e.ids, e.mask) for e in evals]}
    # SetFit's own head: logistic regression with C = 1, no class weights, on the unit-length tuned features
    lr1 = fit_probe(tuned_features(run.unwrapped, tr.ids, tr.mask, device="cpu"), tr.y.numpy(), len(labels),
                    balanced=False, normalize=True, C=1.0)
    out["stage+lr1"] = [lr1.logits(tuned_features(run.unwrapped, e.ids, e.mask, device="cpu")) for e in evals]
    m = run.unwrapped
    head0 = (m.head.weight.detach().clone(), m.head.bias.detach().clone())
    start = copy.deepcopy(m.state_dict())
    epochs = sorted({max(1, round(f * budget)) for f in FRACTIONS})
    info["ft_s"] = {}
    for ep in epochs:
        m.load_state_dict(start)
        r = dataclasses.replace(run, epochs=ep, optimizer=make_optimizer(m, cfg))
        t0 = time.perf_counter()
        fit_epochs(r, FitState())
        info["ft_s"][ep] = round(time.perf_counter() - t0, 1)
        head1 = (m.head.weight.detach().clone(), m.head.bias.detach().clone())
        lora_b = {n: p.detach().clone() for n, p in m.named_parameters() if "lora_B" in n}
        for a in alphas:
            set_alpha(m, a, lora_b, head0, head1)
            out[f"ft@{ep}" if a == 1.0 else f"ft@{ep}/{a:g}"] = [r.predict_logits(e.ids, e.mask) for e in evals]
    return out, info


def cell(name: str, size: int, seed: int, alphas: list[float], overrides: dict[str, Any], folds: int,
         row: dict[str, Any] | None) -> dict[str, Any]:
    """One (set, size, sample seed): SetFit and every recipe on the test queries, and (``folds``)
    every recipe's out-of-fold logits on the sample, for judging selection rules offline. A ``row``
    already holding the test part only gets the out-of-fold part."""
    import numpy as np
    from transformers import AutoModel, AutoTokenizer

    from masdr_router import TrainConfig
    from masdr_router.retrieval.embedder import resolve_encoder_path
    from masdr_router.training.trainer import encode, epoch_budget, kfold, macro_f1, run_scope

    ds, split = load(name)
    train, test, labels = sample_per_scope(split["train"] + split["val"], size, seed), split["test"], ds.taxonomy.names
    out: dict[str, Any] = row or {"dataset": name, "size": size, "seed": seed, "n_train": len(train),
                                  "overrides": overrides}
    if "setfit" not in out:
        t0 = time.perf_counter()
        out["setfit"] = macro_f1_of(run_setfit([q.query for q in train], [q.scope for q in train],
                                               [q.query for q in test]), test, labels)
        out["setfit_s"] = round(time.perf_counter() - t0, 1)
    cfg = TrainConfig.from_dict({**TrainConfig().to_dict(), "progress": False, **overrides})
    path = resolve_encoder_path(cfg.base_model)
    tokenizer, frozen = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    budget = epoch_budget(cfg, len(train))  # the cv regime's: the same for its folds and its refit
    with run_scope(cfg, "cpu"):
        data = encode(cfg, labels, train, tokenizer, frozen)
        if "scores" not in out:
            te = encode(cfg, labels, test, tokenizer, frozen)
            logits, info = recipe_logits(cfg, labels, path, tokenizer, data, [te], alphas, budget)
            true = te.y.numpy()
            out.update(info, epoch_budget=budget, scores={
                k: round(macro_f1(true, v[0].argmax(1), len(labels)), 4) for k, v in logits.items()})
            out["test_pred"] = {k: v[0].argmax(1).tolist() for k, v in logits.items()}
            out["test_true"] = true.tolist()
        if folds and "oof" not in out:
            parts = kfold(train, folds, cfg.seed)
            oof: dict[str, Any] = {}
            for rows in parts:
                rest = np.setdiff1d(np.arange(len(train)), rows)
                logits, _ = recipe_logits(cfg, labels, path, tokenizer, data.take(rest), [data.take(rows)], alphas,
                                          budget)
                for k, v in logits.items():
                    oof.setdefault(k, np.zeros((len(train), len(labels)), np.float32))[rows] = v[0]
            out["oof"] = {k: np.round(v, 4).tolist() for k, v in oof.items()}
            out["oof_true"] = data.y.numpy().tolist()
    return out


def macro_f1_of(pred: list[str], test: list[Any], labels: list[str]) -> float:
    from learning_curve import scores

    return scores([q.scope for q in test], pred, labels)["macro_f1"]


def recipe_name(key: str, row: dict[str, Any]) -> str:
    """``ft@13/0.5`` -> ``ft@1/4 budget/0.5``: recipes compare across cells by their share of the budget."""
    if not key.startswith("ft@"):
        return key
    e, _, a = key[3:].partition("/")
    share = FRACTIONS[[max(1, round(f * row["epoch_budget"])) for f in FRACTIONS].index(int(e))]
    return f"ft@{share:g}" + (f"/{a}" if a else "")


def report(rows: list[dict[str, Any]]) -> str:
    import numpy as np

    by_cell: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in rows:
        by_cell.setdefault((r["dataset"], r["size"]), []).append(r)
    recipes = sorted({recipe_name(k, r) for r in rows for k in r["scores"]})
    lines = ["| set | per scope | seeds | SetFit | " + " | ".join(recipes) + " |",
             "|---|---|---|---|" + "---|" * len(recipes)]
    diffs: dict[str, list[float]] = {k: [] for k in recipes}
    for (name, size), rs in sorted(by_cell.items()):
        setfit = float(np.mean([r["setfit"] for r in rs]))
        cells = []
        for k in recipes:
            vals = [r["scores"][key] for r in rs for key in r["scores"] if recipe_name(key, r) == k]
            cells.append(f"{np.mean(vals) - setfit:+.3f}" if vals else "–")
            if vals:
                diffs[k].append(float(np.mean(vals)) - setfit)
        lines.append(f"| {name} | {size} | {len(rs)} | {setfit:.3f} | " + " | ".join(cells) + " |")
    lines.append("| **mean** | | | | " + " | ".join(f"**{np.mean(d):+.3f}**" if d else "–"
                                                  for d in diffs.values()) + " |")
    lines.append("| **worst** | | | | " + " | ".join(f"{min(d):+.3f}" if d else "–" for d in diffs.values()) + " |")
    return "\n".join(lines)


def oof_criteria(row: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per recipe, what a selection rule may look at: out-of-fold macro-F1, accuracy, and the
    negative log-likelihood after the recipe's own temperature scaling (continuous, so far less
    noisy on a few dozen queries than a count of right answers)."""
    import numpy as np

    from masdr_router.training.calibration import fit_temperature
    from masdr_router.training.trainer import macro_f1

    true = np.array(row["oof_true"])
    n_labels = len(row["oof"]["probe"][0])
    out = {}
    for k, v in row["oof"].items():
        z = np.array(v, dtype=np.float64)
        z = z / fit_temperature(z, true)
        z = z - z.max(1, keepdims=True)
        nll = float(-(z[np.arange(len(true)), true] - np.log(np.exp(z).sum(1))).mean())
        pred = z.argmax(1)
        out[k] = {"f1": macro_f1(true, pred, n_labels), "acc": float((pred == true).mean()), "nll": nll}
    return out


# candidate sets a selection rule chooses from (by recipe-name pattern) and the rules themselves
CANDIDATES = {
    "epochs": lambda k: k == "stage+probe" or (k.startswith("ft@") and "/" not in k),
    "epochs+wise": lambda k: k == "stage+probe" or k.startswith("ft@"),
    "lr1+epochs": lambda k: k == "stage+lr1" or (k.startswith("ft@") and "/" not in k),
    "lr1+wise": lambda k: k == "stage+lr1" or k.startswith("ft@"),
}
RULES = {"max oof macro-F1": lambda c: (c["f1"], c["acc"]), "max oof accuracy": lambda c: (c["acc"], c["f1"]),
         "min oof NLL (temperature-scaled)": lambda c: (-c["nll"],)}


def rule_report(rows: list[dict[str, Any]]) -> str:
    """Each (candidate set, rule): the test macro-F1 of what it picks, as a difference to SetFit,
    averaged over the sample seeds of a cell."""
    import numpy as np

    rows = [r for r in rows if "oof" in r]
    cells = sorted({(r["dataset"], r["size"]) for r in rows})
    header = "| candidates | rule | " + " | ".join(f"{d} {s}" for d, s in cells) + " | mean | worst |"
    lines = [header, "|---|---|" + "---|" * (len(cells) + 2)]
    crit = [oof_criteria(r) for r in rows]
    for cname, keep in CANDIDATES.items():
        for rname, key in RULES.items():
            per_cell = []
            for cell_ in cells:
                diffs = []
                for r, c in zip(rows, crit):
                    if (r["dataset"], r["size"]) != cell_:
                        continue
                    pick = max((k for k in c if keep(k)), key=lambda k: key(c[k]))
                    diffs.append(r["scores"][pick] - r["setfit"])
                per_cell.append(float(np.mean(diffs)))
            lines.append(f"| {cname} | {rname} | " + " | ".join(f"{d:+.3f}" for d in per_cell)
                         + f" | **{np.mean(per_cell):+.3f}** | {min(per_cell):+.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    from masdr_router.datasets import DATASETS  # --datasets names a built-in set, or argparse says which exist

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=["bbc", "composite"])
    ap.add_argument("--sizes", nargs="+", type=int, default=[8])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="sample seeds")
    ap.add_argument("--alphas", nargs="+", type=float, default=[0.25, 0.5, 0.75, 1.0])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="TrainConfig override")
    ap.add_argument("--out", type=Path, default=Path("bench/results/small_data_recipes.json"))
    ap.add_argument("--folds", type=int, default=3, help="also score every recipe out-of-fold on the sample "
                    "(the cv regime's folds), for judging selection rules; 0: test only")
    ap.add_argument("--report", action="store_true", help="only print the table of what --out holds")
    args = ap.parse_args(argv)
    from masdr_router.training.run import parse_overrides

    rows = json.loads(args.out.read_text()) if args.out.exists() else []
    if not args.report:
        overrides = parse_overrides(args.set)
        index = {(r["dataset"], r["size"], r["seed"], json.dumps(r["overrides"], sort_keys=True)): i
                 for i, r in enumerate(rows)}
        for seed in args.seeds:
            for size in args.sizes:
                for name in args.datasets:
                    i = index.get((name, size, seed, json.dumps(overrides, sort_keys=True)))
                    if i is not None and ("oof" in rows[i] or not args.folds):
                        continue
                    row = cell(name, size, seed, args.alphas, overrides, args.folds,
                               rows[i] if i is not None else None)
                    if i is None:
                        rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if k not in BULKY}), flush=True)
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    args.out.write_text(json.dumps(rows))
    print(report(rows))
    if any("oof" in r for r in rows):
        print("\nSelection rules on out-of-fold scores (test macro-F1 of the pick minus SetFit's):\n")
        print(rule_report(rows))
    return rows


if __name__ == "__main__":
    main()

"""Is a soup of seeds better than one run? The holdout regime's runs at several seeds, and their averages.

With 1,000 labelled queries or more (and no validation file) ``masdr train`` holds out 15 % and
fine-tunes on the rest. This trains that run as the trainer does (same split, probe head start,
schedule) at seeds ``seed``, ``seed+1``, ... on the same split, and after each new run scores on the
validation split and the test queries:

- each run alone (``holdout_soup: 1`` is the first);
- the **soup**: one model, the uniform average of the runs' weights (``training.model.model_soup``,
  what ``holdout_soup: k`` exports);
- the **ensemble**: the runs' softmax probabilities averaged (k models at serving time: a reference,
  not something the trainer exports).

The test queries are read only to compare, never to choose. Same data sets, pool and test split as
``learning_curve.py`` with ``--sizes all``.

    python bench/holdout_soup.py --datasets bbc composite sqlalchemy-docs django-docs
    python bench/holdout_soup.py --datasets 20ng --max-docs-per-scope 100 --members 3
    python bench/holdout_soup.py --datasets bbc --set lora_r=64 --set lora_alpha=128   # a variant of the run
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from holdout_epochs import holdout, run_sets  # the trainer's holdout run, resumable per data set


def soups(name: str, seed: int, members: int, max_docs_per_scope: int | None,
          overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per run and per soup size k = 2..members: validation and test macro-F1 (and test accuracy), with
    ``overrides`` (TrainConfig fields) as ``--set`` gives them to the trainer."""
    import numpy as np
    import torch

    from masdr_router import TrainConfig
    from masdr_router.training import trainer as T
    from masdr_router.training.model import model_soup

    with holdout(name, seed, max_docs_per_scope, overrides) as h:
        cfg, labels, tr, va, te, n = h.cfg, h.labels, h.tr, h.va, h.te, len(h.labels)
        yv, yt = va.y.numpy(), te.y.numpy()

        def scores(val: np.ndarray, tst: np.ndarray) -> dict[str, float]:
            return {"val": round(T.macro_f1(yv, val.argmax(1), n), 4),
                    "test": round(T.macro_f1(yt, tst.argmax(1), n), 4),
                    "test_accuracy": round(float((tst.argmax(1) == yt).mean()), 4)}

        runs, probs, rows, agg = [], [], [], []
        for i in range(members):
            t0 = time.perf_counter()
            run = T.build_run(TrainConfig.from_dict({**cfg.to_dict(), "seed": seed + i}), labels, h.base, h.tokenizer,
                              tr, va, key=f"soup-{i}", epochs=h.epochs, head_init=h.probe)
            for e in range(h.epochs):
                T.train_one_epoch(run, e)
            run.finish()
            lv, lt = run.predict_logits(va.ids, va.mask), run.predict_logits(te.ids, te.mask)
            probs.append(tuple(torch.softmax(torch.from_numpy(x), 1).numpy() for x in (lv, lt)))
            runs.append(run)
            rows.append({"seed": seed + i, **scores(lv, lt), "seconds": round(time.perf_counter() - t0)})
            print(json.dumps({"dataset": name, **rows[-1]}), flush=True)
            if i == 0:
                continue
            soup = copy.deepcopy(runs[0].unwrapped)  # the runs stay as they are for the larger soups
            model_soup([soup, *(copy.deepcopy(r.unwrapped) for r in runs[1:])])
            # predicted through the first run (its accelerator, its batching); one process on the CPU, so its
            # prepared model is the model itself
            kept = runs[0].model, runs[0].unwrapped
            runs[0].model = runs[0].unwrapped = soup
            sv, st = runs[0].predict_logits(va.ids, va.mask), runs[0].predict_logits(te.ids, te.mask)
            runs[0].model, runs[0].unwrapped = kept
            ens = [np.mean([p[j] for p in probs], 0) for j in (0, 1)]
            agg.append({"k": i + 1, "soup": scores(sv, st), "ensemble": scores(ens[0], ens[1]),
                        "mean_run_test": round(float(np.mean([r["test"] for r in rows])), 4)})
            print(json.dumps({"dataset": name, **agg[-1]}), flush=True)
    return {"dataset": name, "seed": seed, "n_train": h.n_train, "n_val": h.n_val, "n_test": h.n_test,
            "runs": rows, "soups": agg}


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| set | --set | seeds | n train / val | runs: test macro-F1 | mean | soup of k (test / val) "
             "| ensemble of k | soup − mean | soup − first run |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        runs, last = r["runs"], r["soups"][-1] if r["soups"] else None
        mean = sum(x["test"] for x in runs) / len(runs)
        soup = f"{last['soup']['test']:.3f} / {last['soup']['val']:.3f} (k {last['k']})" if last else "–"
        ens = f"{last['ensemble']['test']:.3f}" if last else "–"
        sets = " ".join(r.get("set") or []) or "-"
        lines.append(f"| {r['dataset']} | {sets} | {runs[0]['seed']}-{runs[-1]['seed']} "
                     f"| {r['n_train']} / {r['n_val']} | "
                     + ", ".join(f"{x['test']:.3f}" for x in runs) + f" | {mean:.3f} | {soup} | {ens} | "
                     + (f"{last['soup']['test'] - mean:+.3f} | {last['soup']['test'] - runs[0]['test']:+.3f} |"
                        if last else "– | – |"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    from masdr_router.datasets import DATASETS  # --datasets names a built-in set, or argparse says which exist

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=["bbc", "composite"])
    ap.add_argument("--seed", type=int, default=0, help="TrainConfig.seed: the validation split and the first run")
    ap.add_argument("--members", type=int, default=3, help="runs (seeds seed, seed+1, ...) in the largest soup")
    ap.add_argument("--max-docs-per-scope", type=int, default=None, help="subsample the data sets (e.g. 20ng)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="TrainConfig override, as `masdr train --set` (e.g. learning_rate=5e-4)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/holdout_soup.json"))
    args = ap.parse_args(argv)
    from masdr_router.training.run import parse_overrides

    overrides = parse_overrides(args.set)
    if args.members < 2:
        ap.error("--members must be at least 2 (one run is no soup)")
    done = run_sets(args.out, args.datasets,
                    lambda r, name: r["dataset"] == name and r["seed"] == args.seed and len(r["runs"]) == args.members
                    and parse_overrides(r.get("set")) == overrides,
                    lambda name: {**soups(name, args.seed, args.members, args.max_docs_per_scope, overrides),
                                  "set": args.set})
    print(table(done))
    return done


if __name__ == "__main__":
    main()

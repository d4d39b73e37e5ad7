"""Would a lexical head help the router: a log-linear mix of its scope probabilities with TF-IDF + LR?

TF-IDF + LR (word 1-2 grams, sublinear tf, C by cross-validation) is the best baseline with every
labelled query on the two docs sets (SQLAlchemy, Django), where queries name API terms, so its
errors might not be the router's. This mixes ``(1 - a) log p_router + a log p_tfidf`` with ``a``
chosen on held-out queries, as a trainer would have to choose it:

- ``--model probe``: the frozen-MiniLM probe (LR, C by CV), ``a`` on 5-fold out-of-fold
  predictions of both heads; seconds a cell, every size.
- ``--model default``: the default ``masdr train``, ``a`` on the trainer's own held-out
  probabilities (``TrainResult.held_out``: the validation split it carved out, or its out-of-fold
  predictions in the cv regime; TF-IDF then fitted on the same training part, or out of fold).

Reports test macro-F1 of the router alone, TF-IDF alone, the mix at the chosen ``a`` (by
macro-F1 and by log-loss on the held-out queries) and at the best ``a`` on test (an upper bound
no trainer can choose). Same pools, samples and test splits as ``learning_curve.py``.

    python bench/lexical_mix.py --model probe --datasets bbc composite sqlalchemy-docs django-docs 20ng
    python bench/lexical_mix.py --model default --datasets bbc composite sqlalchemy-docs django-docs --sizes all
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
sys.path.insert(0, str(Path(__file__).parent))

WEIGHTS = np.round(np.arange(0.0, 1.01, 0.1), 2)


def log_proba(model: Any, X: Any, labels: list[str]) -> np.ndarray:
    """Log-probabilities over every label (a label the model never saw gets 1e-6)."""
    P = np.full((X.shape[0], len(labels)), 1e-6)
    P[:, [labels.index(c) for c in model.classes_]] = model.predict_proba(X)
    return np.log(np.clip(P, 1e-6, 1.0))


def out_of_fold(texts: list[str], y: list[str], labels: list[str], fit: Any, seed: int = 0) -> np.ndarray:
    """5-fold (fewer when a scope has fewer queries) out-of-fold log-probabilities of ``fit(idx) -> predict(idx)``."""
    from sklearn.model_selection import StratifiedKFold

    ya = np.array(y)
    k = min(5, int(np.unique(ya, return_counts=True)[1].min()))
    out = np.zeros((len(texts), len(labels)))
    for a, b in StratifiedKFold(k, shuffle=True, random_state=seed).split(texts, ya):
        out[b] = fit(a)(b)
    return out


def mix_scores(gold: list[str], router: np.ndarray, lexical: np.ndarray, labels: list[str]) -> list[float]:
    from learning_curve import scores

    return [scores(gold, [labels[i] for i in ((1 - a) * router + a * lexical).argmax(1)], labels)["macro_f1"]
            for a in WEIGHTS]


def log_loss(gold: list[str], router: np.ndarray, lexical: np.ndarray, labels: list[str]) -> list[float]:
    rows, cols = np.arange(len(gold)), [labels.index(g) for g in gold]
    out = []
    for a in WEIGHTS:
        z = (1 - a) * router + a * lexical
        z = z - z.max(1, keepdims=True)
        z = z - np.log(np.exp(z).sum(1, keepdims=True))
        out.append(round(float(-z[rows, cols].mean()), 4))
    return out


def run_cell(model: str, name: str, size: str, seed: int, emb: Any) -> dict[str, Any]:
    from learning_curve import load_builtin, lr_cv, sample_per_scope, tfidf_lr

    ds, pool, test = load_builtin(name, 100 if name == "20ng" else None)
    labels = ds.taxonomy.names
    train = sample_per_scope(pool, None if size == "all" else int(size), seed)
    x, y = [q.query for q in train], [q.scope for q in train]
    xte, yte = [q.query for q in test], [q.scope for q in test]
    t0 = time.perf_counter()
    if model == "probe":
        E, Ete = emb.encode(x, batch_size=64), emb.encode(xte, batch_size=64)
        held_x, held_y = x, y

        def fit_probe(a: np.ndarray) -> Any:
            m = lr_cv(E[a], [y[i] for i in a])
            return lambda b: log_proba(m, E[b], labels)
        held_r = out_of_fold(x, y, labels, fit_probe)
        test_r = log_proba(lr_cv(E, y), Ete, labels)
        regime = "5-fold"
    else:
        from masdr_router import TrainConfig, train_router

        cfg = TrainConfig.from_dict({**TrainConfig().to_dict(), "progress": False, "seed": seed})
        res = train_router(ds.taxonomy, train, None, cfg)
        held_q, held_p = res.held_out
        held_x, held_y = [q.query for q in held_q], [q.scope for q in held_q]
        held_r = np.log(np.clip(held_p, 1e-6, 1.0))
        test_r = np.log(np.clip(res.router.predict_proba(xte), 1e-6, 1.0))
        regime = f"{res.extra['regime']}/{res.extra['selection']['model']}"
    if len(held_x) < len(x):  # a carved-out validation split: TF-IDF on the rest, as the router was
        held = set(held_x)
        rest = [(q, s) for q, s in zip(x, y) if q not in held]
        vec, m = tfidf_lr([q for q, _ in rest], [s for _, s in rest])
        held_t = log_proba(m, vec.transform(held_x), labels)
    else:  # out of fold, on its own folds
        def fit(a: np.ndarray) -> Any:
            vec, m = tfidf_lr([held_x[i] for i in a], [held_y[i] for i in a])
            return lambda b: log_proba(m, vec.transform([held_x[i] for i in b]), labels)
        held_t = out_of_fold(held_x, held_y, labels, fit)
    vec, m = tfidf_lr(x, y)
    test_t = log_proba(m, vec.transform(xte), labels)
    f_held, nll_held = mix_scores(held_y, held_r, held_t, labels), log_loss(held_y, held_r, held_t, labels)
    f_test = mix_scores(yte, test_r, test_t, labels)
    k, kn, kt = int(np.argmax(f_held)), int(np.argmin(nll_held)), int(np.argmax(f_test))
    return {"dataset": name, "size": size, "seed": seed, "model": model, "regime": regime, "n_train": len(x),
            "n_held": len(held_x), "router": f_test[0], "tfidf": f_test[-1],
            "a_f1": float(WEIGHTS[k]), "mix_f1": f_test[k], "a_nll": float(WEIGHTS[kn]), "mix_nll": f_test[kn],
            "a_test": float(WEIGHTS[kt]), "mix_test": f_test[kt], "held_f1": f_held, "held_nll": nll_held,
            "test_f1": f_test, "seconds": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from masdr_router.datasets import DATASETS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["probe", "default"], default="probe")
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=["bbc", "composite"])
    ap.add_argument("--sizes", nargs="+", default=["8", "16", "32", "64", "all"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="default bench/results/lexical_mix_MODEL.json")
    args = ap.parse_args(argv)
    out = args.out or Path(f"bench/results/lexical_mix_{args.model}.json")
    warnings.filterwarnings("ignore", category=FutureWarning)  # sklearn's LogisticRegressionCV deprecations

    from masdr_router import Embedder

    emb = Embedder("minilm", device="cpu", max_length=64) if args.model == "probe" else None
    rows = json.loads(out.read_text())["results"] if out.exists() else []  # resumable
    done = {(r["dataset"], r["size"], r["seed"]) for r in rows}
    for name in args.datasets:
        for size in args.sizes:
            if (name, size, args.seed) in done:
                continue
            rows.append(run_cell(args.model, name, size, args.seed, emb))
            print(json.dumps({k: v for k, v in rows[-1].items() if not k.startswith(("held_", "test_"))}), flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps({"model": args.model, "results": rows}, indent=2))
            tmp.replace(out)
    print(f"\n| set | per scope | {args.model} | tfidf-lr | mix, a by held-out macro-F1 | by log-loss "
          "| mix − router | best a on test |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dataset']} | {r['size']} | {r['router']:.3f} | {r['tfidf']:.3f} | {r['mix_f1']:.3f} "
              f"(a {r['a_f1']}) | {r['mix_nll']:.3f} (a {r['a_nll']}) | {r['mix_f1'] - r['router']:+.3f} "
              f"| {r['mix_test']:.3f} (a {r['a_test']}) |")
    return {"results": rows}


if __name__ == "__main__":
    main()

"""Learning curves: the default `masdr train` against the baselines at 8, 16, 32, 64 and all
labelled queries per scope, on several real taxonomies.

For each data set the queries are split once (seeded, stratified 70/10/20, as `masdr data
prepare` does); the train+val queries are the labelled pool and the test queries are fixed. At
each size N, N queries per scope are drawn from the pool (seeded; a scope with fewer keeps all) and
every system trains on exactly those, with no separate validation file (as a new user runs
`masdr train` without --val): each system picks its own hyper-parameters by cross-validation on
its training sample. Scores are top-1 macro-F1 and accuracy on the test queries.

Systems:
- ``default``  : `masdr train` with the default TrainConfig
- ``corpus``   : `masdr train --corpus`: the default plus pseudo-queries from the set's corpus (`synth-queries`'
                 rule extractors, ``--corpus-per-scope`` a scope, the test queries held out), as TrainConfig mixes them
                 (``corpus_weight``, ``corpus_per_epoch``)
- ``legacy``   : the previous default (holdout split, random head, no probe guard, 12 epochs)
- ``probe``    : logistic regression on frozen MiniLM features (C by 3-fold CV)
- ``tfidf-lr`` : TF-IDF (1-2 grams) + logistic regression (C by 3-fold CV)
- ``centroid`` : nearest scope centroid of frozen MiniLM sentence embeddings
- ``setfit``   : SetFit with the same MiniLM encoder (when installed; its own regime is 8-64 per class)

    python bench/learning_curve.py --datasets bbc composite --sizes 8 16 32 64 all [--systems ...]
    python bench/learning_curve.py --report a.json b.json   # merge runs (sample seeds averaged) into one table
    python bench/learning_curve.py --report a.json b.json --plot curves.png   # ... and draw the curves
    python bench/learning_curve.py --data-root runs/data --datasets mine   # a prepared set: runs/data/mine/
    python bench/learning_curve.py --datasets bbc --sizes all --save-predictions   # then bench/error_overlap.py

``--data-root DIR`` reads each set from ``DIR/NAME/`` as `masdr data prepare` writes it (taxonomy.yaml,
train/val/test.jsonl: train+val is the pool, test the test split) instead of fetching it: your own
taxonomy, or a machine with no registry access (``bench/device_pack.py`` prepares such a folder for the
GPU machine). For the built-in sets, ``masdr data prepare NAME`` with the default seed writes exactly
the split this script would draw. The ``corpus`` system then reads ``DIR/NAME/pseudo_N.jsonl`` (N:
``--corpus-per-scope``), the pseudo-queries ``device_pack.py`` made from the set's corpus.

The report also shows ``+centroid``: what the default would score if its guard could also export the
nearest-centroid head (``frozen_heads: [probe, centroid]``). It is exact, not an estimate: the run
records every frozen head's held-out lead over LoRA and its bootstrap SE, the guard's choice follows
from them, and the centroid
head predicts exactly what the ``centroid`` baseline predicts (tests/test_training.py).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import random
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np

SYSTEMS = ("default", "legacy", "corpus", "probe", "tfidf-lr", "centroid", "setfit")
SETFIT_ITERATIONS = 20
SETFIT_MAX_STEPS = 600  # the cap every table in the README used, unless it says otherwise
LEGACY = {"regime": "holdout", "head_init": "random", "keep_probe": False, "min_steps": 0}


def scores(gold: list[str], pred: list[str], labels: list[str]) -> dict[str, float]:
    from sklearn.metrics import accuracy_score, f1_score

    return {"macro_f1": round(float(f1_score(gold, pred, labels=labels, average="macro", zero_division=0)), 4),
            "accuracy": round(float(accuracy_score(gold, pred)), 4)}


def sample_per_scope(pool: list[Any], n: int | None, seed: int) -> list[Any]:
    if n is None:
        return list(pool)
    rng = random.Random(seed)
    by: dict[str, list[Any]] = {}
    for q in pool:
        by.setdefault(q.scope, []).append(q)
    out = []
    for scope in sorted(by):
        qs = by[scope]
        out.extend(rng.sample(qs, min(n, len(qs))))
    rng.shuffle(out)
    return out


def lr_cv(X: Any, y: list[str]) -> Any:
    import warnings

    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV

    counts = {s: y.count(s) for s in set(y)}
    with warnings.catch_warnings():
        # scikit-learn 1.9 announces coming changes of default on every fit (FutureWarning), three per cell;
        # the fit is the same either way, and the package's own probe silences them likewise
        warnings.simplefilter("ignore", FutureWarning)
        if min(counts.values()) >= 3:
            return LogisticRegressionCV(Cs=[0.1, 0.3, 1, 3, 10, 30], cv=3, max_iter=3000,
                                        class_weight="balanced").fit(X, y)
        return LogisticRegression(C=1.0, max_iter=3000, class_weight="balanced").fit(X, y)


def tfidf_lr(texts: list[str], y: list[str]) -> tuple[Any, Any]:
    """The TF-IDF + LR baseline fitted: ``(vectorizer, classifier)`` (word 1-2 grams, sublinear tf, C by CV)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
    return vec, lr_cv(vec.fit_transform(texts), y)


def run_system(system: str, taxonomy: Any, train: list[Any], test: list[Any], ctx: dict[str, Any]) -> dict[str, Any]:
    labels = taxonomy.names
    xtr, ytr = [q.query for q in train], [q.scope for q in train]
    xte, yte = [q.query for q in test], [q.scope for q in test]
    t0 = time.perf_counter()
    extra: dict[str, Any] = {}
    if system in ("default", "legacy", "corpus"):
        from masdr_router import TrainConfig, train_router

        cfg = TrainConfig.from_dict({**TrainConfig().to_dict(), "progress": False,
                                     **(LEGACY if system == "legacy" else {}), **ctx["overrides"]})
        pseudo = ctx["pseudo"]() if system == "corpus" else []
        res = train_router(taxonomy, train, None, cfg, pseudo=pseudo)
        pred = res.router.predict(xte)
        sel = res.extra["selection"]
        extra = {"regime": res.extra["regime"], "model": sel["model"], "best_epoch": res.best_epoch,
                 "n_pseudo": len(pseudo), "corpus_weight": cfg.corpus_weight if pseudo else None,
                 "contrastive_steps": (sel.get("contrastive") or {}).get("contrastive_steps", 0),
                 "contrastive_weights": (sel.get("contrastive") or {}).get("contrastive_weights"),
                 # how many queries the stage paired (contrastive_rows: the labelled ones, or the pseudo-queries too)
                 "contrastive_queries": (sel.get("contrastive") or {}).get("contrastive_queries"),
                 # how the epochs were chosen (best / one_se / budget) and the WiSE-FT weight exported
                 "epoch_rule": sel.get("epoch_rule"), "alpha": sel.get("alpha"),
                 # the held-out curve the epoch count was chosen on
                 "held_out_by_epoch": {int(h["epoch"]): round(h.get("cv_macro_f1", h.get("val_macro_f1", 0.0)), 4)
                                       for h in res.history},
                 # held-out scores of every candidate: what another guard would have chosen
                 "held_out_macro_f1": {k.split("_")[0]: round(v, 4) for k, v in sel.items()
                                       if k.endswith(("_cv_macro_f1", "_val_macro_f1")) and isinstance(v, float)},
                 # each frozen head's held-out lead over LoRA and its bootstrap SE: what the guard decided on
                 "guard": sel.get("guard"), "guard_margin_se": sel.get("guard_margin_se"),
                 # the contrastive stage cross-validated against the run without it (contrastive_check)
                 "stage_check": sel.get("contrastive_check") or None,
                 # the probe with and without the corpus out of fold, and whether the corpus was kept (corpus_check)
                 "corpus_check": sel.get("corpus_check") or None}
    elif system == "tfidf-lr":
        vec, clf = tfidf_lr(xtr, ytr)
        pred = list(clf.predict(vec.transform(xte)))
    elif system in ("probe", "centroid"):
        emb = ctx["embedder"]
        etr = emb.encode(xtr, batch_size=64)
        ete = ctx["test_embeddings"]
        if system == "probe":
            pred = list(lr_cv(etr, ytr).predict(ete))
        else:
            cent = np.stack([etr[[i for i, y in enumerate(ytr) if y == s]].mean(0) if s in ytr
                             else np.zeros(etr.shape[1]) for s in labels])
            cent /= np.maximum(np.linalg.norm(cent, axis=1, keepdims=True), 1e-9)
            pred = [labels[i] for i in (ete @ cent.T).argmax(1)]
    elif system == "setfit":
        extra = {"setfit_seed": ctx["setfit_seed"], "setfit_max_steps": ctx["setfit_max_steps"]}
        pred = run_setfit(xtr, ytr, xte, seed=ctx["setfit_seed"], max_steps=ctx["setfit_max_steps"])
    else:
        raise ValueError(system)
    if ctx.get("save_predictions"):  # per query, for bench/error_overlap.py
        extra["predictions"] = [str(p) for p in pred]
    return {**scores(yte, pred, labels), "train_s": round(time.perf_counter() - t0, 1), **extra}


def run_setfit(xtr: list[str], ytr: list[str], xte: list[str], seed: int = 0,
               max_steps: int = SETFIT_MAX_STEPS) -> list[str]:
    from datasets import Dataset
    from setfit import SetFitModel, Trainer, TrainingArguments

    from masdr_router.retrieval.embedder import resolve_encoder_path

    model = SetFitModel.from_pretrained(resolve_encoder_path("minilm"))
    with __import__("tempfile").TemporaryDirectory() as tmp:
        # SetFit's own few-shot setting (20 pair iterations, one epoch), capped at max_steps (0: uncapped);
        # max_steps must not exceed one epoch's steps, since it overrides num_epochs and would repeat the pairs
        epoch_steps = math.ceil(2 * SETFIT_ITERATIONS * len(xtr) / 32)
        steps = min(max_steps, epoch_steps) if max_steps > 0 else epoch_steps
        args = TrainingArguments(output_dir=tmp, save_strategy="no", batch_size=32, num_epochs=1,
                                 num_iterations=SETFIT_ITERATIONS, max_steps=steps, seed=seed, report_to="none",
                                 show_progress_bar=False)
        Trainer(model=model, args=args, train_dataset=Dataset.from_dict({"text": xtr, "label": ytr})).train()
    return list(model.predict(xte))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from masdr_router.datasets import DATASETS  # --datasets names a built-in set, or argparse says which exist

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=["bbc", "composite"])
    ap.add_argument("--sizes", nargs="+", default=["8", "16", "32", "64", "all"])
    ap.add_argument("--systems", nargs="+", choices=SYSTEMS,
                    default=[s for s in SYSTEMS if s not in ("setfit", "corpus")])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-docs-per-scope", type=int, default=None, help="subsample the data sets (e.g. 20ng)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="TrainConfig override")
    ap.add_argument("--data-root", type=Path, default=None,
                    help="read each set from DATA_ROOT/NAME/ (a prepared data set) instead of fetching it")
    ap.add_argument("--out", type=Path, default=Path("bench/results/learning_curve.json"))
    ap.add_argument("--corpus-per-scope", type=int, default=1000,
                    help="system 'corpus': pseudo-queries a scope (synth-queries' per_scope, whose default is 1000)")
    ap.add_argument("--save-predictions", action="store_true",
                    help="keep every system's test predictions (and the test queries) for bench/error_overlap.py")
    ap.add_argument("--setfit-seed", type=int, default=0,
                    help="SetFit's own training seed (pairs, order, head); the sample is --seed's")
    ap.add_argument("--setfit-max-steps", type=int, default=SETFIT_MAX_STEPS,
                    help="cap on SetFit's pair-training steps (batch 32); 0: uncapped, one epoch of its 20 iterations")
    ap.add_argument("--report", nargs="+", type=Path, metavar="JSON",
                    help="only merge these results (several sample seeds are averaged) into a markdown table")
    ap.add_argument("--plot", type=Path, metavar="PNG",
                    help="also draw the learning curves (a panel per set, macro-F1 against labelled queries)")
    args = ap.parse_args(argv)

    def plot(rows: list[dict[str, Any]]) -> None:
        if args.plot:
            try:
                print(f"plot: {plot_learning_curves(rows, args.plot)}")
            except ValueError as e:  # every row an error: nothing to draw
                ap.error(str(e))

    if args.data_root is not None and "corpus" in args.systems:
        missing = [str(p) for name in args.datasets
                   if not (p := packed_pseudo_path(args.data_root, name, args.corpus_per_scope)).exists()]
        if missing:
            ap.error(f"system 'corpus' with --data-root reads the packed pseudo-queries, missing: {', '.join(missing)} "
                     "(python bench/device_pack.py packs them)")
    if args.report:
        reports = [json.loads(f.read_text()) for f in args.report]
        try:
            rows = merge([[{"seed": rep["seed"], "overrides": rep.get("overrides", []), **r} for r in rep["results"]]
                          for rep in reports])
        except ValueError as e:
            ap.error(str(e))
        print(markdown_table(rows))
        plot(rows)
        return {"results": rows}

    import torch

    from masdr_router import Embedder
    from masdr_router.atomic import write_text_atomic
    from masdr_router.training.run import parse_overrides

    report: dict[str, Any] = {"seed": args.seed, "machine": platform.platform(), "cpus": os.cpu_count(),
                              "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                              "overrides": args.set, "results": []}
    if args.out.exists():  # resume: keep finished cells
        # a failed system is tried again
        earlier = json.loads(args.out.read_text())
        report["results"] = [r for r in earlier.get("results", []) if "error" not in r]
        # a cell kept from a run with other settings would pass for this run's: refused, as --report refuses it
        for r in report["results"]:
            now = {"system": r["system"], "overrides": args.set, "setfit_seed": args.setfit_seed,
                   "setfit_max_steps": args.setfit_max_steps}
            if r["system"] in args.systems and variant({"overrides": earlier.get("overrides"), **r}) != variant(now):
                ap.error(f"{args.out} holds {r['dataset']} {r['size']} {r['system']} run as "
                         f"{variant({'overrides': earlier.get('overrides'), **r})}, not {variant(now)}; "
                         "write this run to another --out")
    done = {(r["dataset"], r["size"], r["system"]) for r in report["results"]}
    emb = Embedder("minilm", device="cpu", max_length=64)
    for name in args.datasets:
        taxonomy, pool, test = load_pool(name, args)
        ctx = {"embedder": emb, "test_embeddings": emb.encode([q.query for q in test], batch_size=64),
               "overrides": parse_overrides(args.set), "save_predictions": args.save_predictions,
               "setfit_seed": args.setfit_seed, "setfit_max_steps": args.setfit_max_steps,
               "pseudo": lambda name=name, taxonomy=taxonomy: pseudo_queries(name, taxonomy, args)}
        if args.save_predictions:
            report.setdefault("test", {})[name] = [{"query": q.query, "scope": q.scope} for q in test]
        for size in args.sizes:
            n = None if size == "all" else int(size)
            train = sample_per_scope(pool, n, args.seed)
            for system in args.systems:
                if (name, size, system) in done:
                    continue
                try:
                    result = run_system(system, taxonomy, train, test, ctx)
                except Exception as e:  # one failing system (e.g. a missing package) must not lose the other cells
                    result = {"error": f"{type(e).__name__}: {e}"[:500]}
                row = {"dataset": name, "size": size, "seed": args.seed, "n_train": len(train), "n_test": len(test),
                       "system": system, **result}
                print(json.dumps({k: v for k, v in row.items() if k != "predictions"}), flush=True)
                report["results"].append(row)
                write_text_atomic(args.out, json.dumps(report, indent=2))  # a killed run keeps the cells it finished
    print(markdown_table(report["results"]))
    plot(report["results"])
    return report


def load_pool(name: str, args: argparse.Namespace) -> tuple[Any, list[Any], list[Any]]:
    """``(taxonomy, labelled pool, test queries)`` of one set: fetched, or read from ``--data-root``."""
    from masdr_router.data import read_queries
    from masdr_router.taxonomy import Taxonomy

    if args.data_root is not None:
        d = args.data_root / name
        taxonomy = Taxonomy.from_yaml(d / "taxonomy.yaml")
        pool = read_queries(d / "train.jsonl", taxonomy) + read_queries(d / "val.jsonl", taxonomy)
        return taxonomy, pool, read_queries(d / "test.jsonl", taxonomy)
    ds, pool, test = load_builtin(name, args.max_docs_per_scope)
    return ds.taxonomy, pool, test


@functools.cache
def load_builtin(name: str, max_docs_per_scope: int | None) -> tuple[Any, list[Any], list[Any]]:
    """``(dataset, labelled pool, test queries)`` of a built-in set: the split every bench script
    shares (seeded, stratified 70/10/20; train+val is the pool). Loaded once per process: the pool,
    the corpus system and ``device_pack.py`` read the same set (callers never modify it)."""
    from masdr_router.datasets import load_dataset
    from masdr_router.datasets.splits import stratified_split

    ds = load_dataset(name, max_docs_per_scope=max_docs_per_scope, seed=0)
    split = stratified_split(ds.queries, val=0.1, test=0.2, seed=0)
    return ds, split["train"] + split["val"], split["test"]


def pseudo_queries(name: str, taxonomy: Any, args: argparse.Namespace) -> list[Any]:
    """The corpus system's pseudo-queries: made from the built-in set's corpus, or with
    ``--data-root`` (the GPU machine, where the corpora do not travel) read from what
    ``device_pack.py`` made of them the same way."""
    from masdr_router.data import read_queries

    if args.data_root is not None:
        return read_queries(packed_pseudo_path(args.data_root, name, args.corpus_per_scope), taxonomy)
    return list(corpus_pseudo(name, args.max_docs_per_scope, args.corpus_per_scope))


def packed_pseudo_path(data_root: Path, name: str, per_scope: int) -> Path:
    return data_root / name / f"pseudo_{per_scope}.jsonl"


@functools.cache
def corpus_pseudo(name: str, max_docs_per_scope: int | None, per_scope: int) -> tuple[Any, ...]:
    """Pseudo-queries from a built-in set's corpus, none leaking a test query (as `masdr train
    --corpus` makes them with ``--test``), made once per set; the pool's queries may coincide with
    some of them, as a user's labelled queries may with their own corpus."""
    from masdr_router.querygen import SynthConfig, synthesize_queries

    ds, _, test = load_builtin(name, max_docs_per_scope)
    return tuple(synthesize_queries(ds.taxonomy, ds.documents, config=SynthConfig(per_scope=per_scope),
                                    held_out=test).queries)


def variant(row: dict[str, Any]) -> tuple[Any, ...]:
    """What a row was run with beyond its cell: SetFit's seed and step cap, the trained systems'
    ``--set`` overrides (rows written before these were recorded ran with the defaults)."""
    if row["system"] == "setfit":
        return ("setfit seed", row.get("setfit_seed", 0), "max steps", row.get("setfit_max_steps", SETFIT_MAX_STEPS))
    if row["system"] in ("default", "legacy", "corpus"):
        return ("--set", *sorted(row.get("overrides") or []))
    return ()


def merge(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per (set, size, system, sample seed); a later file wins a rerun of the same variant.

    Two variants of one cell (SetFit capped and uncapped, the default with and without ``--set``)
    would silently replace each other in the table, so they are refused: report them apart.

    >>> a = {"dataset": "bbc", "size": "all", "system": "setfit", "seed": 0, "setfit_max_steps": 600}
    >>> len(merge([[a], [dict(a, macro_f1=0.9)]]))
    1
    >>> merge([[a], [dict(a, setfit_max_steps=0)]])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: bbc all setfit (sample seed 0) was run two ways: ... 600) and (... 0); report them separately
    """
    cells: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rows in runs:
        for r in rows:
            key = (r["dataset"], r["size"], r["system"], r.get("seed", 0))
            if key in cells and variant(cells[key]) != variant(r):
                raise ValueError(f"{key[0]} {key[1]} {key[2]} (sample seed {key[3]}) was run two ways: "
                                 f"{variant(cells[key])} and {variant(r)}; report them separately")
            cells[key] = r
    return list(cells.values())


def seed_mean(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean over sample seeds of one cell's rows (``seeds``: how many, ``sd``: macro-F1 spread)."""
    f1 = [r["macro_f1"] for r in rows]
    return {**rows[0], "macro_f1": float(np.mean(f1)), "accuracy": float(np.mean([r["accuracy"] for r in rows])),
            "train_s": float(np.mean([r["train_s"] for r in rows])), "seeds": len(rows),
            "sd": float(np.std(f1, ddof=1)) if len(rows) > 1 else 0.0,
            "model": "/".join(sorted({model_name(r) for r in rows}))}


def model_name(row: dict[str, Any]) -> str:
    """What the default exported: ``lora@E`` (E epochs of classification fine-tuning; 0: the probe
    on the contrastively tuned encoder; ``αA``: the weight-space ensemble with that probe at weight A;
    ``−stage``: the folds dropped the contrastive stage), ``probe`` or ``centroid``."""
    model = str(row.get("model", "?"))
    if model != "lora" or "best_epoch" not in row:
        return model
    alpha = row.get("alpha")
    dropped = " −stage" if (row.get("stage_check") or {}).get("kept") is False else ""
    return f"lora@{row['best_epoch']}" + (f" α{alpha:g}" if alpha is not None and alpha < 1 else "") + dropped


def with_centroid_guard(row: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The default's score had its guard been allowed the centroid head (None: not recorded)."""
    d, c = row.get("default"), row.get("centroid")
    guard = (d or {}).get("guard")
    if not guard or c is None or "centroid" not in guard:
        return None
    from masdr_router import TrainConfig
    from masdr_router.training.trainer import choose_export

    cfg = TrainConfig(frozen_heads=["probe", "centroid"], guard_margin_se=d.get("guard_margin_se") or 0.0)
    if choose_export(cfg, guard) == "centroid":
        return {**c, "model": "centroid"}
    return d  # the same choice as the run made: lora, or the probe


SIZE_ORDER = {"8": 0, "16": 1, "32": 2, "64": 3, "all": 4}


def cell_means(results: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    """Per (set, size) cell, every system's mean over the sample seeds it ran on (``seed_mean``),
    with ``+centroid`` (the default had its guard been allowed the centroid head) where recorded."""
    by_seed: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for r in results:
        if "error" in r:
            continue
        by_seed.setdefault((r["dataset"], r["size"]), {}).setdefault(r.get("seed", 0), {})[r["system"]] = r
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for key, seeds in by_seed.items():
        # the centroid-guard score per seed, then every system's mean over the seeds it has
        for row in seeds.values():
            cf = with_centroid_guard(row)
            if cf is not None:
                row["+centroid"] = cf
        systems = {s for row in seeds.values() for s in row}
        cells[key] = {s: seed_mean([row[s] for row in seeds.values() if s in row]) for s in systems}
    return cells


def plot_learning_curves(results: list[dict[str, Any]], path: Path) -> Path:
    """Draw :func:`learning_curve_figure` to ``path`` (PNG), atomically: a killed run never leaves
    a half-drawn figure."""
    import io

    from masdr_router.atomic import write_bytes_atomic

    png = io.BytesIO()
    learning_curve_figure(results).savefig(png, format="png", dpi=110)
    write_bytes_atomic(path, png.getvalue())
    return path


def learning_curve_figure(results: list[dict[str, Any]]) -> Any:
    """One panel per data set: test macro-F1 against the number of labelled training queries (log
    scale), a line per system, the mean over sample seeds with their spread as error bars; the
    default drawn on top. A table says who leads a cell; the curves show where the lead opens."""
    from masdr_router.extras import require

    require("matplotlib")
    from matplotlib.figure import Figure

    cells = cell_means(results)
    sets = sorted({ds for ds, _ in cells})
    if not sets:
        raise ValueError("no finished cell to plot: every row is an error")
    cols = min(3, len(sets))
    rows = math.ceil(len(sets) / cols)
    fig = Figure(figsize=(4.6 * cols, 3.6 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    systems = [s for s in SYSTEMS if any(s in c for c in cells.values())]
    for ax, ds in zip(axes, sets):
        sizes = sorted((size for d, size in cells if d == ds), key=lambda s: SIZE_ORDER.get(s, 9))
        for system in systems:
            pts = [cells[(ds, size)][system] for size in sizes if system in cells[(ds, size)]]
            if not pts:
                continue
            main = system in ("default", "corpus")
            ax.errorbar([p["n_train"] for p in pts], [p["macro_f1"] for p in pts], yerr=[p["sd"] for p in pts],
                        marker="o", ms=4 if main else 3, lw=2.2 if main else 1.0, capsize=2,
                        zorder=3 if main else 2, label=system, color=f"C{SYSTEMS.index(system)}")
        ax.set_xscale("log")
        # ticks at the cells themselves, "per scope (n)", rather than powers of ten between them
        ns = [next(iter(cells[(ds, size)].values()))["n_train"] for size in sizes]
        ax.set_xticks(ns, [f"{size}\n({n})" for size, n in zip(sizes, ns)], fontsize=8)
        ax.minorticks_off()
        ax.set_title(ds, fontsize=10)
        ax.set_xlabel("labelled queries: per scope (in all)")
        ax.set_ylabel("test macro-F1")
        ax.grid(alpha=0.3)
    for ax in axes[len(sets):]:
        ax.set_visible(False)
    legend: dict[str, Any] = {}  # a system missing from one panel still gets its entry
    for ax in axes[:len(sets)]:
        legend.update(zip(*reversed(ax.get_legend_handles_labels())))
    names = sorted(legend, key=SYSTEMS.index)
    fig.legend([legend[n] for n in names], names, loc="outside lower center", ncols=len(names), fontsize=8)
    return fig


def markdown_table(results: list[dict[str, Any]]) -> str:
    cells = cell_means(results)
    baselines = [s for s in SYSTEMS if s not in ("default", "legacy", "corpus")]
    out = ["| set | per scope (n) | default: macro-F1 (acc), time, model | " + " | ".join(baselines)
           + " | default − best baseline | +centroid |", "|" + "---|" * (len(baselines) + 5)]
    for (ds, size), row in sorted(cells.items(), key=lambda kv: (kv[0][0], SIZE_ORDER.get(kv[0][1], 9))):
        if "default" not in row:
            continue
        d = row["default"]
        base = {s: row[s] for s in baselines if s in row}
        best = max(base, key=lambda s: base[s]["macro_f1"]) if base else None
        cf = row.get("+centroid")
        cols = [f"**{base[s]['macro_f1']:.3f}** ({base[s]['accuracy']:.3f})" if s == best
                else f"{base[s]['macro_f1']:.3f} ({base[s]['accuracy']:.3f})" if s in base else "–" for s in baselines]
        delta = f"{d['macro_f1'] - base[best]['macro_f1']:+.3f}" if best else "–"
        cf_cell = ("–" if cf is None or cf["seeds"] != d["seeds"] else "same" if cf["macro_f1"] == d["macro_f1"]
                   else f"{cf['macro_f1']:.3f}")
        seeds = f", mean of {d['seeds']} samples ± {d['sd']:.3f}" if d["seeds"] > 1 else ""
        out.append(f"| {ds} | {size} ({d['n_train']}) | {d['macro_f1']:.3f} ({d['accuracy']:.3f}){seeds}, "
                   f"{d['train_s']:.0f} s, {d.get('regime', '?')}/{d.get('model', '?')} | " + " | ".join(cols)
                   + f" | {delta} | {cf_cell} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()

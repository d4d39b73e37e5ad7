"""A new taxonomy, as a new user meets it: what the default router does to retrieval, and how far a
router trained on the corpus alone (no labelled query) gets.

For each data set, on the split `masdr data prepare` writes (seeded, stratified 70/10/20):

``retrieval``: build the index (cached under --work), train the default router on train (val given,
as the demo does), choose its threshold for retrieval on val exactly as `masdr train --index` does,
and compare on the test queries, both recall guards on (``global_head=1``, ``global_in_scope``):
global search, the router at the classification threshold (0.95 accuracy when answered), the router
at the threshold chosen for retrieval, ``+vote`` with its stored threshold and weight, and the
oracle scope. P@10 and R@10.

``retrieval-small`` (32 labelled queries per scope, no val file) and ``retrieval-cv`` (every train+val
query, the cross-validated regime forced): the thresholds are fitted on out-of-fold predictions
instead of the val split.

``coldstart``: pseudo-queries from the corpus (`masdr synth-queries`, none leaking val or test), a
router trained on them alone (`masdr train --corpus C` without --train), against the regex router,
the zero-shot LLM router on the embedded llama.cpp server (constrained choice) and the router trained
on the labelled queries, and each trained router behind the rules (`regex,DIR@0`: the rules, else its
top scope), on the same seeded sample of test queries: top-1 macro-F1 and accuracy.

    python bench/new_taxonomy.py --datasets bbc 20ng composite django-docs sqlalchemy-docs \
        [--parts retrieval coldstart] [--llm-queries 150] [--per-scope 300]

Resumable: finished (data set, part) cells are kept in the JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

MAX_DOCS = {"20ng": 100}  # 20 Newsgroups at 100 posts a group keeps a CPU run in hours, not days


def load(name: str) -> tuple[Any, dict[str, list[Any]]]:
    from masdr_router.datasets import load_dataset
    from masdr_router.datasets.splits import stratified_split

    ds = load_dataset(name, max_docs_per_scope=MAX_DOCS.get(name), seed=0)
    return ds, stratified_split(ds.queries, val=0.1, test=0.2, seed=0)


def get_index(ds: Any, work: Path) -> Any:
    from masdr_router.retrieval.index import ScopedIndex

    path = work / f"{ds.name}-index"
    if (path / "manifest.json").is_file():
        return ScopedIndex.load(path, taxonomy=ds.taxonomy)
    index = ScopedIndex.build(ds.taxonomy, ds.documents, progress=True)
    index.save(path, overwrite=True)
    return index


def labelled_router(ds: Any, split: dict[str, list[Any]], work: Path, cfg: Any,
                    suffix: str = "") -> tuple[Path, dict[str, Any], float]:
    """The router ``cfg`` trains on the labelled train split (val given), cached under --work as
    ``DATASET-router{suffix}``."""
    from masdr_router.training.trainer import train_router

    path = work / f"{ds.name}-router{suffix}"
    meta = path / "bench.json"
    if meta.is_file():
        info = json.loads(meta.read_text())
        return path, info["result"], info["train_s"]
    t0 = time.perf_counter()
    res = train_router(ds.taxonomy, split["train"], split["val"], cfg)
    train_s = time.perf_counter() - t0
    res.router.save_pretrained(path, overwrite=True)
    result = {"regime": res.extra.get("regime"), "model": res.extra.get("selection", {}).get("model"),
              "classification_threshold": res.router.threshold}
    meta.write_text(json.dumps({"result": result, "train_s": train_s}))
    return path, result, train_s


def part_retrieval(ds: Any, split: dict[str, list[Any]], work: Path, cfg: Any, k: int,
                   per_scope: int | None = None, pooled: bool = False, suffix: str = "") -> dict[str, Any]:
    """With ``per_scope``: the small-data case a new agency starts in -- that many labelled queries
    per scope from train+val, no validation file (so the cross-validated regime), the thresholds
    fitted on the out-of-fold predictions, exactly as `masdr train --index` does without --val.
    With ``pooled``: every train+val query, the cross-validated regime forced (``regime: cv``), so
    the thresholds are fitted on out-of-fold predictions for all of them, not on the val split."""
    from masdr_router import SearchConfig, evaluate_router
    from masdr_router.routers.lora import LoraRouter
    from masdr_router.training.thresholds import fit_retrieval_thresholds
    from masdr_router.training.trainer import train_router

    index = get_index(ds, work)
    search = SearchConfig(global_head=1, global_in_scope=True)
    t0 = time.perf_counter()
    chosen: dict[str, Any] = {}
    if per_scope is None and not pooled:
        path, info, train_s = labelled_router(ds, split, work, cfg, suffix)
        router = LoraRouter.from_pretrained(path, taxonomy=ds.taxonomy)
        held, cls_threshold = split["val"], info["classification_threshold"]
        probs = router.predict_proba([q.query for q in held])
        regime = info.get("regime")
    else:
        from learning_curve import sample_per_scope

        train = sample_per_scope(split["train"] + split["val"], per_scope, seed=0)
        res = train_router(ds.taxonomy, train, None, dataclasses.replace(cfg, regime="cv") if pooled else cfg)
        train_s = time.perf_counter() - t0
        router, (held, probs) = res.router, res.held_out
        cls_threshold, regime = router.threshold, res.extra["regime"]
        sel = res.extra.get("selection", {})
        chosen = {"model": sel.get("model"), "best_epoch": res.best_epoch, "epoch_rule": sel.get("epoch_rule"),
                  "alpha": sel.get("alpha")}
    t0 = time.perf_counter()
    fit = fit_retrieval_thresholds(index, held, probs, search=search, k=k)
    fit_s = time.perf_counter() - t0
    systems = compare_thresholds(index, router, cls_threshold, fit, split["test"], search, k)
    top1 = evaluate_router(router, split["test"])  # the regimes' classification quality, next to retrieval
    return {"k": k, "n_test": len(split["test"]), "n_held_out": len(held), "per_scope": per_scope,
            "regime": regime, **chosen, "train_s": round(train_s, 1), "fit_s": round(fit_s, 1),
            "top1_macro_f1": top1["top1_macro_f1"], "top1_accuracy": top1["top1_accuracy"],
            "thresholds": {"classification": cls_threshold, "retrieval": fit["router"]["threshold"],
                           "vote": fit["vote"]["threshold"], "vote_beta": fit["vote"]["beta"]},
            "systems": systems}


def compare_thresholds(index: Any, router: Any, cls_threshold: float, fit: dict[str, Any], test: list[Any],
                       search: Any, k: int) -> dict[str, Any]:
    """Global, the router at each threshold, +vote with its fitted threshold and weight, oracle."""
    import copy

    from masdr_router.evaluation.retrieval import evaluate_retrieval
    from masdr_router.routers.vote import RetrievalVoteRouter

    cls, ret = copy.copy(router), copy.copy(router)  # shallow: one model, two thresholds
    cls.threshold, ret.threshold = cls_threshold, fit["router"]["threshold"]
    vote = RetrievalVoteRouter(ret, index, threshold=fit["vote"]["threshold"], beta=fit["vote"]["beta"], search=search)
    rep = evaluate_retrieval(index, test, {"router@classification": cls, "router@retrieval": ret,
                                           "router+vote": vote, "global": _named(index, "global"),
                                           "oracle": _named(index, "oracle")}, k=k, cfg=search)
    return {name: {key: s[key] for key in ("p_at_k", "r_at_k", "routed_rate", "routing_accuracy",
                                           "searched_fraction")} for name, s in rep["systems"].items()}


def _named(index: Any, name: str) -> Any:
    from masdr_router.routers.spec import build_router

    return build_router(name, index=index)


def part_coldstart(ds: Any, split: dict[str, list[Any]], work: Path, cfg: Any,
                   args: argparse.Namespace) -> dict[str, Any]:
    from masdr_router import evaluate_router
    from masdr_router.llm.client import LLMClient
    from masdr_router.llm.config import LLMConfig
    from masdr_router.llm.server import LocalLLMServer
    from masdr_router.querygen import SynthConfig, synthesize_queries
    from masdr_router.routers.cascade import CascadeRouter, Stage
    from masdr_router.routers.lora import LoraRouter
    from masdr_router.routers.regex import RegexRouter
    from masdr_router.routers.spec import build_router
    from masdr_router.training.trainer import train_router

    t0 = time.perf_counter()
    synth = synthesize_queries(ds.taxonomy, ds.documents, config=SynthConfig(per_scope=args.per_scope),
                               held_out=[*split["val"], *split["test"]])
    synth_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    cold = train_router(ds.taxonomy, [], None, cfg, pseudo=synth.queries)
    cold_s = time.perf_counter() - t0
    path, _, labelled_s = labelled_router(ds, split, work, cfg)
    labelled = LoraRouter.from_pretrained(path, taxonomy=ds.taxonomy)
    # test files are grouped by scope: a seeded sample keeps every scope
    sample = random.Random(0).sample(split["test"], min(args.llm_queries, len(split["test"])))
    rows: dict[str, Any] = {}

    def row(name: str, router: Any, train_s: float | None) -> None:
        rep = evaluate_router(router, sample)
        rows[name] = {"macro_f1": rep["top1_macro_f1"], "accuracy": rep["top1_accuracy"],
                      "abstain_rate": rep["abstain_rate"], "train_s": None if train_s is None else round(train_s, 1),
                      "llm_calls_per_query": rep["llm_calls_per_query"]}
        print(ds.name, name, rows[name], flush=True)

    row("regex", build_router("regex", taxonomy=ds.taxonomy), None)
    row("corpus-only", cold.router, cold_s)
    row("labelled", labelled, labelled_s)
    # the rules first, else the classifier's top scope (`regex,DIR@0`): where the scopes differ in form
    # more than in subject (pytest-docs) the rules and the classifier make different mistakes
    for name, router in (("regex,corpus-only@0", cold.router), ("regex,labelled@0", labelled)):
        row(name, CascadeRouter(ds.taxonomy, [Stage(RegexRouter(ds.taxonomy)), Stage(router, 0.0)]), None)
    if not args.no_llm:
        with LocalLLMServer() as srv:
            client = LLMClient(LLMConfig(base_url=srv.base_url, timeout_s=300, concurrency=2))
            row("llm-zero-shot", build_router("llm", taxonomy=ds.taxonomy, llm=client), None)
    return {"n_sample": len(sample), "n_pseudo": len(synth.candidates), "per_scope": args.per_scope,
            "synth_s": round(synth_s, 1), "dropped": synth.report.get("dropped"),
            "n_labelled": len(split["train"]), "systems": rows}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from masdr_router.datasets import DATASETS  # --datasets names a built-in set, or argparse says which exist

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS),
                    default=["bbc", "20ng", "composite", "django-docs", "sqlalchemy-docs"])
    ap.add_argument("--parts", nargs="+", default=["retrieval", "coldstart"],
                    choices=["retrieval", "retrieval-small", "retrieval-cv", "coldstart"])
    ap.add_argument("--small-per-scope", type=int, default=32,
                    help="labelled queries per scope for the retrieval-small part (no validation file)")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--llm-queries", type=int, default=150, help="test queries sampled for the cold-start rows")
    ap.add_argument("--no-llm", action="store_true", help="skip the zero-shot LLM row")
    ap.add_argument("--per-scope", type=int, default=300, help="pseudo-queries per scope for the corpus-only router")
    ap.add_argument("--work", type=Path, default=Path("runs/bench"), help="indexes and routers are cached here")
    ap.add_argument("--out", type=Path, default=Path("bench/results/new_taxonomy.json"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="TrainConfig override (e.g. cv_choice=budget); the cells and cached routers are "
                         "keyed by the overrides, so a comparison with the default sits in the same JSON")
    args = ap.parse_args(argv)

    from masdr_router import TrainConfig
    from masdr_router.training.run import parse_overrides

    overrides = parse_overrides(args.set)
    cfg = TrainConfig.from_dict({**TrainConfig().to_dict(), "progress": False, "device": "cpu", **overrides})
    tag = "[" + ",".join(f"{k}={v}" for k, v in overrides.items()) + "]" if overrides else ""
    report: dict[str, Any] = {"machine": platform.platform(), "cpus": os.cpu_count(), "results": {}}
    if args.out.exists():
        report["results"] = json.loads(args.out.read_text()).get("results", {})
    args.work.mkdir(parents=True, exist_ok=True)
    for name in args.datasets:
        ds, split = load(name)
        for part in args.parts:
            key = f"{name}/{part}" + (f"@{args.small_per_scope}" if part == "retrieval-small" else "") + tag
            if key in report["results"]:
                continue
            print(f"== {key}", flush=True)
            t0 = time.perf_counter()
            if part == "coldstart":
                res = part_coldstart(ds, split, args.work, cfg, args)
            else:
                res = part_retrieval(ds, split, args.work, cfg, args.k,
                                     args.small_per_scope if part == "retrieval-small" else None,
                                     pooled=part == "retrieval-cv", suffix=tag)
            res["wall_s"] = round(time.perf_counter() - t0, 1)
            print(json.dumps({key: res}), flush=True)
            report["results"][key] = res
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=2))
    print_tables(report["results"])
    return report


def print_tables(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(title="routed retrieval on the test queries (P@10 / R@10), both recall guards on")
    cols = ["global", "router@classification", "router@retrieval", "router+vote", "oracle"]
    for c in ["set", *cols]:
        t.add_column(c, justify="left" if c == "set" else "right")
    for key, r in results.items():
        if "/retrieval" in key:
            label = key.split("/")[0] + (f" ({r['per_scope']}/scope)" if r.get("per_scope") else
                                         " (cv, out-of-fold fit)" if key.endswith("retrieval-cv") else "")
            t.add_row(label, *(f"{r['systems'][c]['p_at_k']:.3f} / {r['systems'][c]['r_at_k']:.3f}" for c in cols))
    console.print(t)
    t = Table(title="cold start: top-1 macro-F1 (accuracy) on a test sample")
    cols = ["regex", "llm-zero-shot", "corpus-only", "labelled", "regex,corpus-only@0", "regex,labelled@0"]
    for c in ["set", "n", *cols]:
        t.add_column(c, justify="left" if c == "set" else "right")
    for key, r in results.items():
        if key.endswith("/coldstart"):
            s = r["systems"]
            t.add_row(key.split("/")[0], str(r["n_sample"]), *(f"{s[c]['macro_f1']:.3f} ({s[c]['accuracy']:.3f})"
                                                               if c in s else "-" for c in cols))
    console.print(t)


if __name__ == "__main__":
    main()

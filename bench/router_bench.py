"""Router benchmark: our LoRA router against the usual baselines, same data, same splits.

Systems (all trained on the same train split; hyper-parameters of the baselines picked on the
same validation split; all scored on the same test split):

- ``lora``        : masdr_router's trained LoRA router (MiniLM + LoRA, default TrainConfig)
- ``lora-onnx``   : the same router exported to ONNX and served by onnxruntime (no torch)
- ``tfidf-lr``    : TF-IDF (1-2 grams) + logistic regression
- ``minilm-lr``   : logistic regression on frozen MiniLM sentence embeddings
- ``centroid``    : nearest scope centroid of frozen MiniLM embeddings (semantic-router style)
- ``setfit``      : SetFit with the same MiniLM encoder (when the setfit package is installed)

Macro-F1 and accuracy are top-1 (no abstention) so every system is scored on every query; the
LoRA router's abstention rate and accuracy-when-answered at its calibrated threshold are reported
next to them.

    python bench/router_bench.py [--datasets bbc 20ng composite] [--max-docs-per-scope N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np


def _scores(gold: list[str], pred: list[str], labels: list[str]) -> dict[str, float]:
    from sklearn.metrics import accuracy_score, f1_score

    return {"accuracy": round(float(accuracy_score(gold, pred)), 4),
            "macro_f1": round(float(f1_score(gold, pred, labels=labels, average="macro", zero_division=0)), 4)}


def _latency(predict_one, texts: list[str], n: int = 100) -> float:
    predict_one(texts[0])
    ts = []
    for t in texts[:n]:
        t0 = time.perf_counter()
        predict_one(t)
        ts.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(ts), 3)


def _throughput(predict_many, texts: list[str]) -> float:
    t0 = time.perf_counter()
    for i in range(0, len(texts), 64):
        predict_many(texts[i:i + 64])
    return round(len(texts) / (time.perf_counter() - t0), 1)


def _pick_c(make, Xtr, ytr, Xva, yva, labels):
    best = None
    for c in (0.3, 1.0, 3.0, 10.0, 30.0):
        clf = make(c).fit(Xtr, ytr)
        f1 = _scores(list(yva), list(clf.predict(Xva)), labels)["macro_f1"]
        if best is None or f1 > best[0]:
            best = (f1, c)
    return best[1]


def bench_dataset(name: str, max_docs: int | None, args: argparse.Namespace) -> dict[str, Any]:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    from masdr_router import Embedder, TrainConfig, train_router
    from masdr_router.datasets import load_dataset
    from masdr_router.datasets.splits import stratified_split

    ds = load_dataset(name, max_docs_per_scope=max_docs, seed=0)
    split = stratified_split(ds.queries, val=0.1, test=0.2, seed=0)  # the same split `data prepare` writes
    labels = ds.taxonomy.names
    tr, va, te = split["train"], split["val"], split["test"]
    xtr, xva, xte = ([q.query for q in s] for s in (tr, va, te))
    ytr, yva, yte = ([q.scope for q in s] for s in (tr, va, te))
    rows: dict[str, dict[str, Any]] = {}
    print(f"== {name}: {len(tr)} train / {len(va)} val / {len(te)} test queries, {len(labels)} scopes", flush=True)

    # --- ours ---
    from masdr_router.training.run import parse_overrides

    cfg = TrainConfig.from_dict({**TrainConfig().to_dict(), "progress": False, **parse_overrides(args.set)})
    t0 = time.perf_counter()
    res = train_router(ds.taxonomy, tr, va, cfg)
    train_s = time.perf_counter() - t0
    router = res.router
    pred = router.predict(xte)
    decisions = router.route_batch(xte)
    answered = [i for i, d in enumerate(decisions) if not d.abstained]
    rows["lora"] = {**_scores(yte, pred, labels), "train_s": round(train_s, 1),
                    "p50_ms": _latency(router.route, xte), "throughput_qps": _throughput(router.route_batch, xte),
                    "abstain_rate": round(1 - len(answered) / len(te), 4),
                    "accuracy_when_answered": round(float(np.mean([decisions[i].scope == yte[i] for i in answered])), 4)
                    if answered else None, "epochs_run": len(res.history), "best_epoch": res.best_epoch}
    print("lora", rows["lora"], flush=True)

    # --- the same router served by onnxruntime (no torch at serving time) ---
    if not args.no_onnx:
        import tempfile

        from masdr_router.routers.lora import LoraRouter
        from masdr_router.training.onnx_export import export_onnx

        with tempfile.TemporaryDirectory() as tmp:
            folder = router.save_pretrained(f"{tmp}/router")
            export_onnx(folder, xte[:32])
            onnx_router = LoraRouter.from_pretrained(folder, runtime="onnx")
            rows["lora-onnx"] = {**_scores(yte, onnx_router.predict(xte), labels), "train_s": round(train_s, 1),
                                 "p50_ms": _latency(onnx_router.route, xte),
                                 "throughput_qps": _throughput(onnx_router.route_batch, xte)}
        print("lora-onnx", rows["lora-onnx"], flush=True)

    # --- TF-IDF + LR ---
    t0 = time.perf_counter()
    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1)
    Xtr, Xva, Xte = vec.fit_transform(xtr), vec.transform(xva), vec.transform(xte)

    def make_lr(c: float) -> LogisticRegression:
        return LogisticRegression(C=c, max_iter=2000, class_weight="balanced")

    c = _pick_c(make_lr, Xtr, ytr, Xva, yva, labels)
    clf = make_lr(c).fit(Xtr, ytr)
    rows["tfidf-lr"] = {**_scores(yte, list(clf.predict(Xte)), labels), "train_s": round(time.perf_counter() - t0, 1),
                        "p50_ms": _latency(lambda t: clf.predict(vec.transform([t])), xte),
                        "throughput_qps": _throughput(lambda b: clf.predict(vec.transform(b)), xte), "C": c}
    print("tfidf-lr", rows["tfidf-lr"], flush=True)

    # --- frozen MiniLM embeddings: LR and centroid ---
    emb = Embedder("minilm", device="cpu", max_length=64)
    t0 = time.perf_counter()
    Etr, Eva, Ete = (emb.encode(x, batch_size=64) for x in (xtr, xva, xte))
    embed_s = time.perf_counter() - t0
    embed_train_s = embed_s * len(xtr) / (len(xtr) + len(xva) + len(xte))
    t0 = time.perf_counter()
    c = _pick_c(make_lr, Etr, ytr, Eva, yva, labels)
    lr2 = make_lr(c).fit(Etr, ytr)
    rows["minilm-lr"] = {**_scores(yte, list(lr2.predict(Ete)), labels),
                         "train_s": round(time.perf_counter() - t0 + embed_train_s, 1),
                         "p50_ms": _latency(lambda t: lr2.predict(emb.encode([t])), xte),
                         "throughput_qps": _throughput(lambda b: lr2.predict(emb.encode(b)), xte), "C": c}
    print("minilm-lr", rows["minilm-lr"], flush=True)
    cent = np.stack([Etr[[i for i, y in enumerate(ytr) if y == s]].mean(0) if s in ytr else np.zeros(Etr.shape[1])
                     for s in labels])
    cent /= np.maximum(np.linalg.norm(cent, axis=1, keepdims=True), 1e-9)

    def centroid(texts: list[str]) -> list[str]:
        return [labels[i] for i in (emb.encode(texts) @ cent.T).argmax(1)]

    rows["centroid"] = {**_scores(yte, [labels[i] for i in (Ete @ cent.T).argmax(1)], labels),
                        "train_s": round(embed_train_s, 1),
                        "p50_ms": _latency(lambda t: centroid([t]), xte), "throughput_qps": _throughput(centroid, xte)}
    print("centroid", rows["centroid"], flush=True)

    # --- zero-shot LLM and cascades, on the embedded llama.cpp server (a subsample: ~1-3 s a call) ---
    if args.llm:
        import random

        sample = random.Random(0).sample(te, min(args.llm_queries, len(te)))  # test files are grouped by scope
        for engine in args.llm_engine:
            rows.update(bench_llm(ds.taxonomy, router, sample, labels, engine))

    # --- SetFit, same encoder ---
    if not args.no_setfit:
        try:
            import setfit  # noqa: F401
        except ImportError:
            rows["setfit"] = {"skipped": "setfit is not installed (pip install setfit)"}
        else:
            rows["setfit"] = bench_setfit(xtr, ytr, xte, yte, labels, args)
            print("setfit", rows["setfit"], flush=True)
    return {"dataset": name, "max_docs_per_scope": max_docs, "n_train": len(tr), "n_val": len(va), "n_test": len(te),
            "scopes": len(labels), "systems": rows}


def bench_llm(taxonomy, lora, test, labels, engine: str = "llama.cpp") -> dict[str, dict[str, Any]]:
    import contextlib
    import tempfile

    from masdr_router import build_systems, evaluate_router
    from masdr_router.llm.client import LLMClient
    from masdr_router.llm.config import LLMConfig

    rows = {}
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        if engine == "vllm":  # the development vLLM serving the same SmolLM2-135M
            from masdr_router.llm.vllm_server import VLLMServer

            srv = stack.enter_context(VLLMServer())
            client = LLMClient(LLMConfig(base_url=srv.base_url, model=srv.model, dialect="vllm", timeout_s=300,
                                         concurrency=2))
        else:
            from masdr_router.llm.server import LocalLLMServer

            srv = stack.enter_context(LocalLLMServer())
            client = LLMClient(LLMConfig(base_url=srv.base_url, timeout_s=300, concurrency=2))
        # the systems are router specs, exactly as `masdr eval router --router SPEC` builds them
        lora_dir = lora.save_pretrained(f"{tmp}/lora")
        systems = build_systems(["llm", "llm-logprobs", "regex,llm", f"regex,{lora_dir},llm"], taxonomy=taxonomy,
                                llm=client)
        names = {"llm": "llm-zero-shot", "llm-logprobs": "llm-logprobs", "regex,llm": "cascade regex>llm",
                 "regex,lora,llm": "cascade regex>lora>llm"}
        for spec_name, (r, _) in systems.items():
            name = names[spec_name] + ("" if engine == "llama.cpp" else f" ({engine})")
            rep = evaluate_router(r, test)
            rows[name] = {"accuracy": rep["accuracy"], "macro_f1": rep["macro_f1"], "train_s": 0.0,
                          "p50_ms": rep["latency_ms"]["p50"], "throughput_qps": rep["throughput_qps"],
                          "abstain_rate": rep["abstain_rate"], "accuracy_when_answered": rep["accuracy_when_answered"],
                          "ece": rep["ece"], "llm_calls_per_query": rep["llm_calls_per_query"],
                          "decided_by": rep["decided_by"], "n_queries": len(test)}
            print(name, rows[name], flush=True)
    return rows


def bench_setfit(xtr, ytr, xte, yte, labels, args) -> dict[str, Any]:
    from datasets import Dataset
    from setfit import SetFitModel, Trainer, TrainingArguments

    from masdr_router.retrieval.embedder import resolve_encoder_path

    t0 = time.perf_counter()
    model = SetFitModel.from_pretrained(resolve_encoder_path("minilm"), labels=labels)
    # SetFit's default output_dir is ./checkpoints, which would drop its trainer state into our
    # artifact folder; keep it under the bench output and save nothing.
    targs = TrainingArguments(output_dir=str(args.out / "setfit-tmp"), save_strategy="no", batch_size=32,
                              num_epochs=1, num_iterations=args.setfit_iterations,
                              max_steps=args.setfit_max_steps, seed=0, report_to="none", show_progress_bar=False)
    trainer = Trainer(model=model, args=targs, train_dataset=Dataset.from_dict({"text": xtr, "label": ytr}))
    trainer.train()
    train_s = time.perf_counter() - t0
    pred = [str(p) for p in model.predict(xte)]
    return {**_scores(yte, pred, labels), "train_s": round(train_s, 1),
            "p50_ms": _latency(lambda t: model.predict([t]), xte),
            "throughput_qps": _throughput(lambda b: model.predict(b), xte),
            "num_iterations": args.setfit_iterations, "max_steps": args.setfit_max_steps}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from masdr_router.datasets import DATASETS  # --datasets names a built-in set, or argparse says which exist

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=["bbc", "20ng", "composite"])
    ap.add_argument("--max-docs-per-scope", type=int, nargs="+", default=None,
                    help="one value per data set (0 = all); default: all for bbc/composite, 300 for 20ng")
    ap.add_argument("--set", action="append", default=[], help="TrainConfig override for the LoRA router, k=v")
    ap.add_argument("--no-setfit", action="store_true")
    ap.add_argument("--no-onnx", action="store_true", help="skip the onnxruntime row of the LoRA router")
    ap.add_argument("--llm", action="store_true", help="also the zero-shot LLM router and cascades (embedded server)")
    ap.add_argument("--llm-queries", type=int, default=100, help="test queries for the LLM rows")
    ap.add_argument("--llm-engine", nargs="+", default=["llama.cpp"], choices=["llama.cpp", "vllm"],
                    help="servers for the LLM rows: the embedded llama.cpp and/or the development vLLM")
    ap.add_argument("--setfit-iterations", type=int, default=5)
    ap.add_argument("--setfit-max-steps", type=int, default=600)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)
    defaults = {"bbc": None, "20ng": 300, "composite": None}
    limits = args.max_docs_per_scope or [defaults.get(d) for d in args.datasets]
    results = [bench_dataset(d, (m or None), args) for d, m in zip(args.datasets, limits)]

    import torch
    from rich.console import Console
    from rich.table import Table

    t = Table(title="router benchmark (test split; top-1 accuracy and macro-F1)")
    for c in ("data set", "system", "accuracy", "macro-F1", "train s", "p50 ms", "QPS", "abstain", "acc answered",
              "LLM calls/q"):
        t.add_column(c, justify="left" if c in ("data set", "system") else "right")
    for r in results:
        for name, s in r["systems"].items():
            if "skipped" in s:
                t.add_row(r["dataset"], name, "-", "-", "-", "-", "-", "-", s["skipped"], "-")
                continue
            t.add_row(r["dataset"], name, f"{s['accuracy']:.3f}", f"{s['macro_f1']:.3f}", f"{s['train_s']:.1f}",
                      f"{s['p50_ms']:.2f}", f"{s['throughput_qps']:.0f}",
                      f"{100 * s['abstain_rate']:.1f}%" if "abstain_rate" in s else "-",
                      f"{s['accuracy_when_answered']:.3f}" if s.get("accuracy_when_answered") else "-",
                      f"{s['llm_calls_per_query']:.2f}" if "llm_calls_per_query" in s else "0")
    Console().print(t)
    out = {"benchmark": "router", "results": results,
           "machine": {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count(),
                       "torch": torch.__version__, "torch_threads": torch.get_num_threads()}}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "router.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")
    return out


if __name__ == "__main__":
    main()

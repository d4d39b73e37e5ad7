"""Does the corpus help a router that has few labelled queries, and at what weight?

`masdr train --corpus C` mixes pseudo-queries made from the corpus (`masdr synth-queries`) into the
labelled queries, each weighing ``corpus_weight`` in the loss (0.1 since this measurement; it was
0.3). Fine-tuning with them costs a full training per cell (hours on 2 CPU cores across sets and
sizes), so this measures the mixing where it is cheap and exact: the router's own linear probe
(``fit_probe``, the head the default starts from and its guard's candidate, which sees the pseudo-
queries the same way) on frozen MiniLM embeddings, on the learning curve's samples (same pools, test
splits and per-scope draws as ``bench/learning_curve.py``), at 8, 16, 32, 64 and all labelled
queries per scope, for several weights, against the labelled queries alone and the corpus alone.

Two kinds of pseudo-queries, both with the test queries held out (contamination check):
- ``all``: every rule extractor, `synth-queries`' default (titles, headings, lead sentences,
  keyphrases).
- ``lead+keyphrase``: no titles or headings. The development sets' queries were taken from their
  documents' titles and headings, so where a document kept its title the ``all`` kind would hand
  out pool queries' own text (labels the sample did not draw); this kind never does. On the five
  built-in sets both kinds give the same pseudo-queries (the documents carry no title or heading),
  so it matters only for a corpus that does.

    python bench/corpus_mix.py --datasets bbc composite 20ng django-docs sqlalchemy-docs --seeds 0 1 2
    python bench/corpus_mix.py --datasets bbc --sizes 8 32 --weights 0.1 0.3 1 --out runs/corpus_mix.json
    python bench/corpus_mix.py --check --weights 0.1 --kinds all   # what corpus_check decides, cell by cell

``--check`` also runs `masdr train`'s ``corpus_check`` on every sample with the trainer's own functions
(k folds over the labelled queries; the probe with the pseudo-queries at ``corpus_weight``, less those
made from the held-out queries' documents, against the probe without them) on this bench's MiniLM
embeddings, and prints how often it keeps the corpus and the test macro-F1 of its choice against
always and never mixing the corpus in. The trainer's features (its ``max_length``) differ slightly,
and near a tie the decision can differ with them (SQLAlchemy with all its queries, README).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from learning_curve import load_builtin, sample_per_scope, scores

KINDS = {"all": None, "lead+keyphrase": ["lead", "keyphrase"]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from masdr_router.datasets import DATASETS  # --datasets names a built-in set, or argparse says which exist

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS),
                    default=["bbc", "composite", "20ng", "django-docs", "sqlalchemy-docs"])
    ap.add_argument("--sizes", nargs="+", default=["8", "16", "32", "64", "all"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--weights", nargs="+", type=float, default=[0.1, 0.3, 1.0],
                    help="corpus_weight values: one pseudo-query's weight, a labelled query weighing 1")
    ap.add_argument("--per-scope", type=int, default=1000, help="pseudo-queries per scope (synth-queries' default)")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    ap.add_argument("--check", action="store_true", help="also run corpus_check on every sample (the default "
                    "TrainConfig; needs the default corpus_weight among --weights and the 'all' kind)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/corpus_mix.json"))
    args = ap.parse_args(argv)
    from masdr_router import TrainConfig

    cfg = TrainConfig()
    if args.check and (cfg.corpus_weight not in args.weights or "all" not in args.kinds):
        ap.error(f"--check compares against the corpus mixed at corpus_weight {cfg.corpus_weight:g}: "
                 "give it in --weights and keep the 'all' kind")

    from masdr_router import Embedder
    from masdr_router.querygen import SynthConfig, synthesize_queries
    from masdr_router.training.probe import fit_probe

    emb = Embedder("minilm", device="cpu", max_length=64)
    rows: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for name in args.datasets:
        # the learning curve's pools and test splits (20 Newsgroups at 100 posts per group, as there)
        ds, pool, test = load_builtin(name, 100 if name == "20ng" else None)
        labels = ds.taxonomy.names
        index = {lab: i for i, lab in enumerate(labels)}
        pool_x = emb.encode([q.query for q in pool], batch_size=64)
        test_x = emb.encode([q.query for q in test], batch_size=64)
        row_of = {id(q): i for i, q in enumerate(pool)}
        gold = [q.scope for q in test]
        corpus: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        made_from: list[Any] = []  # the 'all' kind's pseudo-queries (their texts and documents)
        for kind in args.kinds:
            res = synthesize_queries(ds.taxonomy, ds.documents, held_out=test,
                                     config=SynthConfig(per_scope=args.per_scope, methods=KINDS[kind]
                                                        or SynthConfig().methods))
            corpus[kind] = (emb.encode([q.query for q in res.queries], batch_size=64),
                            np.array([index[q.scope] for q in res.queries]))
            if kind == "all":
                made_from = list(res.queries)
            print(f"{name}: {len(res.queries)} pseudo-queries ({kind})", flush=True)

        def score(x: np.ndarray, y: np.ndarray, w: np.ndarray | None, labels: list[str] = labels,
                  test_x: np.ndarray = test_x, gold: list[str] = gold) -> dict[str, float]:
            probe = fit_probe(x, y, len(labels), sample_weight=w)
            return scores(gold, [labels[i] for i in probe.logits(test_x).argmax(1)], labels)

        for kind, (cx, cy) in corpus.items():
            rows.append({"dataset": name, "kind": kind, "size": "0", "seed": 0, "n_labelled": 0,
                         "n_pseudo": len(cy), "weight": 1.0, **score(cx, cy, None)})
        for size in args.sizes:
            for seed in args.seeds:
                sample = sample_per_scope(pool, None if size == "all" else int(size), seed)
                x = pool_x[[row_of[id(q)] for q in sample]]
                y = np.array([index[q.scope] for q in sample])
                base = {"dataset": name, "size": size, "seed": seed, "n_labelled": len(sample)}
                alone = {**base, "kind": "none", "n_pseudo": 0, "weight": 0.0, **score(x, y, None)}
                rows.append(alone)
                for kind, (cx, cy) in corpus.items():
                    for w in args.weights:
                        sw = np.concatenate([np.ones(len(y)), np.full(len(cy), w)])
                        rows.append({**base, "kind": kind, "n_pseudo": len(cy), "weight": w,
                                     **score(np.concatenate([x, cx]), np.concatenate([y, cy]), sw)})
                mixed = rows[-len(corpus) * len(args.weights):]
                if args.check:
                    at = next(r for r in mixed if r["kind"] == "all" and r["weight"] == cfg.corpus_weight)
                    rows.append({**base, "kind": "check", **check(cfg, sample, x, y, corpus["all"], made_from,
                                                                 len(labels)),
                                 "always": at["macro_f1"], "never": alone["macro_f1"]})
                    rows[-1]["macro_f1"] = rows[-1]["always"] if rows[-1]["kept"] else rows[-1]["never"]
                print(f"{name} {size} seed {seed}: labelled only {alone['macro_f1']:.3f}, with the corpus "
                      + ", ".join(f"{r['kind']}@{r['weight']:g} {r['macro_f1']:.3f}" for r in mixed), flush=True)
    report = {"per_scope": args.per_scope, "seeds": args.seeds, "weights": args.weights,
              "seconds": round(time.perf_counter() - t_start, 1), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(table(rows, args.weights, args.kinds))
    if args.check:
        print(check_table(rows))
    return report


def check(cfg: Any, sample: list[Any], x: np.ndarray, y: np.ndarray, pseudo: tuple[np.ndarray, np.ndarray],
          made_from: list[Any], n_labels: int) -> dict[str, Any]:
    """``corpus_check`` on one sample as `masdr train` runs it: k folds over the labelled queries, a
    fold's probe with the corpus trained on the pseudo-queries (``made_from``, aligned with ``pseudo``)
    but those that would leak its held-out queries (made from their documents, or matching their text)."""
    from masdr_router.querygen import SynthConfig
    from masdr_router.querygen.contamination import HeldOutQueries
    from masdr_router.training.trainer import corpus_verdict, fold_splits, held_out_probes, kfold

    splits = fold_splits(kfold(sample, cfg.cv_folds, cfg.seed))
    extras = []
    for _, held_rows in splits:
        docs = {d for r in held_rows for d in sample[r].relevant_ids}
        index = HeldOutQueries([sample[r].query for r in held_rows], SynthConfig().contamination_jaccard)
        keep = np.array([not docs.intersection(q.relevant_ids) and not index.match(q.query) for q in made_from],
                        dtype=bool)
        extras.append((pseudo[0][keep], pseudo[1][keep], np.full(int(keep.sum()), cfg.corpus_weight)))
    _, with_corpus = held_out_probes(cfg, n_labels, x, y, splits, extras)
    _, without = held_out_probes(cfg, n_labels, x, y, splits)
    return corpus_verdict(cfg, y, with_corpus, without, n_labels)


def check_table(rows: list[dict[str, Any]]) -> str:
    """Per set and size: how often corpus_check kept the corpus, and the mean test macro-F1 of never
    mixing it in, always mixing it in, and the check's choice."""
    checks = [r for r in rows if r["kind"] == "check"]
    out = ["| set | per scope | kept | never | always | the check's choice | choice − best of the two |",
           "|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in checks:
        groups.setdefault((r["dataset"], r["size"]), []).append(r)
    for (ds, size), rs in [*groups.items(), *_by_size(checks)]:
        never, always, chosen = (float(np.mean([r[k] for r in rs])) for k in ("never", "always", "macro_f1"))
        out.append(f"| {ds} | {size} | {sum(r['kept'] for r in rs)}/{len(rs)} | {never:.3f} | {always:.3f} | "
                   f"{chosen:.3f} | {chosen - max(never, always):+.3f} |")
    return "\n".join(out)


def _by_size(checks: list[dict[str, Any]]) -> list[tuple[tuple[str, str], list[dict[str, Any]]]]:
    sizes = dict.fromkeys(r["size"] for r in checks)
    return [(("all sets", size), [r for r in checks if r["size"] == size]) for size in sizes]


def table(rows: list[dict[str, Any]], weights: list[float], kinds: list[str]) -> str:
    """Mean test macro-F1 over the sample seeds: labelled only, then each kind at each weight
    (its difference to labelled only), and the corpus alone."""
    def mean(**match: Any) -> float | None:
        vals = [r["macro_f1"] for r in rows if all(r.get(k) == v for k, v in match.items())]
        return float(np.mean(vals)) if vals else None

    cols = [(k, w) for k in kinds for w in weights]
    out = ["| set | per scope | labelled only | " + " | ".join(f"+ {k} at {w:g}" for k, w in cols) + " |",
           "|" + "---|" * (3 + len(cols))]
    sets = list(dict.fromkeys(r["dataset"] for r in rows))
    for ds in sets:
        alone = " / ".join(f"{k} {mean(dataset=ds, kind=k, size='0'):.3f}" for k in kinds)
        out.append(f"| {ds} | 0 (corpus alone) | – | {alone} |" + " |" * (len(cols) - 1))
        for size in dict.fromkeys(r["size"] for r in rows if r["dataset"] == ds and r["size"] != "0"):
            none = mean(dataset=ds, size=size, kind="none")
            cells = [mean(dataset=ds, size=size, kind=k, weight=w) for k, w in cols]
            out.append(f"| {ds} | {size} | {none:.3f} | " + " | ".join(
                f"{c:.3f} ({c - none:+.3f})" for c in cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    main()

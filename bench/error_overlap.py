"""Where the systems' errors overlap: how much of a set's test error any router here can remove.

Reads learning-curve reports written with ``--save-predictions`` and, per (set, size, sample), counts
the test queries every system gets wrong (no system here routes them; what remains of them is the
set's headroom for this encoder and these data), the queries the default gets wrong that some
baseline gets right (what it could still gain from them), and the macro-F1 of the "any system is
right" oracle, an upper bound on what choosing among these systems per query could reach. With
``--examples N`` it prints N of the queries nobody routes, with their label and the systems'
majority answer, so a reader can judge whether they are routable at all.

    python bench/learning_curve.py --datasets bbc --sizes all --systems probe tfidf-lr centroid setfit default \\
        --save-predictions --out runs/lc_bbc_all.json
    python bench/error_overlap.py runs/lc_bbc_all.json --examples 15 --out runs/overlap.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning_curve import scores  # the metric the learning-curve table reports


def macro_f1(gold: list[str], pred: list[str]) -> float:
    return scores(gold, pred, sorted(set(gold)))["macro_f1"]


def overlap(gold: list[str], preds: dict[str, list[str]], reference: str = "default") -> dict[str, Any]:
    """Error overlap of the systems in ``preds`` on one test set.

    >>> o = overlap(["a", "b", "b"], {"default": ["a", "a", "a"], "x": ["b", "b", "a"]})
    >>> o["nobody_right"], o["reference_wrong_other_right"], o["oracle_accuracy"]
    (1, 1, 0.667)
    """
    n = len(gold)
    right = {s: [p == g for p, g in zip(pred, gold, strict=True)] for s, pred in preds.items()}
    nobody = [i for i in range(n) if not any(r[i] for r in right.values())]
    unrouted = set(nobody)
    # the oracle answers right wherever some system does, and otherwise the majority's wrong answer
    oracle = [gold[i] if i not in unrouted else Counter(p[i] for p in preds.values()).most_common(1)[0][0]
              for i in range(n)]
    out: dict[str, Any] = {
        "n_test": n, "systems": sorted(preds),
        "errors": {s: n - sum(r) for s, r in right.items()},
        "macro_f1": {s: macro_f1(gold, p) for s, p in preds.items()},
        "nobody_right": len(nobody), "nobody_right_share": round(len(nobody) / n, 4),
        "oracle_macro_f1": macro_f1(gold, oracle), "oracle_accuracy": round(1 - len(nobody) / n, 3),
        "nobody_right_rows": nobody}
    if reference in right:
        others = [s for s in right if s != reference]
        out["reference_wrong_other_right"] = sum(not right[reference][i] and any(right[s][i] for s in others)
                                                 for i in range(n))
        out["reference_right_others_wrong"] = sum(right[reference][i] and not any(right[s][i] for s in others)
                                                  for i in range(n)) if others else 0
        # per baseline, the discordant pairs: (reference right and it wrong, reference wrong and it right)
        out["discordant"] = {s: [sum(right[reference][i] and not right[s][i] for i in range(n)),
                                 sum(right[s][i] and not right[reference][i] for i in range(n))] for s in others}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+", type=Path, help="learning-curve JSON written with --save-predictions")
    ap.add_argument("--examples", type=int, default=10, help="queries nobody routes to print per cell")
    ap.add_argument("--out", type=Path, default=None, help="write the overlap per cell as JSON")
    args = ap.parse_args(argv)
    cells: list[dict[str, Any]] = []
    lines = ["| set | per scope (n) | sample | test | macro-F1 by system | nobody right | default wrong, another right "
             "| default alone right | any-system-right oracle: macro-F1 |", "|---|---|---|---|---|---|---|---|---|"]
    for path in args.reports:
        rep = json.loads(path.read_text())
        tests = rep.get("test") or {}
        groups: dict[tuple[str, str, int], dict[str, list[str]]] = {}
        for r in rep["results"]:
            if "predictions" in r:
                groups.setdefault((r["dataset"], r["size"], r.get("seed", 0)), {})[r["system"]] = r["predictions"]
        if not groups:
            raise SystemExit(f"error: {path} has no predictions: run bench/learning_curve.py with --save-predictions")
        for (ds, size, seed), preds in sorted(groups.items()):
            queries = tests[ds]
            gold = [q["scope"] for q in queries]
            o = overlap(gold, preds)
            o.update({"dataset": ds, "size": size, "seed": seed, "report": str(path)})
            o["nobody_right_examples"] = [
                {"query": queries[i]["query"], "scope": gold[i],
                 "majority": Counter(p[i] for p in preds.values()).most_common(1)[0][0]}
                for i in o["nobody_right_rows"]]
            cells.append(o)
            f1 = ", ".join(f"{s} {v:.3f}" for s, v in sorted(o["macro_f1"].items(), key=lambda kv: -kv[1]))
            lines.append(f"| {ds} | {size} | {seed} | {o['n_test']} | {f1} | {o['nobody_right']} "
                         f"({o['nobody_right_share']:.1%}) | {o.get('reference_wrong_other_right', '–')} "
                         f"| {o.get('reference_right_others_wrong', '–')} | {o['oracle_macro_f1']:.3f} |")
    print("\n".join(lines))
    for o in cells:
        if args.examples and o["nobody_right_examples"]:
            print(f"\n{o['dataset']} {o['size']} (sample {o['seed']}): {min(args.examples, o['nobody_right'])} "
                  f"of the {o['nobody_right']} test queries no system routes (label -> the systems' majority "
                  f"answer); default right / wrong where each baseline is wrong / right: "
                  + ", ".join(f"{s} {a}/{b}" for s, (a, b) in o.get("discordant", {}).items()))
            for ex in o["nobody_right_examples"][:args.examples]:
                print(f"  [{ex['scope']} -> {ex['majority']}] {ex['query']}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"cells": cells}, indent=2))
    return {"cells": cells}


if __name__ == "__main__":
    main()

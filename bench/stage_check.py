"""Should the contrastive stage have run? The folds' check (``contrastive_check``), replayed on paired runs.

Two learning-curve runs of the same cells (same data set, size and sample seed, so the same
sample, folds and test split): the default with the contrastive stage, and ``--set
contrastive=off``. When the check keeps the stage the default *is* the first run; when it drops
it, its refit is the second run's (the same folds, probes and epoch rule), so each row shows
what the default exports under each margin. Exactly, since each run draws its LoRA initialisation
from its seed alone (a961c05; on BBC at 16 per scope the check's run without the stage and the
standalone run both chose 10 epochs at 0.7859 out of fold); runs recorded before that drew it from
torch's global generator, where the two could differ (20NG at 16 per scope: 14 epochs against 7). What the
replay cannot know is the paired bootstrap SE of the two runs' out-of-fold predictions, which only
a run doing both computes (it records it as ``stage_check``); it uses that when present and
otherwise the SE the stage run recorded for its guard (LoRA against the frozen probe on the same
held-out queries), scaled by ``--se-scale``: in the four runs that recorded both the paired SE was
0.67, 0.80, 0.92 and 1.03 times that proxy (BBC at 16 and 32 per scope, 20NG at 16 and 32). The
best baseline is read from the stage run's files (every baseline, same sample)::

    python bench/learning_curve.py --datasets composite --sizes 16 --systems default --out with.json
    python bench/learning_curve.py --datasets composite --sizes 16 --systems default \\
        --set contrastive=off --out without.json
    python bench/stage_check.py --with with.json --without without.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from masdr_router.training.selection import beyond_noise

BASELINES = ("probe", "tfidf-lr", "centroid", "setfit")


def load(paths: list[Path]) -> dict[tuple[str, str, int], dict[str, dict[str, Any]]]:
    cells: dict[tuple[str, str, int], dict[str, dict[str, Any]]] = {}
    for p in paths:
        for r in json.loads(p.read_text())["results"]:
            if "macro_f1" in r:
                cells.setdefault((r["dataset"], str(r["size"]), int(r["seed"])), {})[r["system"]] = r
    return cells


def oof_score(row: dict[str, Any], score: str) -> float:
    """``peak``: the best out-of-fold macro-F1 over the epoch counts (what the trainer's check
    compares); ``exported``: that of the epoch count the run exported."""
    return max(row["held_out_by_epoch"].values()) if score == "peak" else row["held_out_macro_f1"]["lora"]


def replay(with_stage: dict[str, Any], without: dict[str, Any], *, margin: float, check_from: float,
           score: str = "peak", se_scale: float = 1.0) -> dict[str, Any]:
    """The check's decision on one cell and what the default would export."""
    lead = oof_score(without, score) - oof_score(with_stage, score)
    recorded = with_stage.get("stage_check") or {}
    proxy = (with_stage.get("guard") or {}).get("probe", {}).get("se")
    se = recorded.get("se") or (proxy * se_scale if proxy is not None else None)
    # the sample's queries per scope (fewer only where a scope has fewer; "all" is above any limit)
    per_scope = float(with_stage["size"]) if str(with_stage["size"]).isdigit() else float("inf")
    checked = per_scope >= check_from and bool(with_stage.get("contrastive_steps"))
    drop = checked and se is not None and beyond_noise(lead, se, margin)  # the trainer's own rule
    return {"lead": lead, "se": se, "se_source": "paired" if recorded.get("se") else "guard proxy",
            "checked": checked, "dropped": drop, "macro_f1": (without if drop else with_stage)["macro_f1"]}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--with", dest="with_", nargs="+", type=Path, required=True,
                    help="learning-curve JSON of the default with the stage (and the baselines)")
    ap.add_argument("--without", nargs="+", type=Path, required=True,
                    help="learning-curve JSON of the default run with --set contrastive=off")
    ap.add_argument("--margins", nargs="+", type=float, default=[1.0, 2.0])
    ap.add_argument("--from", dest="check_from", type=float, default=16.0,
                    help="contrastive_check_from: the check runs from this many queries per scope")
    ap.add_argument("--score", choices=["peak", "exported"], default="peak",
                    help="compare each run's best out-of-fold macro-F1 over epoch counts (as the trainer does) or "
                         "that of the epoch count it exported")
    ap.add_argument("--se-scale", type=float, default=1.0,
                    help="multiply the guard's SE (the proxy) by this: the paired SE of two fine-tuned runs is "
                         "usually smaller than that of LoRA against the frozen probe (0.67, 0.80, 0.92 and 1.03 of it "
                         "in the four runs that recorded both: BBC and 20NG at 16 and 32 per scope)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/stage_check.json"))
    args = ap.parse_args(argv)
    stage, off = load(args.with_), load(args.without)
    rows = []
    for key in sorted(set(stage) & set(off), key=lambda k: (k[0], int(k[1]) if k[1].isdigit() else 10**6, k[2])):
        w, o = stage[key].get("default"), off[key].get("default")
        if w is None or o is None:
            continue
        base = {s: stage[key][s]["macro_f1"] for s in BASELINES if s in stage[key]}
        best = max(base, key=base.get) if base else None
        row = {"dataset": key[0], "size": key[1], "seed": key[2], "with_stage": w["macro_f1"], "without": o["macro_f1"],
               "with_stage_oof": oof_score(w, args.score), "without_oof": oof_score(o, args.score),
               "best_baseline": best, "best_baseline_f1": base.get(best) if best else None, "margins": {}}
        for m in args.margins:
            row["margins"][m] = replay(w, o, margin=m, check_from=args.check_from, score=args.score,
                                       se_scale=args.se_scale)
        rows.append(row)
    head = "| set | per scope | seed | test: with stage / without | out of fold: with / without | lead (SE) |"
    head += "".join(f" {m:g} SE: export, − best |" for m in args.margins) + " best baseline |"
    print(head)
    print("|" + "---|" * (6 + len(args.margins) + 1))
    for r in rows:
        first = r["margins"][args.margins[0]]
        cells = "".join(
            f" {'without' if d['dropped'] else ('with' if d['checked'] else 'with (unchecked)')} {d['macro_f1']:.3f}, "
            f"{d['macro_f1'] - r['best_baseline_f1']:+.3f} |" if r["best_baseline_f1"] is not None else " – |"
            for d in r["margins"].values())
        print(f"| {r['dataset']} | {r['size']} | {r['seed']} | {r['with_stage']:.3f} / {r['without']:.3f} | "
              f"{r['with_stage_oof']:.3f} / {r['without_oof']:.3f} | {first['lead']:+.3f} ({first['se']:.3f}) |{cells} "
              f"{r['best_baseline']} {r['best_baseline_f1']:.3f} |")
    for m in args.margins:
        gain = [r["margins"][m]["macro_f1"] - r["with_stage"] for r in rows]
        changed = sum(r["margins"][m]["dropped"] for r in rows)
        if rows:
            print(f"\n{m:g} SE: the stage dropped in {changed} of {len(rows)} cells; mean change against always "
                  f"keeping it {sum(gain) / len(gain):+.4f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1, default=str))
    return rows


if __name__ == "__main__":
    main()

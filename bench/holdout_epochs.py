"""Which epoch should the holdout regime export? Validation and test curves of one training.

With 1,000 labelled queries or more (and no validation file) ``masdr train`` holds out 15 % and
trains the rest. This trains that run exactly as the trainer does (same split, probe head start,
schedule) for the whole epoch budget and scores the validation split *and* the test queries after
every epoch, then reports the test macro-F1 of the epoch each rule would export:

- ``early stop``: the best validation epoch, stopping after ``early_stopping_patience`` (3) epochs
  without a gain (``holdout_choice: best``, the earlier default);
- ``best val``: the best validation epoch of the whole budget;
- ``last``: the last epoch, the learning rate decayed to zero (``holdout_choice: last``);
- ``late mean``: the mean test score of the last half of the epochs (what a rule choosing among
  them at random would expect);
- ``avg3``: the uniform average of the last three epochs' trainable weights (adapters and head).

The test queries are read only to compare the rules, never to choose. Same data sets, pool and
test split as ``learning_curve.py`` with ``--sizes all``.

    python bench/holdout_epochs.py --datasets bbc composite django-docs sqlalchemy-docs
    python bench/holdout_epochs.py --datasets 20ng --max-docs-per-scope 100 --seed 1
    python bench/holdout_epochs.py --datasets bbc --set contrastive=on --set contrastive_max_steps=100000 \
        --alphas 0.25 0.5 1     # a variant: SetFit's full pair epoch first, each epoch at three WiSE-FT weights
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning_curve import load_builtin  # the pool and test split every bench script shares

RULES = ("early stop", "best val", "last", "late mean", "avg3")


@dataclass
class Holdout:
    """The holdout run's inputs, as the trainer prepares them: its config, split, encoded splits
    (train, validation, test), the probe its head starts from and its epoch budget."""

    cfg: Any
    labels: list[str]
    base: str
    tokenizer: Any
    n_train: int
    n_val: int
    n_test: int
    tr: Any
    va: Any
    te: Any
    probe: Any
    epochs: int


@contextlib.contextmanager
def holdout(name: str, seed: int, max_docs_per_scope: int | None,
            overrides: dict[str, Any] | None = None) -> Iterator[Holdout]:
    """The holdout run on all of ``name``'s pool (``learning_curve.py``'s pool and test split, the trainer's
    validation split for ``seed``), inside the trainer's run scope; ``overrides`` as ``--set`` gives them."""
    from transformers import AutoModel, AutoTokenizer

    from masdr_router import TrainConfig
    from masdr_router.retrieval.embedder import resolve_encoder_path
    from masdr_router.training import trainer as T
    from masdr_router.training.probe import fit_probe

    ds, pool, test = load_builtin(name, max_docs_per_scope)
    cfg = TrainConfig.from_dict({**TrainConfig().to_dict(), "progress": False, "seed": seed, "device": "cpu",
                                 **(overrides or {})})
    labels = ds.taxonomy.names
    with T.run_scope(cfg, "cpu"):
        base = resolve_encoder_path(cfg.base_model)
        tok, frozen = AutoTokenizer.from_pretrained(base), AutoModel.from_pretrained(base).eval()
        tr_q, va_q = T.prepare_splits(pool, None, cfg)
        tr, va, te = (T.encode(cfg, labels, q, tok, frozen) for q in (tr_q, va_q, test))
        probe = fit_probe(tr.features, tr.y.numpy(), len(labels), balanced=cfg.class_weighting == "balanced",
                          seed=cfg.seed, sample_weight=tr.weight.numpy(), normalize=cfg.normalize)
        yield Holdout(cfg, labels, base, tok, len(tr_q), len(va_q), len(test), tr, va, te, probe,
                      T.epoch_budget(cfg, len(tr_q)))


def run_sets(out: Path, datasets: list[str], finished: Callable[[dict[str, Any], str], bool],
             measure: Callable[[str], dict[str, Any]]) -> list[dict[str, Any]]:
    """``measure`` each data set not yet ``finished`` in ``out`` (resumable: the file is rewritten after each)."""
    done = json.loads(out.read_text()) if out.exists() else []
    for name in datasets:
        if any(finished(r, name) for r in done):
            continue
        done.append(measure(name))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(done, indent=1))
    return done


def curves(name: str, seed: int, max_docs_per_scope: int | None, overrides: dict[str, Any] | None = None,
           alphas: tuple[float, ...] = ()) -> dict[str, Any]:
    """Per-epoch validation and test macro-F1 of the holdout run on all of ``name``'s pool: with
    ``overrides`` (TrainConfig fields, e.g. ``contrastive: on``) as ``--set`` gives them to the trainer,
    and at each WiSE-FT weight in ``alphas`` beside the run's own (``alpha_A_val`` / ``alpha_A_test``).
    After a contrastive stage, epoch 0 is the probe on the tuned encoder (SetFit's model)."""
    from masdr_router.training import trainer as T
    from masdr_router.training.model import load_trainable_state, trainable_state

    with holdout(name, seed, max_docs_per_scope, overrides) as h:
        cfg, labels, tr, va, te, probe, epochs = h.cfg, h.labels, h.tr, h.va, h.te, h.probe, h.epochs
        base, tok = h.base, h.tokenizer
        stage = T.use_contrastive(cfg, "holdout", h.n_train / len(labels))
        run = T.build_run(cfg, labels, base, tok, tr, va, key="holdout-epochs", epochs=epochs, head_init=probe,
                          contrastive=stage)
        own = run.alpha

        def f1(enc: Any) -> float:
            return round(T.macro_f1(enc.y.numpy(), run.predict_logits(enc.ids, enc.mask).argmax(1), len(labels)), 4)

        def scored(row: dict[str, Any]) -> dict[str, Any]:
            for a in alphas:
                run.alpha = a
                row.update({f"alpha_{a:g}_val": f1(va), f"alpha_{a:g}_test": f1(te)})
            run.alpha = own
            return row

        states: list[dict[str, Any]] = []
        rows = []
        if stage:  # before any fine-tuning: the head is the probe on the tuned encoder
            start = {"epoch": 0, "val": f1(va), "test": f1(te)}
            print(json.dumps({"dataset": name, "seed": seed, **start}), flush=True)
        for e in range(epochs):
            T.train_one_epoch(run, e)
            states.append(trainable_state(run.unwrapped))
            row = scored({"epoch": e + 1, "val": f1(va), "test": f1(te)})
            if e >= 2:
                load_trainable_state(run.unwrapped, {k: sum(s[k] for s in states[-3:]) / 3 for k in states[-1]})
                row.update(avg3_val=f1(va), avg3_test=f1(te))
                load_trainable_state(run.unwrapped, states[-1])
            rows.append(row)
            print(json.dumps({"dataset": name, "seed": seed, **row}), flush=True)
    return {"dataset": name, "seed": seed, "n_train": h.n_train, "n_val": h.n_val, "n_test": h.n_test,
            "alpha": own, "contrastive": run.contrastive,
            **({"stage_probe": start} if stage else {}),
            "epochs": rows, "rules": rules(rows, cfg.early_stopping_patience)}


def rules(rows: list[dict[str, Any]], patience: int) -> dict[str, Any]:
    """Each rule's exported epoch and its test macro-F1."""
    val, test = [r["val"] for r in rows], [r["test"] for r in rows]
    best, stop_best, bad = -1.0, 0, 0
    for i, v in enumerate(val):  # the trainer's early stopping: strict gains, patience epochs without
        if v > best + 1e-6:
            best, stop_best, bad = v, i, 0
        else:
            bad += 1
            if bad >= patience:
                break
    full_best = max(range(len(val)), key=lambda i: (val[i], -i))
    late = test[len(test) // 2:]
    return {"early stop": {"epoch": stop_best + 1, "test": test[stop_best]},
            "best val": {"epoch": full_best + 1, "test": test[full_best]},
            "last": {"epoch": len(test), "test": test[-1]},
            "late mean": {"epoch": None, "test": round(sum(late) / len(late), 4)},
            "avg3": {"epoch": len(test), "test": rows[-1].get("avg3_test")}}


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| set | seed | --set | n train / val | " + " | ".join(RULES) + " |", "|---" * (len(RULES) + 4) + "|"]
    for r in results:
        cells = []
        for rule in RULES:
            c = r["rules"][rule]
            cells.append(f"{c['test']:.3f}" + (f" (@{c['epoch']})" if rule in ("early stop", "best val") else ""))
        sets = " ".join(r.get("set") or []) or "-"  # as typed: YAML reads contrastive=on as True
        lines.append(f"| {r['dataset']} | {r['seed']} | {sets} | {r['n_train']} / {r['n_val']} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    from masdr_router.datasets import DATASETS  # --datasets names a built-in set, or argparse says which exist

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=["bbc", "composite"])
    ap.add_argument("--seed", type=int, default=0, help="TrainConfig.seed: the validation split and the init")
    ap.add_argument("--max-docs-per-scope", type=int, default=None, help="subsample the data sets (e.g. 20ng)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="TrainConfig override, as `masdr train --set` (e.g. contrastive=on)")
    ap.add_argument("--alphas", type=float, nargs="*", default=[],
                    help="also score every epoch at these WiSE-FT weights (1: the fine-tuned run alone)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/holdout_epochs.json"))
    args = ap.parse_args(argv)
    from masdr_router.training.run import parse_overrides

    overrides = parse_overrides(args.set)
    done = run_sets(args.out, args.datasets,
                    lambda r, name: r["dataset"] == name and r["seed"] == args.seed
                    and parse_overrides(r.get("set")) == overrides,
                    lambda name: {**curves(name, args.seed, args.max_docs_per_scope, overrides, tuple(args.alphas)),
                                  "set": args.set})
    print(table(done))
    return done


if __name__ == "__main__":
    main()

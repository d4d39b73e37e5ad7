"""Train a LoRA scope router: the accelerate-launchable entry point.

Single process (CPU or one GPU):
    python train/train_router.py --taxonomy T.yaml --train TRAIN.jsonl --out checkpoints/NAME \
        [--val VAL.jsonl] [--test TEST.jsonl] [--config configs/train/cpu.yaml] [--set epochs=8 ...]

Several GPUs (data-parallel; one process exports):
    accelerate launch --num_processes 4 train/train_router.py --config configs/train/gpu.yaml ...

It is the same job as `masdr train`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--taxonomy", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--val")
    ap.add_argument("--test")
    ap.add_argument("--config")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)

    from masdr_router.errors import MasdrError
    from masdr_router.training.run import load_train_config, run_training

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_train_config(args.config, args.set)
        metrics = run_training(taxonomy=args.taxonomy, train=args.train, out=args.out, val=args.val, test=args.test,
                               cfg=cfg, overwrite=args.overwrite)
    except MasdrError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if metrics:
        print(f"exported {args.out}: val macro-F1 {metrics['val']['macro_f1']:.4f}, "
              f"threshold {metrics['calibration']['threshold']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``masdr train`` and ``masdr export``: train, calibrate and export a LoRA router; other runtimes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import out
from .report import print_router_reports

export_app = typer.Typer(help="Export trained routers to other runtimes.", no_args_is_help=True)


def train(
    taxonomy: Annotated[Path, typer.Option(help="taxonomy YAML")],
    train_file: Annotated[Path, typer.Option("--train", help="labelled training queries JSONL")],
    out_dir: Annotated[Path, typer.Option("--out", help="artifact directory, e.g. checkpoints/my-router")],
    val: Annotated[Path | None, typer.Option(help="validation queries (default: a stratified share of --train)")]
    = None,
    test: Annotated[Path | None, typer.Option(help="test queries for the model card's evaluation table")] = None,
    config: Annotated[Path | None, typer.Option(help="TrainConfig YAML, e.g. configs/train/cpu.yaml")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a config key: --set epochs=3 "
                                                      "(repeatable; values are YAML: --set target_modules=[query])")]
    = None,
    overwrite: Annotated[bool, typer.Option(help="replace an existing artifact")] = False,
) -> None:
    """Train a LoRA router on a taxonomy, calibrate it, and export it as a self-contained artifact.
    A killed run resumes from its last epoch checkpoint (OUT.ckpt/) when started again."""
    from ..training.run import load_train_config, run_training

    cfg = load_train_config(config, set_)
    metrics = run_training(taxonomy=taxonomy, train=train_file, out=out_dir, val=val, test=test, cfg=cfg,
                           overwrite=overwrite)
    if not metrics:  # a non-main process of a distributed run
        return
    cal = metrics["calibration"]
    out.print(f"trained in {metrics['train_seconds']:.0f} s on {metrics['device']} "
              f"({metrics['trainable_params']:,} trainable params); best epoch {metrics['val']['best_epoch']}; "
              f"temperature {cal['temperature']:.2f}, threshold {cal['threshold']:.3f}")
    ev = metrics.get("evaluation") or {}
    if ev:
        print_router_reports(out, {k: ev[k] for k in ("lora", "regex")}, title=f"router evaluation ({ev['split']})")
    out.print(f"exported {out_dir}")


@export_app.command("onnx")
def onnx(
    router: Annotated[Path, typer.Option(help="router artifact directory")],
    queries: Annotated[Path | None, typer.Option(help="queries JSONL to check the export on (default: a few "
                                                  "built-in samples)")] = None,
) -> None:
    """Add router.onnx to a router artifact (for onnxruntime CPU serving), checked against torch."""
    from ..data import read_queries
    from ..training.onnx_export import SAMPLE_QUERIES, export_onnx

    texts = [q.query for q in read_queries(queries)][:256] if queries else list(SAMPLE_QUERIES)
    info = export_onnx(router, texts)
    out.print(f"wrote {router / info['file']} (max |logit diff| vs torch {info['max_abs_diff']:.1e} on "
              f"{info['checked_on']} queries)")

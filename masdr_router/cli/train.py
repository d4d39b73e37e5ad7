"""``masdr train`` and ``masdr export``: train, calibrate and export a LoRA router; other runtimes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import GlobalHead, GlobalInScope, Mode, SearchConfigFile, out, search_config
from .report import print_router_reports

export_app = typer.Typer(help="Export trained routers to other runtimes.", no_args_is_help=True)


def train(
    taxonomy: Annotated[Path, typer.Option(help="taxonomy YAML")],
    train_file: Annotated[Path | None, typer.Option("--train", help="labelled training queries JSONL (optional "
                                                                   "with --corpus: a router from the corpus alone)")],
    out_dir: Annotated[Path, typer.Option("--out", help="artifact directory, e.g. checkpoints/my-router")],
    val: Annotated[Path | None, typer.Option(help="validation queries (default: a stratified share of --train)")]
    = None,
    test: Annotated[Path | None, typer.Option(help="test queries for the model card's evaluation table")] = None,
    config: Annotated[Path | None, typer.Option(help="TrainConfig YAML, e.g. configs/train/cpu.yaml")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a config key: --set epochs=3 "
                                                      "(repeatable; values are YAML: --set target_modules=[query])")]
    = None,
    overwrite: Annotated[bool, typer.Option(help="replace an existing artifact")] = False,
    corpus: Annotated[Path | None, typer.Option(
        help="corpus JSONL: pseudo-queries made from it (as `masdr synth-queries`, none leaking --val/--test) are "
             "mixed with the labelled queries at corpus_weight: each epoch a fresh sample of corpus_weight x their "
             "number at weight 1 (corpus_per_epoch), in every fold; the contrastive stage pairs the labelled ones only "
             "(contrastive_rows). With labelled queries they are left out when the frozen probe scores lower "
             "with them on the held-out labelled queries (corpus_check) or, in the holdout regime, when a run "
             "fine-tuned without them scores higher on the validation split (corpus_check_finetune: one more "
             "fine-tuning run). Without --train they are the training data")]
    = None,
    synth_config: Annotated[Path | None, typer.Option(help="SynthConfig YAML for --corpus "
                                                             "(configs/synth/default.yaml)")] = None,
    index: Annotated[Path | None, typer.Option(
        help="the index the router will search: its threshold (and its +vote threshold and weight) are then "
             "chosen for retrieval on held-out queries with relevant_ids (highest P@10 with R@10 >= global); "
             "without --val, on out-of-fold predictions of every training query (the cv regime)")]
    = None,
    search_cfg: SearchConfigFile = None,
    mode: Mode = None,
    global_head: GlobalHead = None,
    global_in_scope: GlobalInScope = None,
) -> None:
    """Train a LoRA router on a taxonomy, calibrate it, and export it as a self-contained artifact.
    Small data (no --val, under cv_below queries) is cross-validated and refit on everything.
    A killed run resumes from its last epoch checkpoint (OUT.ckpt/) when started again."""
    from ..querygen import SynthConfig
    from ..training.run import load_train_config, run_training

    cfg = load_train_config(config, set_)
    synth = SynthConfig.load(synth_config) if synth_config else None
    search = search_config(search_cfg, mode=mode, global_head=global_head, global_in_scope=global_in_scope)
    metrics = run_training(taxonomy=taxonomy, train=train_file, out=out_dir, val=val, test=test, cfg=cfg,
                           overwrite=overwrite, index=index, search=search, corpus=corpus, synth=synth)
    if not metrics:  # a non-main process of a distributed run
        return
    from ..training.card import data_line, regime_line, selection_line

    cal = metrics["calibration"]
    if metrics.get("corpus"):
        out.print(f"training data: {data_line(metrics)}")
    out.print(f"trained in {metrics['train_seconds']:.0f} s on {metrics['device']}; regime {metrics['regime']}: "
              f"{regime_line(metrics)}")
    out.print(f"exported model: {selection_line(metrics)}; temperature {cal['temperature']:.2f}, classification "
              f"threshold {cal['threshold']:.3f}")
    fit = metrics.get("retrieval_thresholds") or {}
    if fit:
        r = fit["router"]
        out.print(f"threshold chosen for retrieval on {fit['n_queries']} held-out queries: {r['threshold']:.3f} "
                  f"(P@{fit['k']} {r['p_at_k']:.3f}, R@{fit['k']} {r['r_at_k']:.3f}; global {r['global_p_at_k']:.3f} / "
                  f"{r['global_r_at_k']:.3f}); +vote: {fit['vote']['threshold']:.3f}, beta {fit['vote']['beta']:g}")
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

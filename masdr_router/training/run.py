"""The whole training job behind ``masdr train`` and ``train/train_router.py``: read and validate
inputs, train (resumably), calibrate, evaluate against the regex router, export atomically."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..atomic import check_output
from ..config import SearchConfig
from ..errors import ConfigError, UsageError
from .config import TrainConfig

if TYPE_CHECKING:
    from ..data import LabelledQuery
    from ..querygen import SynthConfig
    from ..retrieval.index import ScopedIndex
    from ..taxonomy import Taxonomy
    from .trainer import TrainResult

log = logging.getLogger(__name__)


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``["epochs=3", "target_modules=[query,value]"]`` -> typed values (parsed as YAML scalars)."""
    import yaml

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"expects key=value, got {item!r}", path="--set")
        try:
            out[key.strip()] = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError:
            raise ConfigError(f"cannot read the value of {item!r} (YAML syntax)", path="--set") from None
    return out


def load_train_config(config: str | Path | None, overrides: list[str] | None) -> TrainConfig:
    base = TrainConfig.from_yaml(config) if config else TrainConfig()
    over = parse_overrides(overrides)
    return TrainConfig.from_dict({**base.to_dict(), **over}, source="--set" if over else str(config or "<defaults>"))


def checkpoint_dir_for(out: Path) -> Path:
    return out.with_name(out.name + ".ckpt")


def run_training(*, taxonomy: str | Path, train: str | Path | None, out: str | Path, val: str | Path | None = None,
                 test: str | Path | None = None, cfg: TrainConfig | None = None, overwrite: bool = False,
                 index: str | Path | None = None, search: SearchConfig | None = None,
                 corpus: str | Path | None = None, synth: SynthConfig | None = None) -> dict[str, Any]:
    """Read and validate the inputs, make pseudo-queries from ``corpus`` when given (none of them
    leaking ``val`` or ``test``), train (resuming ``OUT.ckpt/`` if a killed run left one), choose the
    thresholds for retrieval when an ``index`` is given, evaluate on ``test`` (else ``val``)
    against the regex router, and export to ``out``. Returns the metrics written into the artifact
    (empty on the non-main processes of a distributed run)."""
    from ..data import read_queries
    from ..evaluation.router import evaluate_router
    from ..routers.regex import RegexRouter
    from ..taxonomy import Taxonomy
    from .card import model_card
    from .trainer import pseudo_per_epoch, train_router

    cfg = cfg or TrainConfig()
    out = check_output(out, overwrite=overwrite)
    if cfg.threshold_objective == "retrieval" and index is None:
        raise UsageError("threshold_objective 'retrieval' needs the index the router will search (--index)")
    tax = Taxonomy.from_yaml(taxonomy)
    idx = None
    if index is not None and cfg.threshold_objective != "classification":
        from ..retrieval.index import ScopedIndex

        idx = ScopedIndex.load(index, taxonomy=tax)  # before training: a wrong index fails fast
    train_q = read_queries(train, tax) if train else []
    val_q = read_queries(val, tax) if val else None
    test_q = read_queries(test, tax) if test else None
    if not train_q and corpus is None:
        raise UsageError("give labelled training queries (--train), a corpus to make them from (--corpus), or both")
    pseudo, corpus_info = [], {}
    if corpus is not None:
        pseudo, corpus_info = corpus_queries(tax, corpus, [*(val_q or []), *(test_q or [])], synth)
        corpus_info["weight"] = cfg.corpus_weight if train_q else 1.0
        corpus_info["per_epoch"] = pseudo_per_epoch(cfg, len(pseudo), len(train_q))
    ckpt = checkpoint_dir_for(out)
    result = train_router(tax, train_q, val_q, cfg, pseudo=pseudo, checkpoint_dir=ckpt, for_retrieval=idx is not None)
    if int(os.environ.get("RANK", "0")) != 0:  # under `accelerate launch`, one process exports
        return {}
    if corpus_info:
        corpus_info["check"] = result.extra["selection"].get("corpus_check") or {}
    thresholds = choose_retrieval_thresholds(result, idx, search) if idx is not None else {}
    eval_q = test_q or val_q
    evaluation: dict[str, Any] = {}
    if eval_q:
        evaluation = {"split": "test" if test_q else "val",
                      "lora": evaluate_router(result.router, eval_q, progress=cfg.progress),
                      "regex": evaluate_router(RegexRouter(tax), eval_q)}
    metrics = {"val": result.val_metrics, "calibration": result.calibration, "history": result.history,
               "train_seconds": round(result.train_seconds, 2), "n_train": result.n_train, "n_val": result.n_val,
               "resumed_from_epoch": result.resumed_from_epoch, **result.extra, "evaluation": evaluation,
               "retrieval_thresholds": thresholds, "n_labelled": len(train_q), "corpus": corpus_info}
    card = model_card(result.router, metrics, cfg)
    result.router.save_pretrained(out, metrics=metrics, card=card, overwrite=overwrite)
    shutil.rmtree(ckpt, ignore_errors=True)
    return metrics


def choose_retrieval_thresholds(result: TrainResult, index: ScopedIndex, search: SearchConfig | None) -> dict[str, Any]:
    """Replace the trained router's classification threshold by the one best for retrieval on its
    held-out queries, and store a vote threshold and weight for ``DIR+vote``; returns the fit
    (empty, with the classification threshold kept, when no held-out query has relevant_ids)."""
    from .thresholds import fit_retrieval_thresholds

    queries, probs = result.held_out or ([], None)
    fit = fit_retrieval_thresholds(index, queries, probs, search=search) if queries else {}
    router = result.router
    if not fit:
        log.warning("no held-out query carries relevant_ids: R@10 cannot be measured, so the threshold stays "
                    "the classification one")
        return {}
    fit["classification_threshold"] = router.threshold
    router.threshold = fit["router"]["threshold"]
    router.meta["threshold_objective"] = "retrieval"
    router.meta["vote"] = {"threshold": fit["vote"]["threshold"], "beta": fit["vote"]["beta"]}
    log.info("threshold for retrieval: %.3f (held-out P@10 %.3f, R@10 %.3f; global %.3f / %.3f); vote: %.3f, "
             "beta %g", fit["router"]["threshold"], fit["router"]["p_at_k"], fit["router"]["r_at_k"],
             fit["router"]["global_p_at_k"], fit["router"]["global_r_at_k"], fit["vote"]["threshold"],
             fit["vote"]["beta"])
    return fit


def corpus_queries(taxonomy: Taxonomy, corpus: str | Path, held_out: list[LabelledQuery],
                   synth: SynthConfig | None) -> tuple[list[LabelledQuery], dict[str, Any]]:
    """Pseudo-queries from ``corpus`` (none leaking ``held_out``) and what to record about them."""
    from ..data import read_corpus
    from ..querygen import synthesize_queries
    from ..querygen.pipeline import file_digest

    res = synthesize_queries(taxonomy, read_corpus(corpus), config=synth, held_out=held_out,
                             source={"corpus": str(corpus), "corpus_sha256": file_digest(corpus)})
    log.info("%d pseudo-queries from %s (%s)", len(res.candidates), corpus,
             ", ".join(f"{k} dropped {v}" for k, v in res.report["dropped"].items()))
    return res.queries, {"path": str(corpus), "n_pseudo": len(res.candidates), "report": res.report}

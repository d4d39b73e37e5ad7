"""Train a LoRA router on any taxonomy: transformers + peft + accelerate, wandb logging.

The same code runs on CPU, one GPU, or several GPUs under ``accelerate launch``. It is seeded and
deterministic on CPU, early-stops on validation macro-F1, and checkpoints every epoch so a killed
run resumes where it stopped (``{out}.ckpt/``, safetensors + JSON, no pickle).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..data import LabelledQuery
from ..errors import MasdrError, ValidationError
from ..taxonomy import Taxonomy
from .config import TrainConfig

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    router: Any  # LoraRouter
    history: list[dict[str, float]]
    val_metrics: dict[str, Any]
    calibration: dict[str, Any]
    train_seconds: float
    n_train: int
    n_val: int
    resumed_from_epoch: int = 0
    best_epoch: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def _macro_f1(y_true: np.ndarray, y_pred: np.ndarray, n_labels: int) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(y_true, y_pred, labels=list(range(n_labels)), average="macro", zero_division=0))


def _lr_at(step: int, total: int, warmup: int, base: float) -> float:
    """Linear warm-up then linear decay to zero."""
    if step < warmup:
        return base * (step + 1) / warmup
    return base * max(0.0, (total - step) / max(1, total - warmup))


def _run_key(cfg: TrainConfig, taxonomy: Taxonomy, train: Sequence[LabelledQuery], val: Sequence[LabelledQuery]) -> str:
    """Identifies a training run, so a checkpoint is only resumed by the same run."""
    h = hashlib.sha256()
    keep = {k: v for k, v in cfg.to_dict().items() if k not in {"progress", "report_to", "wandb_mode"}}
    h.update(json.dumps(keep, sort_keys=True).encode())
    h.update(taxonomy.fingerprint.encode())
    for q in [*train, None, *val]:
        h.update(b"|" if q is None else f"{q.query}\t{q.scope}\n".encode())
    return h.hexdigest()[:16]


def resolve_val(train: list[LabelledQuery], val: list[LabelledQuery] | None,
                cfg: TrainConfig) -> tuple[list[LabelledQuery], list[LabelledQuery]]:
    if val:
        return train, val
    from ..datasets.splits import stratified_split

    s = stratified_split(train, val=cfg.val_fraction, test=0.0, seed=cfg.seed)
    return s["train"], s["val"]


def train_router(taxonomy: Taxonomy, train: list[LabelledQuery], val: list[LabelledQuery] | None = None,
                 cfg: TrainConfig | None = None, *, checkpoint_dir: str | Path | None = None,
                 stop_after_epoch: int | None = None) -> TrainResult:
    """Train, early-stop, calibrate; return a :class:`LoraRouter` ready to save.

    >>> result = train_router(tax, read_queries("train.jsonl", tax))        # doctest: +SKIP
    >>> result.router.save_pretrained("checkpoints/my-router")              # doctest: +SKIP
    """
    import torch
    from accelerate import Accelerator
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    from ..progress import progress_bar
    from ..retrieval.embedder import resolve_device, resolve_encoder_path
    from ..routers.lora import LoraRouter
    from .calibration import choose_threshold, expected_calibration_error, fit_temperature, softmax
    from .checkpoint import load_checkpoint, save_checkpoint
    from .model import build_lora_model, load_trainable_state, trainable_state

    cfg = cfg or TrainConfig()
    hf_logging.disable_progress_bar()
    # peft calls a transformers API that transformers 5 renamed; the warning is theirs, not ours
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    labels = taxonomy.names
    for split, qs in (("train", train), ("val", val or [])):
        for i, q in enumerate(qs):
            if q.scope not in taxonomy:
                raise ValidationError(taxonomy.unknown_scope_message(q.scope), path=f"<{split}>", line=i + 1,
                                      field="scope")
    train, val = resolve_val(list(train), list(val) if val else None, cfg)
    if len(train) < 2 or not val:
        raise MasdrError(f"need at least 2 training and 1 validation queries, got {len(train)} and {len(val)}")
    seen = {q.scope for q in train}
    unseen = [s for s in labels if s not in seen]
    if unseen:
        log.warning("no training queries for scope(s) %s: the router will never predict them", unseen)

    device = resolve_device(cfg.device)
    mp = cfg.mixed_precision
    if mp == "auto":
        mp = "bf16" if device == "cuda" and torch.cuda.is_bf16_supported() else "no"
    accelerator = Accelerator(cpu=device == "cpu", mixed_precision=mp)
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    if device == "cpu":
        torch.use_deterministic_algorithms(True, warn_only=True)

    base_path = resolve_encoder_path(cfg.base_model)
    tokenizer = AutoTokenizer.from_pretrained(base_path)
    model = build_lora_model(base_path, len(labels), pooling=cfg.pooling, head_dropout=cfg.head_dropout,
                             lora_r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                             target_modules=cfg.target_modules)
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n_total = sum(p.numel() for p in model.parameters())

    def encode(qs: Sequence[LabelledQuery]) -> tuple[Any, Any, Any]:
        enc = tokenizer([q.query for q in qs], padding="max_length", truncation=True, max_length=cfg.max_length,
                        return_tensors="pt")
        y = torch.tensor([labels.index(q.scope) for q in qs], dtype=torch.long)
        return enc["input_ids"], enc["attention_mask"], y

    tr_ids, tr_mask, tr_y = encode(train)
    va_ids, va_mask, va_y = encode(val)
    counts = np.bincount(tr_y.numpy(), minlength=len(labels)).astype(float)
    if cfg.class_weighting == "balanced":
        w = np.where(counts > 0, len(train) / (len(labels) * np.maximum(counts, 1)), 0.0)
        class_weight = torch.tensor(w, dtype=torch.float32)
    else:
        class_weight = None

    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if n.endswith("bias") or "LayerNorm" in n else decay).append(p)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=cfg.learning_rate)
    model, optimizer = accelerator.prepare(model, optimizer)
    loss_fn = torch.nn.CrossEntropyLoss(
        weight=class_weight.to(accelerator.device) if class_weight is not None else None,
        label_smoothing=cfg.label_smoothing)

    world, rank = accelerator.num_processes, accelerator.process_index
    per_rank = len(train) // world
    steps_per_epoch = math.ceil(per_rank / cfg.batch_size)
    total_steps = steps_per_epoch * cfg.epochs
    warmup = max(1, int(cfg.warmup_ratio * total_steps))

    run_key = _run_key(cfg, taxonomy, train, val)
    history: list[dict[str, float]] = []
    best_f1, best_epoch, bad_epochs, start_epoch = -1.0, 0, 0, 0
    best_state = None
    ckpt = Path(checkpoint_dir) if checkpoint_dir else None
    unwrapped = accelerator.unwrap_model(model)
    if ckpt is not None:
        state = load_checkpoint(ckpt, run_key)
        if state is not None:
            load_trainable_state(unwrapped, state["trainable"])
            optimizer.load_state_dict(state["optimizer"])
            history, best_f1, best_epoch = state["history"], state["best_f1"], state["best_epoch"]
            bad_epochs, start_epoch, best_state = state["bad_epochs"], state["epoch"], state["best"]
            log.warning("resuming from checkpoint %s after epoch %d", ckpt, start_epoch)

    def predict_logits(ids: Any, mask: Any) -> np.ndarray:
        model.eval()
        outs = []
        with torch.inference_mode(), accelerator.autocast():
            for i in range(0, len(ids), 256):
                outs.append(model(ids[i:i + 256].to(accelerator.device),
                                  mask[i:i + 256].to(accelerator.device)).float().cpu())
        return torch.cat(outs).numpy()

    tracker = _Tracker(cfg, accelerator.is_main_process, run_key, extra={
        "n_train": len(train), "n_val": len(val), "trainable_params": n_trainable, "total_params": n_total,
        "labels": labels, "device": device, "mixed_precision": mp, "world_size": world})
    t0 = time.perf_counter()
    stopped_early = False
    try:
        for epoch in range(start_epoch, cfg.epochs):
            model.train()
            torch.manual_seed(cfg.seed * 1000 + epoch)  # dropout masks: a function of (seed, epoch) alone
            g = torch.Generator().manual_seed(cfg.seed * 7919 + epoch)
            perm = torch.randperm(len(train), generator=g)[: per_rank * world][rank::world]
            total_loss, n_seen = 0.0, 0
            with progress_bar(f"epoch {epoch + 1}/{cfg.epochs}", steps_per_epoch,
                              enabled=cfg.progress and accelerator.is_main_process) as bar:
                for b in range(steps_per_epoch):
                    idx = perm[b * cfg.batch_size:(b + 1) * cfg.batch_size]
                    step = epoch * steps_per_epoch + b
                    for group in optimizer.param_groups:
                        group["lr"] = _lr_at(step, total_steps, warmup, cfg.learning_rate)
                    ids, mask, y = (t[idx].to(accelerator.device) for t in (tr_ids, tr_mask, tr_y))
                    # trim the padding shared by the whole batch: queries are short
                    width = int(mask.sum(1).max())
                    with accelerator.autocast():
                        logits = model(ids[:, :width], mask[:, :width])
                        loss = loss_fn(logits.float(), y)
                    accelerator.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    total_loss += float(loss.detach()) * len(idx)
                    n_seen += len(idx)
                    bar.advance()
            va_logits = predict_logits(va_ids, va_mask)
            va_pred = va_logits.argmax(1)
            va_true = va_y.numpy()
            f1 = _macro_f1(va_true, va_pred, len(labels))
            va_loss = float(torch.nn.functional.cross_entropy(torch.from_numpy(va_logits), va_y))
            row = {"epoch": epoch + 1, "train_loss": total_loss / max(n_seen, 1), "val_loss": va_loss,
                   "val_accuracy": float((va_pred == va_true).mean()), "val_macro_f1": f1,
                   "lr": optimizer.param_groups[0]["lr"], "seconds": time.perf_counter() - t0}
            history.append(row)
            tracker.log(row)
            if cfg.progress and accelerator.is_main_process:
                log.info("epoch %d: train loss %.4f  val loss %.4f  val acc %.4f  val macro-F1 %.4f",
                            epoch + 1, row["train_loss"], va_loss, row["val_accuracy"], f1)
            if f1 > best_f1 + 1e-6:
                best_f1, best_epoch, bad_epochs = f1, epoch + 1, 0
                best_state = trainable_state(unwrapped)
            else:
                bad_epochs += 1
            if ckpt is not None and accelerator.is_main_process:
                save_checkpoint(ckpt, run_key, epoch=epoch + 1, trainable=trainable_state(unwrapped),
                                best=best_state, optimizer=optimizer.state_dict(), history=history,
                                best_f1=best_f1, best_epoch=best_epoch, bad_epochs=bad_epochs)
            accelerator.wait_for_everyone()
            if stop_after_epoch is not None and epoch + 1 >= stop_after_epoch:
                raise KeyboardInterrupt  # test hook: behave exactly like a kill after a checkpoint
            if bad_epochs >= cfg.early_stopping_patience:
                stopped_early = True
                break
        train_seconds = time.perf_counter() - t0
        if best_state is not None:
            load_trainable_state(unwrapped, best_state)
        # ---- calibration on validation data ----
        va_logits = predict_logits(va_ids, va_mask)
        va_true = va_y.numpy()
        temperature = fit_temperature(va_logits, va_true)
        probs = softmax(va_logits, temperature)
        conf, pred = probs.max(1), probs.argmax(1)
        correct = pred == va_true
        threshold, thr_stats = choose_threshold(conf, correct, target_accuracy=cfg.target_accuracy,
                                                target_abstain_rate=cfg.target_abstain_rate)
        calibration = {
            "temperature": temperature, **thr_stats, "target_accuracy": cfg.target_accuracy,
            "target_abstain_rate": cfg.target_abstain_rate,
            "val_ece_before": expected_calibration_error(softmax(va_logits).max(1), correct),
            "val_ece_after": expected_calibration_error(conf, correct),
        }
        val_metrics = {"accuracy": float(correct.mean()), "macro_f1": _macro_f1(va_true, pred, len(labels)),
                       "best_epoch": best_epoch, "epochs_run": len(history), "stopped_early": stopped_early}
        tracker.summary({**{f"val/{k}": v for k, v in val_metrics.items() if not isinstance(v, bool)},
                         **{f"calibration/{k}": v for k, v in calibration.items() if v is not None}})
    finally:
        tracker.finish()

    model.eval()
    meta = {"base_model": cfg.base_model,
            "lora": {"r": cfg.lora_r, "alpha": cfg.lora_alpha, "dropout": cfg.lora_dropout,
                     "target_modules": list(cfg.target_modules)},
            "train": {"config": cfg.to_dict(), "run_key": run_key, "n_train": len(train), "n_val": len(val),
                      "trainable_params": n_trainable, "total_params": n_total}}
    router = LoraRouter(taxonomy, unwrapped, tokenizer, temperature=temperature, threshold=threshold,
                        below_threshold=cfg.below_threshold, max_length=cfg.max_length, meta=meta,
                        device=str(accelerator.device))
    return TrainResult(router=router, history=history, val_metrics=val_metrics, calibration=calibration,
                       train_seconds=train_seconds, n_train=len(train), n_val=len(val),
                       resumed_from_epoch=start_epoch, best_epoch=best_epoch,
                       extra={"trainable_params": n_trainable, "total_params": n_total, "device": device,
                              "mixed_precision": mp, "wandb_dir": tracker.run_dir})


class _Tracker:
    """wandb logging (offline by default); a no-op when ``report_to`` is ``none``."""

    def __init__(self, cfg: TrainConfig, main: bool, run_key: str, extra: dict[str, Any]) -> None:
        self.run = None
        self.run_dir: str | None = None
        if cfg.report_to != "wandb" or not main or cfg.wandb_mode == "disabled":
            return
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        self.run = wandb.init(project=cfg.wandb_project, mode=cfg.wandb_mode, config={**cfg.to_dict(), **extra},
                              name=f"router-{run_key}", dir=os.environ.get("WANDB_DIR"), reinit="finish_previous")
        self.run_dir = str(Path(self.run.dir).parent)

    def log(self, row: dict[str, float]) -> None:
        if self.run is not None:
            self.run.log({f"train/{k}" if k.startswith("train") else f"val/{k[4:]}" if k.startswith("val_") else k: v
                          for k, v in row.items()}, step=int(row["epoch"]))

    def summary(self, values: dict[str, Any]) -> None:
        if self.run is not None:
            for k, v in values.items():
                self.run.summary[k] = v

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None

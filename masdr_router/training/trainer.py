"""Train a LoRA router on any taxonomy: transformers + peft + accelerate, wandb logging.

The same code runs on CPU, one GPU, or several GPUs under ``accelerate launch``. It is seeded and
deterministic on CPU, early-stops on validation macro-F1, and checkpoints every epoch so a killed
run resumes where it stopped (``{out}.ckpt/``, safetensors + JSON, no pickle).

A run is a sequence of named steps: :func:`prepare_splits` -> :func:`build_run` (model, optimizer,
encoded data) -> :func:`fit_epochs` -> :func:`calibrate` -> a :class:`LoraRouter`. Global switches
(RNG seeds, deterministic kernels, progress bars, a peft warning filter) hold for the run only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..data import LabelledQuery
from ..errors import MasdrError, ValidationError
from ..taxonomy import Taxonomy
from .config import TrainConfig
from .tracking import Tracker

if TYPE_CHECKING:
    import torch

    from ..routers.lora import LoraRouter

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    router: LoraRouter
    history: list[dict[str, float]]
    val_metrics: dict[str, Any]
    calibration: dict[str, Any]
    train_seconds: float
    n_train: int
    n_val: int
    resumed_from_epoch: int = 0
    best_epoch: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EpochEnd:
    """What an ``on_epoch_end`` callback sees after each epoch (its checkpoint is already written)."""

    epoch: int
    metrics: dict[str, float]
    checkpoint_dir: Path | None


EpochCallback = Callable[[EpochEnd], None]


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray, n_labels: int) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(y_true, y_pred, labels=list(range(n_labels)), average="macro", zero_division=0))


def lr_at(step: int, total: int, warmup: int, base: float) -> float:
    """Linear warm-up then linear decay to zero.

    >>> [round(lr_at(s, 10, 2, 1.0), 3) for s in (0, 1, 2, 9)]
    [0.5, 1.0, 1.0, 0.125]
    """
    if step < warmup:
        return base * (step + 1) / warmup
    return base * max(0.0, (total - step) / max(1, total - warmup))


def run_key(cfg: TrainConfig, taxonomy: Taxonomy, train: Sequence[LabelledQuery], val: Sequence[LabelledQuery]) -> str:
    """Identifies a training run, so a checkpoint is only resumed by the same run."""
    h = hashlib.sha256()
    keep = {k: v for k, v in cfg.to_dict().items() if k not in {"progress", "report_to", "wandb_mode"}}
    h.update(json.dumps(keep, sort_keys=True).encode())
    h.update(taxonomy.fingerprint.encode())
    for q in [*train, None, *val]:
        h.update(b"|" if q is None else f"{q.query}\t{q.scope}\n".encode())
    return h.hexdigest()[:16]


# ---- step 1: data --------------------------------------------------------------------------------
def prepare_splits(taxonomy: Taxonomy, train: Sequence[LabelledQuery], val: Sequence[LabelledQuery] | None,
                   cfg: TrainConfig) -> tuple[list[LabelledQuery], list[LabelledQuery]]:
    """Check every label, and carve a stratified validation share out of ``train`` when no
    validation queries are given."""
    for split, qs in (("train", train), ("val", val or [])):
        for i, q in enumerate(qs):
            if q.scope not in taxonomy:
                raise ValidationError(taxonomy.unknown_scope_message(q.scope), path=f"<{split}>", line=i + 1,
                                      field="scope")
    train, val = resolve_val(list(train), list(val) if val else None, cfg)
    if len(train) < 2 or not val:
        raise MasdrError(f"need at least 2 training and 1 validation queries, got {len(train)} and {len(val)}")
    unseen = [s for s in taxonomy.names if s not in {q.scope for q in train}]
    if unseen:
        log.warning("no training queries for scope(s) %s: the router will never predict them", unseen)
    return train, val


def resolve_val(train: list[LabelledQuery], val: list[LabelledQuery] | None,
                cfg: TrainConfig) -> tuple[list[LabelledQuery], list[LabelledQuery]]:
    if val:
        return train, val
    from ..datasets.splits import stratified_split

    s = stratified_split(train, val=cfg.val_fraction, test=0.0, seed=cfg.seed)
    return s["train"], s["val"]


# ---- step 2: model, optimizer, encoded data --------------------------------------------------------
@dataclass
class Run:
    """Everything one training run works with."""

    cfg: TrainConfig
    labels: list[str]
    device: str
    mixed_precision: str
    accelerator: Any
    model: Any  # prepared by accelerate (DDP-wrapped under several processes)
    unwrapped: Any  # the RouterModel itself
    tokenizer: Any
    optimizer: Any
    loss_fn: Any
    train: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # input ids, attention mask, labels
    val: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    key: str
    n_trainable: int
    n_total: int

    @property
    def steps_per_epoch(self) -> int:
        per_rank = len(self.train[2]) // self.accelerator.num_processes
        return math.ceil(per_rank / self.cfg.batch_size)

    def predict_logits(self, ids: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
        import torch

        self.model.eval()
        outs = []
        with torch.inference_mode(), self.accelerator.autocast():
            for i in range(0, len(ids), 256):
                outs.append(self.model(ids[i:i + 256].to(self.accelerator.device),
                                       mask[i:i + 256].to(self.accelerator.device)).float().cpu())
        return torch.cat(outs).numpy()


def resolve_precision(cfg: TrainConfig) -> tuple[str, str]:
    """``(device, mixed_precision)``: bf16 autocast on a CUDA device that supports it, else none."""
    import torch

    from ..devices import resolve_device

    device = resolve_device(cfg.device)
    mp = cfg.mixed_precision
    if mp == "auto":
        mp = "bf16" if device == "cuda" and torch.cuda.is_bf16_supported() else "no"
    return device, mp


def build_run(taxonomy: Taxonomy, train: list[LabelledQuery], val: list[LabelledQuery], cfg: TrainConfig) -> Run:
    """Tokenise the data, build encoder + LoRA + head, the optimizer and the loss (seed first)."""
    import torch
    from accelerate import Accelerator
    from transformers import AutoTokenizer

    from ..retrieval.embedder import resolve_encoder_path
    from .model import build_lora_model

    labels = taxonomy.names
    device, mp = resolve_precision(cfg)
    accelerator = Accelerator(cpu=device == "cpu", mixed_precision=mp)
    base_path = resolve_encoder_path(cfg.base_model)
    tokenizer = AutoTokenizer.from_pretrained(base_path)
    model = build_lora_model(base_path, len(labels), pooling=cfg.pooling, head_dropout=cfg.head_dropout,
                             lora_r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                             target_modules=cfg.target_modules)
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n_total = sum(p.numel() for p in model.parameters())

    def encode(qs: Sequence[LabelledQuery]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        enc = tokenizer([q.query for q in qs], padding="max_length", truncation=True, max_length=cfg.max_length,
                        return_tensors="pt")
        return enc["input_ids"], enc["attention_mask"], torch.tensor([labels.index(q.scope) for q in qs])

    train_t, val_t = encode(train), encode(val)
    class_weight = None
    if cfg.class_weighting == "balanced":
        counts = np.bincount(train_t[2].numpy(), minlength=len(labels)).astype(float)
        w = np.where(counts > 0, len(train) / (len(labels) * np.maximum(counts, 1)), 0.0)
        class_weight = torch.tensor(w, dtype=torch.float32)

    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if n.endswith("bias") or "LayerNorm" in n else decay).append(p)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=cfg.learning_rate)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    loss_fn = torch.nn.CrossEntropyLoss(
        weight=class_weight.to(accelerator.device) if class_weight is not None else None,
        label_smoothing=cfg.label_smoothing)
    return Run(cfg=cfg, labels=labels, device=device, mixed_precision=mp, accelerator=accelerator, model=prepared,
               unwrapped=accelerator.unwrap_model(prepared), tokenizer=tokenizer, optimizer=optimizer,
               loss_fn=loss_fn, train=train_t, val=val_t, key=run_key(cfg, taxonomy, train, val),
               n_trainable=n_trainable, n_total=n_total)


# ---- step 3: epochs, early stopping, checkpoints ---------------------------------------------------
@dataclass
class FitState:
    """The loop's state; checkpointed after every epoch, restored on resume."""

    history: list[dict[str, float]] = field(default_factory=list)
    best_f1: float = -1.0
    best_epoch: int = 0
    bad_epochs: int = 0
    epoch: int = 0  # epochs completed
    best: dict[str, Any] | None = None  # trainable tensors of the best epoch
    resumed_from_epoch: int = 0
    stopped_early: bool = False
    seconds: float = 0.0


def resume(run: Run, checkpoint_dir: Path | None) -> FitState:
    """The state of this run's checkpoint (weights and optimizer restored), or a fresh state."""
    from .checkpoint import load_checkpoint
    from .model import load_trainable_state

    state = load_checkpoint(checkpoint_dir, run.key) if checkpoint_dir is not None else None
    if state is None:
        return FitState()
    load_trainable_state(run.unwrapped, state["trainable"])
    run.optimizer.load_state_dict(state["optimizer"])
    log.warning("resuming from checkpoint %s after epoch %d", checkpoint_dir, state["epoch"])
    return FitState(history=state["history"], best_f1=state["best_f1"], best_epoch=state["best_epoch"],
                    bad_epochs=state["bad_epochs"], epoch=state["epoch"], best=state["best"],
                    resumed_from_epoch=state["epoch"])


def train_one_epoch(run: Run, epoch: int) -> float:
    """One pass over the training data; returns the mean training loss."""
    import torch

    from ..progress import progress_bar

    cfg, acc = run.cfg, run.accelerator
    world, rank = acc.num_processes, acc.process_index
    steps = run.steps_per_epoch
    total_steps = steps * cfg.epochs
    warmup = max(1, int(cfg.warmup_ratio * total_steps))
    n = len(run.train[2])
    run.model.train()
    torch.manual_seed(cfg.seed * 1000 + epoch)  # dropout masks: a function of (seed, epoch) alone
    g = torch.Generator().manual_seed(cfg.seed * 7919 + epoch)
    perm = torch.randperm(n, generator=g)[: (n // world) * world][rank::world]
    total_loss, n_seen = 0.0, 0
    with progress_bar(f"epoch {epoch + 1}/{cfg.epochs}", steps, enabled=cfg.progress and acc.is_main_process) as bar:
        for b in range(steps):
            idx = perm[b * cfg.batch_size:(b + 1) * cfg.batch_size]
            for group in run.optimizer.param_groups:
                group["lr"] = lr_at(epoch * steps + b, total_steps, warmup, cfg.learning_rate)
            ids, mask, y = (t[idx].to(acc.device) for t in run.train)
            width = int(mask.sum(1).max())  # trim the padding shared by the whole batch: queries are short
            with acc.autocast():
                loss = run.loss_fn(run.model(ids[:, :width], mask[:, :width]).float(), y)
            acc.backward(loss)
            run.optimizer.step()
            run.optimizer.zero_grad(set_to_none=True)
            total_loss += float(loss.detach()) * len(idx)
            n_seen += len(idx)
            bar.advance()
    return total_loss / max(n_seen, 1)


def validate(run: Run) -> dict[str, float]:
    import torch

    logits = run.predict_logits(run.val[0], run.val[1])
    pred, true = logits.argmax(1), run.val[2].numpy()
    return {"val_loss": float(torch.nn.functional.cross_entropy(torch.from_numpy(logits), run.val[2])),
            "val_accuracy": float((pred == true).mean()), "val_macro_f1": macro_f1(true, pred, len(run.labels))}


def fit_epochs(run: Run, state: FitState, *, tracker: Tracker, checkpoint_dir: Path | None = None,
               on_epoch_end: EpochCallback | None = None) -> FitState:
    """Train from ``state.epoch`` until ``cfg.epochs`` or early stopping; keeps the best epoch's
    weights in ``state.best`` and checkpoints after every epoch."""
    from .checkpoint import save_checkpoint
    from .model import trainable_state

    cfg, acc = run.cfg, run.accelerator
    t0 = time.perf_counter()
    for epoch in range(state.epoch, cfg.epochs):
        train_loss = train_one_epoch(run, epoch)
        row = {"epoch": epoch + 1, "train_loss": train_loss, **validate(run),
               "lr": run.optimizer.param_groups[0]["lr"], "seconds": time.perf_counter() - t0}
        state.history.append(row)
        state.epoch = epoch + 1
        tracker.log(row)
        if cfg.progress and acc.is_main_process:
            log.info("epoch %d: train loss %.4f  val loss %.4f  val acc %.4f  val macro-F1 %.4f", epoch + 1,
                     train_loss, row["val_loss"], row["val_accuracy"], row["val_macro_f1"])
        if row["val_macro_f1"] > state.best_f1 + 1e-6:
            state.best_f1, state.best_epoch, state.bad_epochs = row["val_macro_f1"], epoch + 1, 0
            state.best = trainable_state(run.unwrapped)
        else:
            state.bad_epochs += 1
        if checkpoint_dir is not None and acc.is_main_process:
            save_checkpoint(checkpoint_dir, run.key, epoch=epoch + 1, trainable=trainable_state(run.unwrapped),
                            best=state.best, optimizer=run.optimizer.state_dict(), history=state.history,
                            best_f1=state.best_f1, best_epoch=state.best_epoch, bad_epochs=state.bad_epochs)
        acc.wait_for_everyone()
        if on_epoch_end is not None:
            on_epoch_end(EpochEnd(epoch + 1, row, checkpoint_dir))
        if state.bad_epochs >= cfg.early_stopping_patience:
            state.stopped_early = True
            break
    state.seconds = time.perf_counter() - t0
    return state


# ---- step 4: calibration ---------------------------------------------------------------------------
def calibrate(run: Run, state: FitState) -> tuple[dict[str, Any], dict[str, Any]]:
    """Temperature and abstention threshold on the validation data, with the best epoch's weights
    loaded: ``(calibration, val_metrics)``."""
    from .calibration import choose_threshold, expected_calibration_error, fit_temperature, softmax
    from .model import load_trainable_state

    cfg = run.cfg
    if state.best is not None:
        load_trainable_state(run.unwrapped, state.best)
    logits = run.predict_logits(run.val[0], run.val[1])
    true = run.val[2].numpy()
    temperature = fit_temperature(logits, true)
    probs = softmax(logits, temperature)
    conf, pred = probs.max(1), probs.argmax(1)
    correct = pred == true
    _, thr_stats = choose_threshold(conf, correct, target_accuracy=cfg.target_accuracy,
                                    target_abstain_rate=cfg.target_abstain_rate)
    calibration = {"temperature": temperature, **thr_stats, "target_accuracy": cfg.target_accuracy,
                   "target_abstain_rate": cfg.target_abstain_rate,
                   "val_ece_before": expected_calibration_error(softmax(logits).max(1), correct),
                   "val_ece_after": expected_calibration_error(conf, correct)}
    val_metrics = {"accuracy": float(correct.mean()), "macro_f1": macro_f1(true, pred, len(run.labels)),
                   "best_epoch": state.best_epoch, "epochs_run": len(state.history),
                   "stopped_early": state.stopped_early}
    return calibration, val_metrics


# ---- the whole run ---------------------------------------------------------------------------------
@contextlib.contextmanager
def run_scope(cfg: TrainConfig, device: str) -> Any:
    """The process-wide switches a run needs, restored when it ends."""
    from ..process import deterministic_algorithms, hf_progress_bars_off, seeded

    with contextlib.ExitStack() as stack:
        stack.enter_context(seeded(cfg.seed))
        stack.enter_context(deterministic_algorithms(device == "cpu"))
        stack.enter_context(hf_progress_bars_off())
        stack.enter_context(warnings.catch_warnings())
        # peft calls a transformers API that transformers 5 renamed; the warning is theirs, not ours
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def train_router(taxonomy: Taxonomy, train: Sequence[LabelledQuery], val: Sequence[LabelledQuery] | None = None,
                 cfg: TrainConfig | None = None, *, checkpoint_dir: str | Path | None = None,
                 on_epoch_end: EpochCallback | None = None) -> TrainResult:
    """Train, early-stop, calibrate; return a :class:`LoraRouter` ready to save.

    ``on_epoch_end`` is called after each epoch's checkpoint is written (raise in it to stop).

    >>> result = train_router(tax, read_queries("train.jsonl", tax))        # doctest: +SKIP
    >>> result.router.save_pretrained("checkpoints/my-router")              # doctest: +SKIP
    """
    from ..routers.lora import LoraRouter

    cfg = cfg or TrainConfig()
    train_q, val_q = prepare_splits(taxonomy, train, val, cfg)
    ckpt = Path(checkpoint_dir) if checkpoint_dir is not None else None
    device, _ = resolve_precision(cfg)
    with run_scope(cfg, device):
        run = build_run(taxonomy, train_q, val_q, cfg)
        state = resume(run, ckpt)
        tracker = Tracker(cfg, run.accelerator.is_main_process, run.key, extra={
            "n_train": len(train_q), "n_val": len(val_q), "trainable_params": run.n_trainable,
            "total_params": run.n_total, "labels": run.labels, "device": run.device,
            "mixed_precision": run.mixed_precision, "world_size": run.accelerator.num_processes})
        try:
            fit_epochs(run, state, tracker=tracker, checkpoint_dir=ckpt, on_epoch_end=on_epoch_end)
            calibration, val_metrics = calibrate(run, state)
            tracker.summary({**{f"val/{k}": v for k, v in val_metrics.items() if not isinstance(v, bool)},
                             **{f"calibration/{k}": v for k, v in calibration.items() if v is not None}})
        finally:
            tracker.finish()
    run.unwrapped.eval()
    meta = {"base_model": cfg.base_model,
            "lora": {"r": cfg.lora_r, "alpha": cfg.lora_alpha, "dropout": cfg.lora_dropout,
                     "target_modules": list(cfg.target_modules)},
            "train": {"config": cfg.to_dict(), "run_key": run.key, "n_train": len(train_q), "n_val": len(val_q),
                      "trainable_params": run.n_trainable, "total_params": run.n_total}}
    router = LoraRouter(taxonomy, run.unwrapped, run.tokenizer, temperature=calibration["temperature"],
                        threshold=calibration["threshold"], below_threshold=cfg.below_threshold,
                        max_length=cfg.max_length, meta=meta, device=str(run.accelerator.device))
    return TrainResult(router=router, history=state.history, val_metrics=val_metrics, calibration=calibration,
                       train_seconds=state.seconds, n_train=len(train_q), n_val=len(val_q),
                       resumed_from_epoch=state.resumed_from_epoch, best_epoch=state.best_epoch,
                       extra={"trainable_params": run.n_trainable, "total_params": run.n_total, "device": run.device,
                              "mixed_precision": run.mixed_precision, "wandb_dir": tracker.run_dir})

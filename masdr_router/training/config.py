"""Training configuration for the LoRA router. ``configs/train/*.yaml`` mirror it one-to-one."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import DEFAULT_ENCODER, ConfigBase


@dataclass
class TrainConfig(ConfigBase):
    """Everything that decides how a router is trained, calibrated and exported."""

    # model
    base_model: str = field(default=DEFAULT_ENCODER, metadata={"help": "'minilm' or a local HF encoder dir"})
    pooling: str = field(default="mean", metadata={"help": "'mean' over tokens or 'cls'"})
    max_length: int = field(default=64, metadata={"help": "token limit for a query"})
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    target_modules: list[str] = field(default_factory=lambda: ["query", "key", "value", "dense"],
                                      metadata={"help": "module names that get LoRA adapters"})
    head_dropout: float = 0.1
    # optimisation
    epochs: int = 12
    batch_size: int = 32
    learning_rate: float = field(default=1e-3, metadata={"help": "LoRA adapters and head"})
    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    class_weighting: str = field(default="balanced", metadata={"help": "'balanced' or 'none'"})
    label_smoothing: float = 0.0
    early_stopping_patience: int = field(default=3, metadata={"help": "epochs without val macro-F1 gain"})
    val_fraction: float = field(default=0.15, metadata={"help": "held out of train when no val file"})
    seed: int = 0
    device: str = field(default="auto", metadata={"help": "'auto' (CUDA when present), 'cpu', 'cuda'"})
    mixed_precision: str = field(default="auto", metadata={"help": "'auto' (bf16 on CUDA), 'no', 'bf16', 'fp16'"})
    # calibration and abstention
    target_accuracy: float = field(default=0.95, metadata={"help": "accuracy-when-answered the threshold aims at"})
    target_abstain_rate: float | None = field(default=None, metadata={
        "help": "if set, choose the threshold for this abstention rate instead of target_accuracy"})
    below_threshold: str = field(default="abstain", metadata={"help": "'abstain' or 'top2' below threshold"})
    # logging
    report_to: str = field(default="none", metadata={"help": "'none' or 'wandb'"})
    wandb_project: str = "masdr-router"
    wandb_mode: str = field(default="offline", metadata={"help": "'offline' (default), 'online' or 'disabled'"})
    progress: bool = True

    def __post_init__(self) -> None:
        checks = [
            (self.pooling in {"mean", "cls"}, f"pooling must be mean or cls, got {self.pooling!r}"),
            (self.class_weighting in {"balanced", "none"}, "class_weighting must be balanced or none"),
            (self.device in {"auto", "cpu", "cuda"}, f"device must be auto, cpu or cuda, got {self.device!r}"),
            (self.mixed_precision in {"auto", "no", "bf16", "fp16"}, "mixed_precision must be auto, no, bf16, fp16"),
            (self.below_threshold in {"abstain", "top2"}, "below_threshold must be abstain or top2"),
            (self.report_to in {"none", "wandb"}, f"report_to must be none or wandb, got {self.report_to!r}"),
            (self.wandb_mode in {"offline", "online", "disabled"}, "wandb_mode must be offline, online, disabled"),
            (self.epochs > 0 and self.batch_size > 0 and self.max_length > 0, "epochs, batch_size, max_length > 0"),
            (self.lora_r > 0 and self.lora_alpha > 0, "lora_r and lora_alpha must be positive"),
            (0 < self.val_fraction < 1, "val_fraction must be in (0, 1)"),
            (0 < self.target_accuracy <= 1, "target_accuracy must be in (0, 1]"),
            (self.target_abstain_rate is None or 0 <= self.target_abstain_rate < 1,
             "target_abstain_rate must be in [0, 1)"),
            (bool(self.target_modules), "target_modules must name at least one module"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)

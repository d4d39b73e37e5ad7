"""Training the LoRA router: config, model, trainer (transformers + peft + accelerate), calibration."""

from .config import TrainConfig

__all__ = ["TrainConfig"]

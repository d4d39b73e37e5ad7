"""Device selection in one place: ``auto`` means CUDA when torch sees a device, else CPU."""

from __future__ import annotations

from typing import Any

from .errors import MasdrError

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(device: str = "auto") -> str:
    """``"auto"`` -> ``"cuda"`` or ``"cpu"``; an explicit ``"cuda"`` without a GPU is an error.

    >>> resolve_device("cpu")
    'cpu'
    """
    if device not in DEVICES:
        raise MasdrError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cpu":
        return device
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available():
        raise MasdrError("device 'cuda' requested but torch sees no CUDA device; use --device cpu or auto")
    return device


def half_dtype() -> Any:
    """The 16-bit float type for inference on the current CUDA device (bf16 where supported)."""
    import torch

    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16

"""Process-wide switches, scoped: each context manager sets a global (RNG state, deterministic
kernels, a library's progress bars) for the block and restores what was there before, so calling
the package never changes the caller's process behind its back."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def hf_progress_bars_off() -> Iterator[None]:
    """Hide transformers' loading bars for the block (ours cover the long work; theirs are noise)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed torch's and numpy's global generators for the block; their previous states come back
    afterwards (``torch.random.fork_rng`` covers CPU and every visible CUDA device)."""
    import numpy as np
    import torch

    np_state = np.random.get_state()
    with torch.random.fork_rng(devices=range(torch.cuda.device_count()) if torch.cuda.is_available() else []):
        torch.manual_seed(seed)
        np.random.seed(seed)
        try:
            yield
        finally:
            np.random.set_state(np_state)


@contextlib.contextmanager
def deterministic_algorithms(enabled: bool) -> Iterator[None]:
    """``torch.use_deterministic_algorithms(enabled, warn_only=True)`` for the block."""
    import torch

    before = torch.are_deterministic_algorithms_enabled()
    before_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(enabled, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=before_warn)

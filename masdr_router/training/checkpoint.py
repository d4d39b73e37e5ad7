"""Resumable training checkpoints: safetensors for tensors, JSON for the rest (no pickle).

Written atomically after every epoch, so a run killed at any moment resumes from the last
complete epoch. A checkpoint only resumes the run that wrote it (same config, taxonomy, data).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..atomic import atomic_directory

STATE = "state.json"


def _flatten_optimizer(sd: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    import torch

    tensors, scalars = {}, {}
    for pid, st in sd["state"].items():
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                tensors[f"opt.{pid}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars[f"{pid}.{k}"] = v
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def save_checkpoint(path: Path, run_key: str, *, epoch: int, trainable: dict[str, Any], best: dict[str, Any] | None,
                    optimizer: dict[str, Any], history: list[dict[str, float]], best_f1: float, best_epoch: int,
                    bad_epochs: int) -> None:
    from safetensors.torch import save_file

    opt_tensors, opt_meta = _flatten_optimizer(optimizer)
    with atomic_directory(path, overwrite=True) as tmp:
        save_file({k: v.contiguous() for k, v in trainable.items()}, str(tmp / "trainable.safetensors"))
        if best is not None:
            save_file({k: v.contiguous() for k, v in best.items()}, str(tmp / "best.safetensors"))
        save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
        (tmp / STATE).write_text(json.dumps({
            "run_key": run_key, "epoch": epoch, "history": history, "best_f1": best_f1, "best_epoch": best_epoch,
            "bad_epochs": bad_epochs, "optimizer": opt_meta}, indent=1))


def load_checkpoint(path: Path, run_key: str) -> dict[str, Any] | None:
    """The checkpoint's state, or ``None`` when there is none for this run."""
    from safetensors.torch import load_file

    spath = path / STATE
    if not spath.is_file():
        return None
    state = json.loads(spath.read_text())
    if state.get("run_key") != run_key:
        return None
    opt_tensors = load_file(str(path / "optimizer.safetensors"))
    opt_state: dict[int, dict[str, Any]] = {}
    for key, v in opt_tensors.items():
        _, pid, k = key.split(".", 2)
        opt_state.setdefault(int(pid), {})[k] = v
    for key, v in state["optimizer"]["scalars"].items():
        pid, k = key.split(".", 1)
        opt_state.setdefault(int(pid), {})[k] = v
    best_path = path / "best.safetensors"
    return {**state, "trainable": load_file(str(path / "trainable.safetensors")),
            "best": load_file(str(best_path)) if best_path.is_file() else None,
            "optimizer": {"state": opt_state, "param_groups": state["optimizer"]["param_groups"]}}

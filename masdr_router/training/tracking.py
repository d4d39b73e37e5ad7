"""Experiment tracking: wandb (offline by default); a no-op when ``report_to`` is ``none``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .config import TrainConfig


class Tracker:
    """Logs per-epoch rows and a final summary to one wandb run (on the main process only)."""

    def __init__(self, cfg: TrainConfig, main: bool, run_key: str, extra: dict[str, Any]) -> None:
        self.run: Any = None
        self.run_dir: str | None = None
        # wandb's own variables win over the config, as they do for any wandb script
        mode = os.environ.get("WANDB_MODE") or cfg.wandb_mode
        if cfg.report_to != "wandb" or not main or mode == "disabled":
            return
        from ..extras import require

        wandb = require("wandb")

        # the run id is the training run's key: a run killed and started again (it resumes from its
        # checkpoint) goes on logging into the same wandb run
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or cfg.wandb_project, mode=mode,
                              config={**cfg.to_dict(), **extra}, id=f"router-{run_key}", name=f"router-{run_key}",
                              resume="allow", dir=os.environ.get("WANDB_DIR"), reinit="finish_previous",
                              settings=wandb.Settings(silent=True))
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

"""PNG plots of evaluation reports. Figures are built with matplotlib's object API (no pyplot), so
plotting needs no display and never switches the process's matplotlib backend."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def plot_retrieval_report(report: dict[str, Any], path: str | Path) -> Path:
    """Source-confusion heatmaps (one per system) and dilution δ against scope size."""
    import numpy as np

    from ..extras import require

    require("matplotlib")
    from matplotlib.figure import Figure

    systems = list(report["confusion"])
    n = len(systems) + 1
    fig = Figure(figsize=(4.2 * n, 4.4), layout="constrained")
    axes = fig.subplots(1, n)
    for ax, name in zip(axes, systems):
        c = report["confusion"][name]
        m = np.array([[np.nan if v is None else v for v in row] for row in c["matrix"]], dtype=float)
        ax.imshow(m, vmin=0, vmax=1, cmap="viridis")
        ax.set_title(f"{name}: diag {c['diagonal_mean'] if c['diagonal_mean'] is not None else '-'}", fontsize=10)
        ax.set_yticks(range(len(c["labels"])), c["labels"], fontsize=7)
        ax.set_xticks(range(len(c["columns"])), c["columns"], fontsize=7, rotation=90)
        ax.set_ylabel("gold scope")
        ax.set_xlabel("retrieved chunk's scope")
    ax = axes[-1]
    d = report["dilution"]["per_scope"]
    xs = [v["chunks"] for v in d.values()]
    ys = [v["delta"] for v in d.values()]
    ax.scatter(xs, ys)
    for s, x, y in zip(d, xs, ys):
        ax.annotate(s, (x, y), fontsize=7)
    ax.set_xscale("log")
    rho = report["dilution"]["spearman_rho"]
    ax.set_title(f"dilution δ vs scope size (ρ={rho if rho is not None and not math.isnan(rho) else '-'})",
                 fontsize=10)
    ax.set_xlabel("chunks in scope (log)")
    ax.set_ylabel("mean δ")
    fig.savefig(path, dpi=110)
    return Path(path)


def plot_router_report(report: dict[str, Any], path: str | Path) -> Path:
    """Confusion matrix (row-normalised, abstentions as the last column) and reliability diagram."""
    import numpy as np

    from ..extras import require

    require("matplotlib")
    from matplotlib.figure import Figure

    c = report["confusion"]
    m = np.array(c["matrix"], dtype=float)
    m = m / np.maximum(m.sum(1, keepdims=True), 1)
    n = len(c["labels"])
    fig = Figure(figsize=(5 + 0.35 * n + 4.5, 0.3 * n + 4), layout="constrained")
    axes = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1 + 0.1 * n, 1]})
    ax = axes[0]
    ax.imshow(m, vmin=0, vmax=1, cmap="viridis")
    ax.set_yticks(range(n), c["labels"], fontsize=7)
    ax.set_xticks(range(len(c["columns"])), c["columns"], fontsize=7, rotation=90)
    ax.set_ylabel("gold scope")
    ax.set_xlabel("routed to")
    ax.set_title(f"{report['router']}: accuracy {report['accuracy']:.3f}, macro-F1 {report['macro_f1']:.3f}, "
                 f"abstain {100 * report['abstain_rate']:.1f}%", fontsize=9)
    ax = axes[1]
    rel = report.get("reliability")
    if rel:
        xs = [b - 0.05 for b in rel["bin_upper"]]
        accs = [a if a is not None else 0 for a in rel["accuracy"]]
        ax.bar(xs, accs, width=0.095, alpha=0.8, label="accuracy")
        ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("confidence")
        ax.set_ylabel("accuracy")
        ax.legend(fontsize=8, loc="upper left")
        ax.set_title(f"reliability (ECE {report['ece']:.3f})", fontsize=9)
    else:
        ax.axis("off")
        ax.text(0.5, 0.5, "no confidence scores", ha="center")
    fig.savefig(path, dpi=110)
    return Path(path)

"""The learning-curve report: seeds averaged into one table row and one point per system on the
curves (bench/learning_curve.py is a script, loaded here by path)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "learning_curve.py"


@pytest.fixture(scope="module")
def lc():
    spec = importlib.util.spec_from_file_location("learning_curve", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(dataset, size, seed, system, f1, n):
    return {"dataset": dataset, "size": size, "seed": seed, "system": system, "n_train": n, "n_test": 100,
            "macro_f1": f1, "accuracy": f1, "train_s": 1.0, "regime": "cv", "model": "probe"}


@pytest.fixture
def results():
    # two sample seeds of bbc at two sizes; pytest-docs has no setfit row, and one failed cell
    return [
        row("bbc", "8", 0, "default", 0.80, 40), row("bbc", "8", 1, "default", 0.84, 40),
        row("bbc", "8", 0, "setfit", 0.78, 40), row("bbc", "8", 1, "setfit", 0.80, 40),
        row("bbc", "all", 0, "default", 0.90, 1647), row("bbc", "all", 0, "setfit", 0.92, 1647),
        row("pytest-docs", "8", 0, "default", 0.41, 48), row("pytest-docs", "8", 0, "probe", 0.30, 48),
        {"dataset": "pytest-docs", "size": "16", "seed": 0, "system": "default", "error": "KeyboardInterrupt"},
    ]


def test_the_table_averages_sample_seeds_and_says_how_many(lc, results):
    table = lc.markdown_table(results)
    bbc8 = next(line for line in table.splitlines() if line.startswith("| bbc | 8 "))
    assert "0.820 (0.820), mean of 2 samples" in bbc8
    assert "**0.790**" in bbc8 and "+0.030" in bbc8  # setfit's mean is the best baseline
    assert "| pytest-docs | 16 " not in table  # a failed cell is left out, not scored


def test_the_curves_draw_a_panel_per_set_and_a_point_per_size_at_the_seeds_mean(lc, results):
    fig = lc.learning_curve_figure(results)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["bbc", "pytest-docs"]
    lines = {bars.get_label(): bars.lines[0] for bars in panels[0].containers}  # the error bars' data lines
    assert list(lines["default"].get_xdata()) == [40, 1647]
    assert list(lines["default"].get_ydata()) == pytest.approx([0.82, 0.90])
    assert list(lines["setfit"].get_ydata()) == pytest.approx([0.79, 0.92])
    assert [t.get_text() for t in panels[0].get_xticklabels()] == ["8\n(40)", "all\n(1647)"]
    # the legend names every system drawn, the probe too, though only the second panel has it
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["default", "probe", "setfit"]


def test_a_plot_is_written_whole_or_not_at_all(lc, results, tmp_path):
    out = lc.plot_learning_curves(results, tmp_path / "curves" / "lc.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in out.parent.iterdir()) == ["lc.png"]  # no temporary file left behind
    with pytest.raises(ValueError, match="no finished cell"):
        lc.learning_curve_figure(results[-1:])

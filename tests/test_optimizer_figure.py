"""Figure 14 (experiment 15) draws, without a warning, from a synthetic table shaped like
the full run (three arms; parts sweep, taus and long) and from ``--quick``'s tables where
there are some, with y-limits from the data; a missing table names itself and its command."""

from __future__ import annotations

import itertools
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnlab.harness import figures as harness_figures
from attnlab.harness.errors import DataError
from attnlab.harness.tables import Tables
from attnlab.studies.optimizer import figure
from attnlab.studies.optimizer.study import CURVES_CSV, RUNS_CSV

QUICK = Path("/tmp/q15")
#: arm: (optimizer, side, best rate)
ARMS = {"adamw": ("adamw", "shared", 1e-2), "muon": ("muon", "shared", 1e-1),
        "muon_pinned": ("muon", "pinned", 3e-2)}  # fmt: skip
LRS = (3e-3, 1e-2, 3e-2, 1e-1, 3e-1)
STEPS = np.arange(0, 200, 10)


def _cells():
    """(part, arm, schedule, mechanism, clip_on, tau, lr, seed) of the full run."""
    for arm, (_, _, best) in ARMS.items():
        for lr, seed in itertools.product(LRS, (0, 1)):
            yield "sweep", arm, "cosine", "scaled", "none", np.nan, lr, seed
            yield "sweep", arm, "cosine", "qk_norm", "none", np.nan, lr, seed
            yield "sweep", arm, "cosine", "scaled", "signed", 100.0, lr, seed
        for lr, seed in itertools.product((best, 3 * best), (0, 1)):
            for tau in (10.0, 20.0, 30.0, 50.0, 100.0):
                yield "taus", arm, "cosine", "scaled", "signed", tau, lr, seed
            yield "taus", arm, "cosine", "scaled", "abs", 20.0, lr, seed
        for lr, seed in itertools.product((best, 3 * best), (0, 1, 2)):
            yield "long", arm, "cosine", "scaled", "none", np.nan, lr, seed
            yield "long", arm, "cosine", "scaled", "signed", 20.0, lr, seed
            yield "long", arm, "wsd", "scaled", "signed", 20.0, lr, seed


def _full_tables(directory: Path) -> None:
    """Write runs and curves tables shaped like the full run's into ``directory``."""
    rng = np.random.default_rng(0)
    runs, curves = [], []
    for part, arm, schedule, mechanism, clip_on, tau, lr, seed in _cells():
        optimizer, side, best = ARMS[arm]
        keys = {"part": part, "optimizer": optimizer, "side": side, "side_lr": 1e-2,
                "schedule": schedule, "mechanism": mechanism, "qk_clip_on": clip_on,
                "qk_clip_tau": tau, "lr": lr, "seed": seed}  # fmt: skip
        growth = 5 * (lr / best) * (3 if optimizer == "muon" else 1) * (1 + 0.2 * rng.random())
        free = np.exp(np.log(growth) * STEPS / STEPS[-1] * 3) + rng.random(len(STEPS))
        clipped = not np.isnan(tau)
        held = np.minimum(free, tau * (1 + 0.5 * rng.random(len(STEPS)))) if clipped else free
        after = tau * (1 + rng.random() * (lr / best)) if clipped else np.nan
        loss = 2.2 + 0.1 * np.log10(lr / best) ** 2 + 0.02 * rng.random()
        runs.append(keys | {"final_val_loss": loss, "max_signed_after_first_clip": after})
        for layer in (0, 1):
            curves.append(pd.DataFrame(keys | {
                "layer": layer, "step": STEPS, "max_attn_logit": free * (1 + 0.1 * layer),
                "max_signed_logit": held * (1 - 0.1 * layer) if clipped else np.nan,
            }))  # fmt: skip
    pd.DataFrame(runs).to_csv(directory / RUNS_CSV, index=False)
    pd.concat(curves).to_csv(directory / CURVES_CSV, index=False,
                             compression={"method": "xz", "preset": 0})  # fmt: skip


def _finite_ys(ax) -> np.ndarray:
    """Every finite y the axes draw: lines (tau's among them), bands, error bars."""
    ys = [np.asarray(line.get_ydata(), float) for line in ax.lines]
    for collection in ax.collections:
        for path in collection.get_paths():
            ys.append(path.vertices[:, 1])
    ys = np.concatenate(ys) if ys else np.array([])
    return ys[np.isfinite(ys)]


def _draw(tables: Tables, out: Path, monkeypatch) -> list:
    """Draw the figure with warnings as errors; return its axes that hold data."""
    drawn = []
    real = figure.save

    def keep(fig, figures_dir, stem):
        drawn.append(fig)
        return real(fig, figures_dir, stem)

    monkeypatch.setattr(figure, "save", keep)
    monkeypatch.setattr(harness_figures, "DPI", 60)  # the test's time: a coarser PNG
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        paths = figure.fig14_optimizer(tables, out)
    assert [p.name for p in paths] == ["fig14_optimizer.png", "fig14_optimizer.pdf"]
    assert all(p.stat().st_size > 0 for p in paths)
    (fig,) = drawn
    legends = [*fig.legends]
    for sub in fig.subfigs:
        legends += [*sub.legends, *(s for subsub in sub.subfigs for s in subsub.legends)]
    assert legends and all(t.get_fontsize() >= 7 for lg in legends for t in lg.get_texts())
    return [ax for ax in fig.get_axes() if len(_finite_ys(ax))]


def _assert_y_from_data(axes) -> None:
    for ax in axes:
        ys = _finite_ys(ax)
        low, high = ax.get_ylim()
        if ax.get_yscale() == "log":
            ys = ys[ys > 0]
            assert ys.min() / 100 <= low and high <= ys.max() * 100, (ax.get_title(), low, high)
        else:
            span = max(ys.max() - ys.min(), 1e-9)
            assert high - low <= 100 * span, (ax.get_title(), low, high)
            assert ys.min() - 100 * span <= low and high <= ys.max() + 100 * span


def test_the_figure_draws_a_full_shaped_run(tmp_path, monkeypatch):
    _full_tables(tmp_path)
    axes = _draw(Tables(tmp_path, lambda name: "make"), tmp_path, monkeypatch)
    titles = " ".join(ax.get_title() for ax in axes)
    for part in ("(a) long run, cosine, best", "(a) long run, cosine, 3x best", "(b)", "(c)"):
        assert part in titles
    _assert_y_from_data(axes)
    (tau_ax,) = [ax for ax in axes if ax.get_title().startswith("(b)")]
    assert len(tau_ax.get_legend_handles_labels()[1]) == 8  # 3 arms x 2 rates, 1 and 2 tau


def test_the_figure_draws_the_quick_tables(tmp_path, monkeypatch):
    if not (QUICK / RUNS_CSV).is_file() or not (QUICK / CURVES_CSV).is_file():
        pytest.skip("no --quick tables in /tmp/q15")
    for name in (RUNS_CSV, CURVES_CSV):
        shutil.copy(QUICK / name, tmp_path / name)
    axes = _draw(Tables(tmp_path, lambda name: "make"), tmp_path, monkeypatch)
    assert not any(ax.get_title().startswith("(b)") for ax in axes)  # no tau sweep: a note
    _assert_y_from_data(axes)


def test_a_missing_table_names_itself_and_its_command(tmp_path):
    with pytest.raises(DataError, match=f"{RUNS_CSV}.*make the tables"):
        figure.fig14_optimizer(Tables(tmp_path, lambda name: "make the tables"), tmp_path)

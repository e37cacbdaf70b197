"""Figure 5 (experiment 06): the unscaled max weight over the (d_k, n) grid."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import patheffects

from attnlab.harness.figures import COLUMN_WIDTH_IN, STYLE, VARIANT_COLORS, save
from attnlab.harness.tables import Tables
from attnlab.studies.condensation.study import CSV, DEPARTURE_RATIO, SATURATED_MAX_WEIGHT
from attnlab.studies.condensation.thresholds import measured_thresholds, threshold_dk


def _log2_edges(centres: np.ndarray) -> np.ndarray:
    """Cell edges halfway in log2 between grid points (a pcolormesh on log axes)."""
    logs = np.log2(np.asarray(centres, float))
    step = np.diff(logs) if len(logs) > 1 else np.ones(1)
    inner = (logs[1:] + logs[:-1]) / 2
    return 2.0 ** np.concatenate([[logs[0] - step[0] / 2], inner, [logs[-1] + step[-1] / 2]])


def _log2_ticks(ax: plt.Axes, which: str, values: np.ndarray, every: int = 1) -> None:
    """Base-2 log scale on axis ``which`` ("x" or "y"), a tick at every grid value and an
    integer label at every ``every``-th."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log", base=2)
    axis.set_ticks(values, [str(int(v)) if i % every == 0 else "" for i, v in enumerate(values)])
    axis.set_minor_locator(plt.NullLocator())


def fig5_condensation(tables: Tables, figures_dir: Path) -> list[Path]:
    """(a) Heatmap over (d_k, n) of the mean max weight of unscaled attention, with the
    condensation threshold d_k = 2 ln n and the measured saturation points; (b) the
    measured thresholds against n beside 2 ln n."""
    frame = tables.get(
        CSV,
        ["n_keys", "d_k", "trials", "max_weight_unscaled_mean", "max_weight_scaled_mean"],
    )
    d_k, n = np.sort(frame.d_k.unique()), np.sort(frame.n_keys.unique())
    found = measured_thresholds(frame)
    grid = frame.pivot(index="n_keys", columns="d_k", values="max_weight_unscaled_mean")
    n_curve = np.geomspace(n[0] / 1.5, n[-1] * 1.5, 200)
    theory = r"theory: $d_k = 2\ln n$"
    saturation = rf"measured: unscaled max weight $\geq$ {SATURATED_MAX_WEIGHT:g}"
    departure = rf"measured: unscaled $\geq$ {DEPARTURE_RATIO:g}$\times$ scaled max weight"
    with plt.rc_context(STYLE):
        fig, (ax_map, ax_thr) = plt.subplots(
            1, 2, figsize=(2 * COLUMN_WIDTH_IN, 2.9), gridspec_kw={"width_ratios": [1.25, 1]}
        )
        mesh = ax_map.pcolormesh(
            _log2_edges(d_k),
            _log2_edges(n),
            grid.loc[n, d_k].to_numpy(),
            cmap="viridis",
            vmin=0,
            vmax=1,
        )
        fig.colorbar(mesh, ax=ax_map, label="mean max weight, unscaled", pad=0.02)
        ax_map.plot(
            threshold_dk(n_curve),
            n_curve,
            color="white",
            ls="--",
            lw=1.4,
            label=theory,
            path_effects=[patheffects.withStroke(linewidth=2.6, foreground="black")],
        )
        ax_map.plot(
            found.saturation_dk,
            found.n_keys,
            "o",
            color="white",
            mec="black",
            mew=0.6,
            label=saturation,
        )
        _log2_ticks(ax_map, "x", d_k)
        _log2_ticks(ax_map, "y", n)
        ax_map.set_xlim(_log2_edges(d_k)[[0, -1]])
        ax_map.set_ylim(_log2_edges(n)[[0, -1]])
        for label in ax_map.get_xticklabels():
            label.set_fontsize(6)
        ax_map.grid(False)
        ax_map.set_xlabel(r"head dimension $d_k$ (log$_2$ scale)")
        ax_map.set_ylabel(r"keys per row $n$ (log$_2$ scale)")
        ax_map.set_title("(a) Mean max weight of unscaled attention")
        ax_map.legend(loc="lower right", fontsize=6, framealpha=0.85)

        ax_thr.plot(n_curve, threshold_dk(n_curve), color="black", ls="--", label=theory)
        ax_thr.plot(
            found.n_keys,
            found.saturation_dk,
            "o-",
            color=VARIANT_COLORS["unscaled"],
            label=saturation,
        )
        ax_thr.plot(
            found.n_keys, found.departure_dk, "s-", color="0.45", mfc="white", label=departure
        )
        _log2_ticks(ax_thr, "x", n, every=2 if len(n) > 6 else 1)
        _log2_ticks(ax_thr, "y", d_k)
        ax_thr.set_xlim(_log2_edges(n)[[0, -1]])
        ax_thr.set_ylim(1, 128)
        ax_thr.set_xlabel(r"keys per row $n$ (log$_2$ scale)")
        ax_thr.set_ylabel(r"threshold head dimension $d_k$ (log$_2$)")
        ax_thr.set_title(r"(b) Threshold $d_k$ against $n$")
        ax_thr.legend(loc="upper left", fontsize=6)
        fig.suptitle(
            "Condensation of unscaled attention: standard normal q, k; "
            f"{int(frame.trials.iloc[0])} rows per cell; thresholds interpolated in log$_2 d_k$",
            fontsize=8,
        )
        fig.tight_layout()
        return save(fig, figures_dir, "fig5_condensation")

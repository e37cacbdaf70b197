"""Figure 6 (experiment 07): float16 overflow, mask fill values, correlated q and k."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from attnlab.harness.figures import COLUMN_WIDTH_IN, STYLE, VARIANT_COLORS, save
from attnlab.harness.tables import Tables
from attnlab.studies.failure_modes.study import FLOAT16_EXP_LIMIT, PART_CSVS, TV_TOLERANCE

#: Softmax implementations of experiment 07 (a) and their colours (float32: the suite's).
OVERFLOW_COLORS = {
    "float16": "#c0392b",
    "float16, max subtracted": "#e69f00",
    "float32 upcast (masked_softmax)": VARIANT_COLORS["scaled"],
}


#: Outcome of a fully masked row -> (cell text, cell colour) in experiment 07 (b).
MASK_OUTCOMES = {
    "nan": ("NaN", "#f4b6b0"),
    "uniform": ("uniform\n(leak 1)", "#fde3a7"),
    "zeros": ("zeros", "#c7e9c0"),
}


def _mask_outcome(row: pd.Series) -> str:
    """``nan``, ``zeros`` (the masked_softmax convention) or ``uniform`` (any other sum)."""
    if row.output_nan:
        return "nan"
    return "zeros" if row.row_sum == 0 else "uniform"


def _overflow_panel(ax: plt.Axes, overflow: pd.DataFrame) -> None:
    for method, group in overflow.groupby("method", sort=False):
        finite = group[group.nonfinite_fraction == 0].sort_values("max_logit")
        ax.plot(finite.max_logit, finite.tv_error_max, color=OVERFLOW_COLORS[method], label=method)
        broken = group[group.nonfinite_fraction > 0]
        if len(broken):
            start = broken.max_logit.min()
            colour = OVERFLOW_COLORS[method]
            ax.axvspan(start, group.max_logit.max(), color=colour, alpha=0.12, lw=0)
            ax.text(start + 1.5, 1e-5, f"{method}:\nNaN weights", color=colour, fontsize=6)
    ax.axvline(FLOAT16_EXP_LIMIT, color="0.3", ls=":", lw=1)
    limit = r"$\ln 65504$" + f"\n= {FLOAT16_EXP_LIMIT:.2f}"
    ax.text(FLOAT16_EXP_LIMIT + 0.8, 2e-2, limit, fontsize=6)
    ax.axhline(TV_TOLERANCE, color="0.5", ls="--", lw=0.8)
    ax.text(
        overflow.max_logit.max(),
        TV_TOLERANCE / 2.2,
        f"tolerance {TV_TOLERANCE:g}",
        ha="right",
        va="top",
        fontsize=6,
        color="0.35",
    )
    ax.set_yscale("log")
    ax.set_ylim(1e-12, 3)
    ax.set_xlabel("largest logit in the row $s$")
    ax.set_ylabel("worst total-variation error vs float64")
    ax.set_title("(a) float16 softmax overflow")
    ax.legend(loc="lower left", fontsize=5.5)


def _mask_panel(ax: plt.Axes, masks: pd.DataFrame) -> None:
    full = masks[masks.row == "fully masked"]
    dtypes = list(dict.fromkeys(full.dtype))
    fills = list(dict.fromkeys(full.fill))
    for i, fill in enumerate(fills):
        for j, dtype in enumerate(dtypes):
            row = full[(full.fill == fill) & (full.dtype == dtype)].iloc[0]
            text, colour = MASK_OUTCOMES[_mask_outcome(row)]
            ax.add_patch(plt.Rectangle((j, i), 1, 1, facecolor=colour, edgecolor="white", lw=2))
            ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=6.5)
    ax.set_xlim(0, len(dtypes))
    ax.set_ylim(len(fills), 0)
    ax.set_xticks(np.arange(len(dtypes)) + 0.5, dtypes)
    ax.set_yticks(
        np.arange(len(fills)) + 0.5, [f if f == "masked_softmax" else f"fill {f}" for f in fills]
    )
    ax.tick_params(length=0)
    ax.grid(False)
    for spine in ax.spines.values():
        spine.set_visible(False)
    partly = masks[masks.row == "partly masked"]
    clean = not partly.output_nan.any() and (partly.leaked_mass == 0).all()
    ax.set_xlabel(
        "partly masked rows: " + ("no NaN, no leak in any cell" if clean else "see REPORT.md")
    )
    ax.set_title("(b) Fully masked row, naive fill")


def _correlation_panel(ax: plt.Axes, corr: pd.DataFrame) -> None:
    rho = np.linspace(-1, 1, 101)
    ax.plot(rho, np.sqrt(1 + rho**2), color="black", lw=1, label=r"$\sqrt{1+\rho^2}$")
    ax.plot(rho, rho, color="black", lw=1, ls="--", label=r"$\rho$")
    colours = plt.get_cmap("Greens")(np.linspace(0.45, 0.95, corr.d_k.nunique()))
    for colour, (d_k, group) in zip(colours, corr.groupby("d_k"), strict=True):
        root = np.sqrt(d_k)
        ax.errorbar(
            group.rho, group.std_measured / root, yerr=group.std_se / root, fmt="o", color=colour
        )
        ax.errorbar(
            group.rho,
            group.mean_measured / d_k,
            yerr=group.mean_se / d_k,
            fmt="s",
            color=colour,
            mfc="white",
        )
    ax.plot([], [], "o", color="0.4", label=r"std / $\sqrt{d_k}$")
    ax.plot([], [], "s", color="0.4", mfc="white", label=r"mean / $d_k$")
    widths = ", ".join(str(d) for d in sorted(corr.d_k.unique()))
    ax.set_xlabel(r"correlation $\rho$ = corr$(q_i, k_i)$")
    ax.set_ylabel(r"normalised moment of $q\cdot k$")
    ax.set_title(f"(c) Correlated q, k ($d_k$ = {widths})")
    ax.set_ylim(-1.15, 1.6)
    ax.legend(loc="center left", bbox_to_anchor=(0.0, 0.58), fontsize=5.5, handlelength=1.4)


def fig6_failure_modes(tables: Tables, figures_dir: Path) -> list[Path]:
    """(a) Softmax error against the largest logit, float16 and float32; (b) what each mask
    fill gives for a fully masked row; (c) moments of correlated ``q . k`` against rho."""
    overflow = tables.get(
        PART_CSVS["overflow"],
        ["method", "max_logit", "nonfinite_fraction", "tv_error_max"],
    )
    masks = tables.get(
        PART_CSVS["masks"],
        ["dtype", "fill", "row", "output_nan", "row_sum", "leaked_mass"],
    )
    corr = tables.get(
        PART_CSVS["correlation"],
        ["d_k", "rho", "mean_measured", "mean_se", "std_measured", "std_se"],
    )
    with plt.rc_context(STYLE | {"lines.markersize": 3}):
        fig, (ax_o, ax_m, ax_c) = plt.subplots(
            1, 3, figsize=(2 * COLUMN_WIDTH_IN, 2.7), gridspec_kw={"width_ratios": [1.15, 1, 1]}
        )
        _overflow_panel(ax_o, overflow)
        _mask_panel(ax_m, masks)
        _correlation_panel(ax_c, corr)
        fig.suptitle("Failure modes at the boundaries (companion article)", fontsize=9)
        fig.tight_layout()
        return save(fig, figures_dir, "fig6_failure_modes")

"""Figure 11 (experiment 13): the attention temperature of all-MiniLM-L6-v2, per layer and
head, trained beside re-initialised; max weight against row length; the static drift."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm

from attnlab.harness.figures import COLUMN_WIDTH_IN, STYLE, VARIANT_COLORS, save
from attnlab.harness.tables import Tables
from attnlab.studies.real_model.causal_figure import fig13_real_model_causal  # noqa: F401 (the study's Figure 13)
from attnlab.studies.real_model.report import HEADS, headline_length
from attnlab.studies.real_model.study import COUNTERFACTUALS_CSV, HEADS_CSV, MODELS

#: Trained and re-initialised weights: the trained model divides by sqrt(d) (scaled blue).
MODEL_STYLE = {
    "trained": {"color": VARIANT_COLORS["scaled"], "marker": "o", "label": "trained"},
    "initial": {"color": "0.45", "marker": "s", "label": "re-initialised, N(0, 0.02)"},
}


def _grid(frame: pd.DataFrame, column: str) -> np.ndarray:
    """``[layers, heads]`` of ``column``."""
    return frame.pivot(index="layer", columns="head", values=column).to_numpy()


def _map(ax: plt.Axes, grid: np.ndarray, title: str, **kwargs) -> plt.cm.ScalarMappable:
    image = ax.imshow(grid, aspect="auto", **kwargs)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(0, grid.shape[1], 2))
    ax.set_yticks(range(grid.shape[0]))
    ax.grid(False)
    ax.set_title(title, fontsize=7.5)
    return image


def _row_length_panel(ax: plt.Axes, heads: pd.DataFrame) -> None:
    for model in MODELS:
        style = MODEL_STYLE[model]
        frame = heads[heads.model == model].groupby("row_length").max_weight_p50
        T = np.asarray(frame.median().index)
        ax.fill_between(T, frame.min(), frame.max(), color=style["color"], alpha=0.15, lw=0)
        ax.plot(T, frame.median(), color=style["color"], marker=style["marker"],
                label=f"{style['label']}: median head")  # fmt: skip
    T = np.asarray(sorted(heads.row_length.unique()), float)
    ax.plot(T, 1 / T, color="black", ls=":", lw=1, label="uniform, 1/T")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(T, [str(int(t)) for t in T])
    ax.set_xlabel("row length T (tokens)")
    ax.set_ylabel("max weight (median over rows)")
    ax.set_ylim(1e-4, 1.5)  # room below the data for the legend
    ax.set_title("(c) Max weight against row length\n(band: range over heads)", fontsize=7.5)
    ax.legend(loc="lower left", fontsize=5.5)


def _drift_panel(ax: plt.Axes, frame: pd.DataFrame) -> None:
    drift = frame[frame.counterfactual == "drift"]
    removed = frame[frame.counterfactual != "drift"]
    scaled, unscaled = VARIANT_COLORS["scaled"], VARIANT_COLORS["unscaled"]
    ax.plot(drift.logit_factor, drift.cosine_mean, color=scaled, marker="o",
            label=r"drift $q, k \to \alpha q, \alpha k$: embedding cosine")  # fmt: skip
    ax.plot(drift.logit_factor, drift.entropy_ratio_median, color=scaled, marker="o", ls="--",
            mfc="white", label="drift: entropy / ln T")  # fmt: skip
    ax.plot(removed.logit_factor, removed.cosine_mean, color=unscaled, marker="s", ls="none",
            label=r"divisor removed ($\times\sqrt{d}$): cosine")  # fmt: skip
    ax.plot(removed.logit_factor, removed.entropy_ratio_median, color=unscaled, marker="s",
            ls="none", mfc="white", label="divisor removed: entropy / ln T")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel(r"logits' factor over the trained model ($\alpha^2$)")
    ax.set_ylabel("cosine; entropy / ln T")
    ax.set_ylim(-0.03, 1.55)  # room above the data for the legend
    T = int(frame.row_length.iloc[0])
    ax.set_title(f"(f) Static drift, trained weights, T = {T}", fontsize=7.5)
    ax.legend(loc="upper right", fontsize=5)


def fig11_real_model(tables: Tables, figures_dir: Path) -> list[Path]:
    """(a, b) Layer x head maps of the logits' std, trained and re-initialised; (d, e) of
    entropy / ln T; (c) max weight against row length; (f) the static drift."""
    heads = tables.get(HEADS_CSV, HEADS)
    counterfactuals = tables.get(COUNTERFACTUALS_CSV)
    T = headline_length(tables)
    trained, initial = (heads[(heads.model == m) & (heads.row_length == T)] for m in MODELS)
    std = np.concatenate([trained.logit_std_p50, initial.logit_std_p50])
    std_norm = LogNorm(vmin=std.min(), vmax=std.max())
    with plt.rc_context(STYLE | {"lines.markersize": 3}):
        fig, axes = plt.subplots(
            2, 3, figsize=(2 * COLUMN_WIDTH_IN, 5.0), layout="constrained",
            gridspec_kw={"width_ratios": [1, 1, 1.25]},
        )  # fmt: skip
        maps = (
            ("logit_std_p50", "viridis", {"norm": std_norm}, "logits' std", "ab"),
            ("entropy_ratio_p50", "magma", {"vmin": 0.0, "vmax": 1.0}, "entropy / ln T", "de"),
        )
        for row, (column, cmap, scale, label, tags) in enumerate(maps):
            for ax, frame, tag, name in zip(
                axes[row, :2], (trained, initial), tags, ("trained", "re-initialised"), strict=True
            ):
                image = _map(
                    ax, _grid(frame, column), f"({tag}) {name}, T = {T}", cmap=cmap, **scale
                )
            fig.colorbar(image, ax=axes[row, :2], label=f"{label} (median over rows)", shrink=0.9)
        _row_length_panel(axes[0, 2], heads)
        _drift_panel(axes[1, 2], counterfactuals)
        fig.suptitle(
            "all-MiniLM-L6-v2 on real text: logits' std (a, b) and entropy / ln T (d, e) per "
            "layer and head",
            fontsize=8.5,
        )
        return save(fig, figures_dir, "fig11_real_model")

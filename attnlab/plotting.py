"""CSVs -> figures/: one style for every figure of the suite.

Each figure is a function of the result CSVs only (read through ``read_csv_checked``, so a
missing or malformed CSV names itself and the command that makes it). Colours follow the
article: scaled attention blue, unscaled attention green.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from attnlab.curves import crossing_dk  # noqa: E402
from attnlab.io import read_csv_checked  # noqa: E402
from attnlab.outputs import made_by  # noqa: E402

VARIANT_COLORS = {"scaled": "#1f5fbf", "unscaled": "#2a9d3a"}
VARIANT_LABELS = {"scaled": r"scaled, $1/\sqrt{d_k}$", "unscaled": "unscaled"}
VARIANT_MARKERS = {"scaled": "o", "unscaled": "s"}

#: Column width of a two-column paper is about 3.4 in; figures are drawn at that width
#: (or twice it for two-panel figures) so their text stays readable when printed.
COLUMN_WIDTH_IN = 3.4
DPI = 200

STYLE = {
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "lines.linewidth": 1.4,
    "lines.markersize": 4,
    "savefig.bbox": "tight",
    "pdf.fonttype": 42,
}


def load(results_dir: Path, name: str, columns: list[str]) -> pd.DataFrame:
    return read_csv_checked(Path(results_dir) / name, columns, made_by(name))


def save(fig: plt.Figure, figures_dir: Path, stem: str) -> list[Path]:
    """Write ``stem.png`` (DPI dots per inch) and ``stem.pdf``; return both paths."""
    paths = []
    for suffix in (".png", ".pdf"):
        path = Path(figures_dir) / f"{stem}{suffix}"
        tmp = path.with_name(f".{path.stem}.tmp{suffix}")
        fig.savefig(tmp, dpi=DPI, metadata={"CreationDate": None} if suffix == ".pdf" else None)
        tmp.replace(path)
        paths.append(path)
    plt.close(fig)
    return paths


def log2_dk_axis(ax: plt.Axes, d_k: np.ndarray) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(d_k)
    ax.set_xticklabels([str(int(d)) for d in d_k], rotation=0)
    ax.set_xlabel(r"head dimension $d_k$ (log$_2$ scale)")


def errorbar_by_variant(ax: plt.Axes, frame: pd.DataFrame, column: str) -> None:
    for variant, group in frame.groupby("variant", sort=False):
        group = group.sort_values("d_k")
        ax.errorbar(
            group.d_k,
            group[f"{column}_mean"],
            yerr=group[f"{column}_sem"],
            color=VARIANT_COLORS[variant],
            marker=VARIANT_MARKERS[variant],
            label=VARIANT_LABELS[variant],
            capsize=2,
        )


def fig1_saturation(results_dir: Path, figures_dir: Path) -> list[Path]:
    """Mean max weight and mean entropy against d_k; the uniform ceiling ln n for reference."""
    frame = load(
        results_dir,
        "02_saturation_sweep.csv",
        [
            "variant",
            "d_k",
            "n_keys",
            "trials",
            "max_weight_mean",
            "max_weight_sem",
            "entropy_mean",
            "entropy_sem",
        ],
    )
    n, trials = int(frame.n_keys.iloc[0]), int(frame.trials.iloc[0])
    d_k = np.sort(frame.d_k.unique())
    with plt.rc_context(STYLE):
        fig, (ax_max, ax_ent) = plt.subplots(1, 2, figsize=(2 * COLUMN_WIDTH_IN, 2.5))
        errorbar_by_variant(ax_max, frame, "max_weight")
        ax_max.axhline(1.0 / n, color="0.4", ls=":", lw=1, label=f"uniform, 1/n = 1/{n}")
        ax_max.set_ylabel("mean max attention weight")
        ax_max.set_ylim(0, 1.02)
        ax_max.set_title("(a) Max weight")
        errorbar_by_variant(ax_ent, frame, "entropy")
        ax_ent.axhline(
            np.log(n),
            color="0.4",
            ls="--",
            lw=1,
            label=rf"uniform ceiling, $\ln {n}$ = {np.log(n):.3f}",
        )
        ax_ent.set_ylabel("mean attention entropy (nats)")
        ax_ent.set_ylim(0, np.log(n) * 1.08)
        ax_ent.set_title("(b) Entropy")
        for ax in (ax_max, ax_ent):
            log2_dk_axis(ax, d_k)
        ax_max.legend(loc="upper left")
        ax_ent.legend(loc="lower left")
        fig.suptitle(
            f"Softmax saturation without scaling (n = {n} keys, {trials} trials, error bars: SEM)",
            fontsize=9,
        )
        fig.tight_layout()
        return save(fig, figures_dir, "fig1_saturation")


def fig2_jacobian_norm(results_dir: Path, figures_dir: Path) -> list[Path]:
    """Mean Frobenius norm of the softmax Jacobian against d_k, the crossing marked."""
    frame = load(
        results_dir,
        "03_jacobian_norm.csv",
        ["variant", "d_k", "n_keys", "trials", "jacobian_fro_mean", "jacobian_fro_sem"],
    )
    n, trials = int(frame.n_keys.iloc[0]), int(frame.trials.iloc[0])
    d_k = np.sort(frame.d_k.unique())
    wide = frame.pivot(index="d_k", columns="variant", values="jacobian_fro_mean").sort_index()
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 2.6))
        errorbar_by_variant(ax, frame, "jacobian_fro")
        if {"scaled", "unscaled"} <= set(wide.columns):
            found = crossing_dk(wide.index.to_numpy(), (wide.unscaled - wide.scaled).to_numpy())
            if found is not None:
                lo, hi, at = found
                level = float(np.interp(np.log2(at), np.log2(wide.index), wide.scaled))
                ax.axvline(at, color="0.4", ls=":", lw=1)
                ax.annotate(
                    f"crossing\n$d_k \\approx {at:.0f}$",
                    (at, level),
                    xytext=(-75, -32),
                    textcoords="offset points",
                    arrowprops={"arrowstyle": "->", "color": "0.3"},
                )
        log2_dk_axis(ax, d_k)
        ax.set_ylabel(r"mean $\|\mathrm{diag}(p) - pp^\top\|_F$")
        ax.set_ylim(bottom=0)
        ax.set_title(f"Softmax Jacobian norm (n = {n}, {trials} trials, ±SEM)")
        ax.legend(loc="upper right")
        fig.tight_layout()
        return save(fig, figures_dir, "fig2_jacobian_norm")


def band_by_variant(
    ax: plt.Axes, curves: pd.DataFrame, column: str, colors: dict[str, str], labels: dict[str, str]
) -> None:
    """Median over seeds as a line, min-max over seeds as a shaded band, per variant."""
    for variant, group in curves.groupby("variant", sort=False):
        wide = group.pivot(index="step", columns="seed", values=column)
        steps = wide.index.to_numpy()
        ax.fill_between(
            steps, wide.min(axis=1), wide.max(axis=1), color=colors[variant], alpha=0.18, lw=0
        )
        ax.plot(steps, wide.median(axis=1), color=colors[variant], label=labels[variant])


def mark_milestones(ax: plt.Axes, summary: pd.DataFrame, colors: dict[str, str]) -> None:
    """Dashed lines at the loss milestones; a marker at each variant's median step."""
    for threshold, column in ((1.0, "step_loss_below_1"), (0.1, "step_loss_below_0p1")):
        ax.axhline(threshold, color="0.5", ls="--", lw=0.8)
        for variant, group in summary.groupby("variant", sort=False):
            steps = group[column].dropna()
            if len(steps):
                ax.plot(
                    steps.median(),
                    threshold,
                    marker="v",
                    color=colors[variant],
                    ms=6,
                    mec="black",
                    mew=0.5,
                    zorder=5,
                )


def fig3_training(results_dir: Path, figures_dir: Path) -> list[Path]:
    """Smoothed training loss against step (log loss axis): median and range over seeds."""
    curves = load(results_dir, "04_recall_curves.csv", ["variant", "seed", "step", "smoothed_loss"])
    summary = load(
        results_dir,
        "04_recall_summary.csv",
        ["variant", "seed", "step_loss_below_1", "step_loss_below_0p1"],
    )
    n_seeds = curves.seed.nunique()
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 2.6))
        band_by_variant(ax, curves, "smoothed_loss", VARIANT_COLORS, VARIANT_LABELS)
        mark_milestones(ax, summary, VARIANT_COLORS)
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel("smoothed training loss (nats)")
        ax.set_title(f"Associative recall, $d_k$ = 256 ({n_seeds} seeds: median, range)")
        ax.plot(
            [],
            [],
            marker="v",
            ls="",
            color="0.5",
            mec="black",
            mew=0.5,
            label="median milestone step",
        )
        ax.legend(loc="upper right")
        fig.tight_layout()
        return save(fig, figures_dir, "fig3_training")


@dataclass(frozen=True)
class Figure:
    """A figure of the suite: the function that draws it from the CSVs."""

    draw: Callable[[Path, Path], list[Path]]
    group: str


FIGURES: dict[str, Figure] = {
    "fig1_saturation": Figure(fig1_saturation, "statics"),
    "fig2_jacobian_norm": Figure(fig2_jacobian_norm, "statics"),
    "fig3_training": Figure(fig3_training, "training"),
}

"""One style for every figure of the suite, and the helpers several figures share.

Each figure is a function ``draw(tables, figures_dir)`` of the result CSVs only, read
through ``Tables`` (so a missing or malformed CSV names itself and the command that makes
it). Colours follow the article: scaled attention blue, unscaled attention green.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

VARIANT_COLORS = {"scaled": "#1f5fbf", "unscaled": "#2a9d3a"}


VARIANT_LABELS = {"scaled": r"scaled, $1/\sqrt{d_k}$", "unscaled": "unscaled"}


VARIANT_MARKERS = {"scaled": "o", "unscaled": "s"}


#: Colours of the temperature mechanisms: scaled and unscaled as everywhere, the rest from
#: a qualitative palette that avoids blue and green.
MECHANISM_COLORS = {
    **VARIANT_COLORS,
    "folded_init": "#9467bd",
    "qk_norm": "#d62728",
    "learned_temperature": "#ff7f0e",
    "inv_d": "#8c564b",
    "softcap30": "#e377c2",
    "softcap50": "#7f7f7f",
    "ssmax": "#bcbd22",
    "sigmoid": "#17becf",
    "softpick": "#8b0000",
    "cosine_tau": "#ff1493",
}

#: The colour of a mechanism the suite does not know (a researcher's own, on its card).
OWN_MECHANISM_COLOR = "#000000"


def mechanism_color(name: str) -> str:
    """``MECHANISM_COLORS[name]``, black for a mechanism not in it."""
    return MECHANISM_COLORS.get(name, OWN_MECHANISM_COLOR)


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


def mark_milestones(ax: plt.Axes, summary: pd.DataFrame | None, colors: dict[str, str]) -> None:
    """Dashed lines at the loss milestones; with a ``summary``, a marker at each variant's
    median step, where at least half of its seeds reach the milestone (the report's *on k
    of n seeds* rule)."""
    for threshold, column in ((1.0, "step_loss_below_1"), (0.1, "step_loss_below_0p1")):
        ax.axhline(threshold, color="0.5", ls="--", lw=0.8)
        if summary is None:
            continue
        for variant, group in summary.groupby("variant", sort=False):
            steps = group[column].dropna()
            if len(steps) and 2 * len(steps) >= len(group):
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


#: The article's milestones: (variant, smoothed-loss threshold, step).
ARTICLE_MILESTONES = (
    ("scaled", 1.0, 224),
    ("unscaled", 1.0, 424),
    ("scaled", 0.1, 436),
    ("unscaled", 0.1, 822),
)


def mark_article_milestones(ax: plt.Axes) -> None:
    """The article's four milestones as diamonds in the variants' colours, with a legend
    entry."""
    for variant, threshold, step in ARTICLE_MILESTONES:
        ax.plot(
            step,
            threshold,
            marker="D",
            ms=5,
            color=VARIANT_COLORS[variant],
            mec="black",
            mew=0.6,
            ls="",
            zorder=6,
        )
    ax.plot(
        [], [], marker="D", ls="", color="0.5", mec="black", mew=0.6, label="article's milestone"
    )


def smoothed_loss_panel(ax: plt.Axes, curves: pd.DataFrame, summary: pd.DataFrame | None) -> None:
    """Each variant's smoothed training loss over seeds (``band_by_variant``) on a log loss
    axis against training step, the loss milestones (``mark_milestones``: with a
    ``summary``, our median steps and their legend entry) and the article's
    (``mark_article_milestones``)."""
    band_by_variant(ax, curves, "smoothed_loss", VARIANT_COLORS, VARIANT_LABELS)
    mark_milestones(ax, summary, VARIANT_COLORS)
    mark_article_milestones(ax)
    if summary is not None:
        ax.plot(
            [],
            [],
            marker="v",
            ls="",
            color="0.5",
            mec="black",
            mew=0.5,
            label="our median milestone",
        )
    ax.set_yscale("log")
    ax.set_xlabel("training step")

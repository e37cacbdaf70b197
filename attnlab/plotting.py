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
}


def fig4_remedies(results_dir: Path, figures_dir: Path) -> list[Path]:
    """Remedies: loss curves, milestone steps per mechanism, and the fold continuation."""
    curves = load(
        results_dir, "05_remedies_curves.csv", ["variant", "seed", "step", "smoothed_loss"]
    )
    summary = load(
        results_dir,
        "05_remedies_summary.csv",
        ["variant", "seed", "step_loss_below_1", "step_loss_below_0p1"],
    )
    fold = load(
        results_dir, "05_fold_curves.csv", ["seed", "step", "smoothed_unfolded", "smoothed_folded"]
    )
    order = list(dict.fromkeys(summary.variant))
    labels = {m: m for m in order}
    with plt.rc_context(STYLE):
        fig, (ax_c, ax_m, ax_f) = plt.subplots(
            1, 3, figsize=(3 * COLUMN_WIDTH_IN, 2.8), gridspec_kw={"width_ratios": [1.3, 1, 1]}
        )
        for name in order:
            wide = curves[curves.variant == name].pivot(
                index="step", columns="seed", values="smoothed_loss"
            )
            ax_c.plot(
                wide.index,
                wide.median(axis=1),
                color=MECHANISM_COLORS[name],
                label=labels[name],
                lw=1.1,
            )
        ax_c.set_yscale("log")
        ax_c.set_xlabel("training step")
        ax_c.set_ylabel("smoothed training loss (nats)")
        ax_c.set_title(f"(a) Median loss over {curves.seed.nunique()} seeds")
        ax_c.legend(ncol=2, loc="upper right", fontsize=6)

        y = np.arange(len(order))
        for offset, (column, marker, text) in enumerate(
            (("step_loss_below_1", "o", "loss 1.0"), ("step_loss_below_0p1", "D", "loss 0.1"))
        ):
            for i, name in enumerate(order):
                steps = summary.loc[summary.variant == name, column].dropna()
                ax_m.scatter(
                    steps,
                    np.full(len(steps), i + 0.15 * (2 * offset - 1)),
                    color=MECHANISM_COLORS[name],
                    marker=marker,
                    s=14,
                    edgecolor="black",
                    linewidth=0.3,
                )
            ax_m.scatter(
                [],
                [],
                marker=marker,
                color="0.6",
                edgecolor="black",
                linewidth=0.3,
                label=f"first step below {text}",
            )
        ax_m.set_yticks(y, order)
        ax_m.invert_yaxis()
        ax_m.set_xscale("log")
        ax_m.set_xlabel("training step (log scale)")
        ax_m.set_title("(b) Milestones, one point per seed")
        ax_m.legend(loc="center right", fontsize=6)

        for column, name, text in (
            ("smoothed_unfolded", "scaled", "unfolded (scaled)"),
            ("smoothed_folded", "folded_init", "folded into $W_Q$"),
        ):
            wide = fold.pivot(index="step", columns="seed", values=column)
            ax_f.fill_between(
                wide.index,
                wide.min(axis=1),
                wide.max(axis=1),
                color=MECHANISM_COLORS[name],
                alpha=0.2,
                lw=0,
            )
            ax_f.plot(wide.index, wide.median(axis=1), color=MECHANISM_COLORS[name], label=text)
        ax_f.set_yscale("log")
        ax_f.set_xlabel("training step")
        ax_f.set_ylabel("smoothed training loss (nats)")
        ax_f.set_title(f"(c) Folding at step {int(fold.step.min())}, same lr")
        ax_f.legend(loc="upper right")
        fig.tight_layout()
        return save(fig, figures_dir, "fig4_remedies")


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


def fig5_condensation(results_dir: Path, figures_dir: Path) -> list[Path]:
    """(a) Heatmap over (d_k, n) of the mean max weight of unscaled attention, with the
    condensation threshold d_k = 2 ln n and the measured saturation points; (b) the
    measured thresholds against n beside 2 ln n."""
    from matplotlib import patheffects

    from attnlab.condensation import (  # imports jax: only when this figure is drawn
        DEPARTURE_RATIO,
        SATURATED_MAX_WEIGHT,
        measured_thresholds,
        threshold_dk,
    )

    frame = load(
        results_dir,
        "06_condensation.csv",
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
    from attnlab.failure_modes import FLOAT16_EXP_LIMIT, TV_TOLERANCE  # imports jax

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


def fig6_failure_modes(results_dir: Path, figures_dir: Path) -> list[Path]:
    """(a) Softmax error against the largest logit, float16 and float32; (b) what each mask
    fill gives for a fully masked row; (c) moments of correlated ``q . k`` against rho."""
    from attnlab.failure_modes import PART_CSVS  # imports jax: only when this figure is drawn

    overflow = load(
        results_dir,
        PART_CSVS["overflow"],
        ["method", "max_logit", "nonfinite_fraction", "tv_error_max"],
    )
    masks = load(
        results_dir,
        PART_CSVS["masks"],
        ["dtype", "fill", "row", "output_nan", "row_sum", "leaked_mass"],
    )
    corr = load(
        results_dir,
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


@dataclass(frozen=True)
class Figure:
    """A figure of the suite: the function that draws it from the CSVs."""

    draw: Callable[[Path, Path], list[Path]]
    group: str


FIGURES: dict[str, Figure] = {
    "fig1_saturation": Figure(fig1_saturation, "statics"),
    "fig2_jacobian_norm": Figure(fig2_jacobian_norm, "statics"),
    "fig3_training": Figure(fig3_training, "training"),
    "fig4_remedies": Figure(fig4_remedies, "remedies"),
    "fig5_condensation": Figure(fig5_condensation, "beyond"),
    "fig6_failure_modes": Figure(fig6_failure_modes, "beyond"),
}

"""The card's figure, and the figure comparing every card, drawn from the cards' CSVs only."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import matplotlib.ticker as ticker
import numpy as np
import pandas as pd

from attnlab.harness.figures import (
    COLUMN_WIDTH_IN,
    STYLE,
    VARIANT_COLORS,
    log2_dk_axis,
    mechanism_color,
    save,
)
from attnlab.harness.tables import Tables
from attnlab.studies.card.study import COMPARISON_CSV
from attnlab.studies.card.verdicts import DRIFT_SCALE_FACTOR, Card

#: The comparison every multi-mechanism run writes, relative to its results directory.
STATICS_COLUMNS = ["mechanism", "sweep", "d_k", "n_keys", "max_weight_mean", "max_weight_sem"]


def _order(frame: pd.DataFrame, name: str) -> list[str]:
    """The carded mechanism last (drawn on top), its baselines first."""
    names = list(dict.fromkeys(frame.mechanism))
    return [n for n in names if n != name] + [name]


def _style(mechanism: str, name: str | None) -> dict:
    """The carded mechanism thick and below its baselines, so a baseline it equals stays
    visible on top of it. With no carded mechanism (Figure 10) the article's two variants
    are dashed, on top: several built-ins share their statics at initialisation."""
    if name is None:
        top = mechanism in VARIANT_COLORS
        return {
            "color": mechanism_color(mechanism),
            "lw": 1.6 if top else 1.1,
            "ls": "--" if top else "-",
            "zorder": 4 if top else 3,
        }
    own = mechanism == name
    return {
        "color": mechanism_color(mechanism),
        "lw": 2.4 if own else 1.1,
        "zorder": 2 if own else 3,
    }


def _statics(ax: plt.Axes, statics: pd.DataFrame, sweep: str, column: str, names: list[str], name):
    rows = statics[statics.sweep == sweep]
    x = "d_k" if sweep == "d_k" else "n_keys"
    for mechanism in names:
        group = rows[rows.mechanism == mechanism].sort_values(x)
        ax.errorbar(
            group[x],
            group[f"{column}_mean"],
            yerr=group[f"{column}_sem"],
            marker="o",
            ms=3,
            capsize=2,
            label=mechanism,
            **_style(mechanism, name),
        )
    values = np.sort(rows[x].unique())
    if sweep == "d_k":
        log2_dk_axis(ax, values)
    else:
        ax.set_xscale("log", base=2)
        ax.set_xticks(values)
        ax.set_xticklabels([str(int(v)) for v in values])
        ax.set_xlabel(f"keys per row $n$ ($d_k$ = {int(rows.d_k.iloc[0])}, log$_2$ scale)")


def _drift_panel(ax: plt.Axes, drift: pd.DataFrame, names: list[str], name) -> None:
    """The trained model's attention-logit scale (within-row std) under the drift
    multiplier, over its scale at ``alpha = 1``, with the verdict's band (a factor
    ``DRIFT_SCALE_FACTOR`` either way: the temperature holds)."""
    for mechanism in names:
        rows = drift[drift.mechanism == mechanism].sort_values("alpha")
        base = rows[rows.alpha == 1.0].logit_std_mean
        if base.empty or not base.iloc[0] > 0:
            continue
        ax.plot(rows.alpha, rows.logit_std_mean / base.iloc[0], marker="o", ms=3,
                label=mechanism, **_style(mechanism, name))  # fmt: skip
    ax.axhspan(1 / DRIFT_SCALE_FACTOR, DRIFT_SCALE_FACTOR, color="0.9", zorder=0,
               label=f"holds (within {DRIFT_SCALE_FACTOR:g}x)")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    ax.set_xlabel(r"$\alpha$ (W_Q, W_K multiplied by)")
    ax.set_ylabel(r"logit scale / scale at $\alpha$ = 1")
    ax.set_title("(e) static drift of the trained model")


def _lr_panel(ax: plt.Axes, sweep: pd.DataFrame, names: list[str], name) -> None:
    """Median over seeds of ``min(final loss, loss at step 0)`` (a diverged lane counts
    as the loss at step 0) against the learning rate, at the first swept width."""
    rates = sweep.lr.nunique()
    swept = [d for d, g in sweep.groupby("d_k") if g.lr.nunique() == rates and rates > 1]
    if not swept:
        return
    at = sweep[sweep.d_k == swept[0]]
    for mechanism in names:
        rows = at[at.mechanism == mechanism]
        clipped = np.minimum(rows.final_loss.fillna(rows.loss_step0), rows.loss_step0)
        medians = clipped.groupby(rows.lr).median()
        ax.plot(medians.index, medians.values, marker="o", ms=3, label=mechanism,
                **_style(mechanism, name))  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=1e-2)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("learning rate")
    ax.set_ylabel("final loss, capped at step 0's")
    ax.set_title(f"(f) learning-rate sweep, $d_k$ = {int(swept[0])}")


def draw_card(card: Card, name: str, out_dir: Path, stem: str = "card") -> list[Path]:
    """Six panels for mechanism ``name`` and its baselines: saturation and Jacobian norm
    at initialisation against d_k, max weight against n, 04's training loss, the trained
    model's logit scale under static drift, and the learning-rate sweep."""
    names = _order(card.statics, name)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(2, 3, figsize=(3 * COLUMN_WIDTH_IN, 2 * 2.3))
        a, b, c, d, e, f = axes.ravel()
        n_keys = int(card.statics[card.statics.sweep == "d_k"].n_keys.iloc[0])
        _statics(a, card.statics, "d_k", "max_weight", names, name)
        a.set_ylabel("mean max weight")
        a.set_title(f"(a) saturation at initialisation, $n$ = {n_keys}")
        _statics(b, card.statics, "d_k", "jacobian_fro", names, name)
        b.set_ylabel(r"mean $\|\partial p / \partial z\|_F$")
        b.set_title("(b) Jacobian norm at initialisation")
        _statics(c, card.statics, "n", "max_weight", names, name)
        c.set_ylabel("mean max weight")
        c.set_title("(c) against row length (condensation)")

        for mechanism in names:
            rows = card.training_curves[card.training_curves.mechanism == mechanism]
            d.plot(rows.step, rows.smoothed_loss_median, label=mechanism, **_style(mechanism, name))
        d.set_yscale("log")
        d.set_xlabel("training step")
        d.set_ylabel("smoothed loss (median over seeds)")
        d.set_title("(d) training on 04's task")

        _drift_panel(e, card.drift, names, name)
        _lr_panel(f, card.sweep, names, name)
        handles, labels = a.get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), frameon=False)
        fig.suptitle(f"Mechanism card: {name}", fontsize=10)
        fig.tight_layout(rect=(0, 0.06, 1, 0.97))
        return save(fig, out_dir, stem)


def fig10_cards(tables: Tables, figures_dir: Path) -> list[Path]:
    """Figure 10: every card of ``cards/comparison.csv`` (``make cards``: the built-ins)
    overlaid: its statics at initialisation (max weight and Jacobian norm against d_k, max
    weight against n), the trained model's logit scale under static drift and the
    learning-rate sweep. scaled and unscaled are dashed on top: learned_temperature starts
    as scaled, and folded_init (whose fold acts on W_Q, W_K, not on given q, k) as
    unscaled."""
    names = list(dict.fromkeys(tables.get(COMPARISON_CSV, ["mechanism"]).mechanism))

    def own(table: str, columns: list[str]) -> pd.DataFrame:
        frames = [tables.get(f"cards/{n}/{table}.csv", columns) for n in names]
        return pd.concat([f[f.mechanism == n] for f, n in zip(frames, names, strict=True)])

    statics = own("statics", STATICS_COLUMNS)
    drift = own("drift", ["mechanism", "alpha", "logit_std_mean"])
    sweep = own("sweep", ["mechanism", "d_k", "lr", "final_loss", "loss_step0"])
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 5, figsize=(5 * COLUMN_WIDTH_IN, 2.7))
        panels = (
            ("d_k", "max_weight", "mean max weight", "(a) saturation at initialisation"),
            ("d_k", "jacobian_fro", r"mean $\|\partial p / \partial z\|_F$", "(b) Jacobian norm"),
            ("n", "max_weight", "mean max weight", "(c) against row length"),
        )
        for ax, (axis, column, ylabel, title) in zip(axes[:3], panels, strict=True):
            _statics(ax, statics, axis, column, names, name=None)
            ax.set_ylabel(ylabel)
            ax.set_title(title)
        _drift_panel(axes[3], drift, names, None)
        axes[3].set_title("(d) static drift of the trained model")
        _lr_panel(axes[4], sweep, names, None)
        axes[4].set_title(axes[4].get_title().replace("(f)", "(e)"))
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=12, frameon=False)
        fig.tight_layout(rect=(0, 0.16, 1, 1))
        return save(fig, figures_dir, "fig10_cards")

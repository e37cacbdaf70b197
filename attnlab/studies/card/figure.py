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
from attnlab.studies.card.verdicts import Card

#: The comparison every multi-mechanism run writes, relative to its results directory.
COMPARISON_CSV = "cards/comparison.csv"
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


def _plain_log_y(ax: plt.Axes) -> None:
    """A log y axis labelled in plain numbers."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())


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


def draw_card(card: Card, name: str, out_dir: Path, stem: str = "card") -> list[Path]:
    """Six panels for mechanism ``name`` and its baselines: saturation and Jacobian norm
    at initialisation against d_k, max weight against n, 04's training loss, the logits'
    std against width at step 0 and after training, and the drift at the drift width."""
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

        widths = card.widths
        base = widths.groupby("lr").d_k.nunique().idxmax()
        for mechanism in names:
            rows = widths[(widths.mechanism == mechanism) & (widths.lr == base)]
            medians = rows.groupby("d_k")[["logit_std_step0", "logit_std_end"]].median()
            style = _style(mechanism, name)
            e.plot(medians.index, medians.logit_std_step0, marker="o", ms=3, ls="--", **style)
            e.plot(medians.index, medians.logit_std_end, marker="s", ms=3, label=mechanism, **style)
        _plain_log_y(e)
        log2_dk_axis(e, np.sort(widths.d_k.unique()))
        e.set_ylabel("logit std (median)")
        e.set_title("(e) logit std: step 0 dashed, trained solid")

        for mechanism in names:
            rows = card.drift[card.drift.mechanism == mechanism]
            medians = rows.groupby("step").logit_std.median()
            f.plot(medians.index, medians.values, label=mechanism, **_style(mechanism, name))
        _plain_log_y(f)
        f.set_xlabel("training step")
        f.set_ylabel("logit std (median)")
        drift_dk = int(card.drift.d_k.iloc[0]) if not card.drift.empty else 0
        f.set_title(f"(f) drift, $d_k$ = {drift_dk}")
        handles, labels = a.get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), frameon=False)
        fig.suptitle(f"Mechanism card: {name}", fontsize=10)
        fig.tight_layout(rect=(0, 0.06, 1, 0.97))
        return save(fig, out_dir, stem)


def fig10_cards(tables: Tables, figures_dir: Path) -> list[Path]:
    """Figure 10: every card of ``cards/comparison.csv`` (``make cards``: the built-ins),
    its statics at initialisation overlaid: max weight and Jacobian norm against d_k, max
    weight against n. scaled and unscaled are dashed on top: learned_temperature starts
    as scaled, and folded_init (whose fold acts on W_Q, W_K, not on given q, k) as
    unscaled."""
    names = list(dict.fromkeys(tables.get(COMPARISON_CSV, ["mechanism"]).mechanism))
    frames = [tables.get(f"cards/{n}/statics.csv", STATICS_COLUMNS) for n in names]
    statics = pd.concat([f[f.mechanism == n] for f, n in zip(frames, names, strict=True)])
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 3, figsize=(3 * COLUMN_WIDTH_IN, 2.7))
        panels = (
            ("d_k", "max_weight", "mean max weight", "(a) saturation at initialisation"),
            ("d_k", "jacobian_fro", r"mean $\|\partial p / \partial z\|_F$", "(b) Jacobian norm"),
            ("n", "max_weight", "mean max weight", "(c) against row length"),
        )
        for ax, (sweep, column, ylabel, title) in zip(axes, panels, strict=True):
            _statics(ax, statics, sweep, column, names, name=None)
            ax.set_ylabel(ylabel)
            ax.set_title(title)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=6, frameon=False)
        fig.tight_layout(rect=(0, 0.16, 1, 1))
        return save(fig, figures_dir, "fig10_cards")

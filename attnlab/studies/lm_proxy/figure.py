"""Figure 12 (experiment 14): held-out loss and the largest layer-0 attention logit against
the learning rate per mechanism and width, and the layer-0 max logit over training at
three rates."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D

from attnlab.harness.figures import COLUMN_WIDTH_IN, STYLE, mechanism_color, save
from attnlab.harness.tables import Tables
from attnlab.studies.lm_proxy.report import SWEEP_COLUMNS, headline_width
from attnlab.studies.lm_proxy.study import BOUNDED, CURVES_CSV, GROWN, SWEEP_CSV

#: One line style per width, thinnest to widest.
WIDTH_STYLES = ("-", "--", ":", "-.")
#: The rates whose curves panel (c) draws: lowest, middle and highest of the grid.
CURVE_RATES = 3


def _by_rate(sweep, mechanism: str, d_model: int, column: str):
    cell = sweep[(sweep.mechanism == mechanism) & (sweep.d_model == d_model)]
    series = cell.groupby("lr")[column].median()
    return series.index.to_numpy(), series.to_numpy()


def _rate_panels(ax_loss: plt.Axes, ax_logit: plt.Axes, sweep) -> None:
    widths = sorted(sweep.d_model.unique())
    for mechanism in sweep.mechanism.unique():
        for d in sorted(sweep[sweep.mechanism == mechanism].d_model.unique()):
            style = WIDTH_STYLES[widths.index(d) % len(WIDTH_STYLES)]
            kwargs = {"color": mechanism_color(mechanism), "ls": style, "marker": "o"}
            ax_loss.plot(*_by_rate(sweep, mechanism, d, "final_val_loss"), **kwargs)
            ax_logit.plot(*_by_rate(sweep, mechanism, d, "max_attn_logit_layer0"), **kwargs)
    # One legend entry per mechanism (colour) and per width (line style), not per line.
    handles = [Line2D([], [], color=mechanism_color(m), marker="o", label=m)
               for m in sweep.mechanism.unique()]  # fmt: skip
    handles += [Line2D([], [], color="0.3", ls=WIDTH_STYLES[i % len(WIDTH_STYLES)],
                       label=f"d_model {d}") for i, d in enumerate(widths)]  # fmt: skip
    initial = float(sweep.initial_val_loss.median())
    ax_loss.axhline(initial, color="0.4", lw=0.8, ls=":")
    ax_loss.annotate("step 0 (ln 256)", (sweep.lr.min(), initial), fontsize=6,
                     va="top", color="0.3")  # fmt: skip
    ax_loss.set_ylabel("held-out loss (nats per byte)")
    ax_loss.set_title("(a) Final held-out loss")
    ax_loss.legend(handles=handles, fontsize=5.5, loc="upper left", ncol=2)
    top = ax_loss.get_ylim()
    ax_loss.set_ylim(top[0], top[1] + 0.35 * (top[1] - top[0]))  # room for the legend
    for value, text in ((GROWN, f"{GROWN:g}"), (BOUNDED, f"{BOUNDED:g}")):
        ax_logit.axhline(value, color="0.5", lw=0.7, ls="--")
        ax_logit.annotate(text, (sweep.lr.min(), value), fontsize=6, va="bottom", color="0.3")
    ax_logit.set_yscale("log")
    ax_logit.set_ylabel("largest layer-0 attention logit |z|")
    ax_logit.set_title("(b) Largest layer-0 logit over training")
    for ax in (ax_loss, ax_logit):
        ax.set_xscale("log")
        ax.set_xlabel("peak learning rate")


def _curves_panel(ax: plt.Axes, curves, d_model: int) -> None:
    cell = curves[(curves.d_model == d_model) & (curves.layer == 0)]
    rates = sorted(cell.lr.unique())
    chosen = [rates[0], rates[len(rates) // 2], rates[-1]][:CURVE_RATES]
    for mechanism in ("scaled", "qk_norm"):
        for rate, style in zip(chosen, WIDTH_STYLES, strict=False):
            run = cell[(cell.mechanism == mechanism) & (cell.lr == rate)]
            run = run.groupby("step").max_logit.median()
            if len(run):
                ax.plot(run.index, run.to_numpy(), color=mechanism_color(mechanism), ls=style,
                        label=f"{mechanism}, lr {rate:g}")  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("layer-0 max attention logit |z|")
    ax.set_title(f"(c) Over training, d_model {d_model}")
    low, high = ax.get_ylim()
    ax.set_ylim(low, high * 10 ** (0.6 * np.log10(high / low)))  # room for the legend
    ax.legend(fontsize=5.5, loc="upper left", ncol=2)


def fig12_lm_proxy(tables: Tables, figures_dir: Path) -> list[Path]:
    sweep = tables.get(SWEEP_CSV, SWEEP_COLUMNS)
    curves = tables.get(CURVES_CSV, ["mechanism", "d_model", "lr", "layer", "step", "max_logit"])
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 3, figsize=(3 * COLUMN_WIDTH_IN, 2.8))
        _rate_panels(axes[0], axes[1], sweep)
        _curves_panel(axes[2], curves, headline_width(sweep))
        fig.suptitle("Experiment 14: attention logit growth with the learning rate in a "
                     "byte-level causal LM (Wortsman et al. 2023's proxy)", fontsize=9)  # fmt: skip
        fig.tight_layout()
        return save(fig, figures_dir, "fig12_lm_proxy")

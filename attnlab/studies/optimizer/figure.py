"""Figure 14 (experiment 15): the largest attention logit over the long run's steps per
optimizer and run, with QK-Clip's tau drawn; the largest logit and the held-out loss
against the rate in the sweep, for both optimizers."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D

from attnlab.harness.figures import COLUMN_WIDTH_IN, STYLE, mechanism_color, save
from attnlab.harness.tables import Tables
from attnlab.studies.optimizer.report import CURVE_COLUMNS, RUN_COLUMNS, run_name
from attnlab.studies.optimizer.study import CURVES_CSV, RUNS_CSV

#: One line style per optimizer.
OPTIMIZER_STYLES = {"adamw": "-", "muon": "--"}
#: QK-Clip's runs: the mechanism's colour, lighter, with a marker of their own.
CLIP_COLOR = "#6a3d9a"


def _color(mechanism: str, clipped: bool) -> str:
    return CLIP_COLOR if clipped else mechanism_color(mechanism)


def _draw_tau(ax: plt.Axes, taus, x, ha: str = "left") -> None:
    for tau in taus:
        ax.axhline(tau, color="0.4", lw=0.7, ls=":")
        ax.annotate(f"tau {tau:g}", (x, tau), fontsize=6, va="top", ha=ha, color="0.3")


def _long_panel(ax: plt.Axes, curves) -> None:
    long = curves[curves.part == "long"]
    lowest = long.groupby("optimizer").lr.min()  # each optimizer's best rate: drawn lighter
    for key, lane in long.groupby(["optimizer", "mechanism", "qk_clip_tau", "lr", "seed"],
                                  dropna=False, sort=False):  # fmt: skip
        optimizer, mechanism, tau, rate, seed = key
        steps = lane.groupby("step").max_attn_logit.max()
        clipped = not np.isnan(tau)
        first_seed = seed == long.seed.min()  # one legend entry per run, every seed a line
        ax.plot(steps.index, steps.to_numpy(), color=_color(mechanism, clipped),
                ls=OPTIMIZER_STYLES.get(optimizer, "-."), lw=0.8 if first_seed else 0.5,
                alpha=0.45 if rate == lowest[optimizer] and not clipped else 1.0,
                label=f"{optimizer}, {run_name(lane.iloc[0])}, lr {rate:g}" if first_seed
                else None)  # fmt: skip
    _draw_tau(ax, long.qk_clip_tau.dropna().unique(), long.step.max(), "right")
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("largest attention logit (max over layers)")
    ax.set_title("(a) The long run")
    low, high = ax.get_ylim()
    ax.set_ylim(low, high * 10 ** (1.0 * np.log10(high / low)))  # room for the legend
    ax.legend(fontsize=4.5, loc="upper left", ncol=1, handlelength=2.5)


def _rate_panels(ax_logit: plt.Axes, ax_loss: plt.Axes, runs) -> None:
    sweep = runs[runs.part == "sweep"].assign(run=lambda f: [run_name(r) for r in f.itertuples()])
    for (optimizer, _), cell in sweep.groupby(["optimizer", "run"], sort=False):
        by_rate = cell.groupby("lr")[["max_attn_logit", "final_val_loss"]].median()
        first = cell.iloc[0]
        kwargs = {"color": _color(first.mechanism, not np.isnan(first.qk_clip_tau)),
                  "ls": OPTIMIZER_STYLES.get(optimizer, "-."), "marker": "o", "ms": 3}  # fmt: skip
        ax_logit.plot(by_rate.index, by_rate.max_attn_logit, **kwargs)
        ax_loss.plot(by_rate.index, by_rate.final_val_loss, **kwargs)
    _draw_tau(ax_logit, sweep.qk_clip_tau.dropna().unique(), sweep.lr.min())
    ax_logit.set_yscale("log")
    ax_logit.set_ylabel("largest attention logit over training")
    ax_logit.set_title("(b) The sweep: largest logit")
    ax_loss.set_ylabel("held-out loss (nats per byte)")
    ax_loss.set_title("(c) The sweep: held-out loss")
    handles = [Line2D([], [], color="0.3", ls=s, label=o) for o, s in OPTIMIZER_STYLES.items()
               if o in set(sweep.optimizer)]  # fmt: skip
    for _, cell in sweep.groupby("run", sort=False):
        first = cell.iloc[0]
        handles.append(Line2D([], [], color=_color(first.mechanism,
                                                   not np.isnan(first.qk_clip_tau)),
                              marker="o", ms=3, label=first.run))  # fmt: skip
    ax_loss.legend(handles=handles, fontsize=5.5, loc="upper left")
    for ax in (ax_logit, ax_loss):
        ax.set_xscale("log")
        ax.set_xlabel("peak learning rate")


def fig14_optimizer(tables: Tables, figures_dir: Path) -> list[Path]:
    runs = tables.get(RUNS_CSV, RUN_COLUMNS)
    curves = tables.get(CURVES_CSV, CURVE_COLUMNS)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 3, figsize=(3 * COLUMN_WIDTH_IN, 2.8))
        _long_panel(axes[0], curves)
        _rate_panels(axes[1], axes[2], runs)
        fig.suptitle("Experiment 15: the attention logits under AdamW and Muon, with and "
                     "without QK-Clip", fontsize=9)  # fmt: skip
        fig.tight_layout()
        return save(fig, figures_dir, "fig14_optimizer")

"""Figure 14 (experiment 15): the clip's quantity S over the long run per arm, rate and
seed, with tau drawn; S after the clip first fired over tau in the tau sweep; the held-out
loss against the rate in the sweep. Every line is the median over seeds with the seeds'
least and largest as a band (or error bars); one hue per arm, darker with the clip.

*S* is the clip's quantity: a layer's largest signed logit before that step's clip. The
unclipped runs record no S, so their lines are the largest |logit| (|z|), drawn in a line
style of their own and named so in the legend: S and |z| are not like for like."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import to_rgb
from matplotlib.lines import Line2D

from attnlab.harness.figures import COLUMN_WIDTH_IN, STYLE, save
from attnlab.harness.tables import Tables
from attnlab.studies.optimizer.answers import arm_of
from attnlab.studies.optimizer.study import CURVES_CSV, HOT, ONE_UPDATE, RUNS_CSV

_KEYS = ["part", "optimizer", "side", "schedule", "mechanism", "qk_clip_on", "qk_clip_tau",
         "lr", "seed"]  # fmt: skip
#: The columns the figure reads from each table.
RUN_COLUMNS = [*_KEYS, "final_val_loss", "max_signed_after_first_clip"]
CURVE_COLUMNS = [*_KEYS, "layer", "step", "max_attn_logit", "max_signed_logit"]

#: One hue per arm of the registry's optimizers (all runs here are ``scaled``, so not the
#: house's blue/green pair).
ARM_COLORS = {"adamw": "tab:blue", "muon": "tab:purple", "muon_pinned": "tab:orange",
              "lion": "tab:red", "adam": "tab:brown"}  # fmt: skip
#: The hue of an arm the figure does not know (an optimizer registered by a user).
OTHER_COLOR = "tab:gray"
#: Line styles: the unclipped runs solid, the clipped dashed; tau's line dotted grey.
STYLES = {False: "-", True: "--"}
TAU_STYLE = {"color": "0.25", "ls": ":", "lw": 1.0}
LEGEND = {"fontsize": 7, "framealpha": 0.9}


def arm_color(arm: str, clipped: bool) -> tuple[float, float, float]:
    """The arm's hue, darker for the clipped runs and lighter for the unclipped."""
    rgb = np.array(to_rgb(ARM_COLORS.get(arm, OTHER_COLOR)))
    shade = rgb * 0.7 if clipped else rgb + (1 - rgb) * 0.3
    return tuple(float(c) for c in shade)


def _arms(frame: pd.DataFrame) -> list[str]:
    """The arms present, in ``ARM_COLORS``' order, any other after them."""
    present = list(dict.fromkeys(frame.arm))
    return [a for a in ARM_COLORS if a in present] + [a for a in present if a not in ARM_COLORS]


def _cells(frame: pd.DataFrame):
    """``(arm, clipped, rows)`` for each arm (``_arms``' order), unclipped then clipped, of
    ``frame`` (with ``arm`` and ``clipped`` columns), the empty ones left out."""
    for arm in _arms(frame):
        for clipped in (False, True):
            rows = frame[(frame.arm == arm) & (frame.clipped == clipped)]
            if not rows.empty:
                yield arm, clipped, rows


#: The names of an arm's rates in the tau sweep and the long run, lowest first.
RATE_NAMES = ("best", f"{HOT:g}x best")


def _rate_names(rates) -> dict[float, str]:
    """Each of an arm's rates (sorted): the lowest ``best``, the next ``3x best``."""
    return {r: RATE_NAMES[i] if i < len(RATE_NAMES) else f"lr {r:g}"
            for i, r in enumerate(sorted(rates))}  # fmt: skip


def _spread(wide: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Median, least and largest over the columns (seeds), non-finite values skipped."""
    wide = wide.replace([np.inf, -np.inf], np.nan)
    return (wide.median(axis=1).to_numpy(), wide.min(axis=1).to_numpy(),
            wide.max(axis=1).to_numpy())  # fmt: skip


def _band(ax: plt.Axes, x, wide: pd.DataFrame, color, ls: str, label=None) -> None:
    median, low, high = _spread(wide)
    ax.fill_between(x, low, high, color=color, alpha=0.2, lw=0)
    ax.plot(x, median, color=color, ls=ls, lw=1.2, label=label)


def _note(ax: plt.Axes, text: str, blank: bool = True) -> None:
    """``text`` in the middle of ``ax``, its ticks gone where ``blank`` (not a shared axis)."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=7,
            color="0.3")  # fmt: skip
    if blank:
        ax.set_xticks([])
        ax.set_yticks([])


def _long_lines(curves: pd.DataFrame) -> pd.DataFrame:
    """The long run on the cosine schedule, unclipped or clipped on the signed S: per run,
    seed and step, the largest over layers of S (clipped) or of |z| (unclipped: no S)."""
    long = curves[(curves.part == "long") & (curves.schedule == "cosine")
                  & curves.qk_clip_on.isin(["none", "signed"])]  # fmt: skip
    long = long.assign(arm=arm_of(long), clipped=long.qk_clip_tau.notna())
    long = long.assign(value=long.max_signed_logit.where(long.clipped, long.max_attn_logit))
    keys = ["arm", "clipped", "qk_clip_tau", "lr", "seed", "step"]
    return long.groupby(keys, dropna=False).value.max().reset_index()


def _long_panels(axes: list[plt.Axes], curves: pd.DataFrame) -> list[Line2D]:
    """(a): one sub-panel per rate name (best, 3x best); returns the legend's handles."""
    lines = _long_lines(curves)
    if lines.empty:
        for ax in axes:
            _note(ax, "no long run on the cosine schedule in the curves table", False)
        return []
    lines["rate"] = lines.groupby("arm").lr.transform(lambda r: r.map(_rate_names(r.unique())))
    handles = {}
    for ax, name in zip(axes, RATE_NAMES, strict=True):
        panel = lines[lines.rate == name]
        if panel.empty:
            _note(ax, f"no long run at {name}", False)
            continue
        for arm, clipped, run in _cells(panel):
            wide = run.pivot_table(index="step", columns="seed", values="value",
                                   aggfunc="max", dropna=False)  # fmt: skip
            color = arm_color(arm, clipped)
            _band(ax, wide.index.to_numpy(), wide, color, STYLES[clipped])
            what = "clipped: S" if clipped else "unclipped: |z|"
            handles[(arm, clipped)] = Line2D([], [], color=color, ls=STYLES[clipped],
                                             label=f"{arm}, {what}")  # fmt: skip
        for tau in sorted(panel.qk_clip_tau.dropna().unique()):
            ax.axhline(tau, **TAU_STYLE)
            ax.annotate(f"tau {tau:g}", (0.01, tau), xycoords=("axes fraction", "data"),
                        fontsize=7, va="bottom", color="0.25")  # fmt: skip
        rates = "; ".join(f"{a} {panel[panel.arm == a].lr.iloc[0]:g}" for a in _arms(panel))
        seeds = panel.seed.nunique()
        ax.set_title(f"(a) long run, cosine, {name}, {seeds} seed{'s' if seeds > 1 else ''}"
                     f"\nlr: {rates}", fontsize=8)  # fmt: skip
        ax.set_yscale("log")
        ax.set_xlabel("step")
    axes[0].set_ylabel("largest logit over layers\nS (clipped, before the step's clip)\n"
                       "|z| (unclipped: no S recorded)")  # fmt: skip
    tau_handle = Line2D([], [], **TAU_STYLE, label="tau")
    return [*handles.values(), tau_handle]


def _tau_panel(ax: plt.Axes, runs: pd.DataFrame) -> None:
    """(b): the largest S after the first firing over tau, against tau."""
    taus = runs[(runs.part == "taus") & (runs.qk_clip_on == "signed") & runs.qk_clip_tau.notna()]
    ax.set_title("(b) tau sweep: S after the clip first fired\n(rates as in (a))", fontsize=8)
    if taus.empty:
        _note(ax, "no tau sweep in this run\n(part 'taus' absent, e.g. --quick)")
        return
    taus = taus.assign(arm=arm_of(taus), ratio=taus.max_signed_after_first_clip / taus.qk_clip_tau)
    taus["rate"] = taus.groupby("arm").lr.transform(lambda r: r.map(_rate_names(r.unique())))
    series = [(arm, name) for arm in _arms(taus) for name in RATE_NAMES
              if ((taus.arm == arm) & (taus.rate == name)).any()]  # fmt: skip
    ratios = []
    for i, (arm, name) in enumerate(series):
        cell = taus[(taus.arm == arm) & (taus.rate == name)]
        wide = cell.pivot_table(index="qk_clip_tau", columns="seed", values="ratio",
                                aggfunc="max", dropna=False)  # fmt: skip
        median, low, high = _spread(wide)
        shown = np.isfinite(median)
        if not shown.any():
            continue
        dodge = 10 ** (0.015 * (i - (len(series) - 1) / 2))  # side by side on the log axis
        x = wide.index.to_numpy()[shown] * dodge
        ratios += [*low[shown], *high[shown]]
        best = name == "best"
        mid = median[shown]
        ax.errorbar(x, mid, yerr=[mid - low[shown], high[shown] - mid],
                    color=arm_color(arm, True), ls="-" if best else "--",
                    marker="o" if best else "s", ms=3.5, capsize=2, lw=1.0,
                    label=f"{arm}, {name}")  # fmt: skip
    ax.axhline(1.0, **TAU_STYLE, label="S = tau")
    ax.axhline(ONE_UPDATE, color="0.25", ls="--", lw=1.0, label=f"bound {ONE_UPDATE:g} tau")
    finite = [r for r in ratios if np.isfinite(r) and r > 0]
    if finite and max(finite) / min(finite) > 20:
        ax.set_yscale("log")
    ax.set_xscale("log")
    grid = sorted(taus.qk_clip_tau.unique())
    ax.set_xticks(grid, [f"{t:g}" for t in grid])
    ax.minorticks_off()
    ax.set_xlabel("tau (signed S)")
    ax.set_ylabel("largest S after the first clip / tau")


def _sweep_panel(ax: plt.Axes, runs: pd.DataFrame) -> None:
    """(c): the held-out loss against the rate, unclipped and clipped ``scaled``."""
    sweep = runs[(runs.part == "sweep") & (runs.mechanism == "scaled")
                 & (runs.schedule == "cosine")]  # fmt: skip
    ax.set_title("(c) sweep: held-out loss\n(scaled)", fontsize=8)
    if sweep.empty:
        _note(ax, "no sweep of scaled in the runs table")
        return
    sweep = sweep.assign(arm=arm_of(sweep), clipped=sweep.qk_clip_tau.notna())
    for arm, clipped, cell in _cells(sweep):
        wide = cell.pivot_table(index="lr", columns="seed", values="final_val_loss",
                                aggfunc="max", dropna=False)  # fmt: skip
        taus = ", ".join(f"{t:g}" for t in sorted(cell.qk_clip_tau.unique()))
        label = f"{arm}, clipped (tau {taus})" if clipped else f"{arm}, unclipped"
        color = arm_color(arm, clipped)
        _band(ax, wide.index.to_numpy(), wide, color, STYLES[clipped], label)
        median = _spread(wide)[0]
        ax.plot(wide.index.to_numpy(), median, color=color, ls="none", marker="o", ms=2.5)
    ax.set_xscale("log")
    ax.set_xlabel("learning rate (peak)")
    ax.set_ylabel("held-out loss (nats/byte)")


def fig14_optimizer(tables: Tables, figures_dir: Path) -> list[Path]:
    runs = tables.get(RUNS_CSV, RUN_COLUMNS)
    curves = tables.get(CURVES_CSV, CURVE_COLUMNS)
    with plt.rc_context(STYLE):
        fig = plt.figure(figsize=(2 * COLUMN_WIDTH_IN, 7.2), layout="constrained")
        top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.1])
        long_axes = list(top.subplots(1, 2, sharey=True))
        handles = _long_panels(long_axes, curves)
        if handles:
            top.legend(handles=handles, loc="outside lower center", ncol=4, **LEGEND)
        for sub, draw in zip(bottom.subfigures(1, 2), (_tau_panel, _sweep_panel), strict=True):
            ax = sub.subplots()
            draw(ax, runs)
            if ax.get_legend_handles_labels()[0]:  # below its panel, clear of the data
                sub.legend(loc="outside lower center", ncol=2, **LEGEND)
        fig.suptitle("Experiment 15: the clip's S under each optimizer (median over seeds, "
                     "band: least to largest)", fontsize=9)  # fmt: skip
        return save(fig, figures_dir, "fig14_optimizer")

"""Figures 8 and 9 (experiment 10): the training demo across widths; the temperature's
drift over training."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from attnlab.harness.figures import COLUMN_WIDTH_IN, MECHANISM_COLORS, STYLE, log2_dk_axis, save
from attnlab.harness.tables import Tables
from attnlab.studies.widths.report import (
    base_runs,
    best_lrs,
    curves_at,
    drift_width,
    medians,
    milestone_ratios,
)
from attnlab.studies.widths.study import CURVES_CSV, SUMMARY_CSV


def fig8_widths(tables: Tables, figures_dir: Path) -> list[Path]:
    """(a) training slow-down vs d_k beside the static Jacobian ratio, (b) routing and
    held-out accuracy vs d_k per mechanism, (c) best learning rate vs d_k."""
    base, pairs, _ = base_runs(tables)
    ratios = milestone_ratios(tables)
    routing, accuracy = medians(base, "routing_accuracy_end"), medians(base, "eval_accuracy")
    best = best_lrs(tables)
    d_k = ratios.index.to_numpy()
    with plt.rc_context(STYLE):
        fig, (a, b, c) = plt.subplots(1, 3, figsize=(3 * COLUMN_WIDTH_IN, 2.8))
        judged = ratios.reached_scaled >= 0.5
        bound = judged & (ratios.reached_unscaled < 0.5)
        slowdown = {  # where scaled reaches loss 1.0; ^ where unscaled never does (a bound)
            "training: loss-1.0 step, unscaled / scaled": (judged, {"marker": "o"}),
            "lower bound (unscaled never reaches 1.0)": (bound, {"marker": "^", "ls": "", "ms": 7}),
        }
        for label, (shown, style) in slowdown.items():
            a.plot(d_k[shown], ratios.slowdown[shown], color="black", label=label, **style)
        a.plot(
            d_k,
            ratios.jacobian,
            marker="s",
            ls="--",
            color="0.5",
            label=r"static: $J_{scaled} / J_{unscaled}$, 16 keys",
        )
        a.axhline(1.0, color="0.3", lw=0.8)
        a.set_yscale("log")
        a.set_ylim(top=4 * max(ratios.jacobian.max(), ratios.slowdown.max()))  # legend room
        log2_dk_axis(a, d_k)
        a.set_ylabel("ratio (dimensionless)")
        a.set_title("(a) slow-down vs the Jacobian")
        a.legend(loc="upper left", fontsize=6)

        swept = tables.flags(SUMMARY_CSV).get("mechanisms", list(routing.columns))
        for name in [m for m in swept if m in routing.columns]:
            color = MECHANISM_COLORS[name]
            b.plot(routing.index, routing[name], marker="o", color=color, label=f"{name}: routing")
            b.plot(
                accuracy.index,
                accuracy[name],
                marker="x",
                ls=":",
                color=color,
                label=f"{name}: accuracy",
            )
        b.axhline(1 / pairs, color="0.3", lw=0.8, ls="--", label=f"routing chance 1/{pairs}")
        log2_dk_axis(b, routing.index.to_numpy())
        b.set_ylabel("fraction of held-out sequences")
        b.set_ylim(-0.02, 1.02)
        b.set_title("(b) routing (o) and held-out accuracy (x)")
        b.legend(loc="center left", fontsize=6, ncol=1, bbox_to_anchor=(1.0, 0.5))

        for name in best.columns:
            c.plot(best.index, best[name], marker="o", color=MECHANISM_COLORS[name], label=name)
        c.set_yscale("log")
        log2_dk_axis(c, best.index.to_numpy())
        c.set_ylabel("best Adam learning rate")
        c.set_title("(c) learning-rate transfer")
        c.legend(loc="best")
        fig.tight_layout()
        return save(fig, figures_dir, "fig8_widths")


def fig9_drift(tables: Tables, figures_dir: Path) -> list[Path]:
    """Logit std (after the scale) and implied rho over training at the drift width, per
    mechanism: median over seeds, step 0 marked."""
    curves = tables.get(CURVES_CSV, ["d_k"])
    d_k = drift_width(tables) or int(curves.d_k.max())  # no drift runs: the widest width
    at = curves_at(tables, d_k, ["logit_std", "rho_implied"])
    with plt.rc_context(STYLE):
        fig, (a, b) = plt.subplots(1, 2, figsize=(2 * COLUMN_WIDTH_IN, 2.7), sharex=True)
        for name, group in at.groupby("mechanism", sort=False):
            median = group.groupby("step")[["logit_std", "rho_implied"]].median()
            color = MECHANISM_COLORS[name]
            for ax, column in ((a, "logit_std"), (b, "rho_implied")):
                ax.plot(median.index, median[column], color=color, label=name)
                ax.plot(0, median[column].iloc[0], marker="o", color=color, mec="black", mew=0.5)
        a.set_yscale("log")
        a.set_ylabel("std of the logits the softmax sees")
        b.set_ylabel(r"implied $\rho$ = mean $q \cdot k_{asked}$ / ($d_k \sigma_q \sigma_k$)")
        for ax in (a, b):
            ax.set_xlabel("training step")
        a.set_title(f"(a) effective temperature, $d_k$ = {d_k} (o: initialisation)", fontsize=7)
        b.set_title("(b) q-k correlation implied by 07's law", fontsize=7)
        b.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=6)
        fig.tight_layout()
        return save(fig, figures_dir, "fig9_drift")

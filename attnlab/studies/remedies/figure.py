"""Figure 4 (experiment 05): the remedies' loss curves, milestones, and the fold."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

from attnlab.harness.figures import COLUMN_WIDTH_IN, MECHANISM_COLORS, STYLE, save
from attnlab.harness.tables import Tables, seeds_text
from attnlab.studies.remedies.study import CURVES_CSV, FOLD_CURVES_CSV, SUMMARY_CSV


def fig4_remedies(tables: Tables, figures_dir: Path) -> list[Path]:
    """Remedies: loss curves, milestone steps per mechanism, and the fold continuation."""
    curves = tables.get(CURVES_CSV, ["variant", "seed", "step", "smoothed_loss"])
    summary = tables.get(
        SUMMARY_CSV,
        ["variant", "seed", "step_loss_below_1", "step_loss_below_0p1"],
    )
    fold = tables.get(FOLD_CURVES_CSV, ["seed", "step", "smoothed_unfolded", "smoothed_folded"])
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
            # Scaled on top, dashed: its curve lies on qk_norm's and learned_temperature's.
            on_top = name == "scaled"
            ax_c.plot(
                wide.index,
                wide.median(axis=1),
                color=MECHANISM_COLORS[name],
                label=labels[name],
                lw=1.1,
                ls=(0, (4, 2)) if on_top else "-",
                zorder=3 if on_top else 2,
            )
        ax_c.set_yscale("log")
        ax_c.set_ylim(top=100 * curves.smoothed_loss.max())  # room for the legend above the data
        ax_c.set_xlabel("training step")
        ax_c.set_ylabel("smoothed training loss (nats)")
        ax_c.set_title(f"(a) Median loss over {seeds_text(curves.seed.nunique())}")
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
        # Plain step numbers at 1, 2 and 5 per decade; log minor labels overlap.
        ax_m.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        ax_m.xaxis.set_major_formatter(ScalarFormatter())
        ax_m.xaxis.set_minor_formatter(NullFormatter())
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

"""Figure 13: experiment 13 on experiment 14's causal models beside all-MiniLM-L6-v2 (Figure
11's encoder): the logits' spread and entropy per layer, trained and re-initialised, and
the static drift's effect on the next-token loss."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from attnlab.harness.figures import COLUMN_WIDTH_IN, STYLE, mechanism_color, save
from attnlab.harness.tables import Tables
from attnlab.studies.real_model.causal_report import per_layer
from attnlab.studies.real_model.report import HEADS as ENCODER_HEADS
from attnlab.studies.real_model.report import headline_length as encoder_length
from attnlab.studies.real_model.study import CAUSAL_COUNTERFACTUALS_CSV, HEADS_CSV

ENCODER = "all-MiniLM-L6-v2"
ENCODER_COLOR = "0.2"


def _encoder_layers(tables: Tables) -> pd.DataFrame:
    """MiniLM's per-layer medians over heads at its headline length (Figure 11's)."""
    heads = tables.get(HEADS_CSV, ENCODER_HEADS)
    at = heads[heads.row_length == encoder_length(tables)]
    return at.groupby(["model", "layer"], sort=False).agg(
        logit_std=("logit_std_p50", "median"), logit_std_min=("logit_std_p50", "min"),
        logit_std_max=("logit_std_p50", "max"), entropy_ratio=("entropy_ratio_p50", "median"),
    ).reset_index()  # fmt: skip


def _depth(layers: pd.Series) -> np.ndarray:
    """Layer ``i`` of ``L`` at relative depth ``(i + 1/2) / L``."""
    return (layers.to_numpy() + 0.5) / (layers.max() + 1)


def _layer_panels(ax_std: plt.Axes, ax_entropy: plt.Axes, tables: Tables) -> None:
    causal = per_layer(tables)
    curves = [(ENCODER, ENCODER_COLOR, _encoder_layers(tables))]
    for name, frame in causal.groupby("checkpoint", sort=False):
        curves.append((name, mechanism_color(frame.mechanism.iloc[0]), frame))
    for label, color, frame in curves:
        for model, ls, marker in (("trained", "-", "o"), ("initial", ":", "s")):
            f = frame[frame.model == model]
            x = _depth(f.layer)
            kwargs = {"color": color, "ls": ls, "marker": marker, "mfc": "white" if ls == ":"
                      else color}  # fmt: skip
            ax_std.plot(x, f.logit_std, **kwargs)
            ax_std.fill_between(x, f.logit_std_min, f.logit_std_max, color=color, alpha=0.12,
                                lw=0)  # fmt: skip
            ax_entropy.plot(x, f.entropy_ratio, label=f"{label}, {model}", **kwargs)
    ax_std.set_yscale("log")
    ax_std.axhline(1.0, color="black", lw=0.8, ls="--")
    for ax in (ax_std, ax_entropy):
        ax.set_xlabel("relative depth (layer + 1/2) / L")
        ax.set_xlim(0, 1)
    ax_std.set_ylabel("logits' std, median head (band: heads)")
    ax_entropy.set_ylabel("entropy / ln n, median head")
    ax_entropy.set_ylim(0, 1.05)
    ax_std.set_title("(a) Logit spread per layer\n(dashed: the 1 the divisor aims at)",
                     fontsize=7.5)  # fmt: skip
    ax_entropy.set_title("(b) Entropy per layer", fontsize=7.5)
    ax_entropy.legend(fontsize=5, loc="lower right")


def _drift_panel(ax: plt.Axes, tables: Tables) -> None:
    frame = tables.get(CAUSAL_COUNTERFACTUALS_CSV)
    drift = frame[frame.counterfactual == "drift"]
    for name, f in drift.groupby("checkpoint", sort=False):
        color = mechanism_color(name.split("_lm_")[-1].rsplit("_d", 1)[0])
        ax.plot(f.logit_factor, f.next_token_loss_change, color=color, marker="o", label=name)
        ax.plot(f.logit_factor, 1 - f.top1_agreement, color=color, marker="o", ls=":",
                mfc="white", label=f"{name}: top-1 changed")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel(r"q$\cdot$k factor ($\alpha^2$)")
    ax.set_ylabel("next-token loss change (nats)\nshare of top-1 changed (dotted)")
    T = int(frame.row_length.iloc[0])
    ax.set_title(f"(c) Static drift q, k → α q, α k, T = {T}", fontsize=7.5)
    ax.legend(fontsize=5, loc="upper left")


def fig13_real_model_causal(tables: Tables, figures_dir: Path) -> list[Path]:
    """(a) Logits' std and (b) entropy per layer of 14's models beside MiniLM's, trained and
    re-initialised; (c) the static drift on 14's models' next-token loss."""
    with plt.rc_context(STYLE | {"lines.markersize": 3}):
        fig, axes = plt.subplots(1, 3, figsize=(2 * COLUMN_WIDTH_IN, 3.0), layout="constrained")
        _layer_panels(axes[0], axes[1], tables)
        _drift_panel(axes[2], tables)
        fig.suptitle("Experiment 13 on experiment 14's causal LMs beside all-MiniLM-L6-v2",
                     fontsize=8.5)  # fmt: skip
        return save(fig, figures_dir, "fig13_real_model_causal")

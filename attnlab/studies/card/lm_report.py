"""The language-model card's ``lm/card.md``, from its tables only (pandas, no JAX)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from attnlab.lm.sweep_tables import lr_sensitivity
from attnlab.studies.card.lm_verdicts import DRIFT_FACTOR, LMCard
from attnlab.studies.card.markdown import QUICK_LINE, reused_lines, table, verdict_lines


def _loss(mean: float, se: float) -> str:
    return f"{mean:.3f} ± {se:.3f}" if np.isfinite(mean) else "diverged"


def _sweep_lines(sweep: pd.DataFrame, names: list[str]) -> list[str]:
    """Held-out loss / largest attention logit per mechanism and width (rows) and rate."""
    rates = sorted(sweep.lr.unique())
    layers = [c for c in sweep.columns if c.startswith("max_attn_logit_layer")]
    rows = []
    for name in names:
        for d, g in sweep[sweep.mechanism == name].groupby("d_model"):
            by = g.groupby("lr")
            loss, se = by.final_val_loss.mean(), by.final_val_loss_se.mean()
            logit = by[layers].max().max(axis=1)
            cells = [f"{_loss(loss[r], se[r])} / {logit[r]:.3g}" if r in loss else "—"
                     for r in rates]  # fmt: skip
            rows.append([name, str(d), g.positions.iloc[0], *cells])
    return table(["mechanism", "d_model", "positions", *(f"{r:g}" for r in rates)], rows)


def _sensitivity_lines(sweep: pd.DataFrame, names: list[str]) -> list[str]:
    sensitivities = lr_sensitivity(sweep)
    rows = [
        [r.mechanism, str(r.d_model), f"{r.lr_sensitivity:.3f}", f"{r.best_lr:g}",
         f"{r.best_loss:.3f}"]
        for name in names
        for r in sensitivities[sensitivities.mechanism == name].itertuples()
    ]  # fmt: skip
    return table(["mechanism", "d_model", "LR sensitivity", "best rate", "best loss"], rows)


def _ownership_lines(ownership: pd.DataFrame, names: list[str]) -> list[str]:
    rows = []
    for name in names:
        own = ownership[ownership.mechanism == name] if "mechanism" in ownership else ownership
        if own.empty:
            continue
        own = own[own.d_model == own.d_model.max()]
        for (weights, layer), g in own.groupby(["weights", "layer"], sort=False):
            rows.append([
                name, str(int(g.d_model.iloc[0])), f"{weights} ({g.lr.iloc[0]:g})", str(layer),
                f"{g.logit_scale.median():.3g}", f"{g.elasticity_1.median():.2f}",
                f"{g.elasticity_8.median():.2f}", ", ".join(g.owner.value_counts().index),
                *sink_cells(g),
            ])  # fmt: skip
    header = ["mechanism", "d_model", "weights (rate)", "layer", "logit scale", "e at α 1",
              "e at α 8", "owner (heads)", "first-position weight", "sink heads (> 0.3)",
              "weight on nothing"]  # fmt: skip
    return table(header, rows)


def sink_cells(heads: pd.DataFrame) -> list[str]:
    """The attention sink of ``heads`` (rows of an LM card's ownership table; Gu et al.
    2024): their mean first-position weight, how many exceed 0.3, and their mean weight on
    nothing; dashes for a card made before the columns."""
    if "first_weight" not in heads:
        return ["—", "—", "—"]
    sinks = int(heads.sink_head.astype(bool).sum())
    return [f"{heads.first_weight.mean():.3f}", f"{sinks} of {len(heads)}",
            f"{heads.null_weight.mean():.3f}"]  # fmt: skip


def _length_lines(lengths: pd.DataFrame, names: list[str]) -> list[str]:
    if lengths.empty or "mechanism" not in lengths:
        return ["No lengths read: a model with learned positions ends at its training length."]
    rows = [
        [r.mechanism, str(r.d_model), r.positions, f"{r.lr:g}", f"{r.factor}x ({r.length})",
         str(r.windows), _loss(r.loss, r.loss_se)]
        for name in names for r in lengths[lengths.mechanism == name].itertuples()
    ]  # fmt: skip
    header = ["mechanism", "d_model", "positions", "best rate", "length", "windows", "loss"]
    return table(header, rows)


def lm_card_markdown(
    card: LMCard,
    verdicts: pd.DataFrame,
    name: str,
    reference: str,
    command: str,
    reused: Mapping[str, str],
    quick: bool = False,
) -> str:
    """``lm/card.md`` of mechanism ``name`` (its baselines: the other mechanisms of
    ``card``); ``reused``: baseline -> the committed card its rows were read from."""
    names = [name] + [n for n in dict.fromkeys(card.lm_sweep.mechanism) if n != name]
    title = "Quick language-model card" if quick else "Language-model card"
    lines = [f"# {title}: {name}", ""]
    if quick:
        lines += [QUICK_LINE, ""]
    lines += [
        f"Mechanism `{reference}`, against {', '.join(names[1:]) or 'nothing'}, trained in "
        "experiment 14's byte-level causal LM (attnlab/studies/card/README.md, *The "
        f"language-model card*). Made by `{command}`; every number below is read from this "
        "folder's CSVs.",
    ]
    lines += reused_lines(reused, "same text, initialisations and batches")
    lines += [
        "",
        "## Verdicts",
        "",
        *verdict_lines(verdicts, names),
        "",
        "## Learning rates",
        "",
        "Held-out loss (nats per byte, ± SE over windows) / largest attention logit over "
        "training, any layer, per peak rate:",
        "",
        *_sweep_lines(card.lm_sweep, names),
        "",
        *_sensitivity_lines(card.lm_sweep, names),
        "",
        "## Who owns the temperature, and after the drift",
        "",
        f"Per layer, at the best rate and at {DRIFT_FACTOR:g}x it (widest width): medians over "
        "heads of the logits' within-row std and of the elasticity e = d ln std(z) / d ln α "
        "to q, k → αq, αk (2: the weights own the temperature, 0: the mechanism).",
        "",
        *_ownership_lines(card.lm_ownership, names),
        "",
        "## Longer sequences",
        "",
        "The best rate's model on held-out sequences longer than it was trained on, every "
        "position counted, disjoint windows:",
        "",
        *_length_lines(card.lm_lengths, names),
    ]
    return "\n".join(lines) + "\n"

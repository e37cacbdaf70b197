"""The recall card's ``card.md``, from its tables only (pandas, no JAX): its verdicts, the
statics, float16 headroom and masks, training, ownership, drift, learning rates and
widths."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from attnlab.studies.card.headroom import headroom
from attnlab.studies.card.markdown import (
    QUICK_LINE,
    closing_lines,
    pm,
    reused_lines,
    table,
    verdict_lines,
)
from attnlab.studies.card.sensitivity import sensitivity
from attnlab.studies.card.verdicts import Card


def _statics_lines(statics: pd.DataFrame, name: str) -> list[str]:
    rows = []
    for _, r in statics[statics.mechanism == name].iterrows():
        rows.append(
            [
                r.sweep,
                int(r.d_k),
                int(r.n_keys),
                pm(r.max_weight_mean, r.max_weight_sem),
                pm(r.entropy_mean, r.entropy_sem),
                pm(r.mass_mean, r.mass_sem),
                pm(r.jacobian_fro_mean, r.jacobian_fro_sem),
                pm(r.logit_std_mean, r.logit_std_sem),
            ]
        )
    header = ["sweep", "d_k", "n", "max weight", "entropy (nats)", "mass", "‖J‖_F", "logit std"]
    return table(header, rows)


def _training_lines(training: pd.DataFrame, names: list[str]) -> list[str]:
    rows = []
    for n in names:
        g = training[training.mechanism == n]
        reached = g.step_loss_below_1.notna().sum()
        rows.append(
            [
                n,
                f"{g.grad_wq_step0.median():.3g}",
                f"{g.step_loss_below_1.astype(float).median():.0f} ({reached}/{len(g)})",
                f"{g.step_loss_below_0p1.astype(float).median():.0f}",
                f"{g.final_loss.median():.3g}",
                f"{g.eval_accuracy.median():.3f}",
                _diverged_text(g),
            ]
        )
    header = [
        "mechanism",
        "‖∇W_Q‖ step 0",
        "step to loss 1 (seeds)",
        "step to loss 0.1",
        "final loss",
        "held-out accuracy",
        "diverged",
    ]
    # a milestone never reached prints as "nan": say "never" (in the numbers, not the name)
    return table(header, [[r[0], *(c.replace("nan", "never") for c in r[1:])] for r in rows])


def _diverged_text(rows: pd.DataFrame) -> str:
    bad = rows[rows.diverged_step.notna()]
    return ", ".join(
        f"seed {int(r.seed)} at step {int(r.diverged_step)} ({r.nonfinite})"
        for r in bad.itertuples()
    )


def _swept(
    frame: pd.DataFrame, names: list[str], by: str, swept: str
) -> tuple[list, list[tuple[str, object, pd.DataFrame]]]:
    """The sorted values of column ``swept``, and ``(mechanism, value of by, rows sorted by
    swept)`` per group of ``names``' rows of ``frame``, in the table's order."""
    groups = frame[frame.mechanism.isin(names)].groupby(["mechanism", by], sort=False)
    return sorted(frame[swept].unique()), [(n, k, g.sort_values(swept)) for (n, k), g in groups]


def _precision_lines(precision: pd.DataFrame, names: list[str]) -> list[str]:
    sigmas, groups = _swept(precision, names, "d_k", "sigma")
    rows = []
    for n, d_k, g in groups:
        cells = [
            f"{e:.1g}" if ok else "non-finite"
            for ok, e in zip(g.finite_float16.astype(bool), g.max_error, strict=True)
        ]
        room, top = headroom(g)
        rows.append([n, int(d_k), *cells, f"{'≥' if top else ''}{room:g}"])
    return table(["mechanism", "d_k", *(f"σ {s:g}" for s in sigmas), "headroom"], rows)


def _ownership_lines(ownership: pd.DataFrame, names: list[str]) -> list[str]:
    alphas, groups = _swept(ownership, names, "stage", "alpha")
    rows = [[n, stage, *map(pm, g.elasticity_mean, g.elasticity_sem)] for n, stage, g in groups]
    return table(["mechanism", "weights", *(f"e at α {a:g}" for a in alphas)], rows)


def _drift_lines(drift: pd.DataFrame, names: list[str]) -> list[str]:
    rows = []
    for r in drift[drift.mechanism.isin(names)].itertuples():
        rows.append(
            [
                r.mechanism,
                f"{r.alpha:.3g}",
                pm(r.loss_mean, r.loss_sem),
                pm(r.accuracy_mean, r.accuracy_sem),
                pm(r.entropy_mean, r.entropy_sem),
                pm(r.max_weight_mean, r.max_weight_sem),
                # — for a card made before the reading
                *(
                    pm(getattr(r, f"{c}_mean", np.nan), getattr(r, f"{c}_sem", np.nan))
                    for c in ("logit_std", "first_weight", "null_weight")
                ),
            ]
        )
    header = ["mechanism", "α", "held-out loss", "accuracy", "entropy (nats)", "max weight",
              "logit std", "weight on slot 0", "weight on nothing"]  # fmt: skip
    return table(header, rows)


def _sweep_lines(sweep: pd.DataFrame, names: list[str]) -> list[str]:
    rates = sweep.lr.nunique()
    lines = []
    for (n, d_k), g in sweep[sweep.mechanism.isin(names)].groupby(["mechanism", "d_k"], sort=False):
        if g.lr.nunique() != rates:
            continue
        s = sensitivity(g)
        lines.append(
            f"- {n}, d_k {int(d_k)}: sensitivity {pm(s.sensitivity.mean(), _sem(s.sensitivity))}"
            " (mean ± SE over seeds); per rate, median final loss / largest |logit| / "
            "diverged seeds: "
            + "; ".join(
                f"{lr:.3g}: {r.final_loss.median():.3g} / {r.max_logit.median():.3g} / "
                f"{int(r.diverged_step.notna().sum())}"
                for lr, r in g.groupby("lr")
            )
        )
    return lines


def _sem(values: pd.Series) -> float:
    return float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else np.nan


def _median_step(steps: pd.Series) -> str:
    """The median of milestone steps over seeds, ``never`` where none reached it."""
    median = steps.astype(float).median()
    return f"{median:.0f}" if np.isfinite(median) else "never"


def _widths_lines(sweep: pd.DataFrame, names: list[str]) -> list[str]:
    base = sweep.groupby("lr").d_k.nunique().idxmax()
    rows = []
    at_base = sweep[sweep.lr == base]
    for (n, d_k), g in at_base[at_base.mechanism.isin(names)].groupby(
        ["mechanism", "d_k"], sort=False
    ):
        reached = int(g.step_loss_below_1.notna().sum())
        rows.append(
            [
                n,
                int(d_k),
                f"{_median_step(g.step_loss_below_1)} ({reached}/{len(g)})",
                f"{g.eval_accuracy.median():.3f}",
                f"{g.logit_std_step0.median():.3g}",
                f"{g.logit_std_end.median():.3g}",
                _diverged_text(g),
            ]
        )
    header = ["mechanism", "d_k", "step to loss 1 (seeds)", "accuracy", "logit std step 0"]
    return [
        f"At the base rate {base:g}:",
        "",
        *table([*header, "logit std end", "diverged"], rows),
    ]


def card_markdown(
    card: Card,
    verdicts: pd.DataFrame,
    name: str,
    reference: str,
    command: str,
    reused: Mapping[str, str],
    quick: bool = False,
) -> str:
    """``card.md`` of mechanism ``name`` (its baselines are the other mechanisms of
    ``card``'s tables); ``reused``: baseline -> the committed card its rows were read from;
    ``quick``: a ``--quick`` card, said in its first line."""
    names = [name] + [n for n in dict.fromkeys(card.statics.mechanism) if n != name]
    lines = [f"# Quick mechanism card: {name}" if quick else f"# Mechanism card: {name}", ""]
    if quick:
        lines += [QUICK_LINE, ""]
    lines += [
        *closing_lines(verdicts[verdicts.mechanism == name]),
        "",
        f"Mechanism `{reference}`, against {', '.join(names[1:]) or 'nothing'}. "
        f"Made by `{command}`; every number below is read from this folder's CSVs.",
    ]
    lines += reused_lines(reused, "same draws, seeds and data")
    lines += ["", "## Verdicts", "", *verdict_lines(verdicts, names), "", "![card](card.png)"]
    lines += [
        "",
        "## Statics at initialisation",
        "",
        "q and k with iid N(0, 1) entries, drawn as experiments 02 and 03 draw them; means "
        "± standard errors over trials. *mass* is the row's total weight; where it is not 1 "
        "the entropy is that of the normalised row and ‖J‖_F is the Frobenius norm of the "
        "weights' Jacobian with respect to the logits by autodiff (softmax's closed form "
        "otherwise); — where not computed.",
        "",
        *_statics_lines(card.statics, name),
        "",
        "## Float16 headroom and masks",
        "",
        "q and k with iid N(0, σ²) entries rounded to float16, through the mechanism in "
        "float16 and in float32: the largest weight difference per σ; the headroom is the "
        "largest σ up to which every cell is finite and within 1e-2 (≥: the grid's top).",
        "",
        *_precision_lines(card.precision, names),
        "",
    ]
    for r in card.masks[card.masks.mechanism == name].itertuples():
        lines.append(
            f"- fully masked row: finite output {bool(r.finite_output)}, finite gradients "
            f"{bool(r.finite_gradients)}, largest weight on a masked key {r.masked_weight_max:.2g},"
            f" largest output of the empty row {r.dead_row_max:.2g}"
        )
    lines += ["", "## Training (experiment 04's task and defaults)", ""]
    lines += _training_lines(card.training, names)
    lines += [
        "",
        "## Who owns the temperature",
        "",
        "Elasticity e = d ln std(z) / d ln α of the logits to q, k → αq, αk, q and k from the "
        "projections on held-out sequences (mean ± SE over seeds): 2 where the weights own "
        "the temperature, 0 where the mechanism does, falling from 2 under a cap.",
        "",
        *_ownership_lines(card.ownership, names),
        "",
        "## Static drift",
        "",
        "The trained model with W_Q and W_K multiplied by α, everything else fixed; held-out "
        "sequences, mean ± SE over seeds. Logit std: the attention logits' within-row std "
        "(root mean square over rows), α² times α 1's where the weights own the temperature.",
        "",
        *_drift_lines(card.drift, names),
        "",
        "## Learning rates (Wortsman et al. 2023's sensitivity)",
        "",
        *_sweep_lines(card.sweep, names),
        "",
        "## Widths",
        "",
        *_widths_lines(card.sweep, names),
    ]
    return "\n".join(lines) + "\n"

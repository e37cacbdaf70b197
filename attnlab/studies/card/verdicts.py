"""The card's verdicts: each a stated rule over the card's tables that can fail.

A verdict is *yes*, *no*, or *undetermined* (None) where the tables cannot decide it (a
baseline missing, every seed diverged). Each function takes the card's tables (``Card``)
and a mechanism's name and returns a ``Verdict``; ``VERDICTS`` lists them in the card's
order. The thresholds are module constants, so a test can probe both sides of each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd

#: mup's coordinate-check criterion: the logits' size within this factor over a 4x width.
WIDTH_FACTOR = 1.2
#: Largest |p_16 - p_32| a float16-safe mechanism may show (07's total-variation bound).
FLOAT16_TOLERANCE = 1e-2
#: "As fast as scaled": the median step to smoothed loss 1 at most this times scaled's.
SPEED_FACTOR = 1.25
#: "Holds its temperature": the logits' std at the end within this factor of step 0.
DRIFT_FACTOR = 2.0
#: "Does not saturate at initialisation": mean max weight at most this at every d_k.
SATURATION_MAX_WEIGHT = 0.5


class Card(NamedTuple):
    """The tables of one card (``attnlab.studies.card.compute``); each is written as
    ``<field>.csv`` in the card's folder."""

    statics: pd.DataFrame
    precision: pd.DataFrame
    masks: pd.DataFrame
    training: pd.DataFrame
    training_curves: pd.DataFrame
    widths: pd.DataFrame
    lr: pd.DataFrame
    drift: pd.DataFrame


class Verdict(NamedTuple):
    verdict: str
    rule: str
    value: str
    passed: bool | None


def _rows(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    return frame[frame.mechanism == name]


def _factor(ratio: float) -> float:
    """How far a ratio is from 1, as a factor >= 1."""
    return float(max(ratio, 1.0 / ratio))


def no_saturation(card: Card, name: str) -> Verdict:
    rule = (
        f"mean max weight <= {SATURATION_MAX_WEIGHT} at every d_k of the statics "
        "(N(0, 1) q and k, initial scalars)"
    )
    rows = _rows(card.statics, name)
    rows = rows[rows.sweep == "d_k"]
    if rows.empty:
        return Verdict("does not saturate at initialisation", rule, "no rows", None)
    worst = rows.loc[rows.max_weight_mean.idxmax()]
    value = f"{worst.max_weight_mean:.3g} at d_k {int(worst.d_k)}"
    passed = bool(rows.max_weight_mean.max() <= SATURATION_MAX_WEIGHT)
    return Verdict("does not saturate at initialisation", rule, value, passed)


def _width_factor(card: Card, name: str, column: str) -> tuple[str, bool | None]:
    rows = _rows(card.widths, name)
    if rows.empty:
        return "no rows", None
    rows = rows[rows.lr.isin(_base_lr(card))]
    medians = rows.groupby("d_k")[column].median().dropna().sort_index()
    if len(medians) < 2 or (medians <= 0).any():
        return "too few widths", None
    factors = [_factor(b / a) for a, b in zip(medians.values[:-1], medians.values[1:], strict=True)]
    worst = int(np.argmax(factors))
    d = medians.index
    value = f"x{max(factors):.3g} from d_k {d[worst]} to {d[worst + 1]}"
    return value, bool(max(factors) <= WIDTH_FACTOR)


def _base_lr(card: Card) -> list[float]:
    """The learning rate every width was trained at (the width runs' rate)."""
    counts = card.widths.groupby("lr").d_k.nunique()
    return [float(counts.idxmax())] if not counts.empty else []


def width_stable_at_init(card: Card, name: str) -> Verdict:
    rule = (
        f"median logit std at step 0 within a factor {WIDTH_FACTOR} between widths 4x apart "
        "(mup's coordinate check)"
    )
    value, passed = _width_factor(card, name, "logit_std_step0")
    return Verdict("keeps its temperature across widths at step 0", rule, value, passed)


def width_stable_trained(card: Card, name: str) -> Verdict:
    rule = f"median logit std after training within a factor {WIDTH_FACTOR} between widths 4x apart"
    value, passed = _width_factor(card, name, "logit_std_end")
    return Verdict("keeps its temperature across widths after training", rule, value, passed)


def float16_safe(card: Card, name: str) -> Verdict:
    rule = (
        f"float16 inputs give finite weights within {FLOAT16_TOLERANCE} of float32 at every "
        "d_k of the statics"
    )
    rows = _rows(card.precision, name)
    if rows.empty:
        return Verdict("float16-safe", rule, "no rows", None)
    if not rows.finite_float16.all():
        bad = rows[~rows.finite_float16.astype(bool)].d_k.tolist()
        return Verdict("float16-safe", rule, f"non-finite at d_k {bad}", False)
    error = float(rows.max_error.max())
    return Verdict("float16-safe", rule, f"max error {error:.2g}", error <= FLOAT16_TOLERANCE)


def mask_safe(card: Card, name: str) -> Verdict:
    rule = (
        "with a fully masked row: finite output and gradients, weight 0 on masked keys, "
        "zero output on the empty row"
    )
    rows = _rows(card.masks, name)
    if rows.empty:
        return Verdict("mask-safe", rule, "no rows", None)
    row = rows.iloc[0]
    checks = {
        "finite output": bool(row.finite_output),
        "finite gradients": bool(row.finite_gradients),
        "masked weight 0": row.masked_weight_max == 0,
        "empty row 0": row.dead_row_max == 0,
    }
    failed = [k for k, ok in checks.items() if not ok]
    return Verdict("mask-safe", rule, "; ".join(failed) or "all four hold", not failed)


def _median_step(card: Card, name: str) -> float | None:
    rows = _rows(card.training, name)
    steps = rows.step_loss_below_1.astype(float)
    return None if rows.empty or steps.isna().any() else float(steps.median())


def trains_as_fast_as_scaled(card: Card, name: str) -> Verdict:
    rule = (
        f"every seed reaches smoothed loss 1 (04's task), the median step at most "
        f"{SPEED_FACTOR}x scaled's"
    )
    verdict = "trains as fast as scaled"
    rows = _rows(card.training, name)
    if rows.empty or _rows(card.training, "scaled").empty:
        return Verdict(verdict, rule, "no rows for it or for scaled", None)
    own, scaled = _median_step(card, name), _median_step(card, "scaled")
    if own is None:
        reached = int(rows.step_loss_below_1.notna().sum())
        return Verdict(verdict, rule, f"{reached} of {len(rows)} seeds reach loss 1", False)
    if scaled is None:
        return Verdict(verdict, rule, "scaled does not reach loss 1", None)
    ratio = own / scaled
    value = f"median step {own:.0f} vs {scaled:.0f} (x{ratio:.2f})"
    return Verdict(verdict, rule, value, bool(ratio <= SPEED_FACTOR))


def lr_transfers(card: Card, name: str) -> Verdict:
    rule = (
        "the best learning rate (lowest median final loss, 10's rule) is the same at every "
        "swept width"
    )
    rows = _rows(card.lr, name)
    best = rows[rows.best.astype(bool)] if not rows.empty else rows
    if best.empty:
        return Verdict("learning rate transfers across widths", rule, "no best rate", None)
    by_width = dict(zip(best.d_k.astype(int), best.lr.astype(float), strict=True))
    value = ", ".join(f"d_k {d}: {lr:g}" for d, lr in sorted(by_width.items()))
    passed = len(set(by_width.values())) == 1 and len(by_width) == rows.d_k.nunique()
    return Verdict("learning rate transfers across widths", rule, value, passed)


def holds_after_drift(card: Card, name: str) -> Verdict:
    rule = (
        f"median logit std at the end within a factor {DRIFT_FACTOR} of step 0 "
        "(the drift width, base learning rate)"
    )
    verdict = "holds its temperature after the weights drift"
    rows = _rows(card.drift, name)
    if rows.empty:
        return Verdict(verdict, rule, "no rows", None)
    start = rows[rows.step == rows.step.min()].logit_std.median()
    end = rows[rows.step == rows.step.max()].logit_std.median()
    if not (np.isfinite(end) and start > 0 and end > 0):
        return Verdict(verdict, rule, "diverged", False)
    value = f"{start:.3g} -> {end:.3g} (x{end / start:.2f})"
    return Verdict(verdict, rule, value, _factor(end / start) <= DRIFT_FACTOR)


VERDICTS: tuple[Callable[[Card, str], Verdict], ...] = (
    no_saturation,
    width_stable_at_init,
    width_stable_trained,
    float16_safe,
    mask_safe,
    trains_as_fast_as_scaled,
    lr_transfers,
    holds_after_drift,
)


def verdicts_frame(card: Card, names: list[str]) -> pd.DataFrame:
    """One row per (mechanism, verdict): ``verdict, rule, value, passed``."""
    rows = [
        {"mechanism": name, **check(card, name)._asdict()} for name in names for check in VERDICTS
    ]
    return pd.DataFrame(rows)

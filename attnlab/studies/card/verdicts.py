"""The card's verdicts: each a stated rule over the card's tables that can fail.

A verdict is *yes*, *no*, or *undetermined* (None) where the tables cannot decide it: a
baseline missing, a premise unmet (a width or a baseline that never learned, a best rate at
the sweep's edge, too few seeds), every seed diverged; its ``value`` then says why. A run
that went non-finite makes its verdict *no* with a value starting ``diverged``. Each
function takes the card's tables (``Card``) and a mechanism's name and returns a
``Verdict``; ``VERDICTS`` lists them in the card's order. The thresholds are module
constants, so a test can probe both sides of each. *Learned* means every seed reached
smoothed loss ``LEARNED_LOSS``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd

from attnlab.core.owner import ALPHAS, owner
from attnlab.studies.card.headroom import headroom
from attnlab.studies.card.sensitivity import paired_difference, sensitivity

#: mup's coordinate-check criterion: the logits' size within this factor over a 4x width.
WIDTH_FACTOR = 1.2
#: The same after training, where the seeds' spread is wider.
TRAINED_WIDTH_FACTOR = 1.5
#: "As fast as scaled": the median step to smoothed loss 1 at most this times scaled's.
SPEED_FACTOR = 1.25
#: "Does not saturate at initialisation": mean max weight at most this at every d_k.
SATURATION_MAX_WEIGHT = 0.5
#: The loss milestone of "learned" (04's first milestone).
LEARNED_LOSS = 1.0
#: Static drift: the multiplier of W_Q, W_K the verdict reads, against alpha = 1 ...
DRIFT_ALPHA = 4.0
#: ... at which the held-out loss may rise by at most this (nats) ...
DRIFT_LOSS_RISE = 0.1
#: ... and the attention logits' scale (``logit_std``: within-row std) change by at most this
#: factor, either way. Bilinear logits grow by ``DRIFT_ALPHA ** 2`` = 16 (the weights own the
#: temperature); normalised q and k leave them as they are. Read whatever the loss does: on a
#: solved task the loss cannot move while the logits grow 16x (the temperature did not hold).
DRIFT_SCALE_FACTOR = 2.0
#: "Stable at high learning rates": sensitivity above scaled's by at most this many SEs of
#: the paired difference (not significantly more sensitive).
SENSITIVITY_SES = 2.0
#: The verdicts that answer the closing question (``report.closing_lines``).
OWNER_VERDICT = "the mechanism or a cap owns the temperature, not the weights"
DRIFT_VERDICT = "holds its temperature after the weights drift"
HIGH_LR_VERDICT = "stable at high learning rates"
#: "Transfers": the best rates of the swept widths at most this many grid steps apart.
LR_STEPS = 1


class Card(NamedTuple):
    """The tables of one card (``attnlab.studies.card.compute``); each is written as
    ``<field>.csv`` in the card's folder."""

    statics: pd.DataFrame
    precision: pd.DataFrame
    masks: pd.DataFrame
    training: pd.DataFrame
    training_curves: pd.DataFrame
    ownership: pd.DataFrame
    drift: pd.DataFrame
    sweep: pd.DataFrame


class Verdict(NamedTuple):
    verdict: str
    rule: str
    value: str
    passed: bool | None


class Rule(NamedTuple):
    """A verdict's name and its stated rule, as the card prints them; ``says`` gives its
    answer for one mechanism (``passed`` None: undetermined, ``value`` says why)."""

    verdict: str
    rule: str

    def says(self, value: str, passed: bool | None) -> Verdict:
        return Verdict(self.verdict, self.rule, value, passed)


def _rows(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    return frame[frame.mechanism == name]


def _factor(ratio: float) -> float:
    """How far a ratio is from 1, as a factor >= 1."""
    return float(max(ratio, 1.0 / ratio))


def _diverged(rows: pd.DataFrame, where: str = "") -> str | None:
    """``diverged: seed S at step T (loss non-finite)`` for the first diverged row, if any."""
    bad = rows[rows.diverged_step.notna()] if "diverged_step" in rows else rows.iloc[:0]
    if bad.empty:
        return None
    r = bad.sort_values("diverged_step").iloc[0]
    return (
        f"diverged: {len(bad)} of {len(rows)} runs{where}, first seed {int(r.seed)} at step "
        f"{int(r.diverged_step)} ({r.nonfinite} non-finite)"
    )


def _learned(rows: pd.DataFrame) -> bool:
    return not rows.empty and bool(rows.step_loss_below_1.notna().all())


NO_SATURATION = Rule(
    "does not saturate at initialisation",
    f"mean max weight <= {SATURATION_MAX_WEIGHT} at every d_k of the statics "
    "(N(0, 1) q and k, initial scalars)",
)


def no_saturation(card: Card, name: str) -> Verdict:
    rows = _rows(card.statics, name)
    rows = rows[rows.sweep == "d_k"] if not rows.empty else rows
    if rows.empty:
        return NO_SATURATION.says("no rows", None)
    worst = rows.loc[rows.max_weight_mean.idxmax()]
    value = f"{worst.max_weight_mean:.3g} at d_k {int(worst.d_k)}"
    passed = bool(rows.max_weight_mean.max() <= SATURATION_MAX_WEIGHT)
    return NO_SATURATION.says(value, passed)


def _base_rows(card: Card, name: str) -> pd.DataFrame:
    """The sweep's lanes at the base rate (the one every width was trained at)."""
    if card.sweep.empty:
        return card.sweep
    counts = card.sweep.groupby("lr").d_k.nunique()
    rows = _rows(card.sweep, name)
    return rows[rows.lr == counts.idxmax()]


def _per_4x(medians: pd.Series, limit: float) -> tuple[str, bool]:
    """The largest change of ``medians`` (by d_k) between neighbouring widths, as a factor
    per 4x of width (``f ** (log 4 / log(d2 / d1))``), against ``limit``."""
    d = medians.index.to_numpy(float)
    steps = [
        _factor(b / a) ** (math.log(4) / math.log(d2 / d1))
        for a, b, d1, d2 in zip(medians.values[:-1], medians.values[1:], d[:-1], d[1:], strict=True)
    ]
    worst = int(np.argmax(steps))
    value = f"x{steps[worst]:.3g} per 4x from d_k {int(d[worst])} to {int(d[worst + 1])}"
    return value, bool(steps[worst] <= limit)


WIDTHS_AT_INIT = Rule(
    "keeps its temperature across widths at step 0",
    f"median logit std at step 0 within a factor {WIDTH_FACTOR} per 4x of width "
    "(mup's coordinate check)",
)


def width_stable_at_init(card: Card, name: str) -> Verdict:
    rows = _base_rows(card, name)
    medians = rows.groupby("d_k").logit_std_step0.median().dropna() if len(rows) else rows
    if len(medians) < 2 or (medians <= 0).any():
        return WIDTHS_AT_INIT.says("fewer than two widths", None)
    return WIDTHS_AT_INIT.says(*_per_4x(medians, WIDTH_FACTOR))


WIDTHS_TRAINED = Rule(
    "keeps its temperature across widths after training",
    f"median logit std after training within a factor {TRAINED_WIDTH_FACTOR} per 4x of "
    "width, over the widths at which it and scaled learned; undetermined with fewer "
    "than two",
)


def width_stable_trained(card: Card, name: str) -> Verdict:
    own, scaled = _base_rows(card, name), _base_rows(card, "scaled")
    if own.empty or scaled.empty:
        return WIDTHS_TRAINED.says("no rows for it or for scaled", None)
    usable = [
        d
        for d in sorted(own.d_k.unique())
        if _learned(own[own.d_k == d]) and _learned(scaled[scaled.d_k == d])
    ]
    if len(usable) < 2:
        learned = [int(d) for d in usable]
        return WIDTHS_TRAINED.says(f"both learned at d_k {learned or 'none'} only", None)
    medians = own[own.d_k.isin(usable)].groupby("d_k").logit_std_end.median()
    return WIDTHS_TRAINED.says(*_per_4x(medians, TRAINED_WIDTH_FACTOR))


FLOAT16 = Rule(
    "float16 headroom at least scaled's",
    "the largest std of q's and k's entries (1 to 64) at which float16 weights are finite "
    "and within 1e-2 of float32, at every width, at least scaled's",
)


def float16_headroom(card: Card, name: str) -> Verdict:
    own, scaled = _rows(card.precision, name), _rows(card.precision, "scaled")
    if own.empty or scaled.empty:
        return FLOAT16.says("no rows for it or for scaled", None)
    parts, passed = [], True
    for d_k, rows in own.groupby("d_k"):
        mine, top = headroom(rows)
        theirs, censored = headroom(scaled[scaled.d_k == d_k])
        parts.append(
            f"d_k {int(d_k)}: {'>=' if top else ''}{mine:g} vs scaled's "
            f"{'>=' if censored else ''}{theirs:g}"
        )
        passed &= mine >= theirs
    return FLOAT16.says("; ".join(parts), bool(passed))


MASK_SAFE = Rule(
    "mask-safe",
    "with a fully masked row: finite output and gradients, weight 0 on masked keys, "
    "zero output on the empty row",
)


def mask_safe(card: Card, name: str) -> Verdict:
    rows = _rows(card.masks, name)
    if rows.empty:
        return MASK_SAFE.says("no rows", None)
    row = rows.iloc[0]
    checks = {
        "finite output": bool(row.finite_output),
        "finite gradients": bool(row.finite_gradients),
        "masked weight 0": row.masked_weight_max == 0,
        "empty row 0": row.dead_row_max == 0,
    }
    failed = [k for k, ok in checks.items() if not ok]
    return MASK_SAFE.says("; ".join(failed) or "all four hold", not failed)


AS_FAST = Rule(
    "trains as fast as scaled",
    f"every seed reaches smoothed loss {LEARNED_LOSS:g} (04's task), the median step at "
    f"most {SPEED_FACTOR}x scaled's",
)


def trains_as_fast_as_scaled(card: Card, name: str) -> Verdict:
    rows, scaled = _rows(card.training, name), _rows(card.training, "scaled")
    if rows.empty or scaled.empty:
        return AS_FAST.says("no rows for it or for scaled", None)
    if diverged := _diverged(rows):
        return AS_FAST.says(diverged, False)
    if not _learned(scaled):
        return AS_FAST.says("scaled does not learn", None)
    if not _learned(rows):
        reached = int(rows.step_loss_below_1.notna().sum())
        return AS_FAST.says(f"{reached} of {len(rows)} seeds reach loss 1", False)
    own = float(rows.step_loss_below_1.astype(float).median())
    ref = float(scaled.step_loss_below_1.astype(float).median())
    value = f"median step {own:.0f} vs {ref:.0f} (x{own / ref:.2f})"
    return AS_FAST.says(value, bool(own / ref <= SPEED_FACTOR))


def _elasticity(card: Card, name: str, stage: str, alpha: float) -> float:
    rows = _rows(card.ownership, name)
    if rows.empty:
        return np.nan
    rows = rows[(rows.stage == stage) & (rows.alpha == alpha)]
    return float(rows.elasticity_mean.iloc[0]) if not rows.empty else np.nan


def owner_words(e_start: float, e_drifted: float) -> str:
    """Who owns the temperature: ``attnlab.core.owner.owner`` of the trained elasticity
    at ``alpha = 1`` (``e_start``) names the mechanism; where that says the weights but the
    elasticity at the largest ``alpha`` (``e_drifted``) no longer does, a cap has taken
    over (``cap``)."""
    start = owner(e_start)
    if start == "weights" and owner(e_drifted) != "weights":
        return "cap"
    return start


def owner_of(card: Card, name: str) -> str | None:
    """Who owns the temperature on the trained weights (``owner_words``), None if unknown."""
    start = _elasticity(card, name, "trained", ALPHAS[0])
    drifted = _elasticity(card, name, "trained", ALPHAS[-1])
    if not (np.isfinite(start) and np.isfinite(drifted)):
        return None
    return owner_words(start, drifted)


OWNER = Rule(
    OWNER_VERDICT,
    "elasticity e = d ln std(z) / d ln alpha of the logits to q, k -> alpha q, alpha k on "
    f"the trained weights: below 1.5 at alpha {ALPHAS[-1]:g} (2: weights; 0: mechanism; "
    "falling from 2: a cap)",
)


def owns_temperature(card: Card, name: str) -> Verdict:
    who = owner_of(card, name)
    init = _elasticity(card, name, "init", ALPHAS[0])
    if who is None:
        reason = _diverged(_rows(card.training, name)) or "no trained weights"
        return OWNER.says(f"{reason}; e = {init:.2f} at init", None)
    trained = [_elasticity(card, name, "trained", a) for a in (ALPHAS[0], ALPHAS[-1])]
    value = (
        f"{who}: e = {init:.2f} at init; trained {trained[0]:.2f} at alpha 1, "
        f"{trained[1]:.2f} at alpha {ALPHAS[-1]:g}"
    )
    return OWNER.says(value, who != "weights")


DRIFT = Rule(
    DRIFT_VERDICT,
    f"W_Q, W_K of the trained model x{DRIFT_ALPHA:g}: the attention logits' scale (within-row "
    f"std) within a factor {DRIFT_SCALE_FACTOR:g} of x1's, both ways (max(r, 1/r) <= "
    f"{DRIFT_SCALE_FACTOR:g}), and the held-out loss up by at most {DRIFT_LOSS_RISE} nats "
    "(04's task, learned)",
)


def holds_after_drift(card: Card, name: str) -> Verdict:
    rows = _rows(card.drift, name)
    training = _rows(card.training, name)
    if rows.empty:
        return DRIFT.says("no rows", None)
    if diverged := _diverged(training):
        return DRIFT.says(diverged, False)
    if not _learned(training):
        return DRIFT.says("did not learn, nothing to drift", None)
    one, four = (rows[rows.alpha == a].iloc[0] for a in (1.0, DRIFT_ALPHA))
    s1, s4 = (float(r.get("logit_std_mean", math.nan)) for r in (one, four))
    if math.isnan(s1):  # a table without the reading (a card made before it)
        return DRIFT.says("no logit scale read at x1", None)
    rise = four.loss_mean - one.loss_mean
    growth = s4 / s1 if s1 > 0 else (1.0 if s4 == 0 else math.inf)
    ratio = _factor(growth) if 0 < growth < math.inf else math.inf  # NaN too
    value = (
        f"loss {one.loss_mean:.3g} -> {four.loss_mean:.3g} (± {four.loss_sem:.1g}), logit "
        f"scale {s1:.3g} -> {s4:.3g} (x{growth:.3g})"
    )
    return DRIFT.says(value, bool(rise <= DRIFT_LOSS_RISE and ratio <= DRIFT_SCALE_FACTOR))


def _sweep_widths(card: Card, name: str) -> dict[int, pd.DataFrame]:
    """The mechanism's sweep rows at each width swept over every rate."""
    rows = _rows(card.sweep, name)
    if rows.empty:
        return {}
    rates = card.sweep.lr.nunique()
    return {int(d): g for d, g in rows.groupby("d_k") if g.lr.nunique() == rates and rates > 1}


HIGH_LR = Rule(
    HIGH_LR_VERDICT,
    "learning-rate sensitivity E_eta[min(l(eta), l0) - l*] (Wortsman et al. 2023) at most "
    f"scaled's + {SENSITIVITY_SES:g} SE of the paired difference, at every swept width",
)


def stable_at_high_lr(card: Card, name: str) -> Verdict:
    own, scaled = _sweep_widths(card, name), _sweep_widths(card, "scaled")
    if not own or not scaled:
        return HIGH_LR.says("no learning-rate sweep for it or for scaled", None)
    parts, passed = [], True
    for d_k, rows in own.items():
        if d_k not in scaled:
            return HIGH_LR.says(f"scaled not swept at d_k {d_k}", None)
        mine, theirs = sensitivity(rows), sensitivity(scaled[d_k])
        if not (mine.l_star < LEARNED_LOSS).all() or not (theirs.l_star < LEARNED_LOSS).all():
            return HIGH_LR.says(f"no rate learned at d_k {d_k}", None)
        diff, se, n = paired_difference(mine, theirs)
        if not np.isfinite(se):
            return HIGH_LR.says(f"{n} seed(s): no standard error", None)
        top = rows[rows.lr == rows.lr.max()]
        parts.append(
            f"d_k {d_k}: {mine.sensitivity.mean():.2f} vs {theirs.sensitivity.mean():.2f} "
            f"(diff {diff:+.2f} ± {se:.2f}; max logit at top rate {top.max_logit.median():.3g})"
        )
        passed &= diff <= SENSITIVITY_SES * se
    return HIGH_LR.says("; ".join(parts), bool(passed))


def best_rates(rows: pd.DataFrame) -> tuple[float | None, bool]:
    """``(best rate, learned)`` of one width's sweep: the lowest median final loss over
    seeds (a rate with a diverged seed is never best; ties go to the smaller rate)."""
    medians = {}
    for lr, g in rows.groupby("lr"):
        if g.diverged_step.isna().all():
            medians[float(lr)] = float(g.final_loss.median())
    if not medians:
        return None, False
    best = min(medians, key=lambda lr: (medians[lr], lr))
    return best, medians[best] < LEARNED_LOSS


LR_TRANSFER = Rule(
    "learning rate transfers across widths",
    f"the best rates (lowest median final loss) of the swept widths at most {LR_STEPS} "
    "grid step(s) apart; undetermined when one is at either end of the sweep",
)


def lr_transfers(card: Card, name: str) -> Verdict:
    widths = _sweep_widths(card, name)
    if len(widths) < 2:
        return LR_TRANSFER.says("fewer than two swept widths", None)
    grid = sorted(card.sweep.lr.unique())
    best = {}
    for d_k, rows in widths.items():
        lr, learned = best_rates(rows)
        if lr is None or not learned:
            return LR_TRANSFER.says(f"no rate learned at d_k {d_k}", None)
        best[d_k] = lr
    value = ", ".join(f"d_k {d}: {lr:.3g}" for d, lr in sorted(best.items()))
    if any(lr in (grid[0], grid[-1]) for lr in best.values()):
        return LR_TRANSFER.says(value + " (at the sweep's edge)", None)
    index = [grid.index(lr) for lr in best.values()]
    steps = max(index) - min(index)
    value += f" ({steps} grid step{'s' * (steps != 1)} of x{grid[1] / grid[0]:.3g} apart)"
    return LR_TRANSFER.says(value, steps <= LR_STEPS)


VERDICTS: tuple[Callable[[Card, str], Verdict], ...] = (
    no_saturation,
    width_stable_at_init,
    width_stable_trained,
    float16_headroom,
    mask_safe,
    trains_as_fast_as_scaled,
    owns_temperature,
    holds_after_drift,
    stable_at_high_lr,
    lr_transfers,
)


def verdicts_frame(card, names: list[str], checks: tuple[Callable, ...] = VERDICTS) -> pd.DataFrame:
    """One row per (mechanism, verdict of ``checks``, in their order): ``verdict, rule,
    value, passed``."""
    rows = [
        {"mechanism": name, **check(card, name)._asdict()} for name in names for check in checks
    ]
    return pd.DataFrame(rows)

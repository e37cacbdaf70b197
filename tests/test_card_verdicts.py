"""attnlab/studies/card/verdicts.py: every verdict on both sides of its threshold, on
hand-made tables holding only the columns it reads, and undetermined where the tables
cannot decide it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from attnlab.studies.card import verdicts as v
from attnlab.studies.card.verdicts import Card, verdicts_frame

EMPTY = pd.DataFrame({"mechanism": pd.Series([], dtype=str)})


def card(**tables: pd.DataFrame) -> Card:
    return Card(**{field: tables.get(field, EMPTY) for field in Card._fields})


def statics(max_weight: float) -> Card:
    return card(
        statics=pd.DataFrame(
            {
                "mechanism": "m",
                "sweep": ["d_k", "d_k", "n"],
                "d_k": [4, 16, 16],
                "max_weight_mean": [0.1, max_weight, 0.9],
            }  # fmt: skip
        )
    )


@pytest.mark.parametrize(("value", "passed"), [(0.49, True), (0.5, True), (0.51, False)])
def test_no_saturation(value, passed):
    assert v.SATURATION_MAX_WEIGHT == 0.5
    assert v.no_saturation(statics(value), "m").passed is passed
    assert v.no_saturation(statics(value), "other").passed is None


def widths(ratio: float, column: str) -> Card:
    """Three widths 4x apart, the second step's median ratio ``ratio``; another rate's rows
    at one width only (not the base rate, so ignored)."""
    frame = pd.DataFrame(
        {
            "mechanism": "m",
            "lr": 3e-4,
            "d_k": [16, 16, 64, 64, 256, 256],
            column: [1.0, 1.0, 1.1, 1.1, 1.1 * ratio, 1.1 * ratio],
        }  # fmt: skip
    )
    extra = pd.DataFrame({"mechanism": "m", "lr": [1e-3], "d_k": [64], column: [50.0]})
    return card(widths=pd.concat([frame, extra], ignore_index=True))


@pytest.mark.parametrize(
    ("check", "column"),
    [(v.width_stable_at_init, "logit_std_step0"), (v.width_stable_trained, "logit_std_end")],
)
@pytest.mark.parametrize(("ratio", "passed"), [(1.19, True), (1.21, False), (1 / 1.21, False)])
def test_width_stability(check, column, ratio, passed):
    assert v.WIDTH_FACTOR == 1.2
    assert check(widths(ratio, column), "m").passed is passed


def test_width_stability_needs_two_widths():
    one = card(widths=pd.DataFrame({"mechanism": "m", "lr": [3e-4], "d_k": [16],
                                    "logit_std_step0": [1.0]}))  # fmt: skip
    assert v.width_stable_at_init(one, "m").passed is None


def precision(errors: list[float], finite: list[bool]) -> Card:
    return card(
        precision=pd.DataFrame(
            {"mechanism": "m", "d_k": [4, 16], "finite_float16": finite, "max_error": errors}
        )
    )


@pytest.mark.parametrize(
    ("errors", "finite", "passed"),
    [
        ([1e-3, 0.0099], [True, True], True),
        ([1e-3, 0.0101], [True, True], False),
        ([1e-3, math.nan], [True, False], False),
    ],
)
def test_float16_safe(errors, finite, passed):
    assert v.FLOAT16_TOLERANCE == 1e-2
    assert v.float16_safe(precision(errors, finite), "m").passed is passed


GOOD_MASK = {"finite_output": True, "finite_gradients": True, "masked_weight_max": 0.0,
             "dead_row_max": 0.0}  # fmt: skip


@pytest.mark.parametrize(
    "broken",
    [
        None,
        {"finite_output": False},
        {"finite_gradients": False},
        {"masked_weight_max": 1e-30},
        {"dead_row_max": 0.5},
    ],  # fmt: skip
)
def test_mask_safe(broken):
    row = {"mechanism": "m", **GOOD_MASK, **(broken or {})}
    verdict = v.mask_safe(card(masks=pd.DataFrame([row])), "m")
    assert verdict.passed is (broken is None)


def training(own: list[float], scaled: list[float]) -> Card:
    rows = [("m", s) for s in own] + [("scaled", s) for s in scaled]
    return card(training=pd.DataFrame(rows, columns=["mechanism", "step_loss_below_1"]))


@pytest.mark.parametrize(
    ("own", "passed"),
    [([120, 124, 200], True), ([120, 126, 200], False), ([10, 20, math.nan], False)],
)
def test_trains_as_fast_as_scaled(own, passed):
    """scaled's median is 100: 1.24x passes, 1.26x fails, a seed that never gets there fails."""
    assert v.SPEED_FACTOR == 1.25
    assert v.trains_as_fast_as_scaled(training(own, [90, 100, 300]), "m").passed is passed


def test_trains_as_fast_is_undetermined_without_a_scaled_that_learns():
    assert v.trains_as_fast_as_scaled(training([100], []), "m").passed is None
    assert v.trains_as_fast_as_scaled(training([100], [math.nan]), "m").passed is None


def lr_table(best_64: float, best_256: float) -> Card:
    rows = [
        {"mechanism": "m", "d_k": d, "lr": lr, "best": lr == best}
        for d, best in ((64, best_64), (256, best_256))
        for lr in (3e-4, 1e-3, 3e-3)
    ]
    return card(lr=pd.DataFrame(rows))


def test_lr_transfers():
    assert v.lr_transfers(lr_table(1e-3, 1e-3), "m").passed is True
    assert v.lr_transfers(lr_table(1e-3, 3e-3), "m").passed is False
    no_best = lr_table(1e-3, 1e-3).lr.assign(best=False)
    assert v.lr_transfers(card(lr=no_best), "m").passed is None


def drift(end: float) -> Card:
    frame = pd.DataFrame(
        {
            "mechanism": "m",
            "step": [0, 0, 250, 250, 500, 500],
            "logit_std": [1.0, 1.0, 3.0, 3.0, end, end],
        }  # fmt: skip
    )
    return card(drift=frame)


@pytest.mark.parametrize(
    ("end", "passed"),
    [(1.99, True), (2.01, False), (0.51, True), (0.49, False), (math.nan, False)],
)
def test_holds_after_drift(end, passed):
    """Only the first and last steps count (the middle's 3x does not)."""
    assert v.DRIFT_FACTOR == 2.0
    assert v.holds_after_drift(drift(end), "m").passed is passed


def test_verdicts_frame_has_one_row_per_mechanism_and_verdict():
    frame = verdicts_frame(statics(0.3), ["m", "other"])
    assert list(frame.columns) == ["mechanism", "verdict", "rule", "value", "passed"]
    assert len(frame) == 2 * len(v.VERDICTS)
    assert frame.rule.str.len().min() > 20  # every rule is stated, not just named
    assert np.all(frame[frame.mechanism == "other"].passed.isna())

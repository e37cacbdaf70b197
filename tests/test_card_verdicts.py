"""attnlab/studies/card/verdicts.py: every verdict on both sides of its threshold, on
hand-made tables holding only the columns it reads; undetermined where a premise fails
(no rows, a width or a baseline that never learned, a best rate at the sweep's edge); a
diverged run named as such."""

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


def sweep_rows(name: str, d_k: int, lr: float, values: dict, seeds: int = 2) -> list[dict]:
    base = {"loss_step0": 3.5, "final_loss": 0.1, "step_loss_below_1": 50, "max_logit": 5.0,
            "logit_std_step0": 1.0, "logit_std_end": 3.0, "diverged_step": None,
            "nonfinite": ""}  # fmt: skip
    return [
        {"mechanism": name, "d_k": d_k, "lr": lr, "seed": s, **base, **values} for s in range(seeds)
    ]


def widths_card(ratio: float, column: str, learned_at: tuple[int, ...] = (16, 64, 256)) -> Card:
    """Three widths 4x apart at the base rate 1e-3, the second step's ratio ``ratio``;
    another rate at one width only (not the base rate, so ignored); scaled learns
    everywhere, m only at ``learned_at``."""
    rows = []
    for i, d_k in enumerate((16, 64, 256)):
        size = 1.1 * ratio if i == 2 else (1.1 if i == 1 else 1.0)
        learned = {"step_loss_below_1": 50 if d_k in learned_at else None}
        rows += sweep_rows("m", d_k, 1e-3, {column: size, **learned})
        rows += sweep_rows("scaled", d_k, 1e-3, {column: 1.0})
    rows += sweep_rows("m", 64, 1e-2, {column: 50.0})
    frame = pd.DataFrame(rows)
    frame["step_loss_below_1"] = frame.step_loss_below_1.astype("Int64")
    return card(sweep=frame)


@pytest.mark.parametrize(("ratio", "passed"), [(1.19, True), (1.21, False), (1 / 1.21, False)])
def test_width_stable_at_init(ratio, passed):
    assert v.WIDTH_FACTOR == 1.2
    assert v.width_stable_at_init(widths_card(ratio, "logit_std_step0"), "m").passed is passed


@pytest.mark.parametrize(("ratio", "passed"), [(1.49, True), (1.51, False), (1 / 1.51, False)])
def test_width_stable_trained(ratio, passed):
    assert v.TRAINED_WIDTH_FACTOR == 1.5
    assert v.width_stable_trained(widths_card(ratio, "logit_std_end"), "m").passed is passed


def test_widths_after_training_compare_only_widths_where_both_learned():
    """d_k 256 (the 1.51 step) never learned: only 16 -> 64 counts, and passes; with one
    usable width the verdict is undetermined, never no."""
    two = widths_card(1.51, "logit_std_end", learned_at=(16, 64))
    assert v.width_stable_trained(two, "m").passed is True
    one = widths_card(1.51, "logit_std_end", learned_at=(64,))
    verdict = v.width_stable_trained(one, "m")
    assert verdict.passed is None and "only" in verdict.value
    # 16 and 256 usable, 64 not: the 16x step is read per 4x (1.51 over two 4x steps)
    skip = widths_card(1.51, "logit_std_end", learned_at=(16, 256))
    assert "per 4x" in v.width_stable_trained(skip, "m").value


def precision_card(own: list[tuple[bool, float]], scaled_ok: int = 3) -> Card:
    sigmas = [1.0, 2.0, 4.0]
    rows = [
        {"mechanism": "m", "d_k": 64, "sigma": s, "finite_float16": f, "max_error": e}
        for s, (f, e) in zip(sigmas, own, strict=True)
    ] + [
        {"mechanism": "scaled", "d_k": 64, "sigma": s, "finite_float16": True,
         "max_error": 0.0 if i < scaled_ok else 1.0}
        for i, s in enumerate(sigmas)
    ]  # fmt: skip
    return card(precision=pd.DataFrame(rows))


def test_float16_headroom_against_scaled():
    good = (True, 0.0)
    assert v.float16_headroom(precision_card([good, good, good]), "m").passed is True
    too_far = [good, good, (True, 0.0101)]  # 1e-2 is the bound: the top sigma fails
    assert v.float16_headroom(precision_card(too_far), "m").passed is False
    overflow = [good, (False, math.nan), good]  # a later good cell does not count
    verdict = v.float16_headroom(precision_card(overflow), "m")
    assert verdict.passed is False and "d_k 64: 1 vs" in verdict.value
    # scaled itself fails at sigma 2: headroom 1 each, passed
    assert v.float16_headroom(precision_card(overflow, scaled_ok=1), "m").passed is True
    assert v.float16_headroom(precision_card(overflow), "other").passed is None


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


def training(own: list[float], scaled: list[float], diverged: list | None = None) -> Card:
    rows = [("m", s) for s in own] + [("scaled", s) for s in scaled]
    frame = pd.DataFrame(rows, columns=["mechanism", "step_loss_below_1"])
    frame["step_loss_below_1"] = frame.step_loss_below_1.astype("Float64").round().astype("Int64")
    frame["seed"] = list(range(len(own))) + list(range(len(scaled)))
    frame["diverged_step"] = pd.array((diverged or [None] * len(own)) + [None] * len(scaled),
                                      "Int64")  # fmt: skip
    frame["nonfinite"] = np.where(frame.diverged_step.notna(), "loss", "")
    return card(training=frame)


@pytest.mark.parametrize(
    ("own", "passed"),
    [([120, 124, 200], True), ([120, 126, 200], False), ([10, 20, math.nan], False)],
)
def test_trains_as_fast_as_scaled(own, passed):
    """scaled's median is 100: 1.24x passes, 1.26x fails, a seed that never gets there fails."""
    assert v.SPEED_FACTOR == 1.25
    assert v.trains_as_fast_as_scaled(training(own, [90, 100, 300]), "m").passed is passed


def test_trains_as_fast_is_undetermined_without_a_scaled_that_learns_and_names_divergence():
    assert v.trains_as_fast_as_scaled(training([100], []), "m").passed is None
    assert v.trains_as_fast_as_scaled(training([100], [math.nan]), "m").passed is None
    diverged = v.trains_as_fast_as_scaled(training([100, 90], [100], [None, 340]), "m")
    assert diverged.passed is False
    assert diverged.value.startswith("diverged") and "seed 1 at step 340" in diverged.value


def ownership_card(trained: tuple[float, float], init: float = 2.0) -> Card:
    rows = [{"mechanism": "m", "stage": "init", "alpha": a, "elasticity_mean": init}
            for a in v.ALPHAS]  # fmt: skip
    rows += [
        {"mechanism": "m", "stage": "trained", "alpha": a,
         "elasticity_mean": trained[0] if a == v.ALPHAS[0] else trained[1]}
        for a in v.ALPHAS
    ]  # fmt: skip
    return card(ownership=pd.DataFrame(rows), training=training([10], [10]).training)


@pytest.mark.parametrize(
    ("trained", "owner", "passed"),
    [
        ((2.0, 2.0), "weights", False),
        ((2.0, 1.49), "cap", True),
        ((1.0, 0.1), "cap", True),
        ((0.0, 0.0), "mechanism", True),
        ((0.5, 0.5), "mechanism", True),
    ],
)
def test_owns_temperature(trained, owner, passed):
    verdict = v.owns_temperature(ownership_card(trained), "m")
    assert verdict.passed is passed and verdict.value.startswith(owner + ":")
    assert v.owns_temperature(ownership_card(trained), "other").passed is None


def drift_card(loss4: float, scale4: float, learned: bool = True, name: str = "m") -> Card:
    """alpha 1, 2, 4, 8: the loss 0.2 at alpha 1, ``loss4`` at 4; the logit scale 1 at
    alpha 1, ``scale4`` at 4 (alpha 2's and 8's rows far off, so only 4's can count)."""
    frame = pd.DataFrame(
        {
            "mechanism": name,
            "alpha": [1.0, 2.0, 4.0, 8.0],
            "loss_mean": [0.2, 5.0, loss4, 9.0],
            "loss_sem": 0.01,
            "entropy_mean": [1.0, 0.01, 1.0, 0.0],
            "logit_std_mean": [1.0, 50.0, scale4, 0.01],
            "logit_std_sem": 0.01,
        }
    )
    steps = [50, 60] if learned else [50, math.nan]
    return card(drift=frame, training=training(steps, [50]).training.assign(mechanism=name))


@pytest.mark.parametrize(
    ("loss4", "scale4", "passed"),
    [
        (0.29, 1.0, True),
        (0.31, 1.0, False),
        (0.2, 1.99, True),
        (0.2, 2.01, False),
        (0.2, 1 / 1.99, True),
        (0.2, 1 / 2.01, False),  # both ways: a logit scale that shrinks 2x does not hold
        (0.0, 1.0, True),  # the loss may fall
        (0.2, 0.0, False),
        (0.29, 2.01, False),
        (0.31, 1.99, False),
    ],
)
def test_holds_after_drift(loss4, scale4, passed):
    """Only alpha 4 against alpha 1 counts (alpha 2's and 8's rows do not); the logit scale
    within DRIFT_SCALE_FACTOR either way, whatever the loss does, and the loss up by at
    most DRIFT_LOSS_RISE."""
    assert (v.DRIFT_ALPHA, v.DRIFT_LOSS_RISE, v.DRIFT_SCALE_FACTOR) == (4.0, 0.1, 2.0)
    assert v.holds_after_drift(drift_card(loss4, scale4), "m").passed is passed


def test_holds_after_drift_reads_the_logit_scale_not_the_entropy():
    """Issue 68: scaled's logits grow alpha^2 = 16x under W_Q, W_K x4 while the solved task's
    loss cannot move (its entropy 0.039 -> 1.6e-29 nats): it does not hold. qk_norm's logit
    scale stays (normalised q, k): it holds. The value names both readings x1 -> x4."""
    scaled = drift_card(0.0001, 16 * 1.0, name="scaled")
    qk_norm = drift_card(0.0001, 1.0, name="qk_norm")
    verdict = v.holds_after_drift(scaled, "scaled")
    assert verdict.passed is False
    assert "loss 0.2 -> 0.0001" in verdict.value and "logit scale 1 -> 16 (x16)" in verdict.value
    assert v.holds_after_drift(qk_norm, "qk_norm").passed is True


def test_holds_after_drift_needs_a_model_that_learned_and_the_reading():
    verdict = v.holds_after_drift(drift_card(0.2, 1.0, learned=False), "m")
    assert verdict.passed is None and "did not learn" in verdict.value
    old = drift_card(0.2, 1.0)  # a card made before the logit scale was read
    old = old._replace(drift=old.drift.drop(columns=["logit_std_mean", "logit_std_sem"]))
    verdict = v.holds_after_drift(old, "m")
    assert verdict.passed is None and "no logit scale" in verdict.value


LRS = (1e-4, 1e-3, 1e-2, 1e-1)


def lr_sweep(own: dict[float, list[float]], scaled: dict[float, list[float]], widths=(64, 256)):
    """Final losses per rate and seed (NaN: diverged) of m and scaled at each width."""
    rows = []
    for name, losses in (("m", own), ("scaled", scaled)):
        for d_k in widths:
            for lr in losses:
                for seed, loss in enumerate(losses[lr]):
                    diverged = 7 if math.isnan(loss) else None
                    rows += sweep_rows(name, d_k, lr, {"final_loss": loss,
                                                       "diverged_step": diverged}, 1)  # fmt: skip
                    rows[-1]["seed"] = seed
    frame = pd.DataFrame(rows)
    frame["diverged_step"] = frame.diverged_step.astype("Int64")
    return card(sweep=frame)


SCALED = {1e-4: [3.0, 3.0, 3.0], 1e-3: [0.1, 0.1, 0.1], 1e-2: [1.0, 1.2, 1.1],
          1e-1: [math.nan] * 3}  # fmt: skip


def test_stable_at_high_lr_against_scaled():
    """S = mean over rates of min(l, l0) - l*, l0 3.5 (sweep_rows): scaled's per seed
    (2.9 + 0 + [0.9, 1.1, 1.0] + 3.4) / 4; a mechanism that holds 0.1 at 1e-2 and 1e-1 is
    less sensitive; one that also fails at 1e-3 more."""
    steady = {**SCALED, 1e-2: [0.1, 0.1, 0.1], 1e-1: [0.2, 0.1, 0.3]}
    assert v.stable_at_high_lr(lr_sweep(steady, SCALED), "m").passed is True
    assert v.stable_at_high_lr(lr_sweep(SCALED, SCALED), "m").passed is True  # diff 0, SE 0
    fragile = {**SCALED, 1e-2: [3.5, 3.4, 3.3]}
    verdict = v.stable_at_high_lr(lr_sweep(fragile, SCALED), "m")
    assert verdict.passed is False and "d_k 64" in verdict.value
    never = {lr: [3.0, 3.0, 3.0] for lr in LRS}
    assert v.stable_at_high_lr(lr_sweep(never, SCALED), "m").passed is None


def test_lr_transfers_one_grid_step_and_undetermined_at_the_edge():
    grid = (*LRS, 1.0)

    def at(best_64: float, best_256: float) -> Card:
        frames = []
        for d_k, best in ((64, best_64), (256, best_256)):
            losses = {lr: [0.05 if lr == best else 0.5] * 2 for lr in grid}
            frames.append(lr_sweep(losses, losses, widths=(d_k,)).sweep)
        return card(sweep=pd.concat(frames, ignore_index=True))

    assert v.LR_STEPS == 1
    assert v.lr_transfers(at(1e-3, 1e-3), "m").passed is True
    assert v.lr_transfers(at(1e-3, 1e-2), "m").passed is True
    assert v.lr_transfers(at(1e-3, 1e-1), "m").passed is False  # two grid steps apart
    assert v.lr_transfers(at(1e-3, 1.0), "m").passed is None  # the best at the top edge
    assert v.lr_transfers(at(1e-4, 1e-2), "m").passed is None  # and at the bottom
    one = card(sweep=at(1e-3, 1e-3).sweep.query("d_k == 64"))
    assert v.lr_transfers(one, "m").passed is None  # one swept width


def test_verdicts_frame_has_one_row_per_mechanism_and_verdict():
    frame = verdicts_frame(statics(0.3), ["m", "other"])
    assert list(frame.columns) == ["mechanism", "verdict", "rule", "value", "passed"]
    assert len(frame) == 2 * len(v.VERDICTS)
    assert frame.rule.str.len().min() > 20  # every rule is stated, not just named
    assert np.all(frame[frame.mechanism == "other"].passed.isna())

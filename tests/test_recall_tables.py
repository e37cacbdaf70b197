"""attnlab.recall.tables: a per-seed summary by hand from a synthetic run (milestones at
their absolute steps, a plateau, the divergence record with ``divergence=True`` and without
it) and the per-step curves' layout."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnlab.recall.config import RecallConfig
from attnlab.recall.step import METRICS
from attnlab.recall.tables import (
    CURVE_COLUMNS,
    SUMMARY_COLUMNS,
    curves_frame,
    summary_frame,
)
from attnlab.recall.trainer import TrainResult

STEPS = 400


def synthetic_run(start_step: int = 0) -> TrainResult:
    """Seed 0: loss 3 for 50 steps, a plateau at 0.5 for 200, then 0.05 (crosses 1 at step
    50, 0.1 at step 250); seed 1: NaN from step 10."""
    good = np.concatenate([np.full(50, 3.0), np.full(200, 0.5), np.full(150, 0.05)])
    bad = np.where(np.arange(STEPS) >= 10, np.nan, 3.0)
    metrics = {k: np.ones((2, STEPS), np.float32) for k in METRICS}
    metrics["loss"] = np.stack([good, bad])
    return TrainResult("m", [0, 1], start_step, metrics, np.array([1.0, 0.5]), None)


def test_summary_by_hand():
    config = RecallConfig(smoothing=1)
    frame = summary_frame([synthetic_run(start_step=100)], config)
    assert list(frame.columns) == SUMMARY_COLUMNS
    good, bad = frame.iloc[0], frame.iloc[1]
    assert (good.step_loss_below_1, good.step_loss_below_0p1) == (150, 350)
    assert (good.plateau_start, good.plateau_end, good.plateau_level) == (150, 349, 0.5)
    # the trailing mean differences a float64 cumulative sum: within STEPS eps of its size
    assert good.final_loss == pytest.approx(0.05, abs=STEPS * 2.0**-52 * 300.0)
    assert good.eval_accuracy == 1.0
    assert pd.isna(bad.step_loss_below_1) and bad.eval_accuracy == 0.5


def test_divergence_adds_its_record_and_blanks_the_diverged_accuracy():
    frame = summary_frame([synthetic_run()], RecallConfig(smoothing=1), divergence=True)
    assert list(frame.columns) == [*SUMMARY_COLUMNS, "diverged_step", "nonfinite"]
    assert frame.diverged_step.tolist()[0] is pd.NA and frame.diverged_step[1] == 10
    assert frame.nonfinite.tolist() == ["", "loss"]
    assert frame.eval_accuracy[0] == 1.0 and np.isnan(frame.eval_accuracy[1])


def test_curves_one_row_per_seed_and_step():
    frame = curves_frame([synthetic_run(start_step=7)], RecallConfig(smoothing=1))
    assert list(frame.columns) == CURVE_COLUMNS and len(frame) == 2 * STEPS
    assert frame.step.iloc[0] == 7 and frame.step.iloc[STEPS - 1] == 7 + STEPS - 1

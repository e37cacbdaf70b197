"""Experiment 14's known answers: (a)-(d) hold on the committed results, and each rule comes
out the other way on a hand-made table of the other outcome; (e) is read both ways too."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnlab.studies.lm_proxy import answers
from attnlab.studies.lm_proxy.study import BOUNDED, GROWN, LRS, SWEEP_CSV

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _table(rows: dict[str, dict[int, list[float]]], column: str, base: dict) -> pd.DataFrame:
    """A sweep table: ``rows[mechanism][d_model]`` is ``column`` over ``LRS``."""
    frames = []
    for mechanism, widths in rows.items():
        for d, values in widths.items():
            frames.append(pd.DataFrame({"mechanism": mechanism, "d_model": d, "lr": LRS,
                                        "seed": 0, column: values, **base}))  # fmt: skip
    return pd.concat(frames, ignore_index=True)


#: A table of what Wortsman et al. report: scaled's logits grow and its loss degrades at
#: high rates, qk_norm's stay small and its loss flat; inv_d grows too.
GROWING = [1.0, 10.0, 50.0, 300.0, 3e3, 3e4]
FLAT = [3.0, 3.5, 4.0, 4.5, 5.0, 5.5]
SCALED_LOSS = [2.0, 1.8, 1.7, 1.9, 2.4, 2.9]
NORMED_LOSS = [2.0, 1.8, 1.7, 1.7, 1.75, 1.8]
BASE = {"initial_val_loss": math.log(256) + 0.01, "initial_val_loss_se": 0.002,
        "initial_logit_var": 0.02, "diverged_step": -1}  # fmt: skip


def _expected() -> pd.DataFrame:
    logits = _table({"scaled": {32: GROWING, 64: GROWING}, "qk_norm": {32: FLAT, 64: FLAT},
                     "inv_d": {64: GROWING}}, "max_attn_logit_layer0", BASE)  # fmt: skip
    loss = _table({"scaled": {32: SCALED_LOSS, 64: SCALED_LOSS},
                   "qk_norm": {32: NORMED_LOSS, 64: NORMED_LOSS},
                   "inv_d": {64: SCALED_LOSS}}, "final_val_loss", {})  # fmt: skip
    return logits.assign(final_val_loss=loss.final_val_loss)


@pytest.fixture(scope="module")
def committed() -> pd.DataFrame:
    path = RESULTS / SWEEP_CSV
    if not path.is_file():
        pytest.fail(f"{path} is missing: run python experiments/14_lm_proxy.py")
    return pd.read_csv(path)


@pytest.mark.parametrize("answer", answers.REQUIRED, ids=lambda f: f.__name__)
def test_each_required_answer_holds_on_the_committed_results(committed, answer):
    result = answer(committed)
    assert result.holds, f"{result.label}: {result.detail}"


@pytest.mark.parametrize("answer", answers.REQUIRED, ids=lambda f: f.__name__)
def test_each_required_answer_holds_on_a_table_of_the_expected_outcome(answer):
    assert answer(_expected()).holds


def test_a_first_loss_far_from_ln256_fails_a():
    table = _expected().assign(initial_val_loss=5.0)
    assert not answers.initial_loss(table).holds


def test_logits_that_do_not_grow_or_a_qk_norm_that_grows_fail_b():
    flat = _expected()
    flat.loc[flat.mechanism == "scaled", "max_attn_logit_layer0"] = np.tile(FLAT, 2)
    assert not answers.logit_growth(flat).holds
    grown = _expected()
    grown.loc[grown.mechanism == "qk_norm", "max_attn_logit_layer0"] = 2 * BOUNDED
    assert not answers.logit_growth(grown).holds


def test_a_qk_norm_as_sensitive_as_scaled_fails_c():
    table = _expected()
    table.loc[table.mechanism == "qk_norm", "final_val_loss"] = np.tile(SCALED_LOSS, 2)
    assert not answers.sensitivity_order(table).holds


def test_an_inv_d_that_stays_bounded_fails_d():
    table = _expected()
    table.loc[table.mechanism == "inv_d", "max_attn_logit_layer0"] = GROWN / 10
    assert not answers.inv_d_grows(table).holds
    assert not answers.inv_d_grows(table[table.mechanism != "inv_d"]).holds


def test_e_reads_a_falling_and_a_steady_degradation_rate():
    falling = _expected()
    wide = (falling.mechanism == "scaled") & (falling.d_model == 64)
    falling.loc[wide, "final_val_loss"] = [2.0, 1.7, 1.9, 2.4, 2.9, 3.0]  # degrades at 1e-2
    assert answers.degradation_rates(falling).to_dict() == {32: 3e-2, 64: 1e-2}
    assert answers.degradation_falls(falling).holds
    assert not answers.degradation_falls(_expected()).holds  # 3e-2 at both widths

"""attnlab/studies/card/sensitivity.py: Wortsman et al.'s learning-rate sensitivity and the
paired difference by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from attnlab.studies.card.sensitivity import paired_difference, sensitivity


def rows(seed: int, finals: list[float], l0: float = 3.5) -> pd.DataFrame:
    lrs = [1e-4 * 10**i for i in range(len(finals))]
    return pd.DataFrame({"seed": seed, "lr": lrs, "loss_step0": l0, "final_loss": finals})


def test_sensitivity_is_the_mean_capped_excess_over_the_best():
    """finals 3.0, 0.1, 4.0 (above l0: capped at 3.5), NaN (diverged: l0): l* = 0.1,
    S = (2.9 + 0 + 3.4 + 3.4) / 4."""
    s = sensitivity(pd.concat([rows(0, [3.0, 0.1, 4.0, math.nan]), rows(1, [3.0, 0.1])]))
    assert list(s.seed) == [0]  # seed 1 lacks two rates: left out
    assert s.l_star.iloc[0] == pytest.approx(0.1, rel=0, abs=1e-15)
    assert s.sensitivity.iloc[0] == pytest.approx((2.9 + 0 + 3.4 + 3.4) / 4, rel=1e-15)


def test_paired_difference_pairs_seeds():
    own = pd.DataFrame({"seed": [0, 1, 2], "sensitivity": [1.0, 2.0, 4.0]})
    other = pd.DataFrame({"seed": [1, 2, 3], "sensitivity": [1.0, 1.0, 9.0]})
    mean, se, n = paired_difference(own, other)  # seeds 1, 2: differences 1 and 3
    assert (mean, n) == (2.0, 2) and se == pytest.approx(1.0, rel=1e-15)
    assert math.isnan(paired_difference(own.iloc[:1], own.iloc[:1])[1])

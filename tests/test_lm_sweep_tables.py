"""attnlab.lm.sweep_tables: Wortsman et al.'s learning-rate sensitivity and the best rate
with its drifted multiple, on hand-made sweep rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnlab.lm.sweep_tables import best_lane_rates, lr_sensitivity

LRS = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)


def _rows(losses, initial=5.0, d_model=32):
    return pd.DataFrame({"mechanism": "scaled", "d_model": d_model, "lr": LRS, "seed": 0,
                         "final_val_loss": losses, "initial_val_loss": initial})  # fmt: skip


def test_lr_sensitivity_is_wortsmans_mean_of_capped_excess():
    """E_eta[min(l(eta), l_0) - l*]: a non-finite loss counts as the initial loss."""
    loss = [2.0, 1.0, float("nan"), 3.0, 7.0, 1.5]
    (row,) = lr_sensitivity(_rows(loss)).itertuples()
    capped = np.array([2.0, 1.0, 5.0, 3.0, 5.0, 1.5])
    assert row.lr_sensitivity == pytest.approx(np.mean(capped - 1.0), rel=1e-12)
    assert row.best_lr == LRS[1] and row.best_loss == 1.0


def test_best_rate_and_its_multiple():
    assert best_lane_rates(_rows([3, 2, 1, 2, 3, 4]), 10.0) == (1e-2, 1e-1)
    assert best_lane_rates(_rows([3, 2, 1, 2, 3, 4]), 3.0) == (1e-2, 3e-2)
    # the best at 3e-2: ten times it is not swept
    assert best_lane_rates(_rows([3, 2, 2, 1, 3, 4]), 10.0) == (3e-2, 3e-1)
    assert best_lane_rates(_rows([3, 2, 2, 2, 1, 4]), 10.0) == (1e-1, None)
    # a non-finite loss is never best
    assert best_lane_rates(_rows([np.nan, 2, 1.5, 2, 3, 4]), 10.0)[0] == 1e-2

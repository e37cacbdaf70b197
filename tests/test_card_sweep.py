"""attnlab/studies/card/sweep.py: the sweep's lanes, one of which diverges and is recorded,
not raised."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from attnlab.core.references import resolve
from attnlab.harness.io import FLOAT_FORMAT
from attnlab.studies.card.sweep import SWEEP_BASE, SweepConfig, sweep_table, width_rows


@pytest.mark.slow  # compiles a training program
def test_a_diverging_rate_is_a_row_not_an_error():
    """Adam moves every parameter by about the rate on its first step: at 1e10 the
    embeddings and projections reach 1e10, q . k passes float32's 3.4e38, the loss is not
    finite; the 1e-3 lane of the same program trains on."""
    base = dataclasses.replace(SWEEP_BASE, d_model=8, steps=20, seeds=1, eval_size=16,
                               batch_size=4, chunk_steps=10)  # fmt: skip
    config = SweepConfig(base=base, dks=(8,), lr_dks=(8,), lrs=(1e-3, 1e10), record_every=10)
    scaled = [resolve("scaled")]
    frame = sweep_table(width_rows(config, scaled, 8), scaled)
    assert list(frame.lr) == [1e-3, 1e10]
    ok, bad = frame.iloc[0], frame.iloc[1]
    assert ok.loss_step0 == bad.loss_step0  # one initialisation and batch for both rates
    assert pd.isna(ok.diverged_step) and ok.nonfinite == "" and np.isfinite(ok.final_loss)
    assert bad.diverged_step >= 0 and bad.nonfinite == "loss" and np.isnan(bad.final_loss)
    assert config.steps_at(8, 1) == 2 * 20
    # rates as the CSV writes them, so a card read back merges with one computed
    assert list(frame.lr) == [float(FLOAT_FORMAT % lr) for lr in config.lrs]


def test_the_sweeps_grid_is_checked_as_10s():
    """The same checks as experiment 10's sweep (``sweeps.widths.check_grid``), named by
    the card's class."""
    with pytest.raises(ValueError, match="SweepConfig.lr_dks must be a subset of dks"):
        SweepConfig(dks=(16,), lr_dks=(64,))

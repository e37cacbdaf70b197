"""attnlab.lm.sweep: the held-out loss at longer lengths (``length_rows``) on a tiny trained
model: at the training length it is the sweep's own final held-out loss (the same windows and
weights), it reads 2x and 4x the length with rotary or no positions, and a model with
learned positions gives no rows; ``ownership_rows`` names the best and drifted rates."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from attnlab.core.positional import POSITIONAL
from attnlab.core.temperature import BUILTINS
from attnlab.core.text import byte_tokens, read_text
from attnlab.lm.sweep import length_rows, ownership_rows, sweep_rows
from attnlab.lm.train import LMConfig, held_out_windows, split_text, train_lanes

EPS = float(np.finfo(np.float32).eps)
#: The LM tests' common tiny config (see tests/test_lm_train.py's COMMON), the same
#: literal values, trained on the whole default text at the card's rates (RATES, seed 0):
#: the rotary run is test_card_lm's ``scaled`` run, its programs compiled once.
TINY = LMConfig(d_model=16, d_head=8, n_layers=1, seq_len=8, batch_size=4, steps=4, warmup=1,
                chunk_steps=2, eval_windows=400, positions="rotary")  # fmt: skip
RATES = [1e-2, 1e-1]
#: The same loss computed by two programs (vmapped over lanes, or one lane) differs by the
#: order of its float32 sums: a logsumexp over 256 bytes and a mean over 400 x 8 positions,
#: each within its terms times eps relative (the loss is about ln 256 ~ 5.5).
LOSS_RTOL = (256 + 400 * 8) * EPS


@functools.cache
def trained(positions: str, mechanism: str = "scaled"):
    config = dataclasses.replace(TINY, positions=positions)
    found = {**BUILTINS, **POSITIONAL}[mechanism]
    split = split_text(byte_tokens(read_text(None).text), config)
    return train_lanes(config, found, RATES, [0], split), split, found


@pytest.mark.parametrize("positions, mechanism", [("rotary", "scaled"), ("none", "alibi")])
def test_lengths_at_the_training_length_are_the_sweeps_held_out_loss(positions, mechanism):
    result, split, found = trained(positions, mechanism)
    rows = length_rows(result, 1e-2, split, found, (1, 2, 4))
    assert list(rows.factor) == [1, 2, 4] and list(rows.length) == [8, 16, 32]
    assert (rows.positions == positions).all() and np.isfinite(rows.loss).all()
    # Disjoint windows, at most eval_windows = 400: 400 of 9 and of 17 bytes; of 33 bytes
    # fewer fit in the held-out part (the default text's last tenth, about 12 600 bytes).
    fit = len(split.rest) // 33
    assert fit < TINY.eval_windows and list(rows.windows) == [400, 400, fit]
    lane = int(np.flatnonzero(np.isclose(result.lrs, 1e-2))[0])
    assert rows.loss.iloc[0] == pytest.approx(result.final_loss[lane].mean(), rel=LOSS_RTOL)


def test_learned_positions_read_no_longer_length():
    # The rows follow the sweep's recorded positions: the rotary run relabelled as learned.
    result, split, found = trained("rotary")
    learned = dataclasses.replace(result, config=dataclasses.replace(TINY, positions="learned"))
    assert length_rows(learned, 1e-2, split, found, (1, 2)).empty


def test_held_out_windows_are_disjoint_where_they_fit():
    rest = np.arange(100)
    windows = held_out_windows(rest, 10, 100 // 10)
    assert windows.shape == (10, 10) and len(set(windows.ravel())) == 100
    with pytest.raises(ValueError, match="fewer than a window"):
        held_out_windows(rest, 101, 1)


def test_elasticity_reads_the_best_rate_and_its_multiple():
    result, split, found = trained("rotary")
    sweep = sweep_rows(result)
    table = ownership_rows(result, sweep, split, found, 10.0)
    best = float(sweep.loc[sweep.final_val_loss.idxmin(), "lr"])
    assert set(table[table.weights == "best"].lr) == {best}
    drifted = table[table.weights == "drifted"]
    # 10x the best: 1e-1 if 1e-2 is best, off the grid (no rows) if 1e-1 is
    assert set(drifted.lr) == {1e-1} if best == 1e-2 else drifted.empty

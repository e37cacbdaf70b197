"""attnlab.studies.widths (experiment 10): routing accuracy, the implied-rho inversion, the
static Jacobian ratio at 16 keys, d_k = 1 identity, divergence bookkeeping, and the script
end to end at tiny sizes."""

from __future__ import annotations

from dataclasses import replace

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from attnlab.core.temperature import MECHANISMS
from attnlab.recall import widths as sweep
from attnlab.recall.trainer import TrainResult
from attnlab.recall.widths import (
    WIDTHS_BASE,
    WidthsConfig,
    implied_rho,
    routing,
    summary_frame,
    train_width,
)
from attnlab.studies.widths import compute as widths

SCRIPT = "10_widths"
TINY = [
    "--dk", "1", "4", "--mechanisms", "scaled", "unscaled", "--lrs", "3e-4", "1e-3",
    "--lr-dks", "4", "--lr-mechanisms", "scaled", "--drift-dk", "0", "--steps", "20",
    "--record-every", "10", "--seeds", "2", "--eval-size", "16", "--batch-size", "8",
    "--d-model", "8", "--jacobian-trials", "64", "--quiet",
]  # fmt: skip
OUTPUTS = ("10_widths_summary", "10_widths_curves", "10_lr_transfer", "10_jacobian_n16")
#: Standard errors allowed between a Monte-Carlo estimate and its expectation.
SE_MULTIPLE = 5


def test_routing_on_hand_made_weights():
    """Rows 0 and 2 put their largest weight on the asked slot, row 1 does not."""
    weights = jnp.array([[0.7, 0.2, 0.1], [0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    slot = jnp.array([0, 2, 2])
    accuracy, on_slot = routing(weights, slot)
    assert float(accuracy) == float(np.float32(2) / np.float32(3))  # mean of 0/1: one division
    # three float32 roundings of numbers below 1: |error| <= 3 eps
    assert abs(float(on_slot) - (0.7 + 0.2 + 0.8) / 3) <= 3 * np.finfo(np.float32).eps


def test_asked_slot_finds_the_query():
    keys = jnp.array([[5, 3, 9], [1, 2, 0]])
    batch = sweep.Batch(keys, keys, jnp.array([9, 1]), jnp.array([0, 0]))
    assert sweep.asked_slot(batch).tolist() == [2, 0]


@pytest.mark.parametrize("rho", [-0.5, 0.0, 0.3, 0.9])
def test_implied_rho_inverts_the_correlation_law(rho):
    """Products drawn with 07's law (q = rho k + sqrt(1 - rho^2) e, unit coordinates):
    ``implied_rho`` recovers rho within 5 standard errors of mean(q.k) / d_k, whose SE is
    sqrt(d_k (1 + rho^2) / N) / d_k (07's variance)."""
    d_k, n = 64, 20_000
    # float32 draws from numpy: eager jax.random and arithmetic compile op by op.
    rng = np.random.default_rng(7)
    k = rng.standard_normal((n, d_k), np.float32)
    q = rho * k + np.float32(np.sqrt(1 - rho**2)) * rng.standard_normal((n, d_k), np.float32)
    qk = np.sum(q * k, axis=-1, dtype=np.float32)
    se = np.sqrt(d_k * (1 + rho**2) / n) / d_k
    assert abs(float(implied_rho(qk, d_k, 1.0, 1.0)) - rho) <= SE_MULTIPLE * se


def test_static_jacobian_ratio_at_16_keys_matches_float64_numpy():
    """``jacobian_frame``'s ratio unscaled / scaled at 16 keys against an independent
    float64 numpy estimate (standard normal q, k; ||J||_F of softmax(z)); within 5 combined
    standard errors (delta method for each ratio)."""
    config = WidthsConfig(dks=(4, 64, 1024), lr_dks=(4,), jacobian_trials=4000, drift_dk=None)
    frame = widths.jacobian_frame(config).set_index("d_k")
    rng = np.random.default_rng(0)
    for d_k in config.dks:
        q = rng.standard_normal((4000, 1, d_k))
        k = rng.standard_normal((4000, 16, d_k))
        z = np.sum(q * k, axis=-1)
        norms = {}
        for name, scale in (("scaled", 1 / np.sqrt(d_k)), ("unscaled", 1.0)):
            p = np.exp(scale * z - (scale * z).max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            jac = p[:, :, None] * (np.eye(16) - p[:, None, :])
            norms[name] = np.sqrt((jac**2).sum(axis=(1, 2)))
        mean = {m: v.mean() for m, v in norms.items()}
        sem = {m: v.std(ddof=1) / np.sqrt(v.size) for m, v in norms.items()}
        ratio = mean["unscaled"] / mean["scaled"]
        se = ratio * np.hypot(sem["unscaled"] / mean["unscaled"], sem["scaled"] / mean["scaled"])
        row = frame.loc[d_k]
        assert abs(row.ratio_unscaled_scaled - ratio) <= SE_MULTIPLE * np.hypot(se, row.ratio_se)


#: A tiny d_k = 1 set-up shared by the training tests (one compile per program).
TINY_DK1 = replace(WIDTHS_BASE, d_k=1, steps=10, seeds=2, eval_size=16, batch_size=8, d_model=8)
LRS = (3e-4, 1e-3)


@pytest.fixture(scope="module")
def dk1_runs():
    """Scaled and unscaled at d_k = 1, two learning-rate runs each (lists by rate)."""
    results = train_width(
        TINY_DK1, [(MECHANISMS[m], LRS) for m in ("scaled", "unscaled")], record_every=5
    )
    assert [(r.mechanism, r.lr, r.d_k) for r in results] == [
        (m, lr, 1) for m in ("scaled", "unscaled") for lr in LRS
    ]
    return {"scaled": results[:2], "unscaled": results[2:]}


def test_scaled_and_unscaled_identical_at_dk_1(dk1_runs):
    """At d_k = 1 the scale 1/sqrt(1) is exactly 1: the same program, bit for bit."""
    for a, b in zip(dk1_runs["scaled"], dk1_runs["unscaled"], strict=True):
        np.testing.assert_array_equal(a.metrics["loss"], b.metrics["loss"])
        for name in sweep.DIAGNOSTICS:
            np.testing.assert_array_equal(a.records[name], b.records[name])
        np.testing.assert_array_equal(a.record_steps, [0, 5, 10])


def test_lanes_match_separate_runs_at_their_learning_rate(dk1_runs):
    """A lane of a learning-rate sweep is the run at that rate alone: the same step
    function on the same data, vmapped."""
    both = dk1_runs["scaled"][1]  # the second lane of the sweep: 1e-3
    (alone,) = train_width(TINY_DK1, [(MECHANISMS["scaled"], (1e-3,))], record_every=5)
    alone_loss, both_loss = alone.metrics["loss"], both.metrics["loss"]
    # vmapped lanes may differ from a single lane by float32 summation order: the loss is a
    # mean of 8 cross-entropies ~3.5, each a few roundings: (8 + 6) eps relative per step,
    # carried over 10 steps without amplification (stated assumption, as in 04's tests).
    bound = 10 * 14 * np.finfo(np.float32).eps * np.abs(alone_loss)
    assert np.all(np.abs(both_loss - alone_loss) <= bound)


def test_diverged_lane_is_recorded_not_raised():
    loss = np.array([[3.0, 2.0, np.nan, np.nan], [3.0, 2.0, 1.0, 0.5]], np.float32)
    diag = {name: np.ones((2, 3), np.float32) for name in sweep.DIAGNOSTICS}
    metrics = {"loss": loss, "grad_norm_wq": np.ones((2, 4)), "grad_norm_wk": np.ones((2, 4))}
    result = TrainResult("unscaled", [0, 1], 0, metrics, np.full(2, np.nan), None, d_k=8,
                         lr=1e-3, records=diag, record_steps=np.array([0, 2, 4]))  # fmt: skip
    frame = summary_frame([result], smoothing=1)
    assert frame.diverged_step.tolist()[0] == 2 and pd.isna(frame.diverged_step.iloc[1])
    assert np.isnan(frame.final_loss.iloc[0]) and frame.final_loss.iloc[1] == 0.5


@pytest.fixture(scope="module")
def two_runs(run_twice):
    return run_twice(SCRIPT, TINY)


@pytest.mark.slow
def test_script_writes_every_output_byte_identically(two_runs):
    a, b = two_runs
    for stem in OUTPUTS:
        assert (a / f"{stem}.csv").read_bytes() == (b / f"{stem}.csv").read_bytes(), stem
        assert (a / f"{stem}.json").is_file()


@pytest.mark.slow
def test_script_outputs_are_consistent(two_runs):
    out = two_runs[0]
    summary = pd.read_csv(out / "10_widths_summary.csv")
    # 2 widths x 2 mechanisms x 2 seeds at 3e-4, plus scaled at 1e-3 at d_k 4
    assert len(summary) == 2 * 2 * 2 + 2
    curves = pd.read_csv(out / "10_widths_curves.csv")
    assert sorted(curves.step.unique()) == [0, 10, 20]
    lrs = pd.read_csv(out / "10_lr_transfer.csv")
    assert lrs.best.sum() == 1 and set(lrs.lr) == {3e-4, 1e-3}
    at1 = summary[summary.d_k == 1]
    a = at1[at1.mechanism == "scaled"].drop(columns="mechanism").reset_index(drop=True)
    b = at1[at1.mechanism == "unscaled"].drop(columns="mechanism").reset_index(drop=True)
    assert a.equals(b)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"lr_dks": (8,)}, "WidthsConfig.lr_dks must be a subset of dks"),
        ({"lrs": (1e-2,)}, "WidthsConfig.lrs must include base.lr"),
        ({"record_every": 7}, "WidthsConfig.record_every must divide base.steps"),
    ],
)
def test_a_sweeps_grid_is_checked(change, message):
    """``check_grid``, which the card's ``SweepConfig`` shares (tests/test_card_sweep.py)."""
    with pytest.raises(ValueError, match=message):
        WidthsConfig(**{"dks": (4, 16), "lr_dks": (16,), **change})

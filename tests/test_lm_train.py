"""attnlab.lm.train: the configuration's checks, the fixed split and the batch
windows, the loss's known answer, and ``train_lanes`` on a tiny model: shapes, the same
initialisation for every rate of a seed, determinism, lanes independent of each other (and
of the chunking, and of being alone), and a diverging lane recorded at its first non-finite
step."""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import numpy as np
import pytest

from attnlab.core.temperature import BUILTINS
from attnlab.core.text import byte_tokens, read_text
from attnlab.lm.train import (
    CLIP_METRICS,
    CLIP_ON,
    PROBE_METRICS,
    STEP_METRICS,
    LMConfig,
    sample_windows,
    seed_keys,
    split_text,
    train_lanes,
)

EPS = float(np.finfo(np.float32).eps)  # 2^-23
VOCAB = 256
#: The LM tests' common tiny config: tests/test_card_lm.py, tests/test_lm_sweep.py and this
#: file train it on the whole default text (``read_text(None)``) with the same values, so that
#: their compiled init, chunk and evaluation programs coincide (a program is keyed by every
#: traced shape: the text's length, ``eval_windows``, the number of lanes). ``eval_windows``
#: is large enough that ``length_rows`` at 4x the length runs out of held-out text first.
COMMON = LMConfig(d_model=16, d_head=8, n_layers=1, seq_len=8, batch_size=4, steps=4, warmup=1,
                  chunk_steps=2, eval_windows=400, positions="rotary")  # fmt: skip
#: Its two-lane run, the card's: rates 1e-2 and 1e-1, seed 0.
COMMON_LRS = [1e-2, 1e-1]
#: The six-lane sweep below: COMMON in chunks of one step (the two-lane run's are two).
TINY = dataclasses.replace(COMMON, chunk_steps=1)
#: Rates: two that train, and one so large that the lane must diverge (see
#: ``test_a_diverging_lane_is_recorded_at_its_first_non_finite_step``). Lanes are
#: rate-major: (1e-3, 0), (1e-3, 1), (1e-2, 0), ...
LRS = [1e-3, 1e-2, 1e10]
SEEDS = [0, 1]
HUGE = 2
#: Terms of the longest float32 reductions behind one loss: a logsumexp over V = 256 bytes,
#: the mean over B T = 32 positions, the MLP's 4 d = 64-term products, and 16 for the
#: element-wise operations in between. Two programs that differ only in how XLA orders
#: those reductions (vmapped over another number of lanes) give losses within
#: FORWARD_TERMS eps relative of each other at step 0 ...
FORWARD_TERMS = VOCAB + 4 * 8 + 4 * 16 + 16
#: ... and, each of the 4 steps adding at most that again through the gradient, which
#: Adam's ratio m / sqrt(v) at most doubles, within 4 x 4 x FORWARD_TERMS eps (about 7e-4
#: relative) at every step of training.
LANE_RTOL = TINY.steps * 4 * FORWARD_TERMS * EPS


@functools.cache
def split():
    return split_text(byte_tokens(read_text(None).text), COMMON)


@functools.cache
def sweep():
    """The tiny sweep (3 rates x 2 seeds of ``scaled``) and the chunk sizes it reported."""
    reported = []
    result = train_lanes(TINY, BUILTINS["scaled"], LRS, SEEDS, split(), on_chunk=reported.append)
    return result, reported


def lane(lr: float, seed: int) -> int:
    return LRS.index(lr) * len(SEEDS) + SEEDS.index(seed)


# ------------------------------------------------------------------------ configuration


@pytest.mark.parametrize(
    "bad",
    [
        {"d_model": 0},
        {"d_model": True},
        {"d_model": 16.0},
        {"n_layers": -1},
        {"seq_len": 0},
        {"batch_size": 0},
        {"eval_windows": 0},
        {"chunk_steps": 0},
        {"d_model": 40, "d_head": 16},  # not a multiple
        {"d_model": 18, "d_head": 3},  # odd head width
        {"warmup": 6},  # == steps
        {"warmup": -1},
        {"held_out": 0.0},
        {"held_out": 1.0},
        {"positions": "alibi"},
        {"warmup": 1.5},
        {"clip": 0.0},
        {"clip": -1.0},
        {"weight_decay": -5.0},
        {"z_loss_weight": -1.0},
        {"weight_decay": float("nan")},
    ],
    ids=repr,
)
def test_config_rejects_bad_fields(bad):
    with pytest.raises(ValueError):
        dataclasses.replace(TINY, **bad)


def test_config_defaults_and_heads():
    assert LMConfig().n_heads == 4
    assert TINY.n_heads == 2
    model = TINY.model(BUILTINS["scaled"])
    assert (model.d_model, model.n_layers, model.n_heads, model.max_length) == (16, 1, 2, 8)


# ------------------------------------------------------------------------------- data


def test_split_text_train_first_and_held_out_windows_last():
    """Train is the first 90% of the tokens; the held-out windows, ``eval_windows`` of
    ``seq_len + 1`` contiguous tokens each, lie in the last 10%, the first at its start and
    the last at its end (evenly spaced). Tokens 0..999, so a window's values are its
    offsets."""
    config = dataclasses.replace(TINY, eval_windows=5)
    tokens = np.arange(1000)
    train, held_out, rest = split_text(tokens, config)
    np.testing.assert_array_equal(train, tokens[:900])
    np.testing.assert_array_equal(rest, tokens[900:])
    assert held_out.shape == (5, config.seq_len + 1)
    for window in held_out:
        np.testing.assert_array_equal(window, np.arange(window[0], window[0] + 9))
    assert held_out[0, 0] == 900 and held_out[-1, -1] == 999
    starts = held_out[:, 0]
    assert np.all(np.diff(starts) > 0) and np.ptp(np.diff(starts)) <= 1
    quarter = split_text(tokens, dataclasses.replace(config, held_out=0.25))
    assert len(quarter.train) == 750 and quarter.held_out.min() >= 750


@pytest.mark.parametrize("held_out", [0.1, 0.9], ids=["held-out-too-short", "train-too-short"])
def test_split_text_rejects_a_text_too_short(held_out):
    """50 tokens: with 10% held out, 5 held-out tokens cannot hold a window of 9; with 90%
    held out, neither can 5 training tokens."""
    with pytest.raises(ValueError, match="window"):
        split_text(np.arange(50), dataclasses.replace(TINY, held_out=held_out))


def test_sample_windows_are_contiguous_slices_at_uniform_offsets():
    """Training tokens 0..11 and windows of 4: every window is ``[s, s + 4)``, and the
    9 offsets 0..8 are drawn alike (each count within 5 standard errors of n / 9, SE =
    sqrt(n p (1 - p))), so neither the first nor the last whole window is left out."""
    n, length = 4000, 4
    train = np.arange(12, dtype=np.int32)
    draw = jax.jit(sample_windows, static_argnums=(2, 3))  # one program, not one per op
    windows = np.asarray(draw(jax.random.key(5), train, n, length))
    assert windows.shape == (n, length)
    starts = windows[:, 0]
    np.testing.assert_array_equal(windows, starts[:, None] + np.arange(length))
    counts = np.bincount(starts, minlength=9)
    assert len(counts) == 9
    p = 1 / 9
    assert np.all(np.abs(counts - n * p) <= 5 * math.sqrt(n * p * (1 - p)))


def test_seed_keys_are_deterministic_and_disjoint():
    init, data = seed_keys(3)
    again = seed_keys(3)
    assert np.array_equal(jax.random.key_data(init), jax.random.key_data(again[0]))
    assert not np.array_equal(jax.random.key_data(init), jax.random.key_data(data))
    assert not np.array_equal(jax.random.key_data(data), jax.random.key_data(seed_keys(4)[1]))


def test_train_lanes_shapes_and_lane_order():
    """Lanes rate-major; per-step metrics ``[lanes, steps]`` and ``[lanes, steps, layers]``,
    held-out losses ``[lanes, eval_windows]``, parameters stacked over lanes; one report
    per chunk (of one step here) of ``steps x lanes``."""
    result, reported = sweep()
    n = len(LRS) * len(SEEDS)
    assert result.mechanism == "scaled" and result.config == TINY
    np.testing.assert_array_equal(result.lrs, np.repeat(LRS, len(SEEDS)))
    np.testing.assert_array_equal(result.seeds, np.tile(SEEDS, len(LRS)))
    assert set(result.metrics) == set(STEP_METRICS)
    assert result.metrics["loss"].shape == (n, TINY.steps)
    for name in STEP_METRICS[1:]:
        assert result.metrics[name].shape == (n, TINY.steps, TINY.n_layers)
    assert result.initial_loss.shape == result.final_loss.shape == (n, TINY.eval_windows)
    assert result.diverged_step.shape == (n,)
    assert all(leaf.shape[0] == n for leaf in jax.tree.leaves(result.params))
    assert reported == [n] * TINY.steps


def test_every_rate_of_a_seed_starts_from_the_same_model():
    """Same seed, same initialisation: the held-out loss before training and the step-0
    training loss (taken before the first update, on the same batch) agree across rates
    within FORWARD_TERMS eps; another seed gives another model. At initialisation the
    logits have std 0.02 |LN(x)| = 0.02 sqrt(d) = 0.08 =: sigma, so the loss is ln 256 up
    to the target's logit (|.| <= 5 sigma) and sigma^2 / 2: within 5 sigma + sigma^2."""
    result, _ = sweep()
    step0 = result.metrics["loss"][:, 0]
    for seed in SEEDS:
        rows = [lane(lr, seed) for lr in LRS]
        for values in (result.initial_loss, step0):
            same = np.broadcast_to(values[rows[0]], values[rows].shape)
            np.testing.assert_allclose(values[rows], same, rtol=FORWARD_TERMS * EPS)
    assert not np.allclose(result.initial_loss[lane(1e-3, 0)], result.initial_loss[lane(1e-3, 1)])
    sigma = 0.02 * math.sqrt(TINY.d_model)
    assert np.all(np.abs(result.initial_loss - math.log(VOCAB)) <= 5 * sigma + sigma**2)


def test_trainable_lanes_stay_finite_and_learn():
    """The rates 1e-3 and 1e-2 never diverge (-1), every metric is finite, and at 1e-2
    four steps lower the held-out loss."""
    result, _ = sweep()
    for lr in LRS[:HUGE]:
        for seed in SEEDS:
            row = lane(lr, seed)
            assert result.diverged_step[row] == -1
            for name in STEP_METRICS:
                assert np.all(np.isfinite(result.metrics[name][row])), (lr, seed, name)
            assert np.all(np.isfinite(result.final_loss[row]))
    for seed in SEEDS:
        row = lane(1e-2, seed)
        assert result.final_loss[row].mean() < result.initial_loss[row].mean()


def test_a_diverging_lane_is_recorded_at_its_first_non_finite_step():
    """At rate 1e10 Adam's first step moves every weight with a gradient by about 1e10
    (|u| = 1 at step 1 whatever the clipping, Adam being scale-invariant), so at step 1 the
    LN scale and W_Q, W_K are ~1e10 and q.k ~ 1e40 overflows float32 (3.4e38): the loss
    is finite at step 0 and non-finite from step 1, and ``diverged_step`` says 1. (The
    lanes vmapped beside it stay finite: ``test_trainable_lanes_stay_finite_and_learn``.)"""
    result, _ = sweep()
    for seed in SEEDS:
        row = lane(LRS[HUGE], seed)
        loss = result.metrics["loss"][row]
        first_bad = int(np.argmax(~np.isfinite(loss)))
        assert np.isfinite(loss[0]) and not np.isfinite(loss[first_bad])
        assert np.all(np.isfinite(loss[:first_bad]))
        assert result.diverged_step[row] == first_bad == 1


def test_train_lanes_is_deterministic():
    """The same call twice gives the same bytes: metrics, held-out losses, parameters."""
    result, _ = sweep()
    again = train_lanes(TINY, BUILTINS["scaled"], LRS, SEEDS, split())
    for name in STEP_METRICS:
        assert result.metrics[name].tobytes() == again.metrics[name].tobytes(), name
    assert result.initial_loss.tobytes() == again.initial_loss.tobytes()
    assert result.final_loss.tobytes() == again.final_loss.tobytes()
    np.testing.assert_array_equal(result.diverged_step, again.diverged_step)
    for a, b in zip(jax.tree.leaves(result.params), jax.tree.leaves(again.params), strict=True):
        assert a.tobytes() == b.tobytes()


def test_a_lane_equals_its_run_beside_other_lanes():
    """The lane (1e-2, seed 0) of the six-lane sweep, in chunks of one step, equals the same
    lane of COMMON's two-lane run (beside 1e-1 instead, in chunks of two): lanes do not
    interact (not even with a NaN lane beside them) and chunking does not change the steps.
    Equal within LANE_RTOL (the two programs may order float32 reductions differently); the
    neighbouring lane at another rate is farther off than that, so the check can fail."""
    result, _ = sweep()
    pair = train_lanes(COMMON, BUILTINS["scaled"], COMMON_LRS, [0], split())
    row = lane(1e-2, 0)
    for name in STEP_METRICS:
        np.testing.assert_allclose(result.metrics[name][row], pair.metrics[name][0],
                                   rtol=LANE_RTOL, atol=0, err_msg=name)  # fmt: skip
    np.testing.assert_allclose(result.final_loss[row], pair.final_loss[0], rtol=LANE_RTOL)
    assert pair.diverged_step[0] == -1
    other = result.metrics["loss"][lane(1e-3, 0), -1]
    assert abs(other - pair.metrics["loss"][0, -1]) > 10 * LANE_RTOL * abs(other)


def test_a_lane_alone_runs_unbatched_and_equals_its_run_beside_another():
    """One lane has no lane axis in its program (``chunk_program``'s unbatched path) and
    still trains as the same lane vmapped beside another: within LANE_RTOL of COMMON's
    two-lane run, every step."""
    pair = train_lanes(COMMON, BUILTINS["scaled"], COMMON_LRS, [0], split())
    alone = train_lanes(COMMON, BUILTINS["scaled"], COMMON_LRS[:1], [0], split())
    for name in STEP_METRICS:
        assert alone.metrics[name].shape[0] == 1
        np.testing.assert_allclose(alone.metrics[name][0], pair.metrics[name][0],
                                   rtol=LANE_RTOL, atol=0, err_msg=name)  # fmt: skip
    np.testing.assert_allclose(alone.final_loss[0], pair.final_loss[0], rtol=LANE_RTOL)
    assert jax.tree.all(jax.tree.map(lambda x: x.shape[0] == 1, alone.params))


# --- the optimizer seam and QK-Clip in the step (issue 57) ---

#: A width where a high rate grows the logits: d_model 32 (4 heads), 40 steps.
GROWS = dataclasses.replace(COMMON, d_model=32, steps=40, warmup=4, chunk_steps=40,
                            eval_windows=16)  # fmt: skip
#: The clip's stated bound: after it first fires, a step's largest logit (before that step's
#: clip) is tau times one update's growth, at most CLIP_GROWTH.
CLIP_GROWTH = 2.0


@pytest.mark.slow  # two 40-step lanes at d_model 32 (20 s of CPU cold); tests/test_lm_qk_clip.py
# checks the clip by hand in the fast suite
def test_qk_clip_bounds_the_logits_in_training_and_the_unclipped_run_grows():
    """Known answer (b): at a rate where the unclipped logits grow past tau, every step
    after the clip first fires records a largest signed logit within CLIP_GROWTH tau; the
    same lane without the clip grows far past it (both sides)."""
    tau = 4.0
    clipped = dataclasses.replace(GROWS, qk_clip_tau=tau)
    mechanism = BUILTINS["scaled"]
    free = train_lanes(GROWS, mechanism, [3e-2], [0], split())
    held = train_lanes(clipped, mechanism, [3e-2], [0], split())
    assert set(CLIP_METRICS) <= set(held.metrics) and not set(CLIP_METRICS) & set(free.metrics)
    signed = held.metrics["max_signed_logit"][0].max(axis=-1)  # [steps], over layers
    fired = np.flatnonzero(held.metrics["clip_fraction"][0].max(axis=-1) > 0)
    assert fired.size and (signed[fired[0] + 1 :] <= CLIP_GROWTH * tau).all()
    assert free.metrics["max_logit"][0].max() > 2 * CLIP_GROWTH * tau  # 19.3 here


def test_muon_through_the_seam_trains():
    """The Muon lanes learn (held-out loss below its start) and stay finite."""
    muon = dataclasses.replace(GROWS, optimizer="muon")
    result = train_lanes(muon, BUILTINS["scaled"], [1e-2], [0], split())
    assert (result.diverged_step == -1).all()
    assert result.final_loss.mean() < result.initial_loss.mean() - 0.1


# --- the schedule, decay, side rate, QK-Clip's quantity and its probes ---


@pytest.mark.parametrize(
    "bad",
    [
        {"schedule": "x"},
        {"decay": "x"},
        {"qk_clip_on": "x", "qk_clip_tau": 1.0},
        {"side_lr": 0.01},  # under adamw: it has one rate
        {"optimizer": "muon", "side_lr": 0.0},
        {"optimizer": "muon", "side_lr": float("nan")},
        {"optimizer": "muon", "side_lr": float("inf")},
        {"probe_every": -1, "qk_clip_tau": 1.0},
        {"probe_every": 1.5, "qk_clip_tau": 1.0},
        {"probe_every": True, "qk_clip_tau": 1.0},
        {"probe_every": 5},  # probes QK-Clip: needs qk_clip_tau
    ],
    ids=repr,
)
def test_config_rejects_bad_new_fields(bad):
    with pytest.raises(ValueError):
        dataclasses.replace(TINY, **bad)


def test_config_takes_the_new_fields_and_lists_their_metrics_only_when_configured():
    """Each field's allowed values are taken; ``metrics`` is ``STEP_METRICS``, then
    ``CLIP_METRICS`` with ``qk_clip_tau``, then ``PROBE_METRICS`` with ``probe_every``."""
    for schedule in ("cosine", "wsd"):
        for decay in ("independent", "coupled"):
            config = dataclasses.replace(TINY, schedule=schedule, decay=decay)
            assert config.metrics == STEP_METRICS
    assert dataclasses.replace(TINY, optimizer="muon", side_lr=0.01).side_lr == 0.01
    clipped = dataclasses.replace(TINY, qk_clip_tau=1.0)
    assert clipped.metrics == STEP_METRICS + CLIP_METRICS
    assert {"head_signed_logit", "head_abs_logit"} <= set(CLIP_METRICS)
    for on in CLIP_ON:
        probed = dataclasses.replace(clipped, qk_clip_on=on, probe_every=5)
        assert probed.metrics == STEP_METRICS + CLIP_METRICS + PROBE_METRICS
    assert not set(PROBE_METRICS) & set(clipped.metrics)
    assert dataclasses.replace(clipped, probe_every=0).metrics == clipped.metrics


#: The probes' run: COMMON's model (its held-out program shared), one lane at rate 1e-1 for
#: three steps, probed every 2 (steps 0 and 2), QK-Clip at TAU_PROBE. Its logits (scaled,
#: rotary): step 0 every head's largest about 0.018 (no clip), step 1 about (0.28, 0.38)
#: signed and (0.34, 0.38) in |.|, step 2 about 1.3 (both heads clipped).
PROBED = dataclasses.replace(COMMON, steps=3, chunk_steps=3, qk_clip_tau=0.3, probe_every=2)
TAU_PROBE = PROBED.qk_clip_tau
#: K2's closed form holds to rounding: scaling W_Q, W_K by gamma^(1/2) scales each q, k
#: coordinate by it within d_model eps of the coordinate's size (a d_model-term product,
#: the factor's sqrt and the product one rounding each), and the logit, a d_head-term
#: product of them (the rotation two terms more), by gamma within (2 d_model + d_head + 8)
#: eps relative, taking each sum as well conditioned (the largest logit's terms mostly
#: agree in sign): 4 times that for the conditioning (measured here: 2 eps).
PROBE_RTOL = 4 * (2 * COMMON.d_model + COMMON.d_head + 8) * EPS


def _probe_run(on: str):
    config = dataclasses.replace(PROBED, qk_clip_on=on)
    return config, train_lanes(config, BUILTINS["scaled"], [1e-1], [0], split()).metrics


def _check_probes(config, metrics, quantity: str):
    """The probes' shared checks: shapes, NaN exactly at the steps not probed, the probe
    before the update equal to the step's own S (``quantity``), and K2's closed form."""
    assert set(metrics) == set(config.metrics)
    shape = (1, config.steps, config.n_layers, config.n_heads)
    for name in (*PROBE_METRICS, "head_signed_logit", "head_abs_logit"):
        assert metrics[name].shape == shape, name
    probed = np.arange(config.steps) % config.probe_every == 0
    assert probed.tolist() == [True, False, True]
    for name in PROBE_METRICS:
        assert np.all(np.isnan(metrics[name][:, ~probed])), name
        assert np.all(np.isfinite(metrics[name][:, probed])), name
    before = metrics["probe_before"][:, probed]
    np.testing.assert_array_equal(before, metrics[quantity][:, probed])
    # The clip reads ``quantity``: a head is clipped where it is above tau.
    np.testing.assert_array_equal(metrics["clip_fraction"],
                                  np.mean(metrics[quantity] > TAU_PROBE, axis=-1))  # fmt: skip
    # K2's closed form: the clip multiplies the head's logits by gamma = min(1, tau / S),
    # so its S after the clip is gamma times S after the update (same batch).
    after_update = metrics["probe_after_update"][:, probed].astype(np.float64)
    after_clip = metrics["probe_after_clip"][:, probed].astype(np.float64)
    assert np.all(before > 0)
    gamma = np.minimum(1.0, TAU_PROBE / before.astype(np.float64))
    assert (gamma < 1).any() and (gamma == 1).any()  # both branches: clipped, left alone
    np.testing.assert_allclose(after_clip, gamma * after_update, rtol=PROBE_RTOL, atol=0)
    # The check can fail: where a head was clipped, after the clip is far from after the
    # update.
    clipped = gamma < 1
    gap = np.abs(after_clip - after_update)[clipped] / after_update[clipped]
    assert np.all(gap > 100 * PROBE_RTOL)


def test_probes_read_k2s_closed_form_on_the_signed_logit():
    """``qk_clip_on="signed"`` (K2's): the probes are NaN at the odd steps; at the probed
    ones the probe before the update is the step's largest signed logit per head (the same
    array), and after the clip each head's S is ``min(1, tau / S_before)`` times its S
    after the update, within PROBE_RTOL; heads are clipped where the signed logit is above
    tau."""
    config, metrics = _probe_run("signed")
    assert metrics["clip_fraction"][0, 2].max() > 0  # the clip binds at a probed step
    _check_probes(config, metrics, "head_signed_logit")
    assert np.all(metrics["head_abs_logit"] >= metrics["head_signed_logit"])


@pytest.mark.slow  # a third tiny program compiled (about 6 s of CPU cold)
def test_probes_and_the_clip_read_the_abs_logit_under_qk_clip_on_abs():
    """``qk_clip_on="abs"``: the same checks on the largest |logit| per head; at step 1 a
    head's largest |logit| is above tau where its largest signed logit is not (0.34 vs
    0.28), and the clip fires on it: a clip on the signed logit would give another
    clip_fraction (the check can fail)."""
    config, metrics = _probe_run("abs")
    _check_probes(config, metrics, "head_abs_logit")
    signed, absolute = metrics["head_signed_logit"], metrics["head_abs_logit"]
    only_abs = (absolute > TAU_PROBE) & (signed <= TAU_PROBE)
    assert only_abs.any()
    assert not np.array_equal(metrics["clip_fraction"], np.mean(signed > TAU_PROBE, axis=-1))

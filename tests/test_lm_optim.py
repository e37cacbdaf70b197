"""attnlab.lm.optim: the warmup-cosine schedule at its closed-form points, AdamW with
rate-independent decay against a numpy float64 reference written from the module
docstring's formula, and the z-loss against numpy."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from attnlab.lm.optim import adamw_independent, decay_mask, warmup_cosine, z_loss

EPS = float(np.finfo(np.float32).eps)  # 2^-23
B1, B2, ADAM_EPS = 0.9, 0.95, 1e-8

#: The schedule compiled once per (total, warmup): eager, each of its operations compiles.
schedule = jax.jit(warmup_cosine, static_argnums=(1, 2))


def test_warmup_cosine_closed_form_points():
    """``s(0) = 1/w``, ``s(w-1) = s(w) = 1``, ``s`` at the cosine's midpoint is 1/2, ``s(T)
    = 0`` and stays 0 after. Bound: a float32 cosine of an argument within ``pi`` is within
    a few eps of exact; 4 eps."""
    total, warmup = 20, 4
    s = np.asarray(schedule(np.arange(total + 5), total, warmup), np.float64)
    midpoint = warmup + (total - warmup) // 2
    expected = {0: 1 / warmup, warmup - 1: 1.0, warmup: 1.0, midpoint: 0.5, total: 0.0}
    for step, value in expected.items():
        assert abs(s[step] - value) <= 4 * EPS, step
    assert np.all(np.abs(s[total:]) <= 4 * EPS)
    # The cosine in between, by its formula (float64 here).
    t = np.arange(warmup, total + 1)
    cosine = 0.5 * (1 + np.cos(np.pi * (t - warmup) / (total - warmup)))
    np.testing.assert_allclose(s[warmup : total + 1], cosine, rtol=0, atol=4 * EPS)


def test_warmup_cosine_is_monotone_and_zero_warmup_starts_at_one():
    """Non-decreasing over the warmup, non-increasing after; without warmup the cosine
    starts at step 0 with ``s = 1``."""
    total, warmup = 50, 10
    s = np.asarray(schedule(np.arange(total + 1), total, warmup))
    assert np.all(np.diff(s[:warmup]) > 0)
    assert np.all(np.diff(s[warmup - 1 :]) <= 0)
    s0 = np.asarray(schedule(np.arange(2), total, 0))
    assert s0[0] == 1.0
    assert 0 < s0[1] < 1


def test_decay_mask_selects_matrices_only():
    params = {"w": np.ones((3, 2)), "e": np.ones((4, 2, 2)), "g": np.ones(2), "s": np.ones(())}
    assert decay_mask(params) == {"w": True, "e": True, "g": False, "s": False}


def _schedule_reference(t: int, total: int, warmup: int) -> float:
    if t < warmup:
        return (t + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (t - warmup) / (total - warmup)))


def _adamw_reference(params, grads_per_step, lr, total, warmup, wd, clip):
    """The module docstring's step in float64: global-norm clipping, bias-corrected Adam,
    ``theta <- theta - lr s(t) u - wd s(t) theta`` with decay on matrices (ndim >= 2) only."""
    theta = {k: np.asarray(v, np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in theta.items()}
    v2 = {k: np.zeros_like(v) for k, v in theta.items()}
    for t, grads in enumerate(grads_per_step):
        g = {k: np.asarray(x, np.float64) for k, x in grads.items()}
        norm = math.sqrt(sum(float(np.sum(x * x)) for x in g.values()))
        g = {k: x * min(1.0, clip / norm) for k, x in g.items()}
        s = _schedule_reference(t, total, warmup)
        for k in theta:
            m[k] = B1 * m[k] + (1 - B1) * g[k]
            v2[k] = B2 * v2[k] + (1 - B2) * g[k] ** 2
            u = (m[k] / (1 - B1 ** (t + 1))) / (np.sqrt(v2[k] / (1 - B2 ** (t + 1))) + ADAM_EPS)
            decay = wd * s * theta[k] if theta[k].ndim >= 2 else 0.0
            theta[k] = theta[k] - lr * s * u - decay
    return theta


def test_adamw_independent_matches_numpy_reference_for_two_steps():
    """Two steps on a matrix, a vector and a scalar: the first gradient's global norm is
    above the clip (clipped), the second's below (left alone); warmup 2 so that ``s`` is 1/2
    then 1. Bound: each element goes through the global norm (a sum of n = 9 squares,
    n eps) and about 16 further roundings (moments, bias corrections, sqrt, division,
    schedule, products); Adam's ratio m / sqrt(v) doubles a relative error of g, so
    (2 n + 32) eps times the size of what is added up (|theta| + lr |u|, |u| <= 1/(1-b1)
    here)."""
    lr, total, warmup, wd, clip = 0.1, 10, 2, 0.05, 1.0
    # float32 inputs from numpy: eager jax.random would compile a sampler per shape.
    rng = np.random.default_rng(7)
    params = {
        "w": rng.standard_normal((3, 2)).astype(np.float32),
        "b": rng.standard_normal(2).astype(np.float32),
        "s": np.float32(0.7),
    }

    def grads(size):
        return {k: (size * rng.standard_normal(np.shape(v))).astype(np.float32)
                for k, v in params.items()}  # fmt: skip

    steps = [grads(3.0), grads(0.05)]
    norms = [math.sqrt(sum(float(np.sum(np.float64(x) ** 2)) for x in g.values())) for g in steps]
    assert norms[0] > clip > norms[1]  # both branches of the clipping are exercised

    optimizer = adamw_independent(lr, total, warmup, weight_decay=wd, clip=clip, b1=B1, b2=B2)

    @jax.jit
    def two_steps(params, steps):
        """Both updates in one program (eager, each operation compiles on its own)."""
        state = optimizer.init(params)
        current = params
        for g in steps:
            updates, state = optimizer.update(g, state, current)
            current = optax.apply_updates(current, updates)
        return current

    current = two_steps(params, steps)

    reference = _adamw_reference(params, steps, lr, total, warmup, wd, clip)
    n = 9
    size = max(float(np.max(np.abs(v))) for v in reference.values()) + lr / (1 - B1)
    for k in params:
        np.testing.assert_allclose(current[k], reference[k], rtol=0, atol=(2 * n + 32) * EPS * size)
    # The check can fail: without the decay on the matrix the result is far off.
    no_decay = _adamw_reference(params, steps, lr, total, warmup, 0.0, clip)
    assert np.max(np.abs(no_decay["w"] - reference["w"])) > 100 * (2 * n + 32) * EPS * size


def test_weight_decay_does_not_scale_with_the_learning_rate():
    """Zero gradients: Adam's direction is exactly 0, so the step is the decay alone,
    ``-wd s(0) theta`` on the matrix and exactly 0 on the vector, for every rate, bit for
    bit (one program, ``lr`` traced). Bound on the decay: three float32 roundings (wd,
    wd s, times theta), 4 eps relative. Optax's AdamW, whose decay is ``lr`` times
    ``wd``, gives two different steps for the same two rates: the check can fail."""
    total, warmup, wd = 10, 4, 0.1
    params = {"w": np.arange(1.0, 7.0, dtype=np.float32).reshape(3, 2),
              "g": np.ones(2, np.float32)}  # fmt: skip
    zeros = jax.tree.map(np.zeros_like, params)

    @jax.jit
    def first_update(lr):
        optimizer = adamw_independent(lr, total, warmup, weight_decay=wd)
        return optimizer.update(zeros, optimizer.init(params), params)[0]

    small, large = (jax.tree.map(np.asarray, first_update(lr)) for lr in (1e-3, 1.0))
    assert all(jax.tree.leaves(jax.tree.map(np.array_equal, small, large)))
    expected = -wd * (1 / warmup) * np.asarray(params["w"], np.float64)
    np.testing.assert_allclose(small["w"], expected, rtol=4 * EPS, atol=0)
    assert np.all(small["g"] == 0)

    @jax.jit
    def coupled_update(lr):
        optimizer = optax.adamw(lr, weight_decay=wd)
        return optimizer.update(zeros, optimizer.init(params), params)[0]

    coupled = [coupled_update(lr) for lr in (1e-3, 1.0)]
    assert not np.allclose(coupled[0]["w"], coupled[1]["w"])


def test_z_loss_known_answer_and_numpy():
    """Uniform logits: ``log Z = ln 256`` at every position, so ``z_loss = (ln 256)^2``.
    Random logits: ``mean(logsumexp^2)`` in numpy float64. Bound: logsumexp of V = 256
    terms is within (V + 4) eps relative of exact (the sum inside the log dominates),
    squaring doubles it and the mean of M = 6 terms adds M eps: (2 (V + 4) + M) eps."""
    vocab = 256
    loss = jax.jit(z_loss)  # one program per input dtype; eager, every operation compiles
    assert float(loss(np.zeros((2, 3, vocab), np.float32))) == pytest.approx(
        math.log(vocab) ** 2, rel=(2 * (vocab + 4) + 6) * EPS, abs=0
    )
    logits = (4.0 * np.random.default_rng(3).standard_normal((2, 3, vocab))).astype(np.float32)
    x = np.asarray(logits, np.float64)
    peak = x.max(axis=-1, keepdims=True)
    lse = peak[..., 0] + np.log(np.sum(np.exp(x - peak), axis=-1))
    expected = np.mean(lse**2)
    assert float(loss(logits)) == pytest.approx(expected, rel=(2 * (vocab + 4) + 6) * EPS, abs=0)
    # Half-precision logits are promoted: the loss is a float32.
    assert loss(logits.astype(jnp.bfloat16)).dtype == jnp.float32

"""attnlab.training.schedules: the warmup-cosine and warmup-stable-decay schedules at their
closed-form points, and 14's AdamW through them (``make_optimizer("adamw", lr, Recipe)``)
with rate-independent decay against a numpy float64 reference written from the module
docstring's formula, and with coupled decay against optax's AdamW."""

from __future__ import annotations

import math

import jax
import numpy as np
import optax
import pytest
from support import matrix_and_vector, optimizer_updates

from attnlab.training.optimizers import Recipe, make_optimizer
from attnlab.training.schedules import (
    DECAYS,
    SCHEDULES,
    WSD_FLOOR,
    WSD_STABLE,
    decay_mask,
    schedule_factor,
    warmup_cosine,
    warmup_stable_decay,
    wsd_decay_start,
)

EPS = float(np.finfo(np.float32).eps)  # 2^-23
B1, B2, ADAM_EPS = 0.9, 0.95, 1e-8

#: The schedule compiled once per (total, warmup): eager, each of its operations compiles.
schedule = jax.jit(warmup_cosine, static_argnums=(1, 2))


def lm_optimizer(name, lr, total, warmup, weight_decay=1e-4, clip=1.0, schedule="cosine",
                 decay="independent", **hyper):  # fmt: skip
    """``make_optimizer(name, lr, Recipe(...), **hyper)``, the recipe's fields spelled as
    ``LMConfig``'s (14's defaults)."""
    recipe = Recipe(total, warmup, weight_decay, clip, schedule, decay)
    return make_optimizer(name, lr, recipe, **hyper)


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

    optimizer = lm_optimizer("adamw", lr, total, warmup, weight_decay=wd, clip=clip, b1=B1, b2=B2)

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
        optimizer = lm_optimizer("adamw", lr, total, warmup, weight_decay=wd)
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


def _wsd_reference(t: int, total: int, warmup: int) -> float:
    """The docstring's closed form in float64: ``(t + 1) / w`` over the warmup, 1 until
    ``D``, then ``f + (1 - f) (1 + cos(pi (t - D) / (T - D))) / 2``, ``f`` after ``T``."""
    start = max(warmup, round(WSD_STABLE * total))
    if t < warmup:
        return (t + 1) / warmup
    progress = min(max((t - start) / (total - start), 0.0), 1.0)
    return WSD_FLOOR + (1 - WSD_FLOOR) * 0.5 * (1 + math.cos(math.pi * progress))


# --- the schedules and the decays (K2's warmup-stable-decay; coupled decay) ---

#: K2's schedule compiled once per (total, warmup), as ``schedule`` above.
wsd = jax.jit(warmup_stable_decay, static_argnums=(1, 2))


def test_warmup_stable_decay_closed_form_points():
    """T = 310, w = 10: ``D = round(310 * 10 / 15.5) = 200``. ``s(0) = 1/w``, the warmup
    linear, the plateau exactly 1 on ``[w, D)`` (``0.1 + 0.9 * 1`` rounds to 1 in float32:
    its error 2.2e-8 is under half an ulp below 1, 3e-8), ``(1 + f)/2`` at the decay's
    midpoint ``D + (T - D)/2 = 255``, ``f = WSD_FLOOR`` at ``T`` and after. Bound: a float32
    cosine of an argument within ``pi`` and the affine map after it, within 4 eps of exact
    (as the cosine schedule's test)."""
    total, warmup = 310, 10
    start = wsd_decay_start(total, warmup)
    assert start == 200
    s = np.asarray(wsd(np.arange(total + 10), total, warmup), np.float64)
    np.testing.assert_allclose(s[:warmup], np.arange(1, warmup + 1) / warmup, rtol=0, atol=4 * EPS)
    assert np.all(s[warmup:start] == 1.0)
    assert s[start - 1] == 1.0 and s[start] == 1.0  # the cosine starts at its top
    expected = {0: 1 / warmup, 255: (1 + WSD_FLOOR) / 2, total: WSD_FLOOR}
    for step, value in expected.items():
        assert abs(s[step] - value) <= 4 * EPS, step
    assert np.all(np.abs(s[total:] - WSD_FLOOR) <= 4 * EPS)
    reference = [_wsd_reference(t, total, warmup) for t in range(total + 10)]
    np.testing.assert_allclose(s, reference, rtol=0, atol=4 * EPS)
    # The check can fail: the decay is not 14's cosine (which is 0.5 at its own midpoint).
    assert abs(s[255] - float(schedule(255, total, warmup))) > 0.1


def test_warmup_stable_decay_starts_its_decay_no_earlier_than_the_warmup_ends():
    """T = 10, w = 8: ``round(10 * 10 / 15.5) = 6 < 8``, so ``D = w = 8``: the warmup reaches
    1 at step 7, the cosine starts at 8 (1) and ends at 10 (the floor), its midpoint 9.
    Bound as above."""
    total, warmup = 10, 8
    assert wsd_decay_start(total, warmup) == warmup
    s = np.asarray(wsd(np.arange(total + 1), total, warmup), np.float64)
    expected = {0: 1 / 8, 7: 1.0, 8: 1.0, 9: (1 + WSD_FLOOR) / 2, 10: WSD_FLOOR}
    for step, value in expected.items():
        assert abs(s[step] - value) <= 4 * EPS, step


def test_schedule_factor_names_the_schedules_and_refuses_another():
    """``"cosine"`` is ``warmup_cosine`` and ``"wsd"`` ``warmup_stable_decay``, bit for bit
    (the same function under a name); another name is a ValueError."""
    assert SCHEDULES == ("cosine", "wsd")
    total, warmup = 40, 5
    steps = np.arange(total + 3)
    for name, direct in (("cosine", schedule), ("wsd", wsd)):
        factor = jax.jit(schedule_factor(name, total, warmup))
        np.testing.assert_array_equal(factor(steps), direct(steps, total, warmup))
    for bad in ("x", "Cosine", "linear"):
        with pytest.raises(ValueError, match="schedule must be one of"):
            schedule_factor(bad, total, warmup)


def test_coupled_decay_is_optax_adamw_on_the_schedule():
    """``lm_optimizer("adamw", ..., decay="coupled")`` against optax's own AdamW (its decay
    ``lr s(t) wd theta``, on the mask's matrices) after the same global-norm clipping, with
    the learning rate ``lr s(t)`` as its schedule: three steps (the first gradient clipped),
    on both schedules (T = 4, w = 1: ``s`` = 1, 3/4, 1/4 under the cosine, 1, 1, 1 under
    K2's, whose decay starts at 3). The two chains do the same float32 operations in the same order
    (Adam, decayed weights added, times ``-lr s(t)``); allowing XLA to fuse them otherwise,
    each of about 16 roundings may differ and Adam's ratio doubles a relative error: 32 eps
    times the size of the update (``lr (max |u| + wd max |theta|)``, ``|u| <= 1/(1 - b1)``
    here). Independent decay is far off: the check can fail."""
    lr, total, warmup, wd, clip = 0.1, 4, 1, 0.1, 1.0
    params = matrix_and_vector()
    rng = np.random.default_rng(12)
    steps = [{k: (size * rng.standard_normal(v.shape)).astype(np.float32)
              for k, v in params.items()} for size in (3.0, 0.05, 0.2)]  # fmt: skip
    size = lr * (1 / (1 - B1) + wd * max(float(np.max(np.abs(v))) for v in params.values()))
    tol = 32 * EPS * size
    last = {}
    for name in SCHEDULES:
        factor = schedule_factor(name, total, warmup)
        ours = lm_optimizer("adamw", lr, total, warmup, weight_decay=wd, clip=clip,
                              schedule=name, decay="coupled")  # fmt: skip
        optax_adamw = optax.adamw(lambda count, f=factor: lr * f(count), b1=B1, b2=B2,
                                  eps=ADAM_EPS, weight_decay=wd, mask=decay_mask)  # fmt: skip
        theirs = optax.chain(optax.clip_by_global_norm(clip), optax_adamw)
        a, b = optimizer_updates(ours, params, steps), optimizer_updates(theirs, params, steps)
        for t, (ua, ub) in enumerate(zip(a, b, strict=True)):
            for k in params:
                np.testing.assert_allclose(ua[k], ub[k], rtol=0, atol=tol, err_msg=(name, t, k))
        independent = lm_optimizer("adamw", lr, total, warmup, weight_decay=wd, clip=clip,
                                     schedule=name)  # fmt: skip
        c = optimizer_updates(independent, params, steps)
        assert np.max(np.abs(c[0]["w"] - b[0]["w"])) > 100 * tol
        np.testing.assert_array_equal(c[0]["b"], a[0]["b"])  # the vector: no decay either way
        last[name] = a[-1]["w"]
    # The schedule enters: at step 2 the cosine's rate is a quarter of K2's plateau.
    assert np.max(np.abs(last["cosine"] - last["wsd"])) > 100 * tol


@pytest.mark.parametrize("decay", DECAYS)
def test_the_decay_alone_follows_the_wsd_schedule(decay):
    """Zero gradients (never clipped: norm 0): Adam's direction is exactly 0, so the update
    at count ``t`` is the decay alone, ``-c s(t) theta`` on the matrix with ``c = lr wd``
    (coupled) or ``wd`` (independent), and exactly 0 on the vector; over every count
    through the warmup, the plateau (``s = 1``), the decay and past ``T`` (the floor).
    Parameters held fixed, so only ``s(t)`` changes. Bound: ``s`` within 4 eps (its test
    above), then three roundings (``-lr s``, ``wd theta``, the product): 8 eps relative."""
    lr, total, warmup, wd = 0.3, 28, 4, 0.1
    start = wsd_decay_start(total, warmup)
    assert start == 18  # plateau [4, 18), the decay's midpoint 23
    params = matrix_and_vector()
    zeros = jax.tree.map(np.zeros_like, params)
    optimizer = lm_optimizer("adamw", lr, total, warmup, weight_decay=wd, schedule="wsd",
                               decay=decay)  # fmt: skip

    @jax.jit
    def every_update(params):
        def body(state, _):
            updates, state = optimizer.update(zeros, state, params)
            return state, updates

        return jax.lax.scan(body, optimizer.init(params), None, length=total + 3)[1]

    updates = jax.tree.map(np.asarray, every_update(params))
    c = lr * wd if decay == "coupled" else wd
    theta = np.asarray(params["w"], np.float64)
    for t in range(total + 3):
        expected = -c * _wsd_reference(t, total, warmup) * theta
        np.testing.assert_allclose(updates["w"][t], expected, rtol=8 * EPS, atol=0, err_msg=t)
        assert np.all(updates["b"][t] == 0), t
    # The plateau's steps are the warmup's last, the floor's a tenth of them.
    np.testing.assert_allclose(updates["w"][warmup:start], np.broadcast_to(
        updates["w"][warmup - 1], (start - warmup, 3, 2)), rtol=8 * EPS)  # fmt: skip
    np.testing.assert_allclose(updates["w"][total], WSD_FLOOR * updates["w"][warmup], rtol=8 * EPS)


def test_an_unknown_decay_is_refused():
    assert DECAYS == ("independent", "coupled")
    with pytest.raises(ValueError, match="decay must be one of"):
        lm_optimizer("adamw", 1e-2, 100, 10, decay="x")

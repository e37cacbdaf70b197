"""attnlab/core/hooks.py: the built-in logits and weights functions of a mechanism, the
softmax with a learned sink (against float64, its gradient against its closed form) and
the output gate."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.core.hooks import gated_output, sink_softmax_weights, softmax_weights

EPS32 = float(np.finfo(np.float32).eps)


def test_softmax_weights_are_float32_for_half_inputs_and_zero_on_an_empty_row():
    z = np.asarray([[1.0, 2.0, 3.0], [60000.0, 0.0, -60000.0]], np.float16)
    mask = np.asarray([[True, True, True], [False, False, False]])
    p = softmax_weights(z, mask)
    assert p.dtype == jnp.float32
    p = np.asarray(p)
    assert np.all(p[1] == 0) and np.isfinite(p).all()
    e = np.exp(np.array([1.0, 2.0, 3.0]) - 3.0)
    # three float32 exponentials and a sum: a few eps per weight
    np.testing.assert_allclose(p[0], e / e.sum(), rtol=0, atol=8 * EPS32)

    def loss(z):
        return jnp.sum(softmax_weights(z, mask) ** 2)

    assert np.isfinite(np.asarray(jax.jit(jax.grad(loss))(z.astype(np.float32)))).all()


# ------------------------------------------------------------ the sink and the gate

#: XLA's float32 exp and sigmoid are accurate to a few ulp; we allow 4 eps each.
ULPS = 4
TINY = float(np.finfo(np.float32).tiny)


def sink_reference(z, mask, sink):
    """``p_j = e^{z_j} / (e^{s} + sum_l e^{z_l})`` over the allowed keys, in float64 from
    the same float32 logits, and a bound on a float32 evaluation's error per weight: the
    rounding of ``z - m`` (``EPS |z - m|`` in the exponent, ``m = max(s, max z)``), exp
    (ULPS), the normaliser's n + 1 terms and the division (2), plus the flush of weights
    below TINY. Also the sink's own share ``e^{s} / (e^{s} + sum_l e^{z_l})`` per row."""
    z = np.asarray(z, np.float64)
    allowed = np.ones(z.shape, bool) if mask is None else np.broadcast_to(mask, z.shape)
    s = np.broadcast_to(np.asarray(sink, np.float64), z.shape[:-1] + (1,))
    m = np.maximum(np.max(np.where(allowed, z, -np.inf), -1, keepdims=True), s)
    e = np.where(allowed, np.exp(np.where(allowed, z - m, 0.0)), 0.0)
    denominator = e.sum(-1, keepdims=True) + np.exp(s - m)
    p = e / denominator
    spread = np.where(allowed, np.abs(z - m), 0.0) + np.abs(s - m)
    bound = p * (spread + ULPS + z.shape[-1] + 3) * EPS32 + TINY
    return p, bound, (np.exp(s - m) / denominator)[..., 0]


def _sink_case(shape, seed, std=3.0):
    """float32 logits of ``shape`` (normal, std ``std``), a causal mask over the last two
    axes and a per-head sink ``[H, 1, 1]`` (H = ``shape[-3]``) of -1, 0.5, 2, ..."""
    z = std * np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    mask = np.tril(np.ones(shape[-2:], bool))
    sink = np.linspace(-1.0, 2.0, shape[-3]).astype(np.float32).reshape(-1, 1, 1)
    return z, mask, sink


@pytest.mark.parametrize("shape", [(3, 6, 6), (2, 4, 5, 5)], ids=["H-T-T", "B-H-T-T"])
def test_sink_softmax_weights_match_float64_with_a_per_head_sink_and_a_mask(shape):
    """Against ``sink_reference`` with a causal mask and a sink per head (``[H, 1, 1]``):
    within its bound everywhere, masked keys exactly 0, and every row sums to 1 minus the
    sink's share (within the sum of its weights' bounds and the float32 sum's n roundings),
    which is below 1 by far more than that."""
    z, mask, sink = _sink_case(shape, seed=0)
    p = np.asarray(sink_softmax_weights(z, mask, sink))
    assert p.dtype == np.float32 and p.shape == shape
    ref, bound, share = sink_reference(z, mask, sink)
    assert np.all(np.abs(p - ref) <= bound)
    assert np.all(p[..., ~mask] == 0)
    sums = p.astype(np.float64).sum(-1)
    sum_bound = bound.sum(-1) + shape[-1] * EPS32
    assert np.all(np.abs(sums - (1.0 - share)) <= sum_bound)
    assert np.all(sums < 1.0 - sum_bound)  # below 1 beyond any rounding


@pytest.mark.parametrize("shape", [(7,), (4, 9)])
def test_sink_softmax_weights_without_a_mask_and_with_a_scalar_sink(shape):
    """No mask, one sink for every row (a scalar): every key counts, within the bound."""
    z = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    p = np.asarray(sink_softmax_weights(z, None, 0.5))
    ref, bound, _ = sink_reference(z, None, 0.5)
    assert p.shape == shape and np.all(np.abs(p - ref) <= bound)


def test_the_sink_takes_a_fully_masked_row_and_large_logits_stay_finite():
    """A fully masked row is all zeros (the sink takes it all); logits of 1e4 (exp would
    overflow without the shift) give the softmax of the row, the sink's e^{-1e4} share
    underflowing to 0; a sink of 1e4 takes the rows of small logits to zeros (the row of
    1e4 shares with it); float16 logits give float32
    weights. Bounds as in ``sink_reference``."""
    z = np.asarray(
        [[1e4, 1e4 - 1.0, 1e4 - 3.0], [0.0, 1.0, 2.0], [1.0, 2.0, 3.0], [-1e4, 0.0, -1e4]],
        np.float32,
    )
    mask = np.asarray([[True] * 3, [True] * 3, [False] * 3, [True] * 3])
    for sink in (0.0, 1e4, -1e4):
        p = np.asarray(sink_softmax_weights(z, mask, sink))
        assert np.isfinite(p).all() and np.all(p[2] == 0)
        ref, bound, _ = sink_reference(z, mask, sink)
        assert np.all(np.abs(p - ref) <= bound), sink
    e = np.exp(np.array([0.0, -1.0, -3.0]))
    p = np.asarray(sink_softmax_weights(z, mask, 0.0))
    # float32 exps of arguments below 3 (ULPS), the 3-term sum and the division
    np.testing.assert_allclose(p[0], e / e.sum(), rtol=0, atol=(ULPS + 5) * EPS32)
    p = np.asarray(sink_softmax_weights(z, mask, 1e4))
    assert np.all(p[1:] == 0) and np.all(p[0] > 0.01)
    half = sink_softmax_weights(z[1:2].astype(np.float16), None, np.float16(0.5))
    assert half.dtype == jnp.float32
    ref, bound, _ = sink_reference(z[1:2].astype(np.float16), None, 0.5)
    assert np.all(np.abs(np.asarray(half) - ref) <= bound)


def _sink_gradient(z, mask, sink, w):
    """The gradient of ``L = sum w_j p_j`` in float64, by hand: the softmax over ``[z, s]``
    with the sink's column weighted 0, so ``dL/dz_j = p_j (w_j - wbar)`` on the allowed keys
    (0 on the others) and ``dL/ds = -p_s wbar`` summed over the rows a sink serves,
    ``wbar = sum_l w_l p_l``; and the absolute terms those are made of (``p_j (|w_j| +
    sum_l p_l |w_l|)``, ``p_s sum_l p_l |w_l|``), the condition of each entry."""
    p, _, share = sink_reference(z, mask, sink)
    wbar = np.sum(w * p, -1, keepdims=True)
    wabs = np.sum(np.abs(w) * p, -1, keepdims=True)
    dz, dz_abs = p * (w - wbar), p * (np.abs(w) + wabs)
    ds, ds_abs = -share * wbar[..., 0], share * wabs[..., 0]
    lead = tuple(range(z.ndim - 3))  # the rows of one head: every axis but the head's
    return dz, dz_abs, np.sum(ds, lead + (-1,)), np.sum(ds_abs, lead + (-1,))


def test_sink_softmax_gradient_matches_its_closed_form():
    """``jax.grad`` of ``sum w p`` in z and in a per-head sink against the closed form
    (``_sink_gradient``), itself checked against float64 central differences of
    ``sink_reference`` (step 1e-5: truncation h^2 |f'''| and cancellation 1e-16 / h, both
    below 1e-8 at these sizes). Bound on the float32 gradient: each entry is a few products
    and an n-term sum of weights whose relative error ``sink_reference`` bounds by
    ``(max |z - m| + |s - m| + ULPS + n + 3) EPS``; the backward pass repeats the forward's
    roundings once more and adds its own n-term sum, so twice that plus n + 8, times the
    entry's absolute terms. Masked keys have gradient exactly 0."""
    z, mask, sink = _sink_case((3, 5, 5), seed=2)
    w = np.random.default_rng(3).standard_normal(z.shape).astype(np.float32)

    @jax.jit
    def grad(z, sink):
        return jax.grad(lambda z, s: jnp.sum(w * sink_softmax_weights(z, mask, s)), (0, 1))(z, sink)

    gz, gs = (np.asarray(g, np.float64) for g in grad(z, sink))
    assert gs.shape == sink.shape
    dz, dz_abs, ds, ds_abs = _sink_gradient(z, mask, sink, w)

    def loss64(z, s):
        return np.sum(w * sink_reference(z, mask, s)[0])

    h, z64, s64 = 1e-5, z.astype(np.float64), sink.astype(np.float64)
    for index in [(0, 4, 0), (1, 4, 3), (2, 2, 1), (0, 0, 0)]:
        step = np.zeros_like(z64)
        step[index] = h
        central = (loss64(z64 + step, s64) - loss64(z64 - step, s64)) / (2 * h)
        assert abs(central - dz[index]) <= 1e-8
    for head in range(3):
        step = np.zeros_like(s64)
        step[head] = h
        central = (loss64(z64, s64 + step) - loss64(z64, s64 - step)) / (2 * h)
        assert abs(central - ds[head]) <= 1e-8

    m = np.maximum(np.max(np.where(mask, z, -np.inf), -1, keepdims=True), sink)
    spread = np.max(np.where(mask, np.abs(z - m), 0.0)) + np.max(np.abs(sink - m))
    relative = (2 * (spread + ULPS + z.shape[-1] + 3) + z.shape[-1] + 8) * EPS32
    assert np.all(np.abs(gz - dz) <= relative * dz_abs + TINY)
    assert np.all(gz[..., ~mask] == 0)
    # the sink's gradient sums T rows: T roundings more
    assert np.all(np.abs(gs[:, 0, 0] - ds) <= (relative + z.shape[-2] * EPS32) * ds_abs)


def test_sink_softmax_gradient_is_zero_and_finite_on_a_fully_masked_row():
    z = np.asarray([[1e4, -1e4, 3.0], [1.0, 2.0, 3.0]], np.float32)
    mask = np.asarray([[False] * 3, [True] * 3])
    gz, gs = jax.grad(lambda z, s: jnp.sum(sink_softmax_weights(z, mask, s) ** 2), (0, 1))(z, 0.0)
    assert np.isfinite(np.asarray(gz)).all() and np.isfinite(float(gs))
    assert np.all(np.asarray(gz)[0] == 0) and np.any(np.asarray(gz)[1] != 0)


@pytest.mark.parametrize("gate_width", ["element", "head"])
def test_gated_output_is_y_times_the_sigmoid_of_g(gate_width):
    """``gated_output(y, g) = y / (1 + e^{-g})`` against numpy in float64 for ``y [B, H, T,
    d]`` and ``g`` the same shape (elementwise) or ``[B, H, T, 1]`` (one gate per head,
    broadcast over d); gate logits up to +-40 saturate without a NaN. Bound: sigmoid
    (ULPS) and the product (1), relative to |y| sigmoid(g)."""
    rng = np.random.default_rng(4)
    y = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    g_shape = y.shape if gate_width == "element" else (2, 3, 5, 1)
    g = (8.0 * rng.standard_normal(g_shape)).astype(np.float32)
    g[0, 0, 0, 0], g[0, 0, 1, 0] = 40.0, -40.0
    out = np.asarray(gated_output(y, g))
    assert out.shape == y.shape and out.dtype == np.float32 and np.isfinite(out).all()
    expected = y.astype(np.float64) / (1.0 + np.exp(-g.astype(np.float64)))
    bound = (ULPS + 1) * EPS32 * np.abs(expected) + TINY
    assert np.all(np.abs(out - expected) <= bound)
    # the gate matters: sigmoid(g) is far from 1 somewhere, so y itself is outside the bound
    assert np.any(np.abs(y - expected) > 1000 * bound)
    half = gated_output(y.astype(np.float16), g)
    assert half.dtype == jnp.float16  # y's dtype; the gate computed in float32


def test_gated_output_at_zero_gate_logits_halves_exactly():
    """``sigmoid(0) = 1/2`` exactly, and halving is exact in binary floating point."""
    y = np.random.default_rng(5).standard_normal((3, 4, 2)).astype(np.float32)
    np.testing.assert_array_equal(gated_output(y, np.zeros((3, 4, 1), np.float32)), y / 2)

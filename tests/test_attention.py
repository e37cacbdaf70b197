"""Tests of attnlab.attention: references, batching, jit/vmap, masking, precision, properties."""

import math

import flax.linen as nn
import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab import (
    attention_logits,
    attention_weights,
    dot_product_attention,
    masked_softmax,
    softcap,
)

B, N, TQ, TK, D = 2, 3, 5, 7, 16
SCALES = [None, 1.0, 0.3]
FAST = settings(max_examples=25, deadline=None)


def rel_err(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return np.max(np.abs(a - b)) / np.max(np.abs(b))


def qkv(seed, lead=(B, N), tq=TQ, tk=TK, d=D, dv=D, dtype=jnp.float32):
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(kq, (*lead, tq, d), dtype)
    k = jax.random.normal(kk, (*lead, tk, d), dtype)
    v = jax.random.normal(kv, (*lead, tk, dv), dtype)
    return q, k, v


def random_mask(seed, shape):
    """Random boolean mask with at least one True per row (the diagonal-ish column 0..Tk)."""
    m = jax.random.bernoulli(jax.random.key(seed), 0.6, shape)
    forced = jax.nn.one_hot(jnp.arange(shape[-2]) % shape[-1], shape[-1], dtype=bool)
    return m | forced


def to_bthd(x):
    """[B, N, T, d] (ours) -> [B, T, N, d] (jax.nn / flax)."""
    return jnp.swapaxes(x, -3, -2)


# --------------------------------------------------------------------------- references


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("scale", SCALES)
def test_matches_jax_nn_dot_product_attention(scale, masked):
    q, k, v = qkv(0)
    mask = random_mask(1, (B, N, TQ, TK)) if masked else None
    ours = dot_product_attention(q, k, v, mask, scale=scale)
    ref = jax.nn.dot_product_attention(
        to_bthd(q), to_bthd(k), to_bthd(v), mask=mask, scale=scale, implementation="xla"
    )
    assert ours.shape == (B, N, TQ, D)
    assert rel_err(ours, to_bthd(ref)) <= 1e-5


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("scale", SCALES)
def test_matches_flax_dot_product_attention(scale, masked):
    q, k, v = qkv(2)
    mask = random_mask(3, (B, N, TQ, TK)) if masked else None
    # flax always divides the query by sqrt(depth); pre-multiply to get scale * q.k overall.
    factor = 1.0 if scale is None else scale * math.sqrt(D)
    ours = dot_product_attention(q, k, v, mask, scale=scale)
    ref = nn.dot_product_attention(
        to_bthd(q) * factor, to_bthd(k), to_bthd(v), mask=mask, deterministic=True
    )
    assert rel_err(ours, to_bthd(ref)) <= 1e-5


def test_scale_changes_the_result():
    """Guards the reference tests: the three scales give clearly different outputs."""
    q, k, v = qkv(4)
    outs = [dot_product_attention(q, k, v, scale=s) for s in SCALES]
    for i in range(len(outs)):
        for j in range(i + 1, len(outs)):
            assert rel_err(outs[i], outs[j]) > 1e-2


def test_broadcast_mask_shape_tq_tk():
    q, k, v = qkv(5)
    mask2d = random_mask(6, (TQ, TK))
    full = jnp.broadcast_to(mask2d, (B, N, TQ, TK))
    np.testing.assert_array_equal(
        dot_product_attention(q, k, v, mask2d), dot_product_attention(q, k, v, full)
    )


# --------------------------------------------------------------------------- batching


@pytest.mark.parametrize("lead", [(), (3,), (2, 3)])
@pytest.mark.parametrize("masked", [False, True])
def test_leading_batch_dims(lead, masked):
    q, k, v = qkv(7, lead=lead, dv=4)
    mask = random_mask(8, (*lead, TQ, TK)) if masked else None
    out = dot_product_attention(q, k, v, mask, scale=0.3)
    w = attention_weights(q, k, mask, scale=0.3)
    assert out.shape == (*lead, TQ, 4)
    assert w.shape == (*lead, TQ, TK)
    np.testing.assert_allclose(out, w @ v, rtol=1e-6, atol=1e-6)

    # Each batch element is computed independently, exactly as unbatched.
    n = math.prod(lead)
    qf, kf, vf = (x.reshape(n, *x.shape[len(lead) :]) for x in (q, k, v))
    mf = None if mask is None else mask.reshape(n, TQ, TK)
    for i in range(n):
        single = dot_product_attention(qf[i], kf[i], vf[i], None if mf is None else mf[i], scale=0.3)
        np.testing.assert_allclose(out.reshape(n, TQ, 4)[i], single, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- jit / vmap


@pytest.mark.parametrize("scale", SCALES)
def test_jit_matches_eager(scale):
    q, k, v = qkv(9)
    mask = random_mask(10, (B, N, TQ, TK))
    eager = dot_product_attention(q, k, v, mask, scale=scale)
    # scale passed as a keyword argument to jit is traced: the learned-temperature case.
    jitted = jax.jit(dot_product_attention)(q, k, v, mask, scale=scale)
    np.testing.assert_allclose(jitted, eager, rtol=1e-6, atol=1e-6)
    jit_w = jax.jit(attention_weights)(q, k, mask, scale=scale)
    np.testing.assert_allclose(jit_w, attention_weights(q, k, mask, scale=scale), atol=1e-6)


def test_vmap_matches_eager():
    q, k, v = qkv(11)
    mask = random_mask(12, (B, N, TQ, TK))
    eager = dot_product_attention(q, k, v, mask, scale=0.3)
    f = lambda q, k, v, m: dot_product_attention(q, k, v, m, scale=0.3)  # noqa: E731
    vmapped = jax.vmap(jax.vmap(f))(q, k, v, mask)
    np.testing.assert_allclose(vmapped, eager, rtol=1e-6, atol=1e-6)
    # vmap over a non-leading axis (heads) with an unbatched (shared) mask.
    m0 = mask[0, 0]
    g = jax.vmap(lambda q, k, v: dot_product_attention(q, k, v, m0), in_axes=1, out_axes=1)
    np.testing.assert_allclose(g(q, k, v), dot_product_attention(q, k, v, m0), atol=1e-6)


def test_jit_vmap_grad_compose():
    q, k, v = qkv(13)
    loss = lambda q, k, v: jnp.sum(dot_product_attention(q, k, v, scale=1.0) ** 2)  # noqa: E731
    g_eager = jax.grad(loss, argnums=(0, 1, 2))(q, k, v)
    g_jit = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
    for a, b in zip(g_jit, g_eager, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- masking


def _mask_with_dead_rows():
    """[B, N, Tq, Tk] mask: rows 0 and 3 fully masked, the others partially (causal-ish)."""
    causal = jnp.tril(jnp.ones((TQ, TK), bool), k=1)
    causal = causal.at[0].set(False).at[3].set(False)
    return jnp.broadcast_to(causal, (B, N, TQ, TK)), jnp.array([0, 3])


@pytest.mark.parametrize("scale", [None, 1.0])
def test_fully_masked_rows(scale):
    q, k, v = qkv(14)
    mask, dead = _mask_with_dead_rows()
    w = attention_weights(q, k, mask, scale=scale)
    out = dot_product_attention(q, k, v, mask, scale=scale)
    assert jnp.all(w[..., dead, :] == 0.0)
    assert jnp.all(out[..., dead, :] == 0.0)
    assert jnp.all(jnp.isfinite(out))

    # Live rows: weights sum to one, zero on masked keys, and equal jax.nn's result.
    live = jnp.array([i for i in range(TQ) if i not in (0, 3)])
    np.testing.assert_allclose(jnp.sum(w[..., live, :], -1), 1.0, atol=1e-6)
    assert jnp.all(jnp.where(mask, 0.0, w) == 0.0)
    ref = jax.nn.dot_product_attention(
        to_bthd(q), to_bthd(k), to_bthd(v), mask=mask, scale=scale, implementation="xla"
    )
    np.testing.assert_allclose(out[..., live, :], to_bthd(ref)[..., live, :], atol=1e-5)


@pytest.mark.parametrize("scale", [None, 1.0])
def test_fully_masked_rows_gradients_finite(scale):
    q, k, v = qkv(15)
    mask, dead = _mask_with_dead_rows()

    def loss(q, k, v):
        return jnp.sum(jnp.sin(dot_product_attention(q, k, v, mask, scale=scale)))

    gq, gk, gv = jax.grad(loss, argnums=(0, 1, 2))(q, k, v)
    for g in (gq, gk, gv):
        assert jnp.all(jnp.isfinite(g))
    # A dead row's output does not depend on its query.
    assert jnp.all(gq[..., dead, :] == 0.0)
    # Gradients on the live rows are unaffected by the presence of the dead rows.
    live = jnp.array([1, 2, 4])

    def loss_live(q, k, v):
        o = dot_product_attention(q[..., live, :], k, v, mask[..., live, :], scale=scale)
        return jnp.sum(jnp.sin(o))

    gq2, gk2, gv2 = jax.grad(loss_live, argnums=(0, 1, 2))(q, k, v)
    np.testing.assert_allclose(gq[..., live, :], gq2[..., live, :], atol=1e-5)
    np.testing.assert_allclose(gk, gk2, atol=1e-5)
    np.testing.assert_allclose(gv, gv2, atol=1e-5)


def test_naive_minus_inf_fill_would_nan():
    """The failure mode the fully-masked handling guards against is real."""
    z = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    mask = jnp.array([[True, True], [False, False]])
    naive = lambda z: jax.nn.softmax(jnp.where(mask, z, -jnp.inf), axis=-1)  # noqa: E731
    assert jnp.any(jnp.isnan(naive(z)))
    ours = masked_softmax(z, mask)
    assert jnp.all(jnp.isfinite(ours)) and jnp.all(ours[1] == 0.0)
    g = jax.grad(lambda z: jnp.sum(masked_softmax(z, mask) * jnp.arange(2.0)))(z)
    assert jnp.all(jnp.isfinite(g))


def test_masked_keys_do_not_leak():
    """Changing keys/values at masked positions (even to huge values) changes nothing."""
    q, k, v = qkv(16)
    mask = random_mask(17, (B, N, TQ, TK)).at[..., -1].set(False)
    out = dot_product_attention(q, k, v, mask, scale=1.0)
    k2 = k.at[..., -1, :].set(1e4)
    v2 = v.at[..., -1, :].set(-1e4)
    np.testing.assert_array_equal(dot_product_attention(q, k2, v2, mask, scale=1.0), out)


def test_unscaled_large_logits():
    """scale=1.0 with logits in the thousands: finite, one-hot-like, finite gradients."""
    q, k, v = qkv(18, d=64)
    q, k = 6.0 * q, 6.0 * k  # q.k has std 36 * 8 = 288; max logits in the thousands.
    mask, dead = _mask_with_dead_rows()
    z = attention_logits(q, k, scale=1.0)
    assert float(jnp.max(jnp.abs(z))) > 500.0
    out = dot_product_attention(q, k, v, mask, scale=1.0)
    assert jnp.all(jnp.isfinite(out))
    assert jnp.all(out[..., dead, :] == 0.0)
    # The weights are (numerically) one-hot on the masked argmax of each live row.
    w = attention_weights(q, k, mask, scale=1.0)
    zm = jnp.where(mask, z, -jnp.inf)
    live = jnp.array([1, 2, 4])
    onehot = jax.nn.one_hot(jnp.argmax(zm, -1), TK)[..., live, :]
    np.testing.assert_allclose(w[..., live, :], onehot, atol=1e-6)
    ref = jax.nn.dot_product_attention(
        to_bthd(q), to_bthd(k), to_bthd(v), mask=mask, scale=1.0, implementation="xla"
    )
    np.testing.assert_allclose(out[..., live, :], to_bthd(ref)[..., live, :], atol=1e-5)

    def loss(q, k, v):
        return jnp.sum(dot_product_attention(q, k, v, mask, scale=1.0) ** 2)

    for g in jax.grad(loss, argnums=(0, 1, 2))(q, k, v):
        assert jnp.all(jnp.isfinite(g))


# --------------------------------------------------------------------------- precision


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
@pytest.mark.parametrize("scale", [None, 1.0])
def test_half_precision_dtypes(dtype, scale):
    q, k, v = qkv(19, dtype=dtype)
    mask = random_mask(20, (B, N, TQ, TK))
    out = dot_product_attention(q, k, v, mask, scale=scale)
    w = attention_weights(q, k, mask, scale=scale)
    assert out.dtype == dtype
    assert w.dtype == jnp.float32
    assert attention_logits(q, k, scale=scale).dtype == jnp.float32
    q32, k32, v32 = (x.astype(jnp.float32) for x in (q, k, v))
    ref = dot_product_attention(q32, k32, v32, mask, scale=scale)
    # Only the final cast rounds: error within one rounding of the output dtype.
    eps = float(jnp.finfo(dtype).eps)
    np.testing.assert_allclose(out.astype(jnp.float32), ref, rtol=eps, atol=eps)


def _fp16_large_logit_inputs():
    """float16 q, k with unscaled logits q.k in about [25, 35]; v in [-1, 1]."""
    kq, kk, kv = jax.random.split(jax.random.key(21), 3)
    d = 16
    q = 1.5 + 0.1 * jax.random.normal(kq, (B, N, TQ, d))
    k = 1.25 + 0.15 * jax.random.normal(kk, (B, N, TK, d))
    v = jax.random.uniform(kv, (B, N, TK, 8), minval=-1.0, maxval=1.0)
    return q.astype(jnp.float16), k.astype(jnp.float16), v.astype(jnp.float16)


def test_fp16_unscaled_large_logits_finite_and_accurate():
    q, k, v = _fp16_large_logit_inputs()
    z = attention_logits(q, k, scale=1.0)
    assert 25.0 < float(jnp.mean(z)) < 35.0
    assert float(jnp.max(z)) > 28.0
    # The test is meaningful: a naive float16 softmax overflows on these logits.
    assert jnp.any(jnp.isinf(jnp.exp(z.astype(jnp.float16))))
    assert jnp.isinf(jnp.exp(jnp.float16(30.0)))

    out = dot_product_attention(q, k, v, scale=1.0)
    assert out.dtype == jnp.float16
    assert jnp.all(jnp.isfinite(out))
    q32, k32, v32 = (x.astype(jnp.float32) for x in (q, k, v))
    ref = dot_product_attention(q32, k32, v32, scale=1.0)
    vmax = float(jnp.max(jnp.abs(v32)))
    np.testing.assert_allclose(out.astype(jnp.float32), ref, rtol=0, atol=2e-3 * vmax)


# --------------------------------------------------------------------------- properties


def _shapes(draw):
    lead = draw(st.sampled_from([(), (2,)]))
    tq = draw(st.integers(1, 4))
    tk = draw(st.integers(1, 6))
    d = draw(st.integers(1, 8))
    return lead, tq, tk, d


def _elems():
    return st.floats(-5.0, 5.0, width=32, allow_nan=False, allow_infinity=False)


@st.composite
def qk_mask(draw):
    lead, tq, tk, d = _shapes(draw)
    q = draw(hnp.arrays(np.float32, (*lead, tq, d), elements=_elems()))
    k = draw(hnp.arrays(np.float32, (*lead, tk, d), elements=_elems()))
    mask = draw(hnp.arrays(np.bool_, (*lead, tq, tk)))
    return q, k, mask


@FAST
@given(qk_mask(), st.sampled_from(SCALES))
def test_weights_rows_sum_to_one(args, scale):
    q, k, mask = args
    w = np.asarray(attention_weights(q, k, mask, scale=scale))
    assert np.all(np.isfinite(w)) and np.all(w >= 0.0)
    live = mask.any(-1)
    np.testing.assert_allclose(w.sum(-1)[live], 1.0, atol=1e-5)
    assert np.all(w.sum(-1)[~live] == 0.0)
    assert np.all(w[~mask] == 0.0)


@FAST
@given(
    hnp.arrays(np.float32, st.tuples(st.integers(1, 4), st.integers(1, 8)), elements=_elems()),
    st.data(),
)
def test_softmax_shift_invariance(z, data):
    n_rows, n = z.shape
    c = data.draw(hnp.arrays(np.float32, (n_rows, 1), elements=st.floats(-50, 50, width=32)))
    mask = data.draw(hnp.arrays(np.bool_, z.shape))
    for m in (None, mask):
        np.testing.assert_allclose(masked_softmax(z + c, m), masked_softmax(z, m), atol=1e-5)


@FAST
@given(qk_mask(), st.floats(0.05, 3.0))
def test_scale_equals_prescaled_query(args, c):
    q, k, mask = args
    a = attention_weights(q, k, mask, scale=c)
    b = attention_weights(np.float32(c) * q, k, mask, scale=1.0)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    za = attention_logits(q, k, scale=c)
    zb = attention_logits(np.float32(c) * q, k, scale=1.0)
    np.testing.assert_allclose(za, zb, rtol=1e-5, atol=1e-5)


@FAST
@given(st.integers(0, 2**31 - 1), st.integers(1, 5), st.integers(1, 7))
def test_dk_one_scaled_equals_unscaled_exactly(seed, tq, tk):
    q, k, v = qkv(seed, lead=(2,), tq=tq, tk=tk, d=1, dv=3)
    q, k = 4.0 * q, 4.0 * k
    mask = jax.random.bernoulli(jax.random.key(seed ^ 1), 0.7, (2, tq, tk))
    np.testing.assert_array_equal(
        attention_logits(q, k, scale=None), attention_logits(q, k, scale=1.0)
    )
    np.testing.assert_array_equal(
        dot_product_attention(q, k, v, mask, scale=None),
        dot_product_attention(q, k, v, mask, scale=1.0),
    )


def test_default_scale_is_inverse_sqrt_dk():
    q, k, _ = qkv(22, d=16)
    np.testing.assert_allclose(
        attention_logits(q, k), attention_logits(q, k, scale=0.25), rtol=1e-7, atol=0
    )
    z1 = attention_logits(q, k, scale=1.0)
    np.testing.assert_allclose(attention_logits(q, k), z1 / 4.0, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- soft-cap


def test_logit_cap_bounds_and_formula():
    q, k, _ = qkv(23, d=64)
    q, k = 3.0 * q, 3.0 * k  # unscaled logits up to several hundred
    z = attention_logits(q, k, scale=1.0)
    assert float(jnp.max(jnp.abs(z))) > 100.0
    zc = attention_logits(q, k, scale=1.0, logit_cap=30.0)
    assert jnp.all(jnp.abs(zc) <= 30.0)
    np.testing.assert_allclose(zc, 30.0 * jnp.tanh(z / 30.0), rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(zc, softcap(z, 30.0), rtol=1e-6, atol=1e-5)
    # Strictly inside the cap wherever tanh has not rounded to +-1 in float32.
    moderate = jnp.abs(z) < 150.0
    assert jnp.any(moderate)
    assert jnp.all(jnp.where(moderate, jnp.abs(zc) < 30.0, True))
    # The cap is applied before the softmax, i.e. the weights follow the capped logits.
    np.testing.assert_allclose(
        attention_weights(q, k, scale=1.0, logit_cap=30.0), jax.nn.softmax(zc, -1), atol=1e-6
    )


def test_softcap_near_identity_for_small_logits():
    z = jnp.linspace(-1.0, 1.0, 101)
    # cap * tanh(z / cap) = z - z^3 / (3 cap^2) + ...; |z| <= 1, cap 30 -> error <= 4e-4.
    np.testing.assert_allclose(softcap(z, 30.0), z, atol=4e-4)
    np.testing.assert_allclose(softcap(z, 30.0), z - z**3 / (3 * 30.0**2), atol=1e-6)
    assert not np.allclose(softcap(z, 1.0), z, atol=1e-2)  # a small cap is not the identity

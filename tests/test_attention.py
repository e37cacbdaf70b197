"""attnlab.core.attention: references, batching, jit/vmap, masking, precision, properties."""

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
FAST = settings(max_examples=25, deadline=None, derandomize=True, database=None)


def rel_err(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return np.max(np.abs(a - b)) / np.max(np.abs(b))


# Test data comes from explicitly seeded numpy Generators (deterministic, no global state):
# eager jax.random would spend seconds compiling threefry for every new shape.
def qkv(seed, lead=(B, N), tq=TQ, tk=TK, d=D, dv=D, dtype=jnp.float32):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*lead, tq, d), np.float32)
    k = rng.standard_normal((*lead, tk, d), np.float32)
    v = rng.standard_normal((*lead, tk, dv), np.float32)
    return tuple(jnp.asarray(x, dtype) for x in (q, k, v))


def random_mask(seed, shape, p_true=0.6):
    """Random boolean mask with at least one True per row."""
    m = np.random.default_rng(seed).random(shape) < p_true
    m[..., np.arange(shape[-2]), np.arange(shape[-2]) % shape[-1]] = True
    return jnp.asarray(m)


def to_bthd(x):
    """[B, N, T, d] (ours) -> [B, T, N, d] (jax.nn / flax); also the inverse."""
    return np.swapaxes(np.asarray(x), -3, -2)


def jax_nn_ref(q, k, v, mask, scale):
    """jax.nn.dot_product_attention on our [B, N, T, d] layout; returns [B, T, N, d]."""
    return jax.nn.dot_product_attention(
        to_bthd(q), to_bthd(k), to_bthd(v), mask=mask, scale=scale, implementation="xla"
    )


# --------------------------------------------------------------------------- references


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("scale", SCALES)
def test_matches_jax_nn_dot_product_attention(scale, masked):
    q, k, v = qkv(0)
    mask = random_mask(1, (B, N, TQ, TK)) if masked else None
    ours = dot_product_attention(q, k, v, mask, scale=scale)
    ref = jax_nn_ref(q, k, v, mask, scale)
    assert ours.shape == (B, N, TQ, D)
    assert rel_err(ours, to_bthd(ref)) <= 1e-5
    # Anything else would be far off: the masked and unmasked outputs differ.
    if masked:
        assert rel_err(dot_product_attention(q, k, v, scale=scale), ours) > 1e-2


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
    full = np.broadcast_to(np.asarray(mask2d), (B, N, TQ, TK))
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
    np.testing.assert_allclose(out, np.asarray(w) @ np.asarray(v), rtol=1e-5, atol=1e-6)

    # Each batch element is computed independently, exactly as unbatched.
    n = math.prod(lead)
    qf, kf, vf = (np.asarray(x).reshape(n, *x.shape[len(lead) :]) for x in (q, k, v))
    mf = None if mask is None else np.asarray(mask).reshape(n, TQ, TK)
    outf = np.asarray(out).reshape(n, TQ, 4)
    for i in range(n):
        single = dot_product_attention(
            qf[i], kf[i], vf[i], None if mf is None else mf[i], scale=0.3
        )
        np.testing.assert_allclose(outf[i], single, rtol=1e-6, atol=1e-6)


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
    m0 = np.asarray(mask)[0, 0]
    g = jax.vmap(lambda q, k, v: dot_product_attention(q, k, v, m0), in_axes=1, out_axes=1)
    np.testing.assert_allclose(jax.jit(g)(q, k, v), dot_product_attention(q, k, v, m0), atol=1e-6)


def test_jit_vmap_grad_compose():
    """grad of the batched loss equals vmap of per-example grads (a sum over examples)."""
    q, k, v = qkv(13)
    loss = lambda q, k, v: jnp.sum(dot_product_attention(q, k, v, scale=1.0) ** 2)  # noqa: E731
    grad = jax.grad(loss, argnums=(0, 1, 2))
    g_batched = jax.jit(grad)(q, k, v)
    g_vmapped = jax.jit(jax.vmap(grad))(q, k, v)
    for a, b in zip(g_batched, g_vmapped, strict=True):
        assert np.all(np.isfinite(a)) and np.max(np.abs(a)) > 0
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- masking


def _mask_with_dead_rows():
    """[B, N, Tq, Tk] mask: rows 0 and 3 fully masked, the others partially (causal-ish)."""
    causal = np.tril(np.ones((TQ, TK), bool), k=1)
    causal[[0, 3]] = False
    return jnp.asarray(np.broadcast_to(causal, (B, N, TQ, TK))), np.array([0, 3])


LIVE = np.array([1, 2, 4])


@pytest.mark.parametrize("scale", [None, 1.0])
def test_fully_masked_rows(scale):
    q, k, v = qkv(14)
    mask, dead = _mask_with_dead_rows()
    w = np.asarray(attention_weights(q, k, mask, scale=scale))
    out = np.asarray(dot_product_attention(q, k, v, mask, scale=scale))
    assert np.all(w[..., dead, :] == 0.0)
    assert np.all(out[..., dead, :] == 0.0)
    assert np.all(np.isfinite(out))

    # Live rows: weights sum to one, zero on masked keys, and equal jax.nn's result.
    np.testing.assert_allclose(np.sum(w[..., LIVE, :], -1), 1.0, atol=1e-6)
    assert np.all(w[~np.asarray(mask)] == 0.0)
    ref = np.asarray(to_bthd(jax_nn_ref(q, k, v, mask, scale)))
    np.testing.assert_allclose(out[..., LIVE, :], ref[..., LIVE, :], atol=1e-5)


@pytest.mark.parametrize("scale", [None, 1.0])
def test_fully_masked_rows_gradients_finite(scale):
    q, k, v = qkv(15)
    mask, dead = _mask_with_dead_rows()

    def loss(q, k, v):
        return jnp.sum(jnp.sin(dot_product_attention(q, k, v, mask, scale=scale)))

    gq, gk, gv = (np.asarray(g) for g in jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v))
    for g in (gq, gk, gv):
        assert np.all(np.isfinite(g)) and np.max(np.abs(g)) > 0
    # A dead row's output does not depend on its query.
    assert np.all(gq[..., dead, :] == 0.0)
    # Gradients on the live rows are unaffected by the presence of the dead rows.

    def loss_live(q, k, v):
        o = dot_product_attention(q[..., LIVE, :], k, v, mask[..., LIVE, :], scale=scale)
        return jnp.sum(jnp.sin(o))

    gq2, gk2, gv2 = jax.jit(jax.grad(loss_live, argnums=(0, 1, 2)))(q, k, v)
    np.testing.assert_allclose(gq[..., LIVE, :], np.asarray(gq2)[..., LIVE, :], atol=1e-5)
    np.testing.assert_allclose(gk, gk2, atol=1e-5)
    np.testing.assert_allclose(gv, gv2, atol=1e-5)


def test_naive_minus_inf_fill_would_nan():
    """The failure mode the fully-masked handling guards against is real."""
    z = np.array([[1.0, 2.0, 0.5], [3.0, 4.0, 5.0]], np.float32)
    mask = np.array([[True, True, False], [False, False, False]])
    with np.errstate(invalid="ignore"):
        zm = np.where(mask, z, -np.inf)
        naive = np.exp(zm - zm.max(-1, keepdims=True))
        naive /= naive.sum(-1, keepdims=True)
    assert np.all(np.isnan(naive[1])) and not np.any(np.isnan(naive[0]))
    ours = np.asarray(masked_softmax(z, mask))
    assert np.all(np.isfinite(ours)) and np.all(ours[1] == 0.0) and ours[0, 2] == 0.0
    np.testing.assert_allclose(ours[0, :2], jax.nn.softmax(z[0, :2]), rtol=1e-6)
    g = jax.jit(jax.grad(lambda z: jnp.sum(masked_softmax(z, mask) * jnp.arange(3.0))))(z)
    assert np.all(np.isfinite(g))


def test_masked_keys_do_not_leak():
    """Changing keys/values at masked positions (even to huge values) changes nothing."""
    q, k, v = qkv(16)
    mask = np.array(random_mask(17, (B, N, TQ, TK)))
    mask[..., -1] = False
    out = dot_product_attention(q, k, v, mask, scale=1.0)
    k2, v2 = np.array(k), np.array(v)
    k2[..., -1, :] = 1e4
    v2[..., -1, :] = -1e4
    np.testing.assert_array_equal(dot_product_attention(q, k2, v2, mask, scale=1.0), out)


def test_unscaled_large_logits():
    """scale=1.0 with logits in the thousands: finite, one-hot-like, finite gradients."""
    q, k, v = qkv(18)
    q, k = 12.0 * q, 12.0 * k  # q.k has std 144 * 4 = 576; max logits in the thousands.
    mask, dead = _mask_with_dead_rows()
    z = np.asarray(attention_logits(q, k, scale=1.0))
    assert np.max(np.abs(z)) > 500.0
    out = np.asarray(dot_product_attention(q, k, v, mask, scale=1.0))
    assert np.all(np.isfinite(out))
    assert np.all(out[..., dead, :] == 0.0)
    # The weights are (numerically) one-hot on the masked argmax of each live row.
    w = np.asarray(attention_weights(q, k, mask, scale=1.0))
    zm = np.where(np.asarray(mask), z, -np.inf)
    onehot = np.argmax(zm, -1)[..., None] == np.arange(TK)
    np.testing.assert_allclose(w[..., LIVE, :], onehot[..., LIVE, :], atol=1e-6)
    ref = np.asarray(to_bthd(jax_nn_ref(q, k, v, mask, 1.0)))
    np.testing.assert_allclose(out[..., LIVE, :], ref[..., LIVE, :], atol=1e-5)

    def loss(q, k, v):
        return jnp.sum(dot_product_attention(q, k, v, mask, scale=1.0) ** 2)

    for g in jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v):
        assert np.all(np.isfinite(g))


# --------------------------------------------------------------------------- precision


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
@pytest.mark.parametrize("scale", [None, 1.0])
def test_half_precision_dtypes(dtype, scale):
    q, k, v = (x.astype(dtype) for x in qkv(19))
    mask = random_mask(20, (B, N, TQ, TK))
    out = dot_product_attention(q, k, v, mask, scale=scale)
    w = attention_weights(q, k, mask, scale=scale)
    assert out.dtype == dtype
    assert w.dtype == jnp.float32
    assert attention_logits(q, k, scale=scale).dtype == jnp.float32
    q32, k32, v32 = (np.asarray(x, np.float32) for x in (q, k, v))
    ref = dot_product_attention(q32, k32, v32, mask, scale=scale)
    # Only the final cast rounds: error within one rounding of the output dtype.
    eps = float(jnp.finfo(dtype).eps)
    np.testing.assert_allclose(np.asarray(out, np.float32), ref, rtol=eps, atol=eps)


def _fp16_large_logit_inputs():
    """float16 q, k with unscaled logits q.k in about [25, 35]; v in [-1, 1]."""
    rng = np.random.default_rng(21)
    q = 1.5 + 0.1 * rng.standard_normal((B, N, TQ, D))
    k = 1.25 + 0.15 * rng.standard_normal((B, N, TK, D))
    v = rng.uniform(-1.0, 1.0, (B, N, TK, D))
    return tuple(jnp.asarray(x, jnp.float16) for x in (q, k, v))


def test_fp16_unscaled_large_logits_finite_and_accurate():
    q, k, v = _fp16_large_logit_inputs()
    z = np.asarray(attention_logits(q, k, scale=1.0))
    assert 25.0 < np.mean(z) < 35.0
    assert np.max(z) > 28.0
    # The test is meaningful: a naive float16 softmax overflows on these logits.
    assert np.any(np.isinf(jnp.exp(jnp.asarray(z, jnp.float16))))
    assert np.isinf(jnp.exp(jnp.float16(30.0)))

    out = dot_product_attention(q, k, v, scale=1.0)
    assert out.dtype == jnp.float16
    out = np.asarray(out, np.float32)
    assert np.all(np.isfinite(out))
    q32, k32, v32 = (np.asarray(x, np.float32) for x in (q, k, v))
    ref = dot_product_attention(q32, k32, v32, scale=1.0)
    vmax = np.max(np.abs(v32))
    np.testing.assert_allclose(out, ref, rtol=0, atol=2e-3 * vmax)


# --------------------------------------------------------------------------- properties


# Fixed shapes keep XLA compilation to once per test; hypothesis draws the values and masks.
PROP_LEAD, PROP_TQ, PROP_TK, PROP_D = (2,), 4, 6, 5
jit_weights = jax.jit(attention_weights)
jit_logits = jax.jit(attention_logits)
jit_softmax = jax.jit(masked_softmax)


def _elems():
    return st.floats(-5.0, 5.0, width=32, allow_nan=False, allow_infinity=False)


@st.composite
def qk_mask(draw):
    q = draw(hnp.arrays(np.float32, (*PROP_LEAD, PROP_TQ, PROP_D), elements=_elems()))
    k = draw(hnp.arrays(np.float32, (*PROP_LEAD, PROP_TK, PROP_D), elements=_elems()))
    mask = draw(hnp.arrays(np.bool_, (*PROP_LEAD, PROP_TQ, PROP_TK)))
    return q, k, mask


@FAST
@given(qk_mask(), st.sampled_from(SCALES))
def test_weights_rows_sum_to_one(args, scale):
    q, k, mask = args
    w = np.asarray(jit_weights(q, k, mask, scale=scale))
    assert np.all(np.isfinite(w)) and np.all(w >= 0.0)
    live = mask.any(-1)
    np.testing.assert_allclose(w.sum(-1)[live], 1.0, atol=1e-5)
    assert np.all(w.sum(-1)[~live] == 0.0)
    assert np.all(w[~mask] == 0.0)


@FAST
@given(
    hnp.arrays(np.float32, (PROP_TQ, PROP_TK), elements=_elems()),
    hnp.arrays(np.float32, (PROP_TQ, 1), elements=st.floats(-50.0, 50.0, width=32)),
    hnp.arrays(np.bool_, (PROP_TQ, PROP_TK)),
)
def test_softmax_shift_invariance(z, c, mask):
    for m in (None, mask):
        np.testing.assert_allclose(jit_softmax(z + c, m), jit_softmax(z, m), atol=1e-5)


@FAST
@given(qk_mask(), st.floats(0.05, 3.0))
def test_scale_equals_prescaled_query(args, c):
    q, k, mask = args
    a = jit_weights(q, k, mask, scale=c)
    b = jit_weights(np.float32(c) * q, k, mask, scale=1.0)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    za = jit_logits(q, k, scale=c)
    zb = jit_logits(np.float32(c) * q, k, scale=1.0)
    np.testing.assert_allclose(za, zb, rtol=1e-5, atol=1e-5)


@FAST
@given(st.integers(0, 2**31 - 1))
def test_dk_one_scaled_equals_unscaled_exactly(seed):
    q, k, v = qkv(seed, lead=PROP_LEAD, tq=PROP_TQ, tk=PROP_TK, d=1, dv=3)
    q, k = 4.0 * q, 4.0 * k
    mask = np.random.default_rng(seed ^ 1).random((*PROP_LEAD, PROP_TQ, PROP_TK)) < 0.7
    np.testing.assert_array_equal(
        attention_logits(q, k, scale=None), attention_logits(q, k, scale=1.0)
    )
    np.testing.assert_array_equal(
        dot_product_attention(q, k, v, mask, scale=None),
        dot_product_attention(q, k, v, mask, scale=1.0),
    )


def test_default_scale_is_inverse_sqrt_dk():
    q, k, _ = qkv(22)
    np.testing.assert_allclose(
        attention_logits(q, k), attention_logits(q, k, scale=0.25), rtol=1e-7, atol=0
    )
    z1 = np.asarray(attention_logits(q, k, scale=1.0))
    np.testing.assert_allclose(attention_logits(q, k), z1 / 4.0, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- soft-cap


def test_logit_cap_bounds_and_formula():
    q, k, _ = qkv(23)
    q, k = 6.0 * q, 6.0 * k  # unscaled logits with std 144, up to several hundred
    z = np.asarray(attention_logits(q, k, scale=1.0))
    assert np.max(np.abs(z)) > 100.0
    zc = np.asarray(attention_logits(q, k, scale=1.0, logit_cap=30.0))
    assert np.all(np.abs(zc) <= 30.0)
    np.testing.assert_allclose(zc, 30.0 * np.tanh(z / 30.0), rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(zc, softcap(z, 30.0), rtol=1e-6, atol=1e-5)
    # Strictly inside the cap wherever tanh has not rounded to +-1 in float32.
    moderate = np.abs(z) < 150.0
    assert np.any(moderate) and np.any(~moderate)
    assert np.all(np.abs(zc[moderate]) < 30.0)
    # The cap is applied before the softmax, i.e. the weights follow the capped logits.
    zc64 = zc.astype(np.float64)
    ref_w = np.exp(zc64 - zc64.max(-1, keepdims=True))
    ref_w /= ref_w.sum(-1, keepdims=True)
    np.testing.assert_allclose(attention_weights(q, k, scale=1.0, logit_cap=30.0), ref_w, atol=1e-6)


def test_softcap_near_identity_for_small_logits():
    z = np.linspace(-1.0, 1.0, 101, dtype=np.float32)
    # cap * tanh(z / cap) = z - z^3 / (3 cap^2) + ...; |z| <= 1, cap 30 -> error <= 4e-4.
    np.testing.assert_allclose(softcap(z, 30.0), z, atol=4e-4)
    np.testing.assert_allclose(softcap(z, 30.0), z - z**3 / (3 * 30.0**2), atol=1e-6)
    assert not np.allclose(softcap(z, 1.0), z, atol=1e-2)  # a small cap is not the identity

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

import attnlab.core.attention as attention_module
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


#: One float32 rounding, 2^-23: twice the unit roundoff, so n * EPS bounds n roundings
#: to second order as well.
EPS = float(np.finfo(np.float32).eps)
#: The smallest normal float32: weights below it may be flushed to zero.
TINY = float(np.finfo(np.float32).tiny)
#: XLA's (and numpy's) float32 exp and tanh are accurate to a few ulp; we allow 4 eps each.
ULPS = 4


def rel_err(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return np.max(np.abs(a - b)) / np.max(np.abs(b))


def assert_within(actual, desired, bound, what=""):
    """|actual - desired| <= bound entrywise, in float64."""
    err = np.abs(np.asarray(actual, np.float64) - np.asarray(desired, np.float64))
    excess = err - np.broadcast_to(bound, err.shape)
    worst = np.unravel_index(np.argmax(excess), excess.shape)
    assert (excess <= 0).all(), f"{what}: |error| {err[worst]:.3g} exceeds its bound at {worst}"


# --------------------------------------------------------------------------- error bounds
# First-order bounds on the error of ONE float32 evaluation against exact arithmetic, from
# the absolute values of the data: an n-term float32 sum is off by at most n EPS times the
# sum of the absolute terms. Two float32 evaluations (another program, batch shape, jit,
# vmap, another library) differ by at most the sum of their two bounds.


def exact_softmax(z, mask=None):
    """float64 (masked) softmax; fully masked rows are zero."""
    z = np.asarray(z, np.float64)
    live = np.ones(z.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask), z.shape)
    m = np.max(np.where(live, z, -np.inf), -1, keepdims=True)
    e = np.where(live, np.exp(np.where(live, z - np.where(np.isfinite(m), m, 0.0), 0.0)), 0.0)
    s = e.sum(-1, keepdims=True)
    return e / np.where(s > 0, s, 1.0), np.where(live, np.abs(z - m), 0.0)


def softmax_bound(p, gap, e_z):
    """|float32 softmax - p| for logits off by at most ``e_z``; ``p`` exact and ``gap`` is
    |z - max z| (``exact_softmax``).

    Logit errors within +-M move p_i by at most p_i (1 - p_i) expm1(2M) (exactly, not only
    to first order); the float32 softmax then rounds z - max (relative error EPS |z - max|
    in the exponential), the exp, the n-term sum and the division (2 roundings, in case
    XLA multiplies by a reciprocal); weights below TINY may be flushed to zero."""
    n = p.shape[-1]
    big_m = np.max(np.where(p > 0, e_z, 0.0), -1, keepdims=True)
    rounding = (gap + ULPS + n + 2) * EPS
    return np.where(p > 0, p * (1 - p) * np.expm1(2 * big_m) + p * rounding + TINY, 0.0)


def attention_bounds(q, k, v, mask=None, scale=None, extra=0):
    """Exact ``(p, out)`` in float64 and bounds ``(e_p, e_out)`` on one float32 evaluation.

    Logits: d_k-term dot products, the float32 scale and the product: (d_k + 2) EPS
    relative to c |q|.|k| (``extra`` more roundings for a reference that also rounds q).
    Output: the weights' errors times |v|, plus the Tk-term sum."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    d_k = q.shape[-1]
    c = 1 / math.sqrt(d_k) if scale is None else scale
    z = c * q @ np.swapaxes(k, -1, -2)
    e_z = (d_k + 2 + extra) * EPS * abs(c) * (np.abs(q) @ np.swapaxes(np.abs(k), -1, -2))
    p, gap = exact_softmax(z, mask)
    e_p = softmax_bound(p, gap, e_z)
    e_out = e_p @ np.abs(v) + p.shape[-1] * EPS * (p @ np.abs(v))
    return p, p @ v, e_p, e_out


def attention_grad_bounds(q, k, v, mask, scale, g_out, e_g_out):
    """Bounds on one float32 evaluation of the gradients (q, k, v) of a loss whose
    gradient with respect to the output is ``g_out`` (within ``e_g_out``): the chain
    rule of ``attention_bounds``, each product and n-term sum adding n EPS of its
    absolute terms, propagated errors added (softmax backward: p (g - sum p g), with
    3 roundings in the difference and product)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    d_k = q.shape[-1]
    c = abs(1 / math.sqrt(d_k) if scale is None else scale)
    p, _, e_p, _ = attention_bounds(q, k, v, mask, scale)
    T = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
    ga, av, ak, aq = np.abs(g_out), np.abs(v), np.abs(k), np.abs(q)
    n_q, n_k, d_v = p.shape[-2], p.shape[-1], v.shape[-1]
    e_gv = T(e_p) @ ga + T(p) @ e_g_out + n_q * EPS * (T(p) @ ga)
    g_p = g_out @ T(v)
    e_gp = e_g_out @ T(av) + d_v * EPS * (ga @ T(av))
    d = g_p - np.sum(p * g_p, -1, keepdims=True)
    e_s = np.sum(e_p * np.abs(g_p) + p * e_gp + n_k * EPS * p * np.abs(g_p), -1, keepdims=True)
    g_z = p * d
    e_gz = e_p * np.abs(d) + p * (e_gp + e_s) + 3 * EPS * np.abs(g_z)
    e_gq = c * (e_gz @ ak + (n_k + 1) * EPS * (np.abs(g_z) @ ak))
    e_gk = c * (T(e_gz) @ aq + (n_q + 1) * EPS * (T(np.abs(g_z)) @ aq))
    return e_gq, e_gk, e_gv


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
    e_out = attention_bounds(q, k, v, mask, scale)[3]
    assert_within(ours, to_bthd(ref), 2 * e_out, "output")  # two float32 evaluations
    # Anything else would be far off (far above the bound): masked and unmasked differ.
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
    # Two float32 evaluations; flax also rounds q * factor and q / sqrt(depth).
    e_ours = attention_bounds(q, k, v, mask, scale)[3]
    e_flax = attention_bounds(q, k, v, mask, scale, extra=2)[3]
    assert_within(ours, to_bthd(ref), e_ours + e_flax, "output")


def test_scale_changes_the_result():
    """Guards the reference tests: the three scales give clearly different outputs."""
    q, k, v = qkv(4)
    outs = [dot_product_attention(q, k, v, scale=s) for s in SCALES]
    for i in range(len(outs)):
        for j in range(i + 1, len(outs)):
            assert rel_err(outs[i], outs[j]) > 1e-2  # far above any rounding (~1e-6)


def test_broadcast_mask_shape_tq_tk():
    q, k, v = qkv(5)
    mask2d = random_mask(6, (TQ, TK))
    full = np.broadcast_to(np.asarray(mask2d), (B, N, TQ, TK))
    # Exact: the mask is broadcast before use, so both run the same ops on the same values.
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
    # The same eager ops give the same w inside dot_product_attention; only the Tk-term
    # products with v differ (XLA and numpy): Tk EPS of |w| |v| each.
    wv_abs = np.abs(np.asarray(w, np.float64)) @ np.abs(np.asarray(v, np.float64))
    assert_within(out, np.asarray(w) @ np.asarray(v), 2 * TK * EPS * wv_abs, "w v")

    # Each batch element is computed independently, as unbatched (another batch shape:
    # two float32 evaluations).
    e_out = attention_bounds(q, k, v, mask, 0.3)[3].reshape(-1, TQ, 4)
    n = math.prod(lead)
    qf, kf, vf = (np.asarray(x).reshape(n, *x.shape[len(lead) :]) for x in (q, k, v))
    mf = None if mask is None else np.asarray(mask).reshape(n, TQ, TK)
    outf = np.asarray(out).reshape(n, TQ, 4)
    for i in range(n):
        single = dot_product_attention(
            qf[i], kf[i], vf[i], None if mf is None else mf[i], scale=0.3
        )
        assert_within(outf[i], single, 2 * e_out[i], f"element {i}")


# --------------------------------------------------------------------------- jit / vmap


@pytest.mark.parametrize("scale", SCALES)
def test_jit_matches_eager(scale):
    q, k, v = qkv(9)
    mask = random_mask(10, (B, N, TQ, TK))
    eager = dot_product_attention(q, k, v, mask, scale=scale)
    # scale passed as a keyword argument to jit is traced: the learned-temperature case.
    jitted = jax.jit(dot_product_attention)(q, k, v, mask, scale=scale)
    _, _, e_p, e_out = attention_bounds(q, k, v, mask, scale)
    assert_within(jitted, eager, 2 * e_out, "output")  # two float32 evaluations
    jit_w = jax.jit(attention_weights)(q, k, mask, scale=scale)
    assert_within(jit_w, attention_weights(q, k, mask, scale=scale), 2 * e_p, "weights")


def test_vmap_matches_eager():
    q, k, v = qkv(11)
    mask = random_mask(12, (B, N, TQ, TK))
    eager = dot_product_attention(q, k, v, mask, scale=0.3)
    f = lambda q, k, v, m: dot_product_attention(q, k, v, m, scale=0.3)  # noqa: E731
    vmapped = jax.vmap(jax.vmap(f))(q, k, v, mask)
    # Two float32 evaluations of the same output, each within its bound.
    assert_within(vmapped, eager, 2 * attention_bounds(q, k, v, mask, 0.3)[3], "vmap")
    # vmap over a non-leading axis (heads) with an unbatched (shared) mask.
    m0 = np.asarray(mask)[0, 0]
    g = jax.vmap(lambda q, k, v: dot_product_attention(q, k, v, m0), in_axes=1, out_axes=1)
    e_out = attention_bounds(q, k, v, m0)[3]
    assert_within(jax.jit(g)(q, k, v), dot_product_attention(q, k, v, m0), 2 * e_out, "heads")


def test_jit_vmap_grad_compose():
    """grad of the batched loss equals vmap of per-example grads (a sum over examples)."""
    q, k, v = qkv(13)
    loss = lambda q, k, v: jnp.sum(dot_product_attention(q, k, v, scale=1.0) ** 2)  # noqa: E731
    grad = jax.grad(loss, argnums=(0, 1, 2))
    g_batched = jax.jit(grad)(q, k, v)
    g_vmapped = jax.jit(jax.vmap(grad))(q, k, v)
    # d loss / d out = 2 out, exact doubling of the output's error.
    _, out, _, e_out = attention_bounds(q, k, v, None, 1.0)
    bounds = attention_grad_bounds(q, k, v, None, 1.0, 2 * out, 2 * e_out)
    for a, b, e in zip(g_batched, g_vmapped, bounds, strict=True):
        assert np.all(np.isfinite(a)) and np.max(np.abs(a)) > 0
        assert_within(a, b, 2 * e, "gradient")  # two float32 evaluations


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
    # Exact: masked entries are selected as 0, and 0 * v sums to 0.
    assert np.all(w[..., dead, :] == 0.0)
    assert np.all(out[..., dead, :] == 0.0)
    assert np.all(np.isfinite(out))

    # Live rows: weights sum to one, zero on masked keys, and equal jax.nn's result.
    # Sum: the float32 normaliser (Tk - 1 roundings, the division 2), numpy's sum (Tk - 1).
    np.testing.assert_allclose(np.sum(w[..., LIVE, :], -1), 1.0, atol=2 * TK * EPS)
    assert np.all(w[~np.asarray(mask)] == 0.0)
    ref = np.asarray(to_bthd(jax_nn_ref(q, k, v, mask, scale)))
    e_out = attention_bounds(q, k, v, mask, scale)[3]
    assert_within(out[..., LIVE, :], ref[..., LIVE, :], 2 * e_out[..., LIVE, :], "output")


@pytest.mark.parametrize("scale", [None, 1.0])
def test_fully_masked_rows_gradients_finite(scale):
    q, k, v = qkv(15)
    mask, dead = _mask_with_dead_rows()

    def loss(q, k, v):
        return jnp.sum(jnp.sin(dot_product_attention(q, k, v, mask, scale=scale)))

    gq, gk, gv = (np.asarray(g) for g in jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v))
    # d loss / d out = cos(out): off by at most the output's error plus cos's rounding.
    _, out, _, e_out = attention_bounds(q, k, v, mask, scale)
    e_g = e_out + ULPS * EPS
    e_gq, e_gk, e_gv = attention_grad_bounds(q, k, v, mask, scale, np.cos(out), e_g)
    for g in (gq, gk, gv):
        assert np.all(np.isfinite(g)) and np.max(np.abs(g)) > 0
    # A dead row's output does not depend on its query (exact: selected zeros).
    assert np.all(gq[..., dead, :] == 0.0)
    # Gradients on the live rows are unaffected by the presence of the dead rows.

    def loss_live(q, k, v):
        o = dot_product_attention(q[..., LIVE, :], k, v, mask[..., LIVE, :], scale=scale)
        return jnp.sum(jnp.sin(o))

    gq2, gk2, gv2 = jax.jit(jax.grad(loss_live, argnums=(0, 1, 2)))(q, k, v)
    # Two float32 evaluations of the same gradients (dead rows contribute exact zeros).
    assert_within(gq[..., LIVE, :], np.asarray(gq2)[..., LIVE, :], 2 * e_gq[..., LIVE, :], "q")
    assert_within(gk, gk2, 2 * e_gk, "k")
    assert_within(gv, gv2, 2 * e_gv, "v")


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
    # Two float32 softmaxes of the same logits, each within its rounding of the exact one.
    p, gap = exact_softmax(z[0, :2])
    assert_within(ours[0, :2], jax.nn.softmax(z[0, :2]), 2 * softmax_bound(p, gap, 0.0))
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
    # Exact: masked logits are replaced inside the exponential, their weights are exact
    # zeros, 0 * (-1e4) = 0 and adding zeros is exact; the rest is the same program.
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
    # The weights are (numerically) one-hot on the masked argmax of each live row. The
    # float64 softmax of the same float32 logits (same eager ops) is one-hot to within
    # float32 resolution, and the float32 weights are within their rounding of it.
    w = np.asarray(attention_weights(q, k, mask, scale=1.0))
    zm = np.where(np.asarray(mask), z, -np.inf)
    onehot = np.argmax(zm, -1)[..., None] == np.arange(TK)
    p, gap = exact_softmax(z, mask)
    assert (np.abs(p - onehot)[..., LIVE, :] < EPS / 2).all()
    assert_within(w, p, softmax_bound(p, gap, 0.0), "weights")
    # Against jax.nn: two float32 evaluations of an output whose logits are ill-conditioned
    # (|q|.|k| ~ 1e3), but whose one-hot weights are insensitive to them (p (1 - p) ~ 0).
    ref = np.asarray(to_bthd(jax_nn_ref(q, k, v, mask, 1.0)))
    e_out = attention_bounds(q, k, v, mask, 1.0)[3]
    assert_within(out[..., LIVE, :], ref[..., LIVE, :], 2 * e_out[..., LIVE, :], "output")

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
    # The same float32 ops on the same (exactly widened) values; only the final cast
    # rounds: half an ulp of the output dtype (half the smallest subnormal near zero).
    info = jnp.finfo(dtype)
    rtol, atol = float(info.eps) / 2, float(info.smallest_subnormal) / 2
    np.testing.assert_allclose(np.asarray(out, np.float32), ref, rtol=rtol, atol=atol)


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
    # As for the other half-precision inputs: the float32 computation is the same, only
    # the cast of the output to float16 rounds (half an ulp, or half a subnormal).
    info = jnp.finfo(jnp.float16)
    rtol, atol = float(info.eps) / 2, float(info.smallest_subnormal) / 2
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol)


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
    # The float32 normaliser (Tk - 1 roundings, the division 2) and numpy's sum (Tk - 1).
    np.testing.assert_allclose(w.sum(-1)[live], 1.0, atol=2 * PROP_TK * EPS)
    assert np.all(w.sum(-1)[~live] == 0.0)
    assert np.all(w[~mask] == 0.0)


@FAST
@given(
    hnp.arrays(np.float32, (PROP_TQ, PROP_TK), elements=_elems()),
    hnp.arrays(np.float32, (PROP_TQ, 1), elements=st.floats(-50.0, 50.0, width=32)),
    hnp.arrays(np.bool_, (PROP_TQ, PROP_TK)),
)
def test_softmax_shift_invariance(z, c, mask):
    shifted = z + c  # float32: each shifted logit rounds by at most EPS / 2 |z + c|
    e_z = EPS / 2 * np.abs(shifted.astype(np.float64))
    for m in (None, mask):
        p, gap = exact_softmax(z, m)
        # softmax(z + c) = softmax(z): the shifted softmax sees logit errors e_z, both round.
        bound = softmax_bound(p, gap, e_z) + softmax_bound(p, gap, 0.0)
        assert_within(jit_softmax(shifted, m), jit_softmax(z, m), bound, "shifted")


@FAST
@given(qk_mask(), st.floats(0.05, 3.0))
def test_scale_equals_prescaled_query(args, c):
    q, k, mask = args
    # Both logits are within (d_k + 2) EPS c |q|.|k| of c q.k (d_k-term sums, float32(c)
    # and one product, on the logits or on q): two float32 evaluations. Plus underflow: XLA's
    # CPU kernels flush subnormals to zero (inputs and results), and hypothesis draws values
    # near zero, so an input q_i may be a subnormal XLA reads as 0 (off by < max(1, c) TINY
    # |k_i|: c q_i may be normal), and each of the d_k products, d_k sums and the scaling
    # may flush (< TINY (1 + c) each).
    c32 = float(np.float32(c))
    q64, k64 = q.astype(np.float64), k.astype(np.float64)
    e_z = (PROP_D + 2) * EPS * c32 * (np.abs(q64) @ np.swapaxes(np.abs(k64), -1, -2))
    e_z += TINY * (max(1.0, c32) * np.abs(k64).sum(-1)[..., None, :] + (2 * PROP_D + 1) * (1 + c32))
    p, gap = exact_softmax(c32 * q64 @ np.swapaxes(k64, -1, -2), mask)
    a = jit_weights(q, k, mask, scale=c)
    b = jit_weights(np.float32(c) * q, k, mask, scale=1.0)
    assert_within(a, b, 2 * softmax_bound(p, gap, e_z), "weights")
    za = jit_logits(q, k, scale=c)
    zb = jit_logits(np.float32(c) * q, k, scale=1.0)
    assert_within(za, zb, 2 * e_z, "logits")


@FAST
@given(st.integers(0, 2**31 - 1))
def test_dk_one_scaled_equals_unscaled_exactly(seed):
    q, k, v = qkv(seed, lead=PROP_LEAD, tq=PROP_TQ, tk=PROP_TK, d=1, dv=3)
    q, k = 4.0 * q, 4.0 * k
    mask = np.random.default_rng(seed ^ 1).random((*PROP_LEAD, PROP_TQ, PROP_TK)) < 0.7
    # Exact: 1/sqrt(1) = 1, the same float32 ops on the same values.
    np.testing.assert_array_equal(
        attention_logits(q, k, scale=None), attention_logits(q, k, scale=1.0)
    )
    np.testing.assert_array_equal(
        dot_product_attention(q, k, v, mask, scale=None),
        dot_product_attention(q, k, v, mask, scale=1.0),
    )


def test_default_scale_is_inverse_sqrt_dk():
    q, k, _ = qkv(22)
    # Exact: 1/sqrt(16) = 1/4 in float32, and scaling by a power of two does not round.
    np.testing.assert_array_equal(attention_logits(q, k), attention_logits(q, k, scale=0.25))
    z1 = np.asarray(attention_logits(q, k, scale=1.0))
    np.testing.assert_array_equal(attention_logits(q, k), z1 / 4.0)


# --------------------------------------------------------------------------- soft-cap


def test_logit_cap_bounds_and_formula():
    q, k, _ = qkv(23)
    q, k = 6.0 * q, 6.0 * k  # unscaled logits with std 144, up to several hundred
    z = np.asarray(attention_logits(q, k, scale=1.0))
    assert np.max(np.abs(z)) > 100.0
    zc = np.asarray(attention_logits(q, k, scale=1.0, logit_cap=30.0))
    assert np.all(np.abs(zc) <= 30.0)
    # Against float64 from the same float32 logits (same eager ops): z / cap (2 roundings
    # if XLA multiplies by 1/cap; tanh passes relative errors on at most 1:1), tanh and
    # the product round.
    ref = 30.0 * np.tanh(z.astype(np.float64) / 30.0)
    np.testing.assert_allclose(zc, ref, rtol=(ULPS + 3) * EPS, atol=0)
    np.testing.assert_allclose(softcap(z, 30.0), ref, rtol=(ULPS + 3) * EPS, atol=0)
    # Strictly inside the cap wherever tanh has not rounded to +-1 in float32.
    moderate = np.abs(z) < 150.0
    assert np.any(moderate) and np.any(~moderate)
    assert np.all(np.abs(zc[moderate]) < 30.0)
    # The cap is applied before the softmax, i.e. the weights follow the capped logits.
    # float64 softmax of the same float32 capped logits: within the softmax's rounding.
    ref_w, gap = exact_softmax(zc)
    w = attention_weights(q, k, scale=1.0, logit_cap=30.0)
    assert_within(w, ref_w, softmax_bound(ref_w, gap, 0.0), "weights")


def test_softcap_near_identity_for_small_logits():
    z = np.linspace(-1.0, 1.0, 101, dtype=np.float32)
    z64, cap = z.astype(np.float64), 30.0
    # cap * tanh(z / cap) = z - z^3 / (3 cap^2) + 2 z^5 / (15 cap^4) - ...: an alternating
    # series, so each truncation errs by at most the next term; float32 rounds z / cap
    # (twice, as z * (1 / cap)), tanh and the product: (ULPS + 3) EPS relative.
    rounding = (ULPS + 3) * EPS * np.abs(z64)
    assert_within(softcap(z, cap), z64, np.abs(z64) ** 3 / (3 * cap**2) + rounding)
    third_order = z64 - z64**3 / (3 * cap**2)
    assert_within(softcap(z, cap), third_order, 2 * np.abs(z64) ** 5 / (15 * cap**4) + rounding)
    # A small cap is not the identity: 1 - tanh(1) = 0.24, far above any rounding.
    assert not np.allclose(softcap(z, 1.0), z, atol=1e-2)


# --------------------------------------------------------------------------- custom rule


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_custom_rule_gradients_match_autodiff(monkeypatch, masked, scale):
    """From ``CUSTOM_RULE_MIN_QUERIES`` queries on, gradients come from ``_attend_custom``'s
    JVP rule; forced on at this size, they match autodiff of the same forward (dead rows
    included), the scale's gradient too, and forward mode still works."""
    q, k, v = qkv(16)
    mask = _mask_with_dead_rows()[0] if masked else None

    def loss(q, k, v, s):
        return jnp.sum(jnp.sin(dot_product_attention(q, k, v, mask, scale=s)))

    def grad():  # a new function each time: jit caches traces by function
        return jax.jit(lambda *args: jax.grad(loss, argnums=(0, 1, 2, 3))(*args))

    s = 1 / math.sqrt(D) if scale is None else scale
    auto = grad()(q, k, v, s)
    monkeypatch.setattr(attention_module, "CUSTOM_RULE_MIN_QUERIES", 1)
    assert "optimization_barrier" in str(jax.make_jaxpr(grad())(q, k, v, s))
    custom = grad()(q, k, v, s)
    assert any(np.any(a != b) for a, b in zip(custom, auto, strict=True))  # really two paths
    # d loss / d out = cos(out), within the output's error plus cos's rounding; the two
    # paths are two float32 evaluations of the same gradients.
    _, out, _, e_out = attention_bounds(q, k, v, mask, s)
    bounds = attention_grad_bounds(q, k, v, mask, s, np.cos(out), e_out + ULPS * EPS)
    for a, b, e, name in zip(custom[:3], auto[:3], bounds, "qkv", strict=True):
        assert np.all(np.isfinite(a))
        assert_within(a, b, 2 * e, name)
    # d loss / d s = sum(q . d loss / d (s q)) = sum(q * g_q) / s: the q-gradient's bound
    # carried through, plus a (B N TQ D)-term float32 sum.
    e_s = np.sum(np.abs(np.asarray(q)) * 2 * bounds[0]) / s
    n = q.size
    e_s += n * EPS * np.sum(np.abs(np.asarray(q) * np.asarray(auto[0]))) / s
    assert_within(custom[3], auto[3], e_s, "scale")
    # Forward mode through the custom rule: jvp along (q, k, v) equals the same directional
    # derivative taken by reverse mode, <grad, t>, within both gradients' bounds times |t|.
    t = qkv(17)
    _, jvp = jax.jvp(lambda q, k, v: loss(q, k, v, s), (q, k, v), t)
    # Both modes make the same first-order errors (one the transpose of the other), so each
    # is within sum |bound| |t| of the exact value; the 3 q.size-term float32 sums add
    # q.size EPS each.
    pairs = list(zip(custom[:3], bounds, t, strict=True))
    dot = sum(float(np.sum(np.asarray(g) * np.asarray(x))) for g, _, x in pairs)
    e_dir = sum(float(np.sum(2 * e * np.abs(np.asarray(x)))) for _, e, x in pairs)
    assert abs(float(jvp) - dot) <= e_dir + 3 * q.size * EPS * abs(dot)


@pytest.mark.parametrize("flag", [True, False])
@pytest.mark.parametrize(
    "call",
    [
        lambda q, k, v, b: attention_weights(q, k, scale=b),
        lambda q, k, v, b: attention_logits(q, k, scale=b),
        lambda q, k, v, b: dot_product_attention(q, k, v, scale=b),
        lambda q, k, v, b: dot_product_attention(q, k, v, logit_cap=b),
    ],
    ids=["weights", "logits", "attention", "cap"],
)
def test_a_bool_scale_or_cap_is_refused_saying_what_to_pass(call, flag):
    """``scale=False`` would multiply every logit by 0 and ``scale=True`` mean unscaled."""
    q = k = v = jnp.ones((1, 2, 4))
    with pytest.raises(TypeError, match=r"(scale|logit_cap) must be .*not the bool"):
        call(q, k, v, flag)

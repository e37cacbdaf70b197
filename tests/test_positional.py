"""The mechanisms that see positions and heads (``attnlab.core.positional``), each against
its paper's closed form, and the context they ask for reaching their logits."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.core.attention import attention_logits
from attnlab.core.context import Context, causal_context
from attnlab.core.literature import LITERATURE, SSMAX_INITIAL_S
from attnlab.core.mechanism_check import check_mechanism
from attnlab.core.positional import (
    LOG_LENGTH_ATTN_SCALE,
    LOG_LENGTH_FLOOR_SCALE,
    POSITIONAL,
    alibi_slope,
    log_length_scale,
)
from attnlab.core.temperature import BUILTINS

#: float32's epsilon: logits of d-term dot products err by at most d EPS |q||k|.
EPS = float(np.finfo(np.float32).eps)
D, T, H = 16, 12, 4


def _qk(seed: int = 0):
    kq, kk = jax.random.split(jax.random.key(seed))
    return (jax.random.normal(kq, (H, T, D), jnp.float32),
            jax.random.normal(kk, (H, T, D), jnp.float32))  # fmt: skip


def _logits(name: str, q, k, context: Context, mask=None):
    mechanism = POSITIONAL[name]
    theta = mechanism.initial_theta(D)
    return mechanism.attend(q, k, theta, mask, context)[0]


@pytest.mark.parametrize("name", sorted(POSITIONAL))
def test_every_positional_builtin_passes_the_check(name):
    check_mechanism(POSITIONAL[name])
    assert POSITIONAL[name].needs_positions()


def test_alibi_slopes_are_press_et_als_geometric_sequence():
    """For 8 heads: 1/2, 1/4, ..., 1/256 (Press et al. 2022, sec. 3)."""
    slopes = np.asarray(alibi_slope(np.arange(8), 8))
    np.testing.assert_array_equal(slopes, 2.0 ** -np.arange(1, 9))


def test_alibi_is_the_scaled_logits_minus_the_slope_times_the_distance():
    q, k = _qk()
    z = np.asarray(_logits("alibi", q, k, causal_context(T, H)))
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    slopes = 2.0 ** (-8.0 * (np.arange(H) + 1) / H)
    expected = np.asarray(attention_logits(q, k)) - slopes[:, None, None] * (i - j)
    # The dot products' rounding (D EPS |q||k| / sqrt(D)) plus the bias' (T EPS).
    bound = D * EPS * np.max(np.abs(q)) * np.max(np.abs(k)) * math.sqrt(D) + T * EPS
    np.testing.assert_allclose(z, expected, rtol=0, atol=bound)


def test_alibi_sees_positions_only_through_their_difference():
    """The same q and k at positions shifted by 7 give the same logits: the positions
    reach the logits, and only as i - j."""
    q, k = _qk(1)
    base = causal_context(T, H)
    shifted = base._replace(q_pos=base.q_pos + 7, k_pos=base.k_pos + 7)
    far = base._replace(q_pos=base.q_pos + 7)  # queries moved, keys not: the bias changes
    z, z_shifted = (np.asarray(_logits("alibi", q, k, c)) for c in (base, shifted))
    np.testing.assert_array_equal(z, z_shifted)
    z_far = np.asarray(_logits("alibi", q, k, far))
    slopes = 2.0 ** (-8.0 * (np.arange(H) + 1) / H)
    np.testing.assert_allclose(z - z_far, np.broadcast_to(7 * slopes[:, None, None], z.shape),
                               rtol=0, atol=8 * T * EPS)  # fmt: skip


def test_ssmax_causal_is_ssmax_with_each_causal_rows_own_length():
    """Nakanishi's z = s log(n) q.k / sqrt(d) with n = i + 1: from positions, it equals
    ssmax with n counted from the causal mask (two routes to one closed form)."""
    q, k = _qk(2)
    context = causal_context(T, H)
    causal = np.asarray(context.k_pos) <= np.asarray(context.q_pos)
    z = np.asarray(_logits("ssmax_causal", q, k, context, causal))
    ssmax = LITERATURE["ssmax"]
    reference = ssmax.attend(q, k, ssmax.initial_theta(D), causal, context)[0]
    n = np.arange(1, T + 1)[:, None]
    closed = SSMAX_INITIAL_S * np.log(n) * np.asarray(attention_logits(q, k))
    bound = 4 * D * EPS * np.max(np.abs(closed)) + EPS
    np.testing.assert_allclose(z, np.asarray(reference), rtol=0, atol=bound)
    np.testing.assert_allclose(z, closed, rtol=0, atol=bound)


def test_log_length_is_llama4s_temperature_tuning():
    """Llama 4's ``log(floor((pos + 1) / floor_scale) + 1) * attn_scale + 1``: 1 before the
    first step, 1 + 0.1 ln 2 from position floor_scale - 1 on, 1 + 0.1 ln 9 at 8 steps."""
    positions = np.arange(64)[:, None]
    scale = np.asarray(log_length_scale(positions, LOG_LENGTH_FLOOR_SCALE,
                                        LOG_LENGTH_ATTN_SCALE))[:, 0]  # fmt: skip
    reference = np.log(np.floor((np.arange(64) + 1.0) / 8.0) + 1.0) * 0.1 + 1.0
    np.testing.assert_allclose(scale, reference, rtol=4 * EPS)
    assert scale[6] == 1.0 and scale[7] == pytest.approx(1 + 0.1 * math.log(2), rel=4 * EPS)
    q, k = _qk(3)
    z = np.asarray(_logits("log_length", q, k, causal_context(T, H)))
    expected = np.asarray(log_length_scale(np.arange(T)[:, None], 8.0, 0.1)) * np.asarray(
        attention_logits(q, k)
    )
    np.testing.assert_allclose(z, expected, rtol=4 * EPS, atol=4 * EPS)


def test_ssmax_attention_does_not_fade_with_length():
    """Nakanishi 2025, Fig. 1's closed form: a key whose scaled logit exceeds the n - 1
    others' by ``delta`` gets softmax weight ``1 / (1 + (n - 1) e^-delta)``, which fades as
    1/n, and under SSMax ``1 / (1 + (n - 1) n^(-s delta))``, which rises towards 1 with n
    when ``s delta > 1``. The first key is the needle of every causal row (n = i + 1)."""
    length, delta = 256, 4.0
    s = POSITIONAL["ssmax_causal"].initial_theta(1)["s"]
    assert s * delta > 1  # the regime the paper's figure shows
    q = np.ones((1, length, 1), np.float32)
    k = np.zeros((1, length, 1), np.float32)
    k[0, 0, 0] = delta  # d = 1: z = q.k
    context = causal_context(length, 1)
    mask = np.asarray(context.k_pos) <= np.asarray(context.q_pos)
    n = np.arange(1, length + 1, dtype=np.float64)
    weights = {}
    for name, mechanism in (("ssmax_causal", POSITIONAL["ssmax_causal"]),
                            ("scaled", BUILTINS["scaled"])):  # fmt: skip
        theta = mechanism.initial_theta(1)
        weights[name] = np.asarray(mechanism.attend(q, k, theta, mask, context)[1])[0, :, 0]
    ssmax = 1 / (1 + (n - 1) * n ** (-s * delta))
    softmax = 1 / (1 + (n - 1) * np.exp(-delta))
    # Each weight is a float32 softmax over at most 256 terms: within 256 eps relative.
    np.testing.assert_allclose(weights["ssmax_causal"], ssmax, rtol=length * EPS)
    np.testing.assert_allclose(weights["scaled"], softmax, rtol=length * EPS)
    assert np.all(np.diff(weights["ssmax_causal"][1:]) >= -length * EPS)  # never fades
    assert weights["scaled"][-1] < 0.2 < 0.9 < weights["ssmax_causal"][-1]

"""The built-in hooks of ``attnlab.core.mechanism.Mechanism``: two ``logits`` and three
``weights`` functions, the ones the built-in mechanisms (``attnlab.core.temperature``,
``attnlab.core.literature``) are made of and a user's may reuse.

Logits, ``logits(q, k, **theta) -> z``, q ``[..., Tq, d]`` and k ``[..., Tk, d]`` to z
``[..., Tq, Tk]``, in float32 through the suite's one dot product (``attention_logits``):

    scaled_logits    z = scale * q . k
    capped_logits    z = cap * tanh(scale * q . k / cap)

Weights, ``weights(z, mask) -> p`` of the same shape, in float32 for half-precision logits,
``mask`` boolean (True where a query may attend) or None:

    softmax_weights   p_j = e^{z_j} / sum_l e^{z_l}             (the default; rows sum to 1)
    sigmoid_weights   p_j = sigmoid(z_j)                          (rows not normalised)
    softpick_weights  p_j = ReLU(e^{z_j} - 1) / (sum_l |e^{z_l} - 1| + eps)

each over the keys ``mask`` allows, 0 on the others; a fully masked row is all zeros.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from attnlab.core.attention import attention_logits, masked_softmax

Array = jax.Array
#: ``epsilon`` of ``softpick_weights`` (the authors' default).
SOFTPICK_EPS = 1e-8


def scaled_logits(q: ArrayLike, k: ArrayLike, scale: ArrayLike) -> Array:
    """``z = scale * q . k`` in float32 (the suite's one dot product, ``attention_logits``)."""
    return attention_logits(q, k, scale=scale)


def capped_logits(q: ArrayLike, k: ArrayLike, scale: ArrayLike, cap: ArrayLike) -> Array:
    """``z = cap * tanh(scale * q . k / cap)``: the soft-cap of Gemma 2 and Grok-1."""
    return attention_logits(q, k, scale=scale, logit_cap=cap)


def softmax_weights(z: ArrayLike, mask: ArrayLike | None = None) -> Array:
    """``p = softmax(z)`` over the keys ``mask`` allows, in float32 for half-precision
    logits (``masked_softmax``); a fully masked row gives zeros."""
    return masked_softmax(jnp.asarray(z, jnp.promote_types(jnp.result_type(z), jnp.float32)), mask)


def sigmoid_weights(z: ArrayLike, mask: ArrayLike | None = None) -> Array:
    """``p_j = sigmoid(z_j)`` where ``mask`` allows, 0 elsewhere: each weight on its own, the
    row not normalised (sigmoid attention, Ramapuram et al. 2024). Computed in float32."""
    z = jnp.asarray(z, jnp.promote_types(jnp.result_type(z), jnp.float32))
    p = jax.nn.sigmoid(z)
    return p if mask is None else jnp.where(jnp.asarray(mask, bool), p, 0.0)


def softpick_weights(z: ArrayLike, mask: ArrayLike | None = None) -> Array:
    """Softpick (Zuhri et al. 2025), ``p_j = ReLU(e^{z_j} - 1) / (sum_l |e^{z_l} - 1| + eps)``
    over the keys ``mask`` allows (masked keys are left out of the sum, as the authors' code
    leaves out non-finite logits), ``eps = SOFTPICK_EPS``.

    Computed stably as the authors do: numerator and denominator multiplied by ``e^{-m}``,
    ``m`` the row's largest allowed logit (held out of the gradient, which it does not
    change), so no exponent argument is positive:

        p_j = ReLU(e^{z_j - m} - e^{-m}) / (sum_l |e^{z_l - m} - e^{-m}| + eps e^{-m}).

    Rows need not sum to one; a row of logits <= 0 is all zeros; so is a fully masked row.
    """
    z = jnp.asarray(z, jnp.promote_types(jnp.result_type(z), jnp.float32))
    allowed = jnp.ones(z.shape, bool) if mask is None else jnp.broadcast_to(mask, z.shape)
    m = jnp.max(jnp.where(allowed, z, -jnp.inf), axis=-1, keepdims=True)
    m = jax.lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0.0))
    shifted = jnp.where(allowed, jnp.exp(jnp.where(allowed, z - m, 0.0)) - jnp.exp(-m), 0.0)
    denominator = jnp.sum(jnp.abs(shifted), axis=-1, keepdims=True) + SOFTPICK_EPS * jnp.exp(-m)
    return jax.nn.relu(shifted) / denominator

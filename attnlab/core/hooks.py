"""The built-in hooks of ``attnlab.core.mechanism.Mechanism``: two ``logits`` functions,
three ``weights`` functions, the softmax with a learned sink and the output gate, the ones
the built-in mechanisms (``attnlab.core.temperature``, ``attnlab.core.literature``) are
made of and a user's may reuse.

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

Around the weights (``Mechanism.sink``, ``Mechanism.gate``):

    sink_softmax_weights  p_j = e^{z_j} / (e^{s} + sum_l e^{z_l})    (s: a learned logit)
    gated_output          y' = y * sigmoid(g)                         (g = x W_gate)
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


def sink_softmax_weights(z: ArrayLike, mask: ArrayLike | None, sink: ArrayLike) -> Array:
    """Softmax with a learned sink (gpt-oss, 2025; the eager attention of transformers'
    gpt-oss model): one more logit ``s`` per head in the normaliser,

        p_j = e^{z_j} / (e^{s} + sum_l e^{z_l})    over the keys ``mask`` allows,

    the softmax of ``[z, s]`` with the sink's column dropped, so a row sums to
    ``1 - e^{s} / (e^{s} + sum_l e^{z_l}) < 1``: the head may put weight on nothing.
    ``sink`` broadcasts against the rows (``[H, 1, 1]`` per head, or a scalar). Computed
    with ``m = max(s, max_l z_l)`` subtracted (held out of the gradient), in float32 for
    half-precision logits; a fully masked row is all zeros (the sink takes it all)."""
    z = jnp.asarray(z, jnp.promote_types(jnp.result_type(z), jnp.float32))
    allowed = jnp.ones(z.shape, bool) if mask is None else jnp.broadcast_to(mask, z.shape)
    s = jnp.broadcast_to(jnp.asarray(sink, z.dtype), z.shape[:-1] + (1,))
    m = jnp.max(jnp.where(allowed, z, -jnp.inf), axis=-1, keepdims=True)
    m = jax.lax.stop_gradient(jnp.maximum(m, s))
    e = jnp.where(allowed, jnp.exp(jnp.where(allowed, z - m, 0.0)), 0.0)
    return e / (jnp.sum(e, axis=-1, keepdims=True) + jnp.exp(s - m))


def gated_output(y: ArrayLike, gate_logits: ArrayLike) -> Array:
    """The output gate of gated attention, ``y' = y * sigmoid(g)`` (Qiu et al. 2025, "Gated
    Attention for Large Language Models", arXiv:2505.06708, position G1: after the weighted
    sum, before the heads are joined; Qwen3-Next's ``attn_output * sigmoid(gate)``), ``g =
    x W_gate`` of the block's normalised input ``x``: ``[..., H, T, d_h]`` elementwise or
    ``[..., H, T, 1]`` one gate per head. The gate is computed in float32."""
    g = jnp.asarray(gate_logits, jnp.promote_types(jnp.result_type(gate_logits), jnp.float32))
    return (y * jax.nn.sigmoid(g)).astype(jnp.result_type(y))

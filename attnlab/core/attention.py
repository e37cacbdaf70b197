"""The one dot-product attention of the suite: scale, soft-cap, mask, precision policy.

For a query ``q`` and keys ``k_1 .. k_n`` the logits are

    z_i = c * q . k_i,          c = 1/sqrt(d_k) by default (Vaswani et al. 2017),

optionally soft-capped as ``z_i <- cap * tanh(z_i / cap)`` (Gemma 2, Grok-1), and the
weights are ``p = softmax(z)`` over the keys a query may attend to. Scaled attention is
``scale=None``, unscaled attention is ``scale=1.0``, and any other value (a float or a
traced scalar, e.g. a learned inverse temperature) multiplies the logits, the convention of
``jax.nn.dot_product_attention``. Every variant in the suite is a value of these arguments;
there is no second implementation.

Precision policy: logits and softmax are always computed in float32 (or wider, if the
inputs are wider), whatever the input dtype, and the output is cast back to the dtype of
``v``. A float16 softmax overflows once a logit exceeds ln(65504) ~ 11.1, which unscaled
attention reaches at modest d_k (companion article, "Failure modes at the boundaries").

Masking: ``mask`` is boolean, True where a query may attend. A fully masked row has no
distribution to normalise; it yields all-zero weights, a zero output row and finite
gradients instead of the NaN a naive ``-inf`` fill produces.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

Array = jax.Array


def _compute_dtype(*xs: ArrayLike) -> jnp.dtype:
    """float32, or the widest input dtype if that is wider (float64 under x64)."""
    return jnp.promote_types(jnp.result_type(*xs), jnp.float32)


def resolve_scale(scale: ArrayLike | None, d_k: int) -> ArrayLike:
    """The logit multiplier: ``1/sqrt(d_k)`` when ``scale`` is None, else ``scale``."""
    return 1.0 / jnp.sqrt(float(d_k)) if scale is None else scale


def softcap(z: Array, cap: float) -> Array:
    """Soft-cap logits to (-cap, cap): ``cap * tanh(z / cap)``.

    The tanh cap of Gemma 2 (cap 50, Gemma Team 2024) and Grok-1 (cap 30, xAI 2024). It is
    the identity to first order for |z| << cap and bounds every logit by ``cap``.
    """
    return cap * jnp.tanh(z / cap)


def attention_logits(
    q: ArrayLike,
    k: ArrayLike,
    *,
    scale: ArrayLike | None = None,
    logit_cap: float | None = None,
) -> Array:
    """Logits ``z[..., i, j] = cap(scale * q_i . k_j)`` in float32, shape ``[..., Tq, Tk]``."""
    dtype = _compute_dtype(q, k)
    q = jnp.asarray(q, dtype)
    k = jnp.asarray(k, dtype)
    z = jnp.einsum("...qd,...kd->...qk", q, k) * jnp.asarray(
        resolve_scale(scale, q.shape[-1]), dtype
    )
    return z if logit_cap is None else softcap(z, logit_cap)


def masked_softmax(z: ArrayLike, mask: ArrayLike | None = None) -> Array:
    """Softmax over the last axis restricted to ``mask``; fully masked rows give zeros.

        p_j = mask_j exp(z_j - m) / sum_l mask_l exp(z_l - m),  m = max_{mask_l} z_l,

    with ``p = 0`` where the row has no True entry. The max is subtracted (and held out of
    the gradient, which it does not change) so no exponent argument is positive; masked
    entries are replaced by 0 *inside* the exponential as well as outside, so neither the
    value nor the gradient of a masked or fully masked row can be NaN.
    """
    z = jnp.asarray(z)
    if mask is None:
        return jax.nn.softmax(z, axis=-1)
    mask = jnp.broadcast_to(jnp.asarray(mask, bool), z.shape)
    row_max = jnp.max(jnp.where(mask, z, -jnp.inf), axis=-1, keepdims=True)
    row_max = jax.lax.stop_gradient(jnp.where(jnp.isfinite(row_max), row_max, 0.0))
    e = jnp.where(mask, jnp.exp(jnp.where(mask, z - row_max, 0.0)), 0.0)
    denom = jnp.sum(e, axis=-1, keepdims=True)
    return e / jnp.where(denom > 0, denom, 1.0)


def attention_weights(
    q: ArrayLike,
    k: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    scale: ArrayLike | None = None,
    logit_cap: float | None = None,
) -> Array:
    """Attention weights ``softmax(scale * q k^T)`` in float32, shape ``[..., Tq, Tk]``.

    Args:
      q: queries ``[..., Tq, d_k]``.
      k: keys ``[..., Tk, d_k]``.
      mask: optional boolean, broadcastable to ``[..., Tq, Tk]``, True where a query may
        attend. Fully masked rows give all-zero weights.
      scale: logit multiplier; None is ``1/sqrt(d_k)``, 1.0 is unscaled attention.
      logit_cap: if given, logits are soft-capped by ``cap * tanh(z / cap)``.
    """
    return masked_softmax(attention_logits(q, k, scale=scale, logit_cap=logit_cap), mask)


def dot_product_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    scale: ArrayLike | None = None,
    logit_cap: float | None = None,
) -> Array:
    """Scaled dot-product attention ``softmax(scale * q k^T) v``.

    Args:
      q: queries ``[..., Tq, d_k]``.
      k: keys ``[..., Tk, d_k]``.
      v: values ``[..., Tk, d_v]``.
      mask: optional boolean, broadcastable to ``[..., Tq, Tk]``, True where a query may
        attend. A fully masked row gives a zero output row.
      scale: logit multiplier; None is ``1/sqrt(d_k)`` (scaled attention), 1.0 is unscaled
        attention, any other value an inverse temperature.
      logit_cap: if given, logits are soft-capped by ``cap * tanh(z / cap)``.

    Returns:
      ``[..., Tq, d_v]`` in the dtype of ``v``; the softmax itself runs in float32.
    """
    p = attention_weights(q, k, mask, scale=scale, logit_cap=logit_cap)
    out = jnp.einsum("...qk,...kd->...qd", p, jnp.asarray(v, p.dtype))
    return out.astype(jnp.result_type(v))

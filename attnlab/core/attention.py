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


def refuse_bool(name: str, value: object, what: str) -> None:
    """Raise TypeError if ``value`` is a bool: ``True`` or ``False`` passed where a number is
    meant would silently act as 1 or 0. ``what`` says what to pass instead."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be {what}, not the bool {value!r}")


_SCALE = "a number or None (None: 1/sqrt(d_k), scaled attention; 1.0: unscaled)"


def resolve_scale(scale: ArrayLike | None, d_k: int) -> ArrayLike:
    """The logit multiplier: ``1/sqrt(d_k)`` when ``scale`` is None, else ``scale``
    (a bool raises TypeError: ``scale=False`` would zero every logit)."""
    refuse_bool("scale", scale, _SCALE)
    return 1.0 / jnp.sqrt(float(d_k)) if scale is None else scale


def softcap(z: Array, cap: float) -> Array:
    """Soft-cap logits to (-cap, cap): ``cap * tanh(z / cap)`` (a bool cap raises TypeError).

    The tanh cap of Gemma 2 (cap 50, Gemma Team 2024) and Grok-1 (cap 30, xAI 2024). It is
    the identity to first order for |z| << cap and bounds every logit by ``cap``.
    """
    refuse_bool("logit_cap", cap, "a number > 0 or None (no cap)")
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
    """The weights ``softmax(scale * q k^T)`` of ``dot_product_attention`` (whose arguments
    these are) in float32, shape ``[..., Tq, Tk]``; a fully masked row is all zeros."""
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
    dtype = _compute_dtype(q, k)
    q, k = jnp.asarray(q, dtype), jnp.asarray(k, dtype)
    c = jnp.asarray(resolve_scale(scale, q.shape[-1]), dtype)
    attend = _attend_custom if q.shape[-2] >= CUSTOM_RULE_MIN_QUERIES else _attend
    return attend(q, k, v, c, mask, logit_cap).astype(jnp.result_type(v))


#: From this many queries on, derivatives come from ``_attend_custom``'s rule (see there);
#: below it, where the score matrix is small and the barriers' extra transposes cost more
#: than they save (measured: 0.4x at 1 query x 16 keys), from plain autodiff. The forward
#: is the same program either way.
CUSTOM_RULE_MIN_QUERIES = 128


def _attend(
    q: Array, k: Array, v: ArrayLike, c: Array, mask: ArrayLike | None, logit_cap: float | None
) -> Array:
    """``softmax(cap(c q k^T)) v`` in the dtype of ``q``: the forward of both paths.

    The weights are normalised before they meet ``v``: XLA fuses this whole function into
    one YNNPACK call, which ran 1.4x slower with the division moved after the product."""
    return weighted_values(attention_weights(q, k, mask, scale=c, logit_cap=logit_cap), v)


def weighted_values(p: ArrayLike, v: ArrayLike) -> Array:
    """``out[..., i, :] = sum_j p[..., i, j] v[..., j, :]`` in the dtype of ``p``: the
    output of attention whose weights ``p`` (``[..., Tq, Tk]``) are already computed."""
    p = jnp.asarray(p)
    return jnp.einsum("...qk,...kd->...qd", p, jnp.asarray(v, p.dtype))


def _swap(x: Array) -> Array:
    """``x`` with its last two axes exchanged, kept apart from its neighbours by a barrier."""
    return jax.lax.optimization_barrier(jnp.swapaxes(x, -1, -2))


_attend_custom = jax.custom_jvp(_attend, nondiff_argnums=(5,))
_attend_custom.__doc__ = """``_attend`` with a JVP rule laid out for a fast reverse mode on CPU.

With ``z = cap(c q k^T)``, ``p = softmax_mask(z)`` and ``out = p v`` the rule is

    z' = (c q' + c' q) k^T + (c q) k'^T,      z' <- z' (1 - (z / cap)^2) if capped,
    w  = p * z',
    out' = w v - rowsum(w) out + p v',

the softmax JVP ``p (z' - rowsum(p z'))`` multiplied into ``v`` with the row sum moved onto
``out`` (``rowsum(p z') * (p v)``). Reverse mode transposes it, so for a cotangent ``g``:
``dz = p * (g v^T - rowsum(g * out))`` (a ``[Tq, d]`` row sum, not a ``[Tq, Tk]`` one), and
``c`` only ever multiplies the small ``q`` (no ``[Tq, Tk]`` broadcast of the scale).
Masked entries have ``p = 0``, so dead rows keep zero and finite derivatives.

Why (XLA CPU, batch 8, 1024 x 1024, d 64): plain autodiff compiled ``dk = dz^T q`` and
``dv = p^T g`` to Eigen dots writing row-major ``[Tk, d]`` from the ``[Tq, Tk]`` operand
contracted along its rows (``lhs_contracting_dims={1}``), about twice as slow as the same
product written ``[d, Tk]``-major, and it materialised five ``[B, Tq, Tk]`` buffers (the
broadcast scale, ``exp``, the broadcast ``1/sum``, ``p``, ``dz``), each costing page faults
on a fresh 32 MiB. Here the tangents ``k'`` and ``v'`` pass through ``_swap``, whose
transpose keeps XLA from folding the swap into the dot: it computes ``(c q)^T dz`` and
``g^T p`` into ``[d, Tk]``-major layout and copies only those small results back; and only
``p`` and ``dz`` remain as large buffers (fwd+bwd 0.8x -> 1.1x of
``jax.nn.dot_product_attention`` there).
Forward mode (``jax.jvp``) keeps working, unlike with a ``custom_vjp``.
"""


@_attend_custom.defjvp
def _attend_jvp(logit_cap: float | None, primals: tuple, tangents: tuple) -> tuple[Array, Array]:
    q, k, v, c, mask = primals
    q_dot, k_dot, v_dot, c_dot, _ = tangents
    v = jnp.asarray(v, q.dtype)
    p = attention_weights(q, k, mask, scale=c, logit_cap=logit_cap)
    out = jnp.einsum("...qk,...kd->...qd", p, v)
    z_dot = jnp.einsum("...qd,...kd->...qk", c * q_dot + c_dot * q, k) + jnp.einsum(
        "...qd,...dk->...qk", c * q, _swap(jnp.asarray(k_dot, q.dtype))
    )
    if logit_cap is not None:
        z = softcap(jnp.einsum("...qd,...kd->...qk", q, k) * c, logit_cap)
        z_dot = z_dot * (1 - jnp.square(z / logit_cap))
    w = p * z_dot
    out_dot = (
        jnp.einsum("...qk,...kd->...qd", w, v)
        - jnp.sum(w, axis=-1, keepdims=True) * out
        + jnp.einsum("...qk,...dk->...qd", p, _swap(jnp.asarray(v_dot, q.dtype)))
    )
    return out, out_dot

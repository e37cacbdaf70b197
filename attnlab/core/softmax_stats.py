"""Statistics of softmax rows: entropy, max weight, the Jacobian and its Frobenius norm, and
the attention sink: the weight on the first key and on nothing.

Every function takes probabilities ``p`` with shape ``[..., n]`` (rows over the last axis)
and reduces or expands only that axis, so any number of leading batch dimensions works and
everything is jit- and vmap-compatible.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

Array = jax.Array


def entropy(p: ArrayLike) -> Array:
    """Shannon entropy in nats, ``H(p) = -sum_i p_i ln p_i``, with ``0 ln 0 = 0``.

    Exact zeros (masked keys, underflowed weights) contribute nothing, in value and in
    gradient. The maximum is ``ln n`` for the uniform row.
    """
    p = jnp.asarray(p)
    positive = p > 0
    safe_p = jnp.where(positive, p, 1.0)
    return -jnp.sum(jnp.where(positive, p * jnp.log(safe_p), 0.0), axis=-1)


def max_weight(p: ArrayLike) -> Array:
    """The largest weight of each row, ``max_i p_i``: 1/n when uniform, 1 when one-hot."""
    return jnp.max(jnp.asarray(p), axis=-1)


def softmax_jacobian(p: ArrayLike) -> Array:
    """The softmax Jacobian ``J = dp/dz = diag(p) - p p^T``, shape ``[..., n, n]``.

    ``J_ij = p_i (delta_ij - p_j)``: symmetric, rows summing to zero, every entry bounded
    by 1/4, and the zero matrix at a one-hot ``p``.
    """
    p = jnp.asarray(p)
    return jnp.eye(p.shape[-1], dtype=p.dtype) * p[..., None, :] - p[..., :, None] * p[..., None, :]


def jacobian_frobenius_norm(p: ArrayLike) -> Array:
    """``||diag(p) - p p^T||_F`` per row in O(n) time and memory, accurate when saturated.

    Expanding the square gives the closed form ``s2 - 2 s3 + s2^2`` (``s_k = sum_i p_i^k``),
    but it cancels catastrophically as ``max p -> 1`` (all three terms approach 1 while the
    result approaches 0) and can even go negative in float32. Instead we sum the squared
    entries in groups that are each a sum of non-negative terms:

        ||J||_F^2 = sum_i p_i^2 [(1 - p_i)^2 + r_i],   r_i = sum_{j != i} p_j^2.

    Let ``m`` be the row's argmax and ``t = sum_{j != m} p_j`` the mass off it. Three
    choices keep full relative precision however saturated the row is:

    - for ``i = m``, ``1 - p_m`` is replaced by ``t`` and ``r_m`` is summed over the other
      entries: ``p_m`` carries an absolute rounding error of ``eps / 2``, a large relative
      error of ``1 - p_m`` once the row saturates, while ``t`` is a sum of small weights;
    - for ``i != m``, ``r_i = s2 - p_i^2 >= s2 / 2`` (``p_m >= p_i``) and ``1 - p_i >= 1/2``,
      so those subtractions lose at most one bit;
    - every term carries a factor ``t^2`` or ``p_i^2 <= t^2``, so with ``u_i = p_i / t``

          ||J||_F = t sqrt(p_m^2 (1 + sum_{j != m} u_j^2)
                           + sum_{i != m} u_i^2 [(1 - p_i)^2 + s2 - p_i^2]),

      which never squares a tiny weight into float32's subnormal range.
    """
    p = jnp.asarray(p)
    is_argmax = jax.nn.one_hot(jnp.argmax(p, axis=-1), p.shape[-1], dtype=bool)
    off_max = jnp.where(is_argmax, 0.0, p)
    t = jnp.sum(off_max, axis=-1, keepdims=True)
    u = off_max / jnp.where(t > 0, t, 1.0)  # a one-hot row has t = 0 and norm 0
    u2 = u * u
    p_max = jnp.max(p, axis=-1, keepdims=True)
    s2 = jnp.sum(p * p, axis=-1, keepdims=True)
    argmax_term = p_max**2 * (1.0 + jnp.sum(u2, axis=-1, keepdims=True))
    other_terms = jnp.sum(u2 * ((1.0 - p) ** 2 + s2 - p * p), axis=-1, keepdims=True)
    return (t * jnp.sqrt(argmax_term + other_terms))[..., 0]


#: Gu et al. 2024 ("When Attention Sink Emerges in Language Models", arXiv:2410.10781,
#: section 3): a head is a sink head when its mean weight on the first token exceeds this.
SINK_THRESHOLD = 0.3


def first_key_weight(p: ArrayLike) -> Array:
    """The mean weight on the first key over the rows, ``alpha_1 = (1/T) sum_i p_{i,1}``,
    for weights ``p`` ``[..., T, n]`` -> ``[...]`` (Gu et al.'s alpha_1 of one head on
    one sequence, every query counted; a causal row 0 puts all of a softmax's on it)."""
    return jnp.mean(jnp.asarray(p)[..., 0], axis=-1)


def null_weight(p: ArrayLike) -> Array:
    """The weight a row puts on nothing, ``1 - sum_j p_j``, averaged over the rows
    ``[..., T, n]`` -> ``[...]``: 0 for softmax rows, the sink's share for a softmax with a
    learned sink (``sink_softmax_weights``); for rows not normalised (sigmoid), one minus
    their mass, of either sign."""
    return jnp.mean(1.0 - jnp.sum(jnp.asarray(p), axis=-1), axis=-1)


def sink_share(alpha: ArrayLike, threshold: float = SINK_THRESHOLD) -> Array:
    """The share of heads whose first-key weight ``alpha`` exceeds ``threshold``
    (Gu et al.'s ``Sink_1^epsilon``, epsilon 0.3), over every axis of ``alpha``."""
    return jnp.mean(jnp.asarray(alpha) > threshold)

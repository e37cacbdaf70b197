"""The elasticity of the logits' scale to the scale of q and k, from which who owns the
attention temperature is read (``attnlab.core.owner``).

Multiply queries and keys by ``alpha`` (the same as ``W_Q, W_K -> alpha W_Q, alpha W_K``
up to biases, the weight-norm growth of long training runs) and watch the logits' scale

    s(alpha) = sqrt( mean over rows of var over keys of z(alpha q, alpha k) ),

the within-row spread, the only part of the logits a softmax sees (it ignores a row's
shift). The elasticity

    e(alpha) = d ln s / d ln alpha

is 2 for any bilinear logit ``z = c q.k`` (scaled, unscaled, 1/d, a learned temperature):
the weights own the temperature. It is 0 where the mechanism normalises q and k (QK-norm,
cosine attention): the mechanism owns it. A soft-cap ``z = cap tanh(q.k / cap)`` starts at 2
and falls towards 0 as ``alpha`` drives the logits into the cap: the cap takes over.

``e`` is computed by forward-mode autodiff in ``ln alpha``, exact to float32 rounding; who
owns the temperature is read from it by ``attnlab.core.owner`` (no JAX).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from attnlab.core.context import Context
from attnlab.core.mechanism import Mechanism
from attnlab.core.owner import ALPHAS

Array = jax.Array


def logit_scale(z: ArrayLike, mask: ArrayLike | None = None) -> Array:
    """``sqrt(mean_rows var_keys z)`` over the keys ``mask`` allows (all if None); rows with
    fewer than two allowed keys are left out."""
    z = jnp.asarray(z, jnp.float32)
    allowed = jnp.ones(z.shape, bool) if mask is None else jnp.broadcast_to(mask, z.shape)
    count = jnp.sum(allowed, axis=-1)
    mean = jnp.sum(jnp.where(allowed, z, 0.0), axis=-1) / jnp.maximum(count, 1)
    var = jnp.sum(jnp.where(allowed, (z - mean[..., None]) ** 2, 0.0), axis=-1)
    var = var / jnp.maximum(count, 1)
    rows = count >= 2
    return jnp.sqrt(jnp.sum(jnp.where(rows, var, 0.0)) / jnp.maximum(jnp.sum(rows), 1))


def logit_elasticity(
    mechanism: Mechanism,
    q: ArrayLike,
    k: ArrayLike,
    alphas: Sequence[float] = ALPHAS,
    theta: Mapping[str, ArrayLike] | None = None,
    mask: ArrayLike | None = None,
    context: Context | None = None,
) -> Array:
    """``e(alpha) = d ln s(alpha) / d ln alpha`` at each of ``alphas`` (``[len(alphas)]``),
    ``s`` the ``logit_scale`` of ``mechanism``'s logits of ``alpha q`` and ``alpha k`` with
    scalars ``theta`` (default: its initial ones at ``d = q.shape[-1]``), under ``mask``
    with the mechanism's own, in ``context`` (for mechanisms that see positions)."""
    mask = mechanism.mask_for(mask, context)
    q, k = jnp.asarray(q, jnp.float32), jnp.asarray(k, jnp.float32)
    theta = mechanism.initial_theta(q.shape[-1]) if theta is None else theta

    def log_scale(log_alpha: Array) -> Array:
        alpha = jnp.exp(log_alpha)
        z = mechanism.scores(*mechanism.prepare(alpha * q, alpha * k), theta, mask, context)
        return jnp.log(logit_scale(z, mask))

    def one(alpha: float) -> Array:
        return jax.jvp(log_scale, (jnp.log(jnp.float32(alpha)),), (jnp.float32(1.0),))[1]

    return jnp.stack([one(a) for a in alphas])

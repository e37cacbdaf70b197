"""The optimiser of the language-model task: AdamW with warmup and cosine decay, global-norm
clipping and weight decay independent of the learning rate (Wortsman et al. 2023, sec.
3.2.2), and the z-loss. Small pure functions; the peak rate may be a traced scalar, so
lanes of different rates share one compiled program.

With the schedule's factor ``s(t)`` (``warmup_cosine``), peak rate ``eta`` and weight
decay ``lambda``, one step on gradients ``g`` is

    g     <- g min(1, c / |g|_2)                         (global-norm clipping at c)
    u     <- Adam(g; beta1, beta2, eps)                  (bias-corrected moments)
    theta <- theta - eta s(t) u - lambda s(t) theta      (decay on matrices only)

so the decay does not grow with ``eta`` ("independent" decay; AdamW as in PyTorch and
optax multiplies it by ``eta``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def warmup_cosine(step: jax.Array, total: int, warmup: int) -> jax.Array:
    """``s(t)``: linear from ``1/warmup`` to 1 over the first ``warmup`` steps, then a cosine
    from 1 to 0 at step ``total``: ``s = (1 + cos(pi (t - w) / (T - w))) / 2``."""
    t = jnp.asarray(step, jnp.float32)
    rise = (t + 1) / max(warmup, 1)
    progress = jnp.clip((t - warmup) / max(total - warmup, 1), 0.0, 1.0)
    return jnp.where(t < warmup, rise, 0.5 * (1 + jnp.cos(jnp.pi * progress)))


def decay_mask(params) -> object:
    """True for the parameters weight decay applies to: matrices (embeddings, projections);
    not LayerNorm scales or a mechanism's scalars."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def scheduled(
    direction: optax.GradientTransformation,
    lr: float | jax.Array,
    total: int,
    warmup: int,
    weight_decay: float = 1e-4,
    clip: float = 1.0,
) -> optax.GradientTransformation:
    """The module docstring's step around any update ``direction`` (Adam's ``u``, or
    Muon's on some parameters, ``attnlab.lm.optimizers``): global-norm clipping at
    ``clip``, then ``direction``, then ``-lr s(t)`` and the rate-independent decay
    (``lr`` may be traced)."""

    def schedule(count: jax.Array) -> jax.Array:
        return warmup_cosine(count, total, warmup)

    def rate(count: jax.Array) -> jax.Array:
        return -lr * schedule(count)

    return optax.chain(
        optax.clip_by_global_norm(clip),
        direction,
        optax.scale_by_schedule(rate),
        independent_decay(weight_decay, schedule),
    )


def adamw_independent(
    lr: float | jax.Array,
    total: int,
    warmup: int,
    weight_decay: float = 1e-4,
    clip: float = 1.0,
    b1: float = 0.9,
    b2: float = 0.95,
    eps: float = 1e-8,
) -> optax.GradientTransformation:
    """The module docstring's step as an optax transformation (``lr`` may be traced)."""
    adam = optax.scale_by_adam(b1=b1, b2=b2, eps=eps)
    return scheduled(adam, lr, total, warmup, weight_decay, clip)


def independent_decay(weight_decay: float, schedule) -> optax.GradientTransformation:
    """Add ``-lambda s(t) theta`` to the updates of ``decay_mask``'s parameters (``s`` the
    schedule's factor of the step count)."""

    def init(params):
        return optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32))

    def update(updates, state, params):
        factor = weight_decay * schedule(state.count)
        mask = decay_mask(params)
        updates = jax.tree.map(lambda u, p, m: u - factor * p if m else u, updates, params, mask)
        return updates, optax.ScaleByScheduleState(count=optax.safe_increment(state.count))

    return optax.GradientTransformation(init, update)


def z_loss(logits: jax.Array) -> jax.Array:
    """``mean (log Z)^2``, ``Z = sum_v exp(logits_v)``: the output-logit penalty of PaLM
    (Chowdhery et al. 2022) and Wortsman et al., weighted ``1e-4`` there."""
    return jnp.mean(jnp.square(jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1)))

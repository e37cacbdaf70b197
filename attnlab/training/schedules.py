"""What an optimizer's step shares whatever its direction (``attnlab.training.optimizers``):
warmup and a decaying schedule, and weight decay independent of the learning rate
(Wortsman et al. 2023, sec. 3.2.2) or coupled to it. Small pure functions; the peak rate
may be a traced scalar, so lanes of different rates share one compiled program.

With the schedule's factor ``s(t)`` (``SCHEDULES``: ``warmup_cosine``, 14's, or
``warmup_stable_decay``, Kimi K2's), peak rate ``eta`` and weight decay ``lambda``, one
step on gradients ``g`` is

    g     <- g min(1, c / |g|_2)                         (global-norm clipping at c)
    u     <- the optimizer's direction (Adam's bias-corrected moments; Muon's, Lion's)
    theta <- theta - eta s(t) u - lambda s(t) theta      (decay "independent", 14's)
    theta <- theta - eta s(t) (u + lambda theta)         (decay "coupled", ``DECAYS``)

the decay on matrices only (``decay_mask``: not LayerNorm gains, not a mechanism's
scalars). "Independent" decay does not grow with ``eta``; "coupled" is AdamW's as in
PyTorch and optax, and Moonlight's and Kimi K2's (Liu et al. 2025: decay 0.1 times the rate,
on AdamW's and Muon's parameters alike).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

#: The schedules of ``schedule_factor``.
SCHEDULES = ("cosine", "wsd")
#: How weight decay scales with the rate (module docstring).
DECAYS = ("independent", "coupled")
#: Kimi K2's warmup-stable-decay (Moonshot AI 2025, sec. 3.2): the rate constant for 10T of
#: its 15.5T tokens, then a cosine from it to a tenth of it.
WSD_STABLE = 10 / 15.5
WSD_FLOOR = 0.1


def warmup_cosine(step: jax.Array, total: int, warmup: int) -> jax.Array:
    """``s(t)``: linear from ``1/warmup`` to 1 over the first ``warmup`` steps, then a cosine
    from 1 to 0 at step ``total``: ``s = (1 + cos(pi (t - w) / (T - w))) / 2``."""
    t = jnp.asarray(step, jnp.float32)
    rise = (t + 1) / max(warmup, 1)
    progress = jnp.clip((t - warmup) / max(total - warmup, 1), 0.0, 1.0)
    return jnp.where(t < warmup, rise, 0.5 * (1 + jnp.cos(jnp.pi * progress)))


def wsd_decay_start(total: int, warmup: int) -> int:
    """The first step of ``warmup_stable_decay``'s decay: ``WSD_STABLE`` of ``total``, at
    least ``warmup``."""
    return max(warmup, round(WSD_STABLE * total))


def warmup_stable_decay(step: jax.Array, total: int, warmup: int) -> jax.Array:
    """``s(t)``: linear from ``1/warmup`` to 1 over the first ``warmup`` steps, 1 (the
    plateau) until ``D = wsd_decay_start``, then a cosine from 1 to ``f = WSD_FLOOR`` at
    step ``total``: ``s = f + (1 - f) (1 + cos(pi (t - D) / (T - D))) / 2``."""
    t = jnp.asarray(step, jnp.float32)
    start = wsd_decay_start(total, warmup)
    rise = (t + 1) / max(warmup, 1)
    progress = jnp.clip((t - start) / max(total - start, 1), 0.0, 1.0)
    decay = WSD_FLOOR + (1 - WSD_FLOOR) * 0.5 * (1 + jnp.cos(jnp.pi * progress))
    return jnp.where(t < warmup, rise, decay)


def schedule_factor(name: str, total: int, warmup: int) -> Callable[[jax.Array], jax.Array]:
    """``count -> s(count)`` of the schedule ``name`` (``SCHEDULES``); a ValueError for
    another."""
    if name == "cosine":
        return lambda count: warmup_cosine(count, total, warmup)
    if name == "wsd":
        return lambda count: warmup_stable_decay(count, total, warmup)
    raise ValueError(f"schedule must be one of {SCHEDULES}, got {name!r}")


def decay_mask(params) -> object:
    """True for the parameters weight decay applies to: matrices (embeddings, projections);
    not LayerNorm scales or a mechanism's scalars."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def descent(
    direction: optax.GradientTransformation,
    lr: float | jax.Array,
    schedule: Callable[[jax.Array], jax.Array],
    weight_decay: float,
    decay: str = "independent",
) -> optax.GradientTransformation:
    """The module docstring's step after the clipping, on any update ``direction`` (Adam's
    ``u``, Muon's or Lion's, ``attnlab.training.optimizers``): ``-lr s(t) u`` and the decay
    ``decay`` (``DECAYS``) at ``weight_decay`` (``lr`` may be traced)."""

    def rate(count: jax.Array) -> jax.Array:
        return -lr * schedule(count)

    if decay == "coupled":
        return optax.chain(direction, optax.add_decayed_weights(weight_decay, decay_mask),
                           optax.scale_by_schedule(rate))  # fmt: skip
    if decay == "independent":
        return optax.chain(direction, optax.scale_by_schedule(rate),
                           independent_decay(weight_decay, schedule))  # fmt: skip
    raise ValueError(f"decay must be one of {DECAYS}, got {decay!r}")


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

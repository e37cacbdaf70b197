"""The optimizers both wings train with, by name: ``make_optimizer(name, lr, recipe,
**hyperparameters)`` is the one switch from a configuration to an
``optax.GradientTransformation`` (as maxtext's ``get_optimizer``).

An optimizer is a frozen dataclass registered in ``OPTIMIZERS`` (``register_optimizer``):
its fields are its hyperparameters, with their defaults, and its ``build(lr, recipe)`` the
transformation at peak rate ``lr`` (a float or a traced scalar, so lanes of different rates
share a compiled program). What every optimizer shares is the ``Recipe``: the schedule,
weight decay and global-norm clipping of ``attnlab.training.schedules``. With a recipe, one
step on gradients ``g`` is

    g      <- g min(1, c / |g|_2)                 (global-norm clipping at c)
    u      <- the optimizer's direction           (below)
    theta  <- theta - eta s(t) u - (decay)        (``schedules.descent``)

Without one (``recipe=None``: 04's recall step), ``theta <- theta - eta u``: a constant rate,
no clipping, no decay (``optax.adam(lr)`` for ``adam``).

``adam``: Adam (Kingma & Ba 2015), ``u = m_hat / (sqrt(v_hat) + eps)``, at its paper's
betas; 04's recall optimizer.

``adamw``: the same direction at 14's betas (0.9, 0.95); with the recipe's decay, AdamW
(Loshchilov & Hutter 2019).

``muon``: Muon (Jordan 2024; Liu et al. 2025, "Muon is Scalable for LLM Training") on the
hidden matrices, ``adamw`` on everything else, routed by name (``muon_labels``): a
transformer's hidden 2-D matrices ``W_Q, W_K, W_V, W_O, W_1, W_2`` take Muon; the token and
position embeddings, the output head, the LayerNorm gains and every mechanism scalar take
AdamW (so the recall model, which has none of those names, trains all on AdamW).
(``optax.contrib.muon`` routes every 2-D array to Muon by default, the embeddings and the
head included, and its Adam side is not 14's: Nesterov, ``b2`` 0.999, decay times the
rate.) Muon's direction is ``u_M = NS5(m_t) sqrt(max(fan_in, fan_out)) r``: Nesterov
momentum ``m_t`` at ``beta``, orthogonalised by five Newton-Schulz steps, scaled to RMS
``r = rms`` (Moonlight's ``0.2 sqrt(max(A, B))``, ``optax.contrib.muon``'s
``consistent_rms``: a Muon update's RMS about AdamW's, so Muon can take AdamW's rate and
decay; Liu et al. 2025, sec. 2.2). The AdamW side runs at ``side_lr`` (None: ``lr``,
Moonlight's recipe, one rate for both): at ``eta = 0.3`` one shared rate trains the
embeddings, head and LayerNorm gains at 30x AdamW's best rate, whose gains then grow the
logits.

``lion``: Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"),
``u = sign(b1 m + (1 - b1) g)``, ``m <- b2 m + (1 - b2) g`` (``optax.scale_by_lion``). Every
entry of its update is +-1, so its best rate is typically 3 to 10 times smaller than
AdamW's (the paper, sec. 3.1).

A new optimizer is a dataclass with a ``build`` here and ``register_optimizer``; every
script that takes ``--optimizer`` or ``--optimizers`` offers it (``OPTIMIZERS``' names).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import optax
from optax.contrib import MuonDimensionNumbers, scale_by_muon

from attnlab.training.schedules import descent, schedule_factor


@dataclass(frozen=True)
class Recipe:
    """What every optimizer's step shares (``attnlab.training.schedules``): the schedule
    ``schedule`` over ``total`` steps with ``warmup``, weight decay ``weight_decay`` of kind
    ``decay`` (``DECAYS``) on matrices, global-norm clipping at ``clip``. 14's defaults."""

    total: int
    warmup: int
    weight_decay: float = 1e-4
    clip: float = 1.0
    schedule: str = "cosine"
    decay: str = "independent"


class Optimizer(Protocol):
    """An optimizer's contract: its fields are its hyperparameters."""

    def build(self, lr: float | jax.Array, recipe: Recipe | None) -> optax.GradientTransformation:
        """The transformation at peak rate ``lr`` under ``recipe`` (None: constant rate)."""
        ...


#: Every optimizer by name: its hyperparameters' dataclass (``register_optimizer``).
OPTIMIZERS: dict[str, type[Optimizer]] = {}


def register_optimizer(name: str) -> Callable[[type], type]:
    """Register the optimizer dataclass it decorates as ``name`` in ``OPTIMIZERS`` (a name
    taken is a ValueError)."""

    def register(kind: type) -> type:
        if name in OPTIMIZERS:
            raise ValueError(f"optimizer {name!r} is registered already; give yours another name")
        OPTIMIZERS[name] = kind
        return kind

    return register


def hyperparameters(name: str) -> dict[str, Any]:
    """The hyperparameters of the optimizer ``name`` and their defaults."""
    return {f.name: f.default for f in dataclasses.fields(OPTIMIZERS[name])}


def make_optimizer(
    name: str, lr: float | jax.Array, recipe: Recipe | None = None, **hyper: Any
) -> optax.GradientTransformation:
    """The optimizer ``name`` (``OPTIMIZERS``) at peak rate ``lr`` under ``recipe`` (None: a
    constant rate, no clipping, no decay), its hyperparameters ``hyper`` over their
    defaults. ``ValueError`` (one line) for another name or a hyperparameter it has not."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {list(OPTIMIZERS)}, got {name!r}")
    known = hyperparameters(name)
    for key in hyper:
        if key not in known:
            raise ValueError(f"{name} has no hyperparameter {key!r}; it has {list(known)}")
    return OPTIMIZERS[name](**hyper).build(lr, recipe)


def step(
    direction: optax.GradientTransformation, lr: float | jax.Array, recipe: Recipe | None
) -> optax.GradientTransformation:
    """``direction`` then the rate: ``-lr u`` without a recipe (optax's
    ``scale_by_learning_rate``), else ``schedules.descent`` on the recipe's schedule and
    decay."""
    if recipe is None:
        return optax.chain(direction, optax.scale_by_learning_rate(lr))
    factor = schedule_factor(recipe.schedule, recipe.total, recipe.warmup)
    return descent(direction, lr, factor, recipe.weight_decay, recipe.decay)


def clipped(
    transform: optax.GradientTransformation, recipe: Recipe | None
) -> optax.GradientTransformation:
    """``transform`` after the recipe's global-norm clipping (none without a recipe)."""
    if recipe is None:
        return transform
    return optax.chain(optax.clip_by_global_norm(recipe.clip), transform)


@register_optimizer("adam")
@dataclass(frozen=True)
class Adam:
    """Adam (Kingma & Ba 2015) at its paper's betas (module docstring)."""

    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8

    def direction(self) -> optax.GradientTransformation:
        """Adam's ``u`` (bias-corrected moments, before the rate)."""
        return optax.scale_by_adam(b1=self.b1, b2=self.b2, eps=self.eps)

    def build(self, lr: float | jax.Array, recipe: Recipe | None) -> optax.GradientTransformation:
        return clipped(step(self.direction(), lr, recipe), recipe)


@register_optimizer("adamw")
@dataclass(frozen=True)
class AdamW(Adam):
    """Adam's direction at 14's betas (0.9, 0.95), decayed by the recipe (module docstring)."""

    b2: float = 0.95


#: The parameters Muon updates: the hidden matrices of every block (by their leaf name).
MUON_PARAMS = frozenset({"W_Q", "W_K", "W_V", "W_O", "W_1", "W_2"})
#: Moonlight's RMS of a Muon update, matched to AdamW's (Liu et al. 2025, sec. 2.2).
CONSISTENT_RMS = 0.2


def muon_labels(params) -> object:
    """``"muon"`` for each leaf of ``params`` named in ``MUON_PARAMS`` and 2-D, ``"adamw"``
    for every other leaf (embeddings, the head, gains, a mechanism's scalars)."""

    def label(path, leaf) -> str:
        name = getattr(path[-1], "key", None) if path else None
        return "muon" if name in MUON_PARAMS and jnp.ndim(leaf) == 2 else "adamw"

    return jax.tree_util.tree_map_with_path(label, params)


def _matrices(updates) -> object:
    """Each Muon leaf as a matrix ``[fan_in, fan_out]`` (``x W``: axis 0 is reduced), the
    partition's masked leaves kept masked."""
    return jax.tree.map(lambda u: MuonDimensionNumbers(reduction_axis=0, output_axis=1), updates)


def consistent_rms(rms: float = CONSISTENT_RMS) -> optax.GradientTransformation:
    """Scale each 2-D update ``[fan_in, fan_out]`` by ``rms sqrt(max(fan_in, fan_out))``: an
    orthogonal update (every singular value 1) then has RMS ``rms``."""

    def update(updates, state, params=None):
        del params
        scaled = jax.tree.map(lambda u: u * (rms * math.sqrt(max(u.shape[-2:]))), updates)
        return scaled, state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def muon_direction(beta: float = 0.95, rms: float = CONSISTENT_RMS) -> optax.GradientTransformation:
    """Muon's update ``u_M`` (before the rate): Nesterov momentum, five Newton-Schulz steps,
    RMS matched (``consistent_rms``)."""
    return optax.chain(
        scale_by_muon(beta=beta, nesterov=True, weight_dimension_numbers=_matrices),
        consistent_rms(rms),
    )


@register_optimizer("muon")
@dataclass(frozen=True)
class Muon:
    """Muon on the hidden matrices, ``adamw`` on the rest at ``side_lr`` (None: the same
    rate, Moonlight's) (module docstring)."""

    beta: float = 0.95
    rms: float = CONSISTENT_RMS
    side_lr: float | None = None

    def build(self, lr: float | jax.Array, recipe: Recipe | None) -> optax.GradientTransformation:
        side = lr if self.side_lr is None else self.side_lr
        sides = {"muon": step(muon_direction(self.beta, self.rms), lr, recipe),
                 "adamw": step(AdamW().direction(), side, recipe)}  # fmt: skip
        return clipped(optax.partition(sides, muon_labels), recipe)


@register_optimizer("lion")
@dataclass(frozen=True)
class Lion:
    """Lion (Chen et al. 2023) at its paper's betas (module docstring)."""

    b1: float = 0.9
    b2: float = 0.99

    def build(self, lr: float | jax.Array, recipe: Recipe | None) -> optax.GradientTransformation:
        return clipped(step(optax.scale_by_lion(b1=self.b1, b2=self.b2), lr, recipe), recipe)

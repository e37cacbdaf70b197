"""The language model's optimizer seam: ``make_optimizer(name, lr, ...)`` is the one switch
from a configuration to an ``optax.GradientTransformation`` (as maxtext's
``get_optimizer``). The peak rate ``lr`` may be traced, so lanes of different rates share a
compiled program; the schedule, clipping and weight decay are 14's for both
(``attnlab.lm.optim``).

``adamw``: 14's AdamW (``attnlab.lm.optim.adamw``).

``muon``: Muon (Jordan 2024; Liu et al. 2025, "Muon is Scalable for LLM Training") on the
hidden matrices, 14's AdamW on everything else, routed by name (``muon_labels``): a
transformer's hidden 2-D matrices ``W_Q, W_K, W_V, W_O, W_1, W_2`` take Muon; the token and
position embeddings, the output head, the LayerNorm gains and every mechanism scalar take
AdamW. (``optax.contrib.muon`` routes every 2-D array to Muon by default, the embeddings and
the head included, and its Adam side is not 14's: Nesterov, ``b2`` 0.999, decay times the
rate.) One step on gradients ``g``, with the schedule ``s(t)`` and peak rate ``eta``:

    g      <- g min(1, c / |g|_2)                          (global-norm clipping at c)
    u_M    <- NS5(m_t) sqrt(max(fan_in, fan_out)) r         (Muon: Nesterov momentum m_t,
                                                             beta 0.95, orthogonalised by
                                                             five Newton-Schulz steps, scaled
                                                             to RMS r = CONSISTENT_RMS)
    u_A    <- Adam(g; 0.9, 0.95, 1e-8)                      (the rest, as 14)
    theta  <- theta - eta s(t) u_M - (decay)                (Muon's matrices)
    theta  <- theta - eta_A s(t) u_A - (decay)              (the rest)

with the decay of ``attnlab.lm.optim`` (independent or coupled, matrices only: the gains
are not decayed) at each side's own rate. ``eta_A`` is ``eta`` (``side_lr`` None:
Moonlight's recipe, one rate for both sides) or a rate of its own (``side_lr``): at
``eta = 0.3`` one shared rate trains the embeddings, head and LayerNorm gains at 30x
AdamW's best rate, whose gains then grow the logits.

The RMS matching (Moonlight's ``0.2 sqrt(max(A, B))``, ``optax.contrib.muon``'s
``consistent_rms``) makes a Muon update's RMS about AdamW's, so that Muon can take AdamW's
rate and decay (Liu et al. 2025, sec. 2.2).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax
from optax.contrib import MuonDimensionNumbers, scale_by_muon

from attnlab.lm.optim import adam_direction, adamw, descent, schedule_factor

#: The optimizers ``make_optimizer`` knows.
OPTIMIZERS = ("adamw", "muon")
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


def muon_direction(beta: float = 0.95) -> optax.GradientTransformation:
    """Muon's update ``u_M`` (before the rate): Nesterov momentum, five Newton-Schulz steps,
    RMS matched (``consistent_rms``)."""
    return optax.chain(
        scale_by_muon(beta=beta, nesterov=True, weight_dimension_numbers=_matrices),
        consistent_rms(),
    )


def make_optimizer(
    name: str,
    lr: float | jax.Array,
    total: int,
    warmup: int,
    weight_decay: float = 1e-4,
    clip: float = 1.0,
    schedule: str = "cosine",
    decay: str = "independent",
    side_lr: float | None = None,
) -> optax.GradientTransformation:
    """The optimizer ``name`` (``OPTIMIZERS``) at peak rate ``lr`` over ``total`` steps
    with ``warmup``, on the schedule ``schedule`` with the decay ``decay``
    (``attnlab.lm.optim``), global-norm clipping at ``clip``; under ``muon`` the AdamW side
    at ``side_lr`` (None: ``lr``, Moonlight's). ``ValueError`` for another name, or a
    ``side_lr`` given to ``adamw`` (it has one rate)."""
    if name == "adamw":
        if side_lr is not None:
            raise ValueError("side_lr is Muon's AdamW side's rate; adamw has one rate, lr")
        return adamw(lr, total, warmup, weight_decay, clip, schedule=schedule, decay=decay)
    if name == "muon":
        factor = schedule_factor(schedule, total, warmup)
        side = lr if side_lr is None else side_lr
        step = optax.partition(
            {"muon": descent(muon_direction(), lr, factor, weight_decay, decay),
             "adamw": descent(adam_direction(), side, factor, weight_decay, decay)},
            muon_labels,
        )  # fmt: skip
        return optax.chain(optax.clip_by_global_norm(clip), step)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")

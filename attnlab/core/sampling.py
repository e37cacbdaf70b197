"""Monte-Carlo drivers for the static measurements (experiments 01-03).

The article's model: a query ``q`` and keys ``k_1 .. k_n`` with independent standard normal
entries in ``d_k`` dimensions. Two samplers draw the unscaled logits ``z_i = q . k_i``:

* ``direct`` (the article's method) draws ``q`` and ``K`` and forms ``K q``: O(n d_k).
* ``exact`` draws from the exact law of the logits given ``q``: conditionally on ``q`` they
  are i.i.d. ``N(0, |q|^2)`` with ``|q|^2 ~ chi^2(d_k)``, so ``z_i = |q| g_i`` with
  ``g_i ~ N(0, 1)``: O(n) per trial whatever ``d_k``.

Both variants of attention are evaluated on the *same* draws (common random numbers), as in
the article: scaled attention sees ``z / sqrt(d_k)``, unscaled attention sees ``z``.

Trial ``t`` at head width ``d_k`` uses the key ``fold_in(fold_in(seed_key, d_k), t)``, so a
result depends on the seed, ``d_k`` and the trial count only, not on chunking or on the
number of devices (beyond float32 rounding, see ``attnlab.core.parallel``). Random numbers are
generated with threefry's non-partitionable layout, which is twice as fast on CPU;
partitioning one large random array is what that layout cannot do, and we never need it
because every trial draws from its own key.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from attnlab.core.attention import masked_softmax
from attnlab.core.parallel import chunked_map
from attnlab.core.softmax_stats import entropy, jacobian_frobenius_norm, max_weight

Sampler = Literal["direct", "exact"]
SAMPLERS: tuple[str, ...] = ("direct", "exact")

#: Variants of the static experiments and the logit multiplier each applies to ``q . k``
#: (a function of d_k, which may be a traced scalar).
VARIANT_SCALES: dict[str, Callable[[jax.Array], jax.Array]] = {
    "scaled": lambda d_k: 1.0 / jnp.sqrt(d_k),
    "unscaled": lambda d_k: jnp.ones_like(d_k),
}

#: Elements of the largest intermediate (``chunk * n_keys * d_k``) per compiled call:
#: 2**23 float32 = 32 MiB, which keeps peak memory far below 2 GB at any d_k.
CHUNK_ELEMENTS = 2**23


def trial_keys(key: jax.Array, d_k: int, trials: int) -> jax.Array:
    """One PRNG key per trial: ``fold_in(fold_in(key, d_k), t)`` for ``t < trials``."""
    per_dk = jax.random.fold_in(key, d_k)
    return jax.vmap(lambda t: jax.random.fold_in(per_dk, t))(jnp.arange(trials))


def chunk_for(elements_per_item: int) -> int:
    """Items per compiled call so that one call touches about ``CHUNK_ELEMENTS`` numbers."""
    return max(1, CHUNK_ELEMENTS // max(1, elements_per_item))


def direct_logits(key: jax.Array, d_k: int, n_keys: int) -> jax.Array:
    """Unscaled logits ``K q`` for ``q ~ N(0, I_dk)`` and ``n_keys`` rows ``k_i ~ N(0, I_dk)``."""
    kq, kk = jax.random.split(key)
    q = jax.random.normal(kq, (d_k,))
    keys = jax.random.normal(kk, (n_keys, d_k))
    return keys @ q


def exact_logits(key: jax.Array, d_k: int | jax.Array, n_keys: int) -> jax.Array:
    """Unscaled logits drawn from their exact law: ``|q| g`` with ``|q|^2 ~ chi^2(d_k)``.

    ``d_k`` may be traced, so one compiled program serves every head width.
    """
    kr, kg = jax.random.split(key)
    norm_q = jnp.sqrt(jax.random.chisquare(kr, d_k))
    return norm_q * jax.random.normal(kg, (n_keys,))


LOGIT_SAMPLERS: dict[str, Callable[[jax.Array, int, int], jax.Array]] = {
    "direct": direct_logits,
    "exact": exact_logits,
}


def map_trials(fn: Callable, items, elements_per_item: int, on_chunk) -> np.ndarray:
    """``chunked_map`` of ``fn`` over ``items`` (one per trial, e.g. ``trial_keys``) in chunks
    of about ``CHUNK_ELEMENTS`` numbers, with the PRNG bits every static experiment draws
    (``threefry_partitionable(False)``)."""
    with jax.threefry_partitionable(False):
        return chunked_map(fn, items, chunk_for(elements_per_item), on_chunk)


@functools.cache
def _dot_product_fn(d_k: int) -> Callable[[jax.Array], jax.Array]:
    def one(key: jax.Array) -> jax.Array:
        return direct_logits(key, d_k, 1)[0]

    return one


def dot_product_samples(
    key: jax.Array, d_k: int, samples: int, on_chunk: Callable[[int], None] | None = None
) -> np.ndarray:
    """``samples`` independent products ``q . k`` of standard normal vectors (experiment 01)."""
    keys = trial_keys(key, d_k, samples)
    return map_trials(_dot_product_fn(d_k), keys, 2 * d_k, on_chunk)


@functools.partial(jax.jit, static_argnums=(2,))
def _exact_products(key: jax.Array, d_k: jax.Array, count: int) -> jax.Array:
    """``count`` independent ``q . k`` from their exact law ``|q| g`` (one logit per q)."""
    chi2_key, normal_key = jax.random.split(key)
    norm_q = jnp.sqrt(jax.random.chisquare(chi2_key, d_k, (count,)))
    return norm_q * jax.random.normal(normal_key, (count,))


def exact_dot_product_samples(
    key: jax.Array,
    d_k: int,
    samples: int,
    on_chunk: Callable[[int], None] | None = None,
    chunk: int = 1_000_000,
) -> np.ndarray:
    """``samples`` independent products ``q . k`` drawn from their exact law.

    Given ``q``, ``q . k ~ N(0, |q|^2)`` with ``|q|^2 ~ chi^2(d_k)``, so each product costs
    O(1) instead of O(d_k): the high-precision column of experiment 01. Chunk ``c`` draws
    from ``fold_in(key, c)``, one compiled program for every d_k.
    """
    out = []
    for c, start in enumerate(range(0, samples, chunk)):
        count = min(chunk, samples - start)
        draws = _exact_products(jax.random.fold_in(key, c), jnp.float32(d_k), chunk)
        out.append(np.asarray(draws)[:count])
        if on_chunk is not None:
            on_chunk(count)
    return np.concatenate(out)


@dataclass(frozen=True)
class RowStatistics:
    """Per-trial statistics of softmax rows, each ``[variants, trials]`` float32."""

    variants: tuple[str, ...]
    max_weight: np.ndarray
    entropy: np.ndarray
    jacobian_fro: np.ndarray


@functools.cache
def _row_statistics_fn(
    sampler: str, n_keys: int, static_d_k: int | None, variants: tuple[str, ...]
) -> Callable:
    """The per-trial function of ``softmax_row_statistics``, one object per configuration
    so that its compilation is reused. ``static_d_k`` None: d_k is read from the item
    (traced), so the exact sampler compiles one program for every head width."""
    draw = LOGIT_SAMPLERS[sampler]

    def one(item: tuple[jax.Array, jax.Array]) -> jax.Array:
        key, width = item  # width is d_k as a traced float
        z = draw(key, width if static_d_k is None else static_d_k, n_keys)
        scales = jnp.stack([VARIANT_SCALES[v](width) for v in variants])
        p = masked_softmax(scales[:, None] * z[None, :])
        return jnp.stack([max_weight(p), entropy(p), jacobian_frobenius_norm(p)], axis=-1)

    return one


def softmax_row_statistics(
    key: jax.Array,
    d_k: int,
    n_keys: int,
    trials: int,
    sampler: Sampler = "direct",
    variants: Sequence[str] = tuple(VARIANT_SCALES),
    on_chunk: Callable[[int], None] | None = None,
) -> RowStatistics:
    """Max weight, entropy and Jacobian norm of ``softmax(c z)`` for each variant's ``c``.

    Every trial draws one row of ``n_keys`` unscaled logits with ``sampler`` and evaluates
    all variants on it.
    """
    exact = sampler == "exact"
    one = _row_statistics_fn(sampler, n_keys, None if exact else d_k, tuple(variants))
    items = (trial_keys(key, d_k, trials), jnp.full((trials,), d_k, jnp.float32))
    elements = n_keys * (1 if exact else d_k) + len(variants) * n_keys
    stats = np.moveaxis(map_trials(one, items, elements, on_chunk), 0, 1)  # [V, trials, 3]
    return RowStatistics(tuple(variants), stats[..., 0], stats[..., 1], stats[..., 2])

"""QK-Clip: the optimizer's side owns the attention temperature.

After each optimizer step, for each head ``h`` with ``S_h`` its largest pre-softmax logit
in that step's forward pass (signed: the largest value the softmax saw),

    gamma_h = tau / S_h  where S_h > tau, else 1,
    W_q[:, h] <- gamma_h ** alpha        W_q[:, h]
    W_k[:, h] <- gamma_h ** (1 - alpha)  W_k[:, h],

so that the head's bilinear logits ``q . k`` (times any fixed divisor) are multiplied by
``gamma_h`` and its largest logit on that batch becomes ``tau``. The forward and backward
passes are unchanged. Kimi K2 (Moonshot AI 2025, arXiv 2507.20534: ``alpha`` 0.5, ``tau``
100, with the Muon optimizer); Megatron-LM's ``qk_clip`` (``qk_clip_alpha`` splits the
factor between W_q and W_k).

Grouped-query attention (``n_kv_heads < n_heads``; query head ``h`` reads key group
``h // (n_heads / n_kv_heads)``, as Hugging Face's ``repeat_kv``): Megatron's rule. Each
group's factor comes from the largest ``S`` among its query heads,
``gamma_g = min_{h in g} gamma_h``; it scales the group's key columns by
``gamma_g ** (1 - alpha)`` and each of its query heads' columns by ``gamma_g ** alpha``: the
group's most extreme head reaches ``tau``, the others stay at most ``tau``.

Heads (groups) at or below ``tau`` are left untouched, bit for bit. The logits' sign is
kept: a head whose logits are all negative is never clipped.

What the rule needs is checked (a ValueError naming the argument): ``tau`` at least
float32's smallest normal number (``check_tau``: the factors are float32, where a
smaller one, 0 or less zeroes the heads or makes them NaN; ``inf`` clips none), ``0 <=
alpha <= 1`` (outside, one of W_q, W_k grows), floating weights (integers round the
factors away) and ``n_heads >= 1`` dividing the weights' width.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

Array = jax.Array
#: The smallest positive normal float32: a ``tau`` below it is subnormal or rounds to 0.
FLOAT32_TINY = float(np.finfo(np.float32).tiny)
FLOAT32_MAX = float(np.finfo(np.float32).max)


def _concrete(value: object) -> bool:
    """Whether ``value`` is a number known now (not a tracer inside ``jit``)."""
    return not isinstance(value, jax.core.Tracer)


def _real(value: object) -> float | None:
    """``value`` as a float where it is one real number (a Python or NumPy number, or a
    0-d array of one), else None (text, a bool, an array of several)."""
    array = None if isinstance(value, str) else np.asarray(value)
    if array is None or array.ndim or array.dtype.kind not in "fiu":
        return None
    return float(array)


def check_tau(tau: object, name: str = "tau", finite: bool = True) -> float:
    """``tau`` as a float, or a ValueError naming ``name`` unless it is a real number
    ``>= FLOAT32_TINY`` (the factors ``tau / S_h`` are float32, where a smaller ``tau`` is
    subnormal or 0) and, with ``finite``, ``<= FLOAT32_MAX`` (float32 holds it); without,
    a larger one or ``inf`` is taken: it clips no head."""
    value = _real(tau)
    top = FLOAT32_MAX if finite else math.inf
    if value is None or not FLOAT32_TINY <= value <= top:  # NaN fails both comparisons
        bound = (
            f"a number float32 holds as a normal number ({FLOAT32_TINY:g} to {FLOAT32_MAX:g})"
            if finite
            else f"a number >= {FLOAT32_TINY:g}, float32's smallest normal (inf clips no head)"
        )
        raise ValueError(f"{name} must be {bound}, got {tau!r}")
    return value


def clip_factors(max_logits: ArrayLike, tau: float) -> Array:
    """``gamma_h = tau / S_h`` where ``S_h > tau``, else 1 (``[n_heads]``); 1 where ``S_h``
    is not finite (a diverged step is left to the divergence record)."""
    if _concrete(tau):
        check_tau(tau, "clip_factors: tau", finite=False)
    s = jnp.asarray(max_logits, jnp.float32)
    clipped = jnp.isfinite(s) & (s > tau)
    return jnp.where(clipped, tau / jnp.where(clipped, s, 1.0), 1.0)


def _scaled_columns(w: Array, factors: Array, heads: int, clipped: Array) -> Array:
    """``w`` ``[d_model, heads * d_head]`` with head ``i``'s columns times ``factors[i]``
    where ``clipped[i]``, the others as they were, bit for bit."""
    blocks = w.reshape(w.shape[0], heads, -1)
    scaled = blocks * factors[None, :, None].astype(w.dtype)
    return jnp.where(clipped[None, :, None], scaled, blocks).reshape(w.shape)


def qk_clip(
    w_q: ArrayLike,
    w_k: ArrayLike,
    max_logits: ArrayLike,
    *,
    tau: float,
    n_heads: int,
    n_kv_heads: int | None = None,
    alpha: float = 0.5,
) -> tuple[Array, Array]:
    """``(w_q, w_k)`` after QK-Clip (module docstring): ``w_q`` ``[d_model, n_heads *
    d_head]``, ``w_k`` ``[d_model, n_kv_heads * d_head]``, ``max_logits`` ``[n_heads]``, the
    largest logit of each head as the softmax saw it in this step's forward pass."""
    w_q, w_k = jnp.asarray(w_q), jnp.asarray(w_k)
    if _concrete(tau):
        check_tau(tau, "qk_clip: tau", finite=False)
    if _concrete(alpha) and not (_real(alpha) is not None and 0 <= _real(alpha) <= 1):
        raise ValueError(f"qk_clip: alpha must be a number in [0, 1], got {alpha!r}")
    for name, w in (("w_q", w_q), ("w_k", w_k)):
        if not jnp.issubdtype(w.dtype, jnp.floating):
            raise ValueError(f"qk_clip: {name} must hold floating-point weights, not {w.dtype}")
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    for name, n in (("n_heads", n_heads), ("n_kv_heads", n_kv)):
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise ValueError(f"qk_clip: {name} must be an integer >= 1, got {n!r}")
    if n_heads % n_kv:
        raise ValueError(f"qk_clip: n_heads {n_heads} is not a multiple of n_kv_heads {n_kv}")
    if w_q.shape[-1] % n_heads or w_k.shape[-1] != w_q.shape[-1] // n_heads * n_kv:
        raise ValueError(
            f"qk_clip: w_q {w_q.shape} and w_k {w_k.shape} do not hold {n_heads} query and "
            f"{n_kv} key heads of one width"
        )
    gamma = clip_factors(max_logits, tau)
    group = gamma.reshape(n_kv, n_heads // n_kv).min(axis=1)  # [n_kv]
    clipped_group = group < 1.0
    per_query = jnp.repeat(group, n_heads // n_kv)  # each query head its group's factor
    clipped_query = jnp.repeat(clipped_group, n_heads // n_kv)
    new_q = _scaled_columns(w_q, per_query**alpha, n_heads, clipped_query)
    new_k = _scaled_columns(w_k, group ** (1.0 - alpha), n_kv, clipped_group)
    return new_q, new_k

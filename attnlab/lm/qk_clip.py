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
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

Array = jax.Array


def clip_factors(max_logits: ArrayLike, tau: float) -> Array:
    """``gamma_h = tau / S_h`` where ``S_h > tau``, else 1 (``[n_heads]``); 1 where ``S_h``
    is not finite (a diverged step is left to the divergence record)."""
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
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
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

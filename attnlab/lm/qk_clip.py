"""QK-Clip: the optimizer's side owns the attention temperature.

After each optimizer step, for each head ``h`` with ``S_h`` its largest pre-softmax logit
in that step's forward pass (signed: the largest value the softmax saw),

    gamma_h = tau / S_h  where S_h > tau, else 1,
    W_q[:, h] <- gamma_h ** alpha        W_q[:, h]
    W_k[:, h] <- gamma_h ** (1 - alpha)  W_k[:, h],

so that the head's bilinear logits ``q . k`` (times any fixed divisor) are multiplied by
``gamma_h``. The forward and backward passes are unchanged. What that bounds, exactly:
the weights the forward saw, clipped, would give a largest logit of ``tau`` on that batch;
but in a training loop ``gamma_h`` comes from the forward before the step's update and is
applied after it, so the next forward's largest logit is about ``tau * S'_h / S_h``, with
``S'_h`` what the updated, unclipped weights give: ``tau`` times one update's growth, not
``tau``. A head whose logits are normalised (QK-norm, cosine attention) is not bounded at
all: scaling W_q, W_k changes none of its logits. Kimi K2 (Moonshot AI 2025, arXiv
2507.20534: ``alpha`` 0.5, ``tau`` 100, with the Muon optimizer); Megatron-LM's
``qk_clip`` (``qk_clip_alpha`` splits the factor between W_q and W_k).

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
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike

from attnlab.core.context import causal_context
from attnlab.core.elasticity import logit_elasticity
from attnlab.core.mechanism import Mechanism

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
    """``w`` ``[d_model, heads * d_head]`` (or ``[d_model, heads, d_head]``) with head
    ``i``'s columns times ``factors[i]`` where ``clipped[i]``, the others as they were, bit
    for bit."""
    blocks = w.reshape(w.shape[0], heads, -1)
    scaled = blocks * factors[None, :, None].astype(w.dtype)
    return jnp.where(clipped[None, :, None], scaled, blocks).reshape(w.shape)


def _heads_of(w: Array, name: str) -> tuple[int, int]:
    """``(width, heads or 0)`` of a projection: ``[d_model, width]`` (heads 0: unknown
    here) or ``[d_model, heads, d_head]``; a ValueError naming ``name`` otherwise."""
    if w.ndim == 2:
        return w.shape[1], 0
    if w.ndim == 3:
        return w.shape[1] * w.shape[2], w.shape[1]
    raise ValueError(f"qk_clip: {name} must be [d_model, heads * d_head] or [d_model, heads, "
                     f"d_head], got shape {w.shape}")  # fmt: skip


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
    d_head]`` or ``[d_model, n_heads, d_head]``, ``w_k`` ``[d_model, n_kv_heads * d_head]``
    or ``[d_model, n_kv_heads, d_head]`` (each returned in its own shape), ``max_logits``
    ``[n_heads]``, the largest logit of each head as the softmax saw it in this step's
    forward pass."""
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
    (q_width, q_heads), (k_width, k_heads) = _heads_of(w_q, "w_q"), _heads_of(w_k, "w_k")
    if (
        q_width % n_heads
        or k_width != q_width // n_heads * n_kv
        or q_heads not in (0, n_heads)
        or k_heads not in (0, n_kv)
    ):
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


def qk_clip_biases(
    b_q: ArrayLike,
    b_k: ArrayLike,
    max_logits: ArrayLike,
    *,
    tau: float,
    n_heads: int,
    n_kv_heads: int | None = None,
    alpha: float = 0.5,
) -> tuple[Array, Array]:
    """``(b_q, b_k)`` after QK-Clip, for projections with biases (``q = x W_q + b_q``): each
    head's (group's) bias times the factor ``qk_clip`` gives its columns, so that with both
    clipped the head's q and k, and so its bilinear logits, scale exactly as without
    biases. ``b_q`` ``[n_heads * d_head]`` or ``[n_heads, d_head]``, ``b_k`` likewise with
    ``n_kv_heads``; the same checks as ``qk_clip``."""
    new_q, new_k = qk_clip(jnp.asarray(b_q)[None], jnp.asarray(b_k)[None], max_logits, tau=tau,
                           n_heads=n_heads, n_kv_heads=n_kv_heads, alpha=alpha)  # fmt: skip
    return new_q[0], new_k[0]


#: The rows and keys of the fixed q, k on which ``clip_handle`` reads a mechanism.
HANDLE_LENGTH = 16


def clip_handle(mechanism: Mechanism, d_head: int, n_heads: int = 1) -> float:
    """How much QK-Clip can move ``mechanism``'s logits: their elasticity to the scale of q
    and k at ``alpha = 1`` (``attnlab.core.elasticity``, causal, head 0 of ``n_heads``) on
    fixed standard-normal q, k ``[HANDLE_LENGTH, d_head]`` (key 0). 2 for bilinear logits
    (scaling W_q, W_k by ``gamma**a``, ``gamma**(1-a)`` scales them by ``gamma``); 0 where
    the mechanism normalises q and k (QK-norm, cosine): the clip changes none of them."""
    q, k = jax.random.normal(jax.random.key(0), (2, HANDLE_LENGTH, d_head), jnp.float32)
    mask = jnp.tril(jnp.ones((HANDLE_LENGTH, HANDLE_LENGTH), bool))
    context = causal_context(HANDLE_LENGTH, n_heads)._replace(head=jnp.int32(0))
    return float(logit_elasticity(mechanism, q, k, (1.0,), None, mask, context)[0])


class QKClipState(NamedTuple):
    """``qk_clip_transform``'s state: none (the clip reads only this step's logits)."""


def qk_clip_transform(
    tau: float,
    n_heads: int,
    layers: Sequence[tuple[Sequence[str], Sequence[str]]],
    *,
    n_kv_heads: int | None = None,
    alpha: float = 0.5,
) -> optax.GradientTransformationExtraArgs:
    """QK-Clip as the last link of an optax chain: ``optax.chain(optimizer,
    qk_clip_transform(tau, n_heads, layers))``, its ``update`` called with
    ``max_logits=`` (``[n_layers, n_heads]``, this step's forward's largest logit per
    head, in the order of ``layers``) and ``params``.

    ``layers`` names each attention layer's ``(W_q, W_k)`` by their key paths in the
    parameters (``(("layer0", "w_q"), ("layer0", "w_k"))``, nested dicts). The updates
    that come in are changed only at those leaves, to ``u' = qk_clip(p + u) - p``, so that
    ``optax.apply_updates(params, u')`` is ``c = qk_clip(p + u)`` up to the two roundings
    of ``p + (c - p)`` in float32: ``|error| <= eps32 (|c| + |c - p|)`` per element."""
    check_tau(tau, "qk_clip_transform: tau", finite=False)
    layers = [(tuple(q), tuple(k)) for q, k in layers]
    if not layers:
        raise ValueError("qk_clip_transform: layers names no (W_q, W_k) pair")

    def init(params: object) -> QKClipState:
        return QKClipState()

    def update(updates, state, params=None, *, max_logits, **extra):
        if params is None:
            raise ValueError("qk_clip_transform: update needs params (the weights it clips)")
        heads = jnp.asarray(max_logits)
        if heads.shape != (len(layers), n_heads):
            raise ValueError(
                f"qk_clip_transform: max_logits must be [{len(layers)}, {n_heads}] (layers, "
                f"heads), got {heads.shape}"
            )
        for i, (q_path, k_path) in enumerate(layers):
            p_q, p_k = _at(params, q_path), _at(params, k_path)
            u_q, u_k = _at(updates, q_path), _at(updates, k_path)
            new_q, new_k = qk_clip(p_q + u_q, p_k + u_k, heads[i], tau=tau, n_heads=n_heads,
                                   n_kv_heads=n_kv_heads, alpha=alpha)  # fmt: skip
            updates = _replaced(updates, q_path, new_q - p_q)
            updates = _replaced(updates, k_path, new_k - p_k)
        return updates, state

    return optax.GradientTransformationExtraArgs(init, update)


def _at(tree: object, path: tuple[str, ...]) -> Array:
    """The leaf of nested mappings ``tree`` at key path ``path``; a ValueError naming it."""
    for key in path:
        if not isinstance(tree, Mapping) or key not in tree:
            raise ValueError(f"qk_clip_transform: no parameter at {'/'.join(path)}")
        tree = tree[key]
    return tree


def _replaced(tree: Mapping, path: tuple[str, ...], leaf: Array) -> dict:
    """A copy of nested mappings ``tree`` with ``leaf`` at ``path`` (the rest shared)."""
    head, *rest = path
    return {**tree, head: _replaced(tree[head], tuple(rest), leaf) if rest else leaf}

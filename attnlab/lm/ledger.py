"""The temperature ledger: per head, what sets the scale of the logits the softmax sees, as
a researcher logs it from their own training loop.

For one layer with queries ``q`` ``[B, H, T, d]``, keys ``k`` ``[B, H_kv, T, d]`` (query head
``h`` reads key group ``h // (H / H_kv)``), logits ``z = scale * q . k`` over the keys each
query may attend (causal: ``j <= i``), and the projections ``W_q`` ``[D, H d]`` and ``W_k``
``[D, H_kv d]``, each head's row of the ledger holds

    max_logit        max z over the allowed entries (signed: QK-Clip's S_h)
    max_abs_logit    max |z|
    logit_std        the mean over rows of the std of z over the row's allowed keys
    entropy          the mean over rows of -sum_j p_j ln p_j, p = softmax(z) (nats)
    spectral_norm    sigma_max(W_q,h W_k,h^T): the bilinear form that, with ``scale`` and the
                     mechanism, sets the logits' scale (``z = scale x W_q,h W_k,h^T y``)
    clip_factor      QK-Clip's gamma_h at ``tau`` (``attnlab.lm.qk_clip``), 1 where none

For a mechanism other than scaled dot products, pass its logits as ``logits`` instead; the
spectral norm still says how large the weights make q . k.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from attnlab.core.attention import masked_softmax
from attnlab.lm.qk_clip import clip_factors

Array = jax.Array
#: The ledger's columns, in order.
LEDGER_COLUMNS = (
    "max_logit",
    "max_abs_logit",
    "logit_std",
    "entropy",
    "spectral_norm",
    "clip_factor",
)


def bilinear_spectral_norms(w_q: ArrayLike, w_k: ArrayLike, n_heads: int) -> Array:
    """``sigma_max(W_q,h W_k,h^T)`` per query head ``[n_heads]`` (its key group's W_k),
    computed on the ``d x d`` core: with ``W_q,h = Q_q R_q`` and ``W_k,h = Q_k R_k``
    (reduced QR), ``W_q,h W_k,h^T = Q_q (R_q R_k^T) Q_k^T`` has the singular values of
    ``R_q R_k^T``."""
    w_q, w_k = jnp.asarray(w_q, jnp.float32), jnp.asarray(w_k, jnp.float32)
    d = w_q.shape[-1] // n_heads
    n_kv = w_k.shape[-1] // d
    q_heads = jnp.moveaxis(w_q.reshape(w_q.shape[0], n_heads, d), 1, 0)  # [H, D, d]
    k_heads = jnp.moveaxis(w_k.reshape(w_k.shape[0], n_kv, d), 1, 0)
    k_heads = jnp.repeat(k_heads, n_heads // n_kv, axis=0)
    r_q = jnp.linalg.qr(q_heads, mode="r")
    r_k = jnp.linalg.qr(k_heads, mode="r")
    return jnp.linalg.svd(r_q @ jnp.swapaxes(r_k, -1, -2), compute_uv=False)[..., 0]


def temperature_ledger(
    q: ArrayLike,
    k: ArrayLike,
    w_q: ArrayLike,
    w_k: ArrayLike,
    *,
    scale: float | None = None,
    causal: bool = True,
    tau: float | None = None,
    logits: ArrayLike | None = None,
) -> dict[str, Array]:
    """The module docstring's ledger of one layer: each of ``LEDGER_COLUMNS`` ``[H]``.
    ``scale`` defaults to ``1 / sqrt(d)``; ``logits`` ``[B, H, T, T]``, where given, are the
    logits the softmax sees (a mechanism's own) instead of ``scale * q . k``."""
    q, k = jnp.asarray(q, jnp.float32), jnp.asarray(k, jnp.float32)
    n_heads, length, d = q.shape[1], q.shape[2], q.shape[3]
    if logits is None:
        keys = jnp.repeat(k, n_heads // k.shape[1], axis=1)
        s = d**-0.5 if scale is None else scale
        z = s * jnp.einsum("bhqd,bhkd->bhqk", q, keys)
    else:
        z = jnp.asarray(logits, jnp.float32)
    allowed = (
        jnp.tril(jnp.ones((length, z.shape[-1]), bool)) if causal else jnp.ones(z.shape[-2:], bool)
    )
    count = allowed.sum(-1)  # keys per row
    heads = (0, 2, 3)  # reduce over batch and the map, per head
    max_logit = jnp.max(jnp.where(allowed, z, -jnp.inf), axis=heads)
    max_abs = jnp.max(jnp.where(allowed, jnp.abs(z), 0.0), axis=heads)
    mean = jnp.sum(jnp.where(allowed, z, 0.0), -1) / count
    var = jnp.sum(jnp.where(allowed, (z - mean[..., None]) ** 2, 0.0), -1) / count
    p = masked_softmax(z, allowed)
    row_entropy = -jnp.sum(
        jnp.where(allowed & (p > 0), p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), -1
    )
    factor = jnp.ones(n_heads) if tau is None else clip_factors(max_logit, tau)
    return {
        "max_logit": max_logit,
        "max_abs_logit": max_abs,
        "logit_std": jnp.mean(jnp.sqrt(var), axis=(0, 2)),
        "entropy": jnp.mean(row_entropy, axis=(0, 2)),
        "spectral_norm": bilinear_spectral_norms(w_q, w_k, n_heads),
        "clip_factor": factor,
    }

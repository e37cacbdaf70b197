"""The temperature ledger of a checkpoint: per head, the factors that set the scale of the
logits the softmax sees, itemised (the language model's own ledger, measured while it
trains, is ``attnlab.lm.ledger``).

Head ``h`` of a layer of the shared decoder (``attnlab.models.decoder``; ``DecoderConfig``:
Llama, Mistral, Qwen3, OLMo 2/3, Gemma 2/3) computes, for a query at ``i`` and a key at
``j``,

    z_ij = c tanh(u_ij / c)  (no cap: z_ij = u_ij),
    u_ij = s a^2 R_i(N_q(x_i W_q,h)) . R_j(N_k(x_j W_k,h))

so its logit scale is the product of

    divisor        s = head_dim^-1/2, or Gemma's query_pre_attn_scalar^-1/2
    rope factor    a^2: YaRN's attention_factor multiplies cos and sin, so the logits by
                   its square (1 for the other rope types; ``layers.read_rope``)
    q/k norm gains g_q, g_k: RMSNorm's weights (Gemma's 1 + w), per head (Qwen3, Gemma 3)
                   or the head's slice of the full width (OLMo 2); their RMS
                   sqrt(mean(g^2)) is the ledger's entry, 1 where the family has none
    weights        sigma_max(W_q,h W_k,h^T) (GQA: the head's key group's W_k): how large
                   the projections make q . k (before norms and positions)
    soft-cap       c (Gemma 2's attn_logit_softcapping), none elsewhere; with weights and
                   text, the share of logits with |z| >= (1 - CAP_MARGIN) c says whether
                   it binds

``static_ledger`` is the part a ``config.json`` alone fixes (the divisor, ``a^2``, which q/k
norm, the cap), one row per layer; ``head_gains`` and ``spectral_norms`` the part the
weights add; ``near_cap_share`` the part the text adds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from attnlab.models.decoder_config import LAYER_TYPES, DecoderConfig

#: A logit is "near the cap" when ``|z| >= (1 - CAP_MARGIN) c``: within 10 % of it.
CAP_MARGIN = 0.1
#: ``DecoderConfig.qk_norm`` in words.
QK_NORMS = {"": "none", "head": "per head", "full": "full width"}
#: The static ledger's columns, in order (``static_ledger``).
STATIC_COLUMNS = (
    "layer", "layer_type", "heads", "kv_heads", "head_dim", "divisor", "divisor_width",
    "rope_type", "rope_theta", "rope_attention_factor_sq", "qk_norm", "softcap",
    "logit_multiplier",
)  # fmt: skip


def static_ledger(config: DecoderConfig) -> list[dict[str, Any]]:
    """The config's part of the ledger, one row per layer (``STATIC_COLUMNS``):

    ``divisor`` ``s`` and ``divisor_width`` ``s^-2`` (``head_dim``, or Gemma's
    ``query_pre_attn_scalar``), the layer's rope type and base, ``rope_attention_factor_sq``
    ``a^2``, ``qk_norm`` (``QK_NORMS``), ``softcap`` ``c`` (None: none) and
    ``logit_multiplier = s a^2``, the constant that multiplies ``q . k`` (norms' gains
    aside) before any cap. Every head of a layer shares these; the layer's type is
    ``full_attention`` or ``sliding_attention`` (``decoder_config.LAYER_TYPES``)."""
    rows = []
    for layer, rope in enumerate(config.ropes):
        factor_sq = rope.attention_factor**2
        rows.append({
            "layer": layer,
            "layer_type": (config.layer_types or LAYER_TYPES[:1] * config.n_layer)[layer],
            "heads": config.n_head,
            "kv_heads": config.n_kv_head,
            "head_dim": config.head_dim,
            "divisor": config.divisor,
            "divisor_width": config.divisor**-2,
            "rope_type": rope.rope_type,
            "rope_theta": rope.theta,
            "rope_attention_factor_sq": factor_sq,
            "qk_norm": QK_NORMS[config.qk_norm],
            "softcap": config.cap,
            "logit_multiplier": config.divisor * factor_sq,
        })  # fmt: skip
    return rows


def _rms(gain: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(np.asarray(gain, np.float64)))))


def head_gains(config: DecoderConfig, tensors: dict[str, np.ndarray]) -> np.ndarray:
    """``[layers, heads, 2]``: the RMS of each head's q and k norm gains, in float64, from
    ``q_norm.weight`` and ``k_norm.weight`` (plus ``norm_offset``: Gemma's ``1 + w``); per
    head the whole ``[head_dim]`` weight, full width (OLMo 2) the head's slice of it
    (``h d .. (h + 1) d``; keys: its group's, ``h // (H / KV)``); 1 where the family has no
    q/k norm."""
    H, d, groups = config.n_head, config.head_dim, config.n_head // config.n_kv_head
    out = np.ones((config.n_layer, H, 2))
    if not config.qk_norm:
        return out
    for layer in range(config.n_layer):
        p = f"model.layers.{layer}.self_attn."
        q = config.norm_offset + np.asarray(tensors[f"{p}q_norm.weight"], np.float64)
        k = config.norm_offset + np.asarray(tensors[f"{p}k_norm.weight"], np.float64)
        for h in range(H):
            if config.qk_norm == "full":
                g = h // groups
                out[layer, h] = _rms(q[h * d : (h + 1) * d]), _rms(k[g * d : (g + 1) * d])
            else:
                out[layer, h] = _rms(q), _rms(k)
    return out


def spectral_norms(qk: Callable[[int], tuple[np.ndarray, np.ndarray]], layers: int) -> np.ndarray:
    """``[layers, heads]``: ``sigma_max(W_Q,h W_K,h^T)`` in float64, from ``qk(layer)``, the
    family's query and key weights per head (``registry.Family.qk_weights``, each
    ``[heads, width, d]``; GQA: the head's key group). With ``W_Q,h = Q_q R_q`` and
    ``W_K,h = Q_k R_k`` (QR, orthonormal columns), ``W_Q,h W_K,h^T = Q_q (R_q R_k^T)
    Q_k^T`` has the singular values of the d x d core."""
    rows = []
    for layer in range(layers):
        wq, wk = qk(layer)
        row = []
        for h in range(wq.shape[0]):
            r_q, r_k = np.linalg.qr(wq[h], mode="r"), np.linalg.qr(wk[h], mode="r")
            row.append(np.linalg.norm(r_q @ r_k.T, 2))
        rows.append(row)
    return np.asarray(rows)


def near_cap_share(z: jax.Array, allowed: jax.Array, cap: float) -> jax.Array:
    """The share of the ``allowed`` logits of ``z`` ``[..., heads, T, T]`` with ``|z| >=
    (1 - CAP_MARGIN) cap``, per head ``[heads]`` (pooled over the leading axes, rows and
    keys)."""
    allowed = jnp.broadcast_to(allowed, z.shape)
    near = allowed & (jnp.abs(z) >= (1 - CAP_MARGIN) * cap)
    axes = tuple(i for i in range(z.ndim) if i != z.ndim - 3)
    return jnp.sum(near, axis=axes) / jnp.sum(allowed, axis=axes)

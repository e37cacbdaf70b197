"""Three mechanisms from the literature that see where a key sits or which head looks,
written with the public API only: each is a logits function whose signature names the
arguments it needs (``q_pos``, ``k_pos``, ``head``, ``n_heads``; ``attnlab.core.mechanism``),
so the model passes them and the recall task, whose slots are unordered, refuses them.

================  ==============================================================  ===========
``alibi``         ``z = q.k / sqrt(d) - m_h (i - j)``, ``m_h = 2^(-8 (h + 1) / H)``  Press et
                                                                                  al. 2022
``ssmax_causal``  ``z = s log(i + 1) q.k / sqrt(d)``, ``s`` learned: SSMax with    Nakanishi
                  each causal row's own length ``n = i + 1`` from its position    2025
``log_length``    ``z = (a log(floor((i + 1) / f) + 1) + 1) q.k / sqrt(d)``:      Llama 4
                  Llama 4's temperature tuning of the query by position           (Meta 2025)
================  ==============================================================  ===========

``i`` is the query's position, ``j`` the key's, ``h`` the head (0-based) of ``H``.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

from attnlab.core.attention import attention_logits
from attnlab.core.literature import SSMAX_INITIAL_S
from attnlab.core.mechanism import Mechanism

#: Llama 4's ``attn_scale`` (the reference implementation's default, 0.1).
LOG_LENGTH_ATTN_SCALE = 0.1
#: Llama 4's ``floor_scale`` is 8192, for contexts of 10^5-10^7 tokens: at the suite's
#: sequences (64 bytes) it would never leave 1. Declared here before any run, not fitted
#: to a result: 8, so that the temperature steps every 8 positions and reaches
#: ``0.1 ln 9 + 1 = 1.22`` at position 63 (the same share of its range as Llama 4's at
#: 8 x 8192 tokens).
LOG_LENGTH_FLOOR_SCALE = 8.0


def alibi_slope(head, n_heads):
    """ALiBi's slope of head ``h`` of ``H``: ``2^(-8 (h + 1) / H)``, the geometric sequence
    from ``2^(-8/H)`` to ``2^-8`` (Press et al. 2022, sec. 3, for ``H`` a power of two)."""
    return jnp.exp2(-8.0 * (head + 1) / n_heads)


def alibi_logits(q, k, q_pos, k_pos, head, n_heads):
    """ALiBi (Press et al. 2022, "Train Short, Test Long", arXiv:2108.12409): the scaled
    logits minus a per-head linear penalty on the distance, ``m_h (i - j)``."""
    distance = (q_pos - k_pos).astype(jnp.float32)
    return attention_logits(q, k) - alibi_slope(head, n_heads) * distance


def ssmax_causal_logits(q, k, s, q_pos):
    """Scalable-Softmax with each causal row's own length ``n = i + 1`` read from the
    query's position (Nakanishi 2025, arXiv:2501.19399): ``z = s log(i + 1) q.k / sqrt(d)``
    (the first row, ``n = 1``, has logits 0 and its one key)."""
    n = (q_pos + 1).astype(jnp.float32)
    return attention_logits(q, k, scale=s * jnp.log(n) / math.sqrt(jnp.shape(q)[-1]))


def log_length_scale(q_pos, floor_scale, attn_scale):
    """Llama 4's query temperature at position ``i``: ``a log(floor((i + 1) / f) + 1) + 1``
    (``_get_attn_scale`` of the reference implementation, ``f`` = floor_scale)."""
    steps = jnp.floor((q_pos + 1).astype(jnp.float32) / floor_scale)
    return attn_scale * jnp.log(steps + 1.0) + 1.0


def log_length_logits(q, k, q_pos, floor_scale, attn_scale):
    """Scaled logits with the query multiplied by Llama 4's position temperature."""
    return log_length_scale(q_pos, floor_scale, attn_scale) * attention_logits(q, k)


POSITIONAL: dict[str, Mechanism] = {
    m.name: m
    for m in (
        Mechanism("alibi", alibi_logits),
        Mechanism("ssmax_causal", ssmax_causal_logits, params={"s": SSMAX_INITIAL_S}),
        Mechanism(
            "log_length",
            log_length_logits,
            constants={
                "floor_scale": LOG_LENGTH_FLOOR_SCALE,
                "attn_scale": LOG_LENGTH_ATTN_SCALE,
            },  # fmt: skip
        ),
    )
}

"""attnlab: reproducible experiments on the 1/sqrt(d_k) factor of dot-product attention."""

from attnlab.core.attention import (
    attention_logits,
    attention_weights,
    dot_product_attention,
    masked_softmax,
    softcap,
)
from attnlab.core.softmax_stats import (
    entropy,
    jacobian_frobenius_norm,
    max_weight,
    softmax_jacobian,
)

__all__ = [
    "attention_logits",
    "attention_weights",
    "dot_product_attention",
    "entropy",
    "jacobian_frobenius_norm",
    "masked_softmax",
    "max_weight",
    "softcap",
    "softmax_jacobian",
]

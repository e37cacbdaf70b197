"""attnlab: reproducible experiments on the 1/sqrt(d_k) factor of dot-product attention."""

import importlib

from attnlab.core.attention import (
    attention_logits,
    attention_weights,
    dot_product_attention,
    masked_softmax,
    softcap,
)
from attnlab.core.mechanism import (
    Mechanism,
    MechanismError,
    MechanismReferenceError,
    as_mechanism,
    capped_logits,
    check_mechanism,
    l2_normalize,
    scaled_logits,
    sigmoid_weights,
    softmax_weights,
    softpick_weights,
)
from attnlab.core.references import load_mechanism
from attnlab.core.softmax_stats import (
    entropy,
    jacobian_frobenius_norm,
    max_weight,
    softmax_jacobian,
)

__all__ = [
    "card",
    "Mechanism",
    "MechanismError",
    "MechanismReferenceError",
    "as_mechanism",
    "capped_logits",
    "check_mechanism",
    "l2_normalize",
    "load_mechanism",
    "scaled_logits",
    "sigmoid_weights",
    "softmax_weights",
    "softpick_weights",
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


def __getattr__(name: str):
    """``attnlab.card`` (``attnlab.studies.card.api.card``), imported on first use: it
    brings in the training engine and matplotlib, which ``import attnlab`` does not need
    (by module name, so that ``make rules`` does not count the card as a dependency of
    every result: no script reads ``attnlab.card``)."""
    if name == "card":
        return importlib.import_module("attnlab.studies.card.api").card
    raise AttributeError(f"module 'attnlab' has no attribute {name!r}")

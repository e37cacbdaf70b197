"""attnlab: reproducible experiments on the 1/sqrt(d_k) factor of dot-product attention.

The public API below is imported on first use (PEP 562): ``import attnlab.harness...`` or a
study's declaration, figure or report loads no JAX through the package, and ``make rules``
counts only the modules a result's code really imports.
"""

import importlib

#: Public name -> the module that defines it.
_API = {
    **dict.fromkeys(
        ("attention_logits", "attention_weights", "dot_product_attention", "masked_softmax",
         "softcap"),
        "attnlab.core.attention",
    ),
    **dict.fromkeys(
        ("Mechanism", "MechanismError", "MechanismReferenceError", "as_mechanism",
         "l2_normalize"),
        "attnlab.core.mechanism",
    ),
    **dict.fromkeys(
        ("capped_logits", "scaled_logits", "sigmoid_weights", "softmax_weights",
         "softpick_weights"),
        "attnlab.core.hooks",
    ),
    "check_mechanism": "attnlab.core.mechanism_check",
    **dict.fromkeys(("qk_clip", "qk_clip_biases", "qk_clip_transform"), "attnlab.lm.qk_clip"),
    "temperature_ledger": "attnlab.lm.ledger",
    "load_mechanism": "attnlab.core.references",
    **dict.fromkeys(
        ("entropy", "jacobian_frobenius_norm", "max_weight", "softmax_jacobian"),
        "attnlab.core.softmax_stats",
    ),
    # The card brings in the training engine and matplotlib; no script reads it from here.
    "card": "attnlab.studies.card.api",
}  # fmt: skip

__all__ = sorted(_API)


def __getattr__(name: str):
    """The public name ``name``, imported from its module on first use."""
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'attnlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))

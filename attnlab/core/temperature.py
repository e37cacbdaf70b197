"""Who owns the attention temperature: the mechanisms compared in experiments 04 and 05.

Each mechanism is a small, documented choice of *where* the logit scale comes from; the
attention itself is always ``attnlab.dot_product_attention``. For a head of width ``d``
with projections ``q = x W_Q`` and ``k = x W_K``:

=====================  ======================================================================
``scaled``             ``z = q.k / sqrt(d)``                          (Vaswani et al. 2017)
``unscaled``           ``z = q.k``
``folded_init``        ``z = q.k`` with W_Q, W_K initialised ``d^(-1/4)`` times smaller, so
                       ``z`` equals the scaled logits at step 0        (article 004, 000)
``qk_norm``            ``z = g * (q/|q|).(k/|k|)``, ``g`` learned      (Henry et al. 2020)
``learned_temperature````z = tau * q.k``, ``tau`` learned, initialised ``1/sqrt(d)``
``inv_d``              ``z = q.k / d``                                 (muP; Yang & Hu 2022)
``softcap30``          ``z = 30 tanh(q.k / 30)``                       (Grok-1)
``softcap50``          ``z = 50 tanh(q.k / 50)``                       (Gemma 2)
=====================  ======================================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

ScaleRule = Literal["inv_sqrt_d", "one", "inv_d", "learned"]


@dataclass(frozen=True)
class Mechanism:
    """How one attention head sets its logit scale.

    Attributes:
      name: the mechanism's name in CSVs and figures.
      scale_rule: the logit multiplier: ``1/sqrt(d)``, ``1``, ``1/d``, or a learned scalar.
      qk_init_exponent: W_Q and W_K are initialised ``d ** qk_init_exponent`` times their
        default (``-1/4`` folds ``1/sqrt(d)`` into the initialisation; 0 changes nothing).
      normalize_qk: L2-normalise q and k before the dot product (QK-norm).
      logit_cap: soft-cap ``cap * tanh(z / cap)`` on the logits, or None.
    """

    name: str
    scale_rule: ScaleRule
    qk_init_exponent: float = 0.0
    normalize_qk: bool = False
    logit_cap: float | None = None

    def fixed_scale(self, d_k: int) -> float:
        """The logit multiplier for the fixed rules (the initial value for ``learned``)."""
        if self.scale_rule == "one":
            return 1.0
        if self.scale_rule == "inv_d":
            return 1.0 / d_k
        if self.scale_rule == "learned" and self.normalize_qk:
            return qk_norm_initial_gain(d_k)
        return 1.0 / math.sqrt(d_k)


def qk_norm_initial_gain(d_k: int) -> float:
    """Initial gain of QK-norm, chosen so cosine logits start with the scaled spread.

    Cosine similarities of independent random vectors in ``d`` dimensions have std
    ``1/sqrt(d)``; scaled attention's logits have std 1 at initialisation. A gain of
    ``sqrt(d)`` makes the two agree at step 0, which isolates what normalisation does during
    training. (Henry et al. instead derive the initial gain from the sequence length.)
    """
    return math.sqrt(d_k)


MECHANISMS: dict[str, Mechanism] = {
    m.name: m
    for m in (
        Mechanism("scaled", "inv_sqrt_d"),
        Mechanism("unscaled", "one"),
        Mechanism("folded_init", "one", qk_init_exponent=-0.25),
        Mechanism("qk_norm", "learned", normalize_qk=True),
        Mechanism("learned_temperature", "learned"),
        Mechanism("inv_d", "inv_d"),
        Mechanism("softcap30", "one", logit_cap=30.0),
        Mechanism("softcap50", "one", logit_cap=50.0),
    )
}

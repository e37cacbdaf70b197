"""Who owns the attention temperature, read from an elasticity ``e = d ln s / d ln alpha``
of the logits' scale ``s`` to the scale ``alpha`` of q and k (``attnlab.core.elasticity``
computes it): the rule and the multipliers it is read at, in plain Python (no JAX), so the
card's verdicts and the reports read it from the CSVs alone.
"""

from __future__ import annotations

#: The multipliers of q and k at which the card and experiment 13 read the elasticity.
ALPHAS: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
#: Elasticity at or above which the weights own the temperature (2 for bilinear logits),
#: and at or below which the mechanism does (0 for normalised q and k); between, a cap.
WEIGHTS_OWN_AT = 1.5
MECHANISM_OWNS_AT = 0.5


def owner(elasticity: float) -> str:
    """Who owns the temperature, in words, from an elasticity: ``weights`` (>=
    ``WEIGHTS_OWN_AT``), ``mechanism`` (<= ``MECHANISM_OWNS_AT``), else ``cap``."""
    if elasticity >= WEIGHTS_OWN_AT:
        return "weights"
    if elasticity <= MECHANISM_OWNS_AT:
        return "mechanism"
    return "cap"


#: The owner named where the logits answer the q/k norm's gains but not the weights before
#: the norm (QK-norm: Qwen3, Gemma 3, OLMo 2).
NORM_GAINS = "norm gains"


def owner_before_norm(e_weights: float, e_after: float) -> str:
    """Who owns the temperature of a head whose q and k may pass a norm outside the
    mechanism, from two elasticities of its logits' scale: ``e_weights`` to W_q, W_k
    (before the norm) and ``e_after`` to q, k as attention sees them (after it: the norm's
    gains' handle). ``NORM_GAINS`` where the weights have none (``e_weights <=
    MECHANISM_OWNS_AT``) and the gains have the bilinear one (``e_after >=
    WEIGHTS_OWN_AT``); else ``owner(e_weights)``: without a norm the two are equal."""
    if e_weights <= MECHANISM_OWNS_AT and e_after >= WEIGHTS_OWN_AT:
        return NORM_GAINS
    return owner(e_weights)

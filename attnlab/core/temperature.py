"""Who owns the attention temperature: the built-in mechanisms, written with the open API
of ``attnlab.core.mechanism``.

For a head of width ``d`` with projections ``q = x W_Q`` and ``k = x W_K``:

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

These eight are 05's and 10's (``MECHANISMS``). Six more from the literature are written
in ``attnlab.core.literature`` with the public API only (``LITERATURE``); ``BUILTINS`` is
every name a command line accepts without ``MODULE:NAME``.

The scale and the cap are *constants* (traced), so scaled, unscaled, folded and 1/d
attention are one compiled program, and so are both caps; the learned ones are
*parameters* named ``scale``.
"""

from __future__ import annotations

import math

from attnlab.core.hooks import capped_logits, scaled_logits
from attnlab.core.literature import LITERATURE
from attnlab.core.mechanism import Mechanism


def inv_sqrt(d_k: int) -> float:
    """``1/sqrt(d_k)``, scaled attention's multiplier (and learned_temperature's start)."""
    return 1.0 / math.sqrt(d_k)


def inv_d(d_k: int) -> float:
    """``1/d_k``, muP's multiplier."""
    return 1.0 / d_k


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
        Mechanism("scaled", scaled_logits, constants={"scale": inv_sqrt}),
        Mechanism("unscaled", scaled_logits, constants={"scale": 1.0}),
        Mechanism("folded_init", scaled_logits, constants={"scale": 1.0}, qk_init_exponent=-0.25),
        Mechanism(
            "qk_norm", scaled_logits, params={"scale": qk_norm_initial_gain}, normalize_qk=True
        ),
        Mechanism("learned_temperature", scaled_logits, params={"scale": inv_sqrt}),
        Mechanism("inv_d", scaled_logits, constants={"scale": inv_d}),
        Mechanism("softcap30", capped_logits, constants={"scale": 1.0, "cap": 30.0}),
        Mechanism("softcap50", capped_logits, constants={"scale": 1.0, "cap": 50.0}),
    )
}

#: Every mechanism a command line names without ``MODULE:NAME``: 05's eight, then the
#: literature's six.
BUILTINS: dict[str, Mechanism] = {**MECHANISMS, **LITERATURE}

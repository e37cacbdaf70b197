"""Six mechanisms from the literature, written with nothing but the public API of
``attnlab`` (the names this file imports are all in ``attnlab.__all__``; a test checks it),
as a researcher would write their own. They are imported from the modules that define
them, as code inside the package must: ``attnlab/__init__`` resolves its names from those
modules on first use, so importing through it from inside would go round in a circle.

=============  ================================================================  ==========
``ssmax``      ``p = softmax(s log(n) q.k / sqrt(d))``, ``s`` learned            Nakanishi
                                                                                 2025
``sigmoid``    ``p_j = sigmoid(q.k_j / sqrt(d) - log n)``, rows not normalised   Ramapuram
                                                                                 et al. 2024
``softpick``   ``p = softpick(q.k / sqrt(d))``, rows not normalised              Zuhri et al.
                                                                                 2025
``cosine_tau`` ``p = softmax(cos(q, k) / tau)``, ``1/tau = exp(min(t, log 100))``, Liu et al.
               ``t`` learned from ``log 10``                                     2022
``gated``      ``softmax(q.k / sqrt(d)) v * sigmoid(x W_gate)``, a gate per     Qiu et al.
               element of each head's output (G1, elementwise)                   2025
``sink``       ``p_j = e^{z_j} / (e^{s_h} + sum_l e^{z_l})``, ``z = q.k/sqrt(d)``, gpt-oss
               ``s_h`` learned per head from 0                                   2025
=============  ================================================================  ==========

``x`` is the block's normalised input (the causal LM's ``LN(x)``; the recall model's query
embedding), ``W_gate`` the model's parameter (``[d_model, H d_h]`` elementwise, ``[d_model,
H]`` per head) at the model's initialisation of its projections, no bias (Qwen3-Next's
gate has none); the gate starts near ``sigmoid(0) = 1/2``. The sink's initial value 0 is
ours: gpt-oss ships trained sinks, and transformers initialises them N(0, 0.02^2). One gate
per head (Qiu et al.'s head-wise G1) is ``Mechanism(..., gate="head")``, not a built-in: the
paper's best variant is the elementwise one.

``n`` is the number of keys a query may attend (``row_length``).
"""

from __future__ import annotations

import math

import jax.numpy as jnp

from attnlab.core.attention import attention_logits
from attnlab.core.hooks import sigmoid_weights, softpick_weights
from attnlab.core.mechanism import Mechanism

#: ssmax's initial ``s``: the default of the ``scalable-softmax`` package (PyPI), about
#: ``1/ln 10``, so that ``s ln n = log10 n`` at step 0: 1.2 at the recall task's n = 16,
#: where scaled attention's multiplier is 1. Nakanishi (2025) learns ``s`` per head and
#: does not fix a value in the text we have.
SSMAX_INITIAL_S = 0.43
#: Swin Transformer V2's logit scale: ``log 10`` at initialisation, clamped at ``log 100``
#: (``logit_scale`` and its ``torch.clamp(max=log(1 / 0.01))`` in the authors' code).
COSINE_INITIAL_LOG_SCALE = math.log(10.0)
COSINE_MAX_LOG_SCALE = math.log(100.0)


def ssmax_logits(q, k, s, n):
    """Scalable-Softmax: ``z = s log(n) q.k / sqrt(d)`` (Nakanishi 2025, "Scalable-Softmax Is
    Superior for Attention", arXiv:2501.19399), softmax weights."""
    return attention_logits(q, k, scale=s * jnp.log(n) / math.sqrt(jnp.shape(q)[-1]))


def sigmoid_logits(q, k, n):
    """Sigmoid attention's argument ``z = q.k / sqrt(d) - log n``: the bias ``b = -log n``
    of Ramapuram et al. (2024, "Theory, Analysis, and Best Practices for Sigmoid
    Self-Attention", arXiv:2409.04431), which starts the row's mass near one."""
    return attention_logits(q, k) - jnp.log(n)


def cosine_logits(q, k, log_scale):
    """Swin V2's scaled cosine attention on q, k already normalised: ``z = cos(q, k) / tau``,
    ``1/tau = exp(min(log_scale, log 100))`` (Liu et al. 2022, "Swin Transformer V2",
    arXiv:2111.09883). The clamp has zero gradient above it, as ``torch.clamp``. q and k are
    normalised by ``normalize_qk`` (``x / sqrt(|x|^2 + 1e-6)``; the authors'
    ``F.normalize`` divides by ``max(|x|, 1e-12)``: the same for ``|x| >> 1e-3``)."""
    return attention_logits(q, k, scale=jnp.exp(jnp.minimum(log_scale, COSINE_MAX_LOG_SCALE)))


def scaled_dot_logits(q, k):
    """The scaled logits ``z = q.k / sqrt(d)``: softpick's argument (Zuhri et al. 2025,
    "Softpick: No Attention Sink, No Massive Activations with Rectified Softmax",
    arXiv:2504.20966), and the gated and the sink mechanisms' logits, whose changes act after
    them (module docstring)."""
    return attention_logits(q, k)


#: The sink's initial logit (module docstring).
SINK_INITIAL = 0.0


LITERATURE: dict[str, Mechanism] = {
    m.name: m
    for m in (
        Mechanism("ssmax", ssmax_logits, params={"s": SSMAX_INITIAL_S}, row_length=True),
        Mechanism("sigmoid", sigmoid_logits, weights=sigmoid_weights, row_length=True),
        Mechanism("softpick", scaled_dot_logits, weights=softpick_weights),
        Mechanism(
            "cosine_tau",
            cosine_logits,
            params={"log_scale": COSINE_INITIAL_LOG_SCALE},
            normalize_qk=True,
        ),
        Mechanism("gated", scaled_dot_logits, gate="element"),
        Mechanism("sink", scaled_dot_logits, sink=SINK_INITIAL),
    )
}

"""attnlab.core.context: the context a logits function names in its signature is what it
receives, and ``causal_context`` gives the positions and heads of a causal sequence."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from attnlab.core.context import asked_context, causal_context
from attnlab.core.mechanism import Mechanism


def _einsum(q, k):
    return jnp.einsum("...qd,...kd->...qk", q, k)


def test_causal_context_positions_and_heads():
    context = causal_context(4, 3)
    assert context.q_pos.shape == (4, 1) and context.k_pos.shape == (1, 4)
    assert context.head.shape == (3, 1, 1) and context.n_heads == 3
    np.testing.assert_array_equal((context.k_pos <= context.q_pos), np.tril(np.ones((4, 4), bool)))


def test_asked_context_reads_names_not_kwargs_or_positional_only():
    assert asked_context(lambda q, k, n, head: q) == {"n", "head"}
    assert asked_context(lambda q, k, **kwargs: q) == frozenset()
    assert asked_context(lambda q, k, n, /: q) == frozenset()
    assert asked_context(max) == frozenset()  # a builtin: no signature to read


def test_the_context_a_signature_names_is_what_it_receives():
    def logits(q, k, n, q_pos, head, n_heads):
        return _einsum(q, k) * 0 + n + 10 * q_pos + 100 * head + 1000 * n_heads

    mechanism = Mechanism("context", logits)
    assert mechanism.asks == {"n", "q_pos", "head", "n_heads"}
    assert mechanism.needs_positions() == ("q_pos", "head", "n_heads")
    context = causal_context(3, 2)
    causal = context.k_pos <= context.q_pos
    q = k = jnp.ones((2, 3, 4), jnp.float32)
    z = np.asarray(mechanism.scores(q, k, {}, causal, context))
    i = np.arange(3)[:, None]
    expected = (i + 1) + 10 * i + 100 * np.arange(2)[:, None, None] + 2000
    np.testing.assert_array_equal(z, np.broadcast_to(expected, (2, 3, 3)))
    assert Mechanism("plain", _einsum).needs_positions() == ()

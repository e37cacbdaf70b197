"""attnlab/core/hooks.py: the built-in logits and weights functions of a mechanism."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from attnlab.core.hooks import softmax_weights

EPS32 = float(np.finfo(np.float32).eps)


def test_softmax_weights_are_float32_for_half_inputs_and_zero_on_an_empty_row():
    z = np.asarray([[1.0, 2.0, 3.0], [60000.0, 0.0, -60000.0]], np.float16)
    mask = np.asarray([[True, True, True], [False, False, False]])
    p = softmax_weights(z, mask)
    assert p.dtype == jnp.float32
    p = np.asarray(p)
    assert np.all(p[1] == 0) and np.isfinite(p).all()
    e = np.exp(np.array([1.0, 2.0, 3.0]) - 3.0)
    # three float32 exponentials and a sum: a few eps per weight
    np.testing.assert_allclose(p[0], e / e.sum(), rtol=0, atol=8 * EPS32)

    def loss(z):
        return jnp.sum(softmax_weights(z, mask) ** 2)

    assert np.isfinite(np.asarray(jax.jit(jax.grad(loss))(z.astype(np.float32)))).all()

"""attnlab.lm.loss: the cross-entropy of uniform logits is ln 256, and the z-loss against
its closed form and numpy."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.lm.loss import cross_entropy, z_loss

EPS = float(np.finfo(np.float32).eps)  # 2^-23
VOCAB = 256  # bytes


def test_cross_entropy_of_uniform_logits_is_ln_256():
    """Equal logits: every byte has probability 1/256, CE = ln 256 nats for any targets
    (float32 logsumexp of 256 terms: within (256 + 4) eps relative)."""
    logits, targets = np.zeros((3, 5, VOCAB), np.float32), np.arange(15).reshape(3, 5)
    ce = np.asarray(jax.jit(cross_entropy)(logits, targets))  # one program, not one per op
    assert ce.shape == (3,)
    np.testing.assert_allclose(ce, math.log(VOCAB), rtol=(VOCAB + 4) * EPS)


def test_z_loss_known_answer_and_numpy():
    """Uniform logits: ``log Z = ln 256`` at every position, so ``z_loss = (ln 256)^2``.
    Random logits: ``mean(logsumexp^2)`` in numpy float64. Bound: logsumexp of V = 256
    terms is within (V + 4) eps relative of exact (the sum inside the log dominates),
    squaring doubles it and the mean of M = 6 terms adds M eps: (2 (V + 4) + M) eps."""
    vocab = 256
    loss = jax.jit(z_loss)  # one program per input dtype; eager, every operation compiles
    assert float(loss(np.zeros((2, 3, vocab), np.float32))) == pytest.approx(
        math.log(vocab) ** 2, rel=(2 * (vocab + 4) + 6) * EPS, abs=0
    )
    logits = (4.0 * np.random.default_rng(3).standard_normal((2, 3, vocab))).astype(np.float32)
    x = np.asarray(logits, np.float64)
    peak = x.max(axis=-1, keepdims=True)
    lse = peak[..., 0] + np.log(np.sum(np.exp(x - peak), axis=-1))
    expected = np.mean(lse**2)
    assert float(loss(logits)) == pytest.approx(expected, rel=(2 * (vocab + 4) + 6) * EPS, abs=0)
    # Half-precision logits are promoted: the loss is a float32.
    assert loss(logits.astype(jnp.bfloat16)).dtype == jnp.float32

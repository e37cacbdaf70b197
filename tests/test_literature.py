"""attnlab/core/literature.py: the four mechanisms from the literature against their papers'
formulas in numpy float64 (tests/numpy_reference.py) on fixed inputs, with and without
masks, and the hooks they use (row length, clamp, unnormalised weights)."""

from __future__ import annotations

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy_reference import float32_bound, reference_logits, reference_weights

from attnlab.core.literature import (
    COSINE_INITIAL_LOG_SCALE,
    COSINE_MAX_LOG_SCALE,
    LITERATURE,
    SSMAX_INITIAL_S,
)

D, N = 16, 12


@pytest.fixture(scope="module")
def inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(20250101)
    return rng.normal(size=(3, D)), rng.normal(size=(N, D))


@pytest.mark.parametrize("name", list(LITERATURE))
def test_weights_equal_the_papers_formula(name, inputs):
    q, k = inputs
    ours = np.asarray(LITERATURE[name](q.astype(np.float32), k.astype(np.float32)))
    assert ours.shape == (3, N) and ours.dtype == np.float32
    for row in range(3):
        ref = reference_weights(name, reference_logits(name, q[row], k))
        # the first-order float32 bound of tests/numpy_reference.py, for this row
        np.testing.assert_allclose(ours[row], ref, rtol=0, atol=float32_bound(name, q[row], k))


@pytest.mark.parametrize("name", ["ssmax", "sigmoid"])
def test_the_row_length_is_the_count_of_allowed_keys(name, inputs):
    """With a mask, n is the number of keys the row may attend (at least 1)."""
    q, k = inputs
    allowed = 5
    mask = np.zeros((3, N), bool)
    mask[:, :allowed] = True
    ours = np.asarray(LITERATURE[name](q.astype(np.float32), k.astype(np.float32), mask))
    for row in range(3):
        ref = reference_weights(name, reference_logits(name, q[row], k[:allowed]))
        bound = float32_bound(name, q[row], k[:allowed])
        np.testing.assert_allclose(ours[row, :allowed], ref, rtol=0, atol=bound)
        assert np.all(ours[row, allowed:] == 0)


def test_ssmax_is_log_n_times_scaled_at_its_initial_s(inputs):
    q, k = (x.astype(np.float32) for x in inputs)
    assert LITERATURE["ssmax"].param_values(D) == {"s": SSMAX_INITIAL_S}
    theta = {"s": 1.0 / math.log(N)}  # s log n = 1: exactly scaled attention
    ours = np.asarray(LITERATURE["ssmax"](q, k, theta=theta))
    ref = np.asarray(jax.nn.softmax(q @ k.T / math.sqrt(D), axis=-1))
    # two float32 evaluations of one softmax; logits up to ~4, so ~16 eps per weight
    np.testing.assert_allclose(ours, ref, rtol=0, atol=16 * np.finfo(np.float32).eps)


def test_sigmoid_rows_do_not_sum_to_one_and_start_near_one(inputs):
    q, k = inputs
    p = np.asarray(LITERATURE["sigmoid"](q.astype(np.float32), k.astype(np.float32)))
    mass = p.sum(axis=-1)
    assert not np.allclose(mass, 1.0, atol=1e-3)
    # the bias -log n gives each key sigma(z - log n) ~ e^z / n for z << log n:
    # E[mass] ~ E[e^z] ~ e^{1/2}, between 0.5 and 3 for these rows
    assert np.all((mass > 0.5) & (mass < 3.0)), mass


def test_softpick_is_zero_for_negative_logits_and_ignores_masked_keys(inputs):
    q, k = inputs
    z = q @ k.T / math.sqrt(D)
    p = np.asarray(LITERATURE["softpick"](q.astype(np.float32), k.astype(np.float32)))
    assert np.all(p[z < 0] == 0)
    mask = np.ones((3, N), bool)
    mask[:, -4:] = False
    masked = np.asarray(LITERATURE["softpick"](q.astype(np.float32), k.astype(np.float32), mask))
    for row in range(3):
        ref = reference_weights("softpick", z[row, :-4])
        bound = float32_bound("softpick", q[row], k[:-4])
        np.testing.assert_allclose(masked[row, :-4], ref, rtol=0, atol=bound)
    assert np.all(masked[:, -4:] == 0)
    dead = np.asarray(LITERATURE["softpick"](q, k, np.zeros((3, N), bool)))
    assert np.all(dead == 0)


def test_softpick_is_finite_for_large_logits():
    """The stable form: logits of 200 overflow e^z in float32, never the weights."""
    q = np.full((1, 4), 20.0, np.float32)
    k = np.concatenate([np.full((1, 4), 20.0, np.float32), -np.ones((3, 4), np.float32)])
    p = np.asarray(LITERATURE["softpick"](q, k))
    assert np.isfinite(p).all()
    # e^{800/2} dominates: the first weight is 1 to float32 rounding, the rest 0
    np.testing.assert_allclose(p[0], [1.0, 0.0, 0.0, 0.0], atol=np.finfo(np.float32).eps)


def test_cosine_tau_initial_scale_and_clamp(inputs):
    q, k = (x.astype(np.float32) for x in inputs)
    mechanism = LITERATURE["cosine_tau"]
    assert mechanism.param_values(D) == {"log_scale": COSINE_INITIAL_LOG_SCALE}
    assert math.isclose(math.exp(COSINE_INITIAL_LOG_SCALE), 10.0)
    above = {"log_scale": np.float32(COSINE_MAX_LOG_SCALE + 1.0)}
    at = {"log_scale": np.float32(COSINE_MAX_LOG_SCALE)}
    np.testing.assert_array_equal(
        np.asarray(mechanism(q, k, theta=above)), np.asarray(mechanism(q, k, theta=at))
    )

    def loss(log_scale):
        return jnp.sum(mechanism(q, k, theta={"log_scale": log_scale}) ** 2)

    grad = jax.jit(jax.grad(loss))  # one program for both points
    assert float(grad(np.float32(COSINE_MAX_LOG_SCALE + 1.0))) == 0.0
    assert float(grad(np.float32(COSINE_INITIAL_LOG_SCALE))) != 0.0


def test_the_literature_uses_only_the_public_api():
    """Every name literature.py imports from the package is public (in ``attnlab.__all__``),
    imported from its defining module (never from the package top, which imports this
    file)."""
    import ast

    import attnlab
    import attnlab.core.literature as literature

    tree = ast.parse(Path(literature.__file__).read_text(encoding="utf-8"))
    imported = [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnlab")
        for alias in node.names
    ]
    assert imported and all(module != "attnlab" for module, _ in imported), imported
    assert {name for _, name in imported} <= set(attnlab.__all__), imported

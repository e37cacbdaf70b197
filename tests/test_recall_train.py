"""Tests of attnlab.studies.recall.train: identical init and data across mechanisms, the step-0 and
step-1 metrics recomputed by hand, determinism, seeds, chunking, resuming, divergence."""

import functools
import math
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from attnlab.core.temperature import MECHANISMS
from attnlab.harness.errors import RunError
from attnlab.studies.recall.task import stream_batch
from attnlab.studies.recall.train import (
    METRICS,
    DivergenceError,
    RecallConfig,
    _check_finite,
    init_params,
    initial_state,
    make_model,
    seed_keys,
    train,
)

C = RecallConfig(d_k=16, d_model=16, steps=30, batch_size=8, seeds=2, eval_size=64, chunk_steps=10)
SCALED, UNSCALED = MECHANISMS["scaled"], MECHANISMS["unscaled"]
cached_init_params = functools.cache(init_params)


@functools.cache
def run(mechanism: str = "scaled", **changes):
    """``train`` of ``C`` (with ``changes``) for one mechanism, cached for the module; the
    sizes of the chunks reported to ``on_chunk`` are kept in ``result.chunks``."""
    chunks: list[int] = []
    result = train(replace(C, **changes), MECHANISMS[mechanism], on_chunk=chunks.append)
    result.chunks = chunks
    return result


def assert_metrics_close(a: dict, b: dict, rtol: float = 1e-5, rows=slice(None)) -> None:
    for name in METRICS:
        np.testing.assert_allclose(a[name], b[name][rows], rtol=rtol, atol=1e-6, err_msg=name)


# --------------------------------------------------------------------------- result layout


def test_result_layout():
    result = run()
    assert result.mechanism == "scaled"
    assert result.seeds == [0, 1]
    assert result.start_step == 0
    assert set(result.metrics) == set(METRICS)
    for name in METRICS:
        assert result.metrics[name].shape == (2, 30), name
        assert np.isfinite(result.metrics[name]).all(), name
    assert result.eval_accuracy.shape == (2,)
    m = result.metrics
    assert (m["loss"] > 0).all()
    # Accuracy over 8 sequences, held-out accuracy over 64.
    np.testing.assert_allclose(m["accuracy"] * 8, np.round(m["accuracy"] * 8), atol=1e-5)
    acc = result.eval_accuracy * 64
    np.testing.assert_allclose(acc, np.round(acc), atol=1e-4)
    assert ((result.eval_accuracy >= 0) & (result.eval_accuracy <= 1)).all()
    assert ((m["attn_entropy"] >= 0) & (m["attn_entropy"] <= math.log(16) + 1e-5)).all()
    assert ((m["attn_max_weight"] >= 1 / 16 - 1e-6) & (m["attn_max_weight"] <= 1 + 1e-6)).all()
    for name in ("grad_norm_wq", "grad_norm_wk", "grad_norm_wv"):
        assert (m[name] > 0).all(), name
    # The loss starts near ln 32 (chance) and the parameters move.
    assert 2.5 < m["loss"][:, 0].mean() < 5
    assert not np.allclose(m["loss"][:, 0], m["loss"][:, -1])


def test_on_chunk_reports_every_step():
    assert run().chunks == [10, 10, 10]
    assert run(chunk_steps=30).chunks == [30]


# --------------------------------------------------------------------------- identical init


def test_initial_state_identical_across_mechanisms():
    scaled, unscaled = initial_state(C, SCALED), initial_state(C, UNSCALED)
    leaves_s, tree_s = jax.tree.flatten(scaled)
    leaves_u, tree_u = jax.tree.flatten(unscaled)
    assert tree_s == tree_u
    for a, b in zip(leaves_s, leaves_u, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # Stacked over the two seeds, each row the seed's own init.
    for i, seed in enumerate(C.seed_values):
        params = cached_init_params(C, SCALED, seed)
        for key, value in params.items():
            assert scaled.params[key].shape == (2, *value.shape)
            np.testing.assert_array_equal(np.asarray(scaled.params[key][i]), np.asarray(value))
    assert not np.array_equal(np.asarray(scaled.params["W_Q"][0]), scaled.params["W_Q"][1])


# --------------------------------------------------------------------------- by hand


@functools.cache
def by_hand(mechanism: str):
    """A compiled function of (init params, data key) recomputing, without train(), the
    step-0 metrics, the step-1 metrics after one Adam step on batch 0, and the loss of the
    init params on batch 1."""
    model = make_model(C, MECHANISMS[mechanism])

    def loss_fn(params, batch):
        logits, weights = model.apply({"params": params}, batch)
        logp = jax.nn.log_softmax(logits)
        loss = -jnp.mean(jnp.take_along_axis(logp, batch.target[:, None], axis=1))
        return loss, (logits, weights)

    def metrics(params, batch):
        (loss, (logits, weights)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch)
        entropy = -jnp.sum(weights * jnp.log(jnp.maximum(weights, 1e-30)), axis=-1)
        return grads, {
            "loss": loss,
            "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch.target),
            "grad_norm_wq": jnp.sqrt(jnp.sum(grads["W_Q"] ** 2)),
            "grad_norm_wk": jnp.sqrt(jnp.sum(grads["W_K"] ** 2)),
            "grad_norm_wv": jnp.sqrt(jnp.sum(grads["W_V"] ** 2)),
            "attn_entropy": jnp.mean(entropy),
            "attn_max_weight": jnp.mean(jnp.max(weights, -1)),
        }

    @jax.jit
    def recompute(params, data_key):
        batch0 = stream_batch(data_key, 0, C.batch_size, C.task)
        batch1 = stream_batch(data_key, 1, C.batch_size, C.task)
        grads, at0 = metrics(params, batch0)
        opt = optax.adam(C.lr)
        updates, _ = opt.update(grads, opt.init(params), params)
        _, at1 = metrics(optax.apply_updates(params, updates), batch1)
        return at0, at1, loss_fn(params, batch1)[0]

    return recompute


@pytest.mark.parametrize("mechanism", ["scaled", "unscaled"])
def test_first_steps_recomputed_by_hand(mechanism):
    """Step t trains on stream_batch(seed_keys(seed).data, t) from the shared init: the
    step-0 metrics and (after one Adam step) the step-1 metrics, recomputed by hand."""
    result = run(mechanism)
    for i, seed in enumerate(C.seed_values):
        params = cached_init_params(C, SCALED, seed)  # the scaled init: identical for both
        at0, at1, other_loss = by_hand(mechanism)(params, seed_keys(seed).data)
        for name in METRICS:
            np.testing.assert_allclose(
                result.metrics[name][i, 0], at0[name], rtol=1e-5, atol=1e-7, err_msg=name
            )
            np.testing.assert_allclose(
                result.metrics[name][i, 1], at1[name], rtol=1e-4, atol=1e-6, err_msg=name
            )
        # Guard: another batch of the stream gives another step-0 loss.
        assert abs(float(other_loss) - float(at0["loss"])) > 1e-4


def test_mechanisms_differ_only_by_the_scale():
    """Same init and data: the unscaled step-0 logits are the scaled ones times sqrt(d_k),
    so the step-0 losses differ (while being recomputable above from the same batch)."""
    assert not np.allclose(
        run("scaled").metrics["loss"][:, 0], run("unscaled").metrics["loss"][:, 0]
    )


# --------------------------------------------------------------------------- invariances


def test_deterministic():
    first = run()
    second = train(C, SCALED)
    for name in METRICS:
        np.testing.assert_array_equal(first.metrics[name], second.metrics[name], err_msg=name)
    np.testing.assert_array_equal(first.eval_accuracy, second.eval_accuracy)


@pytest.mark.parametrize("seed", [0, 1])
def test_vmapped_seeds_equal_separate_runs(seed):
    together = run()
    alone = run(seeds=1, seed=seed)
    assert alone.seeds == [seed]
    assert_metrics_close(alone.metrics, together.metrics, rows=slice(seed, seed + 1))
    np.testing.assert_allclose(alone.eval_accuracy, together.eval_accuracy[seed : seed + 1])


def test_chunking_invariance():
    assert_metrics_close(run(chunk_steps=30).metrics, run().metrics)
    np.testing.assert_allclose(run(chunk_steps=30).eval_accuracy, run().eval_accuracy)


def test_resume_from_state_continues_the_run():
    """10 steps, then 20 more from the returned state, are the 30-step run."""
    first = train(C, SCALED, steps=10)
    rest = train(C, SCALED, state=first.state, start_step=10)
    assert rest.start_step == 10
    assert rest.metrics["loss"].shape == (2, 20)
    full = run()
    assert_metrics_close(first.metrics, full.metrics, rows=(slice(None), slice(0, 10)))
    assert_metrics_close(rest.metrics, full.metrics, rows=(slice(None), slice(10, 30)))
    np.testing.assert_allclose(rest.eval_accuracy, full.eval_accuracy)


# --------------------------------------------------------------------------- divergence


def test_divergence_raises_naming_mechanism_seed_and_step():
    """An absurd learning rate blows the parameters up after the first update: the loss of
    step start_step + 1 is the first non-finite one. (Seeds 3 and 4 from step 5: the
    compiled program is the one of the experiment's divergence test, seeds 0 and 1.)"""
    config = replace(C, lr=1e30, seed=3)
    with pytest.raises(DivergenceError) as info:
        train(config, SCALED, start_step=5, steps=10)
    message = str(info.value)
    assert "mechanism scaled" in message
    assert "seed 3" in message
    assert "at step 6" in message
    assert "\n" not in message
    assert isinstance(info.value, RunError)


def test_check_finite_names_the_bad_entry():
    """Seeds and steps are mapped back from the array indices (chunk start, seed list)."""
    losses = np.ones((3, 10), np.float32)
    losses[2, 4] = np.inf
    with pytest.raises(
        DivergenceError, match=r"^loss is inf for mechanism m, seed 12, at step 44$"
    ):
        _check_finite(losses, "m", [10, 11, 12], 40)
    losses[1, 7] = np.nan
    with pytest.raises(DivergenceError) as info:
        _check_finite(losses, "m", [10, 11, 12], 40)
    assert str(info.value).endswith(("seed 12, at step 44", "seed 11, at step 47"))
    _check_finite(np.ones((2, 5)), "m", [0, 1], 0)  # all finite: no error

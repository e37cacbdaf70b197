"""Tests of attnlab.recall.trainer and .step: identical init and data across mechanisms,
step-1 metrics recomputed by hand, determinism, seeds, chunking, resuming, divergence."""

import functools
import math
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from attnlab.core.parallel import replicate
from attnlab.core.temperature import MECHANISMS
from attnlab.harness.errors import RunError
from attnlab.recall.config import RecallConfig, make_model, seed_keys
from attnlab.recall.step import METRICS, draw_chunk, init_params, initial_state
from attnlab.recall.task import stream_batch
from attnlab.recall.trainer import (
    DivergenceError,
    Run,
    earliest_nonfinite,
    train,
    train_and_evaluate,
    train_runs,
)

#: Experiment 04's TINY run of tests/test_experiments_recall.py (same sizes): the trainings
#: below train scaled and unscaled together as 04 does, so both files share its programs.
C = RecallConfig(d_k=16, d_model=16, steps=30, batch_size=8, seeds=2, eval_size=64, chunk_steps=10)
SCALED, UNSCALED = MECHANISMS["scaled"], MECHANISMS["unscaled"]
cached_init_params = functools.cache(init_params)
#: One float32 rounding, 2^-23: twice the unit roundoff (n EPS bounds n roundings).
EPS = float(np.finfo(np.float32).eps)
#: XLA's float32 exp and log are accurate to a few ulp; we allow 4 eps each.
ULPS = 4
#: Roundings along the longest float32 accumulation chain of one step's metrics, each
#: relative to the magnitudes summed (normwise; like-signed sums, condition ~1): forward
#: d_model, d_k, pairs (softmax), pairs (p v), d_k (W_O), n_value_tokens (log-softmax) and
#: batch-term sums, the same backward, and the 2 d_model d_k squares of |grad W_K| (half
#: of them for the square root).
CHAIN = 2 * (C.d_model + 2 * C.d_k + 2 * C.pairs + C.n_value_tokens + C.batch_size)
CHAIN += C.d_model * C.d_k
#: Two float32 programs computing the same step's metrics from the same state differ by
#: at most twice one evaluation's bound.
STEP_RTOL = 2 * CHAIN * EPS
#: Upper bound of a batch-mean attention entropy of `pairs` weights: ln n exactly, plus
#: the float32 weights' normaliser (sum off 1 by 2 pairs EPS, which moves -sum p ln p by
#: at most that times ln n - 1), the rounding of log, products and the pairs-term sum
#: (relative to H <= ln n), and the batch mean.
LN_PAIRS = math.log(C.pairs)
ENTROPY_MAX = LN_PAIRS * (1 + (C.pairs + ULPS + 1 + C.batch_size) * EPS)
ENTROPY_MAX += 2 * C.pairs * EPS * (LN_PAIRS - 1)


@functools.cache
def trained(**changes) -> dict:
    """``train_and_evaluate`` of ``C`` (with ``changes``): scaled and unscaled as lanes of one
    program, as experiment 04 trains them; cached for the module. The sizes reported to
    ``on_chunk`` are kept in each result's ``chunks``."""
    chunks: list[int] = []
    results = train_and_evaluate(replace(C, **changes), on_chunk=chunks.append)
    for result in results.values():
        result.chunks = chunks
    return results


def run(mechanism: str = "scaled", **changes):
    """The result of ``mechanism`` in ``trained(**changes)``."""
    return trained(**changes)[mechanism]


def both_runs(config: RecallConfig, states=(None, None)) -> list[Run]:
    """Scaled and unscaled on ``config`` (from ``states``), in 04's order."""
    return [Run(config, m, state=s) for m, s in zip((SCALED, UNSCALED), states, strict=True)]


def assert_metrics_equal(a: dict, b: dict, rows=slice(None)) -> None:
    for name in METRICS:
        np.testing.assert_array_equal(a[name], b[name][rows], err_msg=name)


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
    # Accuracy over 8 sequences, held-out accuracy over 64: exact, a float32 mean of 0s
    # and 1s is a sum of integers divided by a power of two.
    np.testing.assert_array_equal(m["accuracy"] * 8, np.round(m["accuracy"] * 8))
    acc = result.eval_accuracy * 64
    np.testing.assert_array_equal(acc, np.round(acc))
    assert ((result.eval_accuracy >= 0) & (result.eval_accuracy <= 1)).all()
    # Entropy in [0, ln 16] and max weight in [1/16, 1], up to float32 rounding: a weight
    # of p = 1 may round up by exp's and the division's roundings, a mean of B values by B.
    assert ((m["attn_entropy"] >= -(ULPS + 3) * EPS) & (m["attn_entropy"] <= ENTROPY_MAX)).all()
    lo = (1 - (C.pairs + ULPS + 2 + C.batch_size) * EPS) / C.pairs
    hi = 1 + (ULPS + 2 + C.batch_size) * EPS
    assert ((m["attn_max_weight"] >= lo) & (m["attn_max_weight"] <= hi)).all()
    for name in ("grad_norm_wq", "grad_norm_wk", "grad_norm_wv"):
        assert (m[name] > 0).all(), name
    # The loss starts near ln 32 = 3.47 (chance; a range, not an estimate) and the
    # parameters move: far beyond np.allclose's 1e-5 + 1e-8 |x|, itself above rounding.
    assert 2.5 < m["loss"][:, 0].mean() < 5
    assert not np.allclose(m["loss"][:, 0], m["loss"][:, -1])


def test_on_chunk_reports_every_step():
    """Each chunk reports its steps times the runs trained (two: scaled and unscaled)."""
    assert run().chunks == [20, 20, 20]
    assert run(chunk_steps=30).chunks == [60]


# --------------------------------------------------------------------------- identical init


def test_initial_state_identical_across_mechanisms():
    scaled, unscaled = initial_state(C, SCALED), initial_state(C, UNSCALED)
    leaves_s, tree_s = jax.tree.flatten(scaled)
    leaves_u, tree_u = jax.tree.flatten(unscaled)
    assert tree_s == tree_u
    for a, b in zip(leaves_s, leaves_u, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # Stacked over the two seeds, each row the seed's own init.
    stacked = {key: np.asarray(value) for key, value in scaled.params.items()}
    for i, seed in enumerate(C.seed_values):
        params = cached_init_params(C, SCALED, seed)
        for key, value in params.items():
            assert stacked[key].shape == (2, *value.shape)
            np.testing.assert_array_equal(stacked[key][i], np.asarray(value))
    assert not np.array_equal(stacked["W_Q"][0], stacked["W_Q"][1])


# --------------------------------------------------------------------------- by hand


@functools.cache
def by_hand():
    """A compiled function of (init params, data key) recomputing, without train(), for
    scaled and unscaled (keys of its result; one program for both): the step-0 metrics,
    the step-1 metrics after one Adam step on batch 0, and the loss of the init params on
    batch 1; each metrics dict also holds the value logits as "logits"."""
    models = {name: make_model(C, MECHANISMS[name]) for name in ("scaled", "unscaled")}

    def loss_fn(model, params, batch):
        logits, weights = model.apply({"params": params}, batch)
        logp = jax.nn.log_softmax(logits)
        loss = -jnp.mean(jnp.take_along_axis(logp, batch.target[:, None], axis=1))
        return loss, (logits, weights)

    def metrics(model, params, batch):
        (loss, (logits, weights)), grads = jax.value_and_grad(
            lambda p: loss_fn(model, p, batch), has_aux=True
        )(params)
        entropy = -jnp.sum(weights * jnp.log(jnp.maximum(weights, 1e-30)), axis=-1)
        return grads, {
            "loss": loss,
            "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch.target),
            "grad_norm_wq": jnp.sqrt(jnp.sum(grads["W_Q"] ** 2)),
            "grad_norm_wk": jnp.sqrt(jnp.sum(grads["W_K"] ** 2)),
            "grad_norm_wv": jnp.sqrt(jnp.sum(grads["W_V"] ** 2)),
            "attn_entropy": jnp.mean(entropy),
            "attn_max_weight": jnp.mean(jnp.max(weights, -1)),
            "logits": logits,
        }

    @jax.jit
    def recompute(params, data_key):
        batch0 = stream_batch(data_key, 0, C.batch_size, C.task)
        batch1 = stream_batch(data_key, 1, C.batch_size, C.task)
        out = {}
        for name, model in models.items():
            grads, at0 = metrics(model, params, batch0)
            opt = optax.adam(C.lr)
            updates, _ = opt.update(grads, opt.init(params), params)
            _, at1 = metrics(model, optax.apply_updates(params, updates), batch1)
            out[name] = (at0, at1, loss_fn(model, params, batch1)[0])
        return out

    return recompute


def assert_step_matches(got: dict, index: tuple, ref: dict) -> None:
    """Metrics of ``train`` at ``index`` against a recomputation from the same state: two
    float32 programs, within ``STEP_RTOL``. Accuracy counts argmaxes, which rounding can
    only flip where the top two value logits are within rounding of each other: the
    recomputation's margins are checked to be far wider, and the accuracy must then match
    exactly."""
    logits = np.sort(np.asarray(ref["logits"], np.float64), axis=-1)
    margin = logits[:, -1] - logits[:, -2]
    assert (margin > 2 * STEP_RTOL * np.abs(logits).max()).all()
    for name in METRICS:
        if name == "accuracy":
            assert got[name][index] == ref[name]
        else:
            np.testing.assert_allclose(got[name][index], ref[name], rtol=STEP_RTOL, err_msg=name)


@pytest.mark.parametrize("mechanism", ["scaled", "unscaled"])
def test_first_steps_recomputed_by_hand(mechanism):
    """Step t trains on stream_batch(seed_keys(seed).data, t) from the shared init: the
    step-0 metrics and (after one Adam step) the step-1 metrics, recomputed by hand."""
    result = run(mechanism)
    for i, seed in enumerate(C.seed_values):
        params = cached_init_params(C, SCALED, seed)  # the scaled init: identical for both
        at0, at1, other_loss = by_hand()(params, seed_keys(seed).data)[mechanism]
        assert_step_matches(result.metrics, (i, 0), at0)
        # Adam's first step is lr g / (|g| + 1e-8): a relative error r of g moves it by
        # lr r 1e-8 / |g|, negligible unless g is within rounding of 0; so step 1 is again
        # two evaluations from (to that precision) the same parameters.
        assert_step_matches(result.metrics, (i, 1), at1)
        # Guard: another batch of the stream gives another step-0 loss (far above rounding).
        assert abs(float(other_loss) - float(at0["loss"])) > 1e-4


def test_draw_chunk_gives_each_seed_its_stream_batches():
    """A chunk's batches drawn together for two seeds are batches ``start .. end - 1`` of
    each seed's stream, each as ``stream_batch`` draws it alone: integer token ids, compared
    exactly."""
    seeds = (3, 4)
    keys = [seed_keys(s).data for s in seeds]
    # A chunk of C.chunk_steps steps, the keys placed as Trainer places them (replicated):
    # the draw program the trainings above compiled.
    steps = np.arange(5, 5 + C.chunk_steps)
    stacked = replicate(jnp.stack(keys))
    together = [np.asarray(x) for x in draw_chunk(stacked, steps, C.batch_size, C.task)]
    for j, key in enumerate(keys):
        for i, t in enumerate(steps):
            alone = stream_batch(key, int(t), C.batch_size, C.task)
            for got, want in zip(together, alone, strict=True):
                np.testing.assert_array_equal(got[j, i], np.asarray(want))


def test_mechanisms_differ_only_by_the_scale():
    """Same init and data: the unscaled step-0 logits are the scaled ones times sqrt(d_k),
    so the step-0 losses differ (while being recomputable above from the same batch)."""
    # Far apart compared with the rounding of either program (STEP_RTOL each).
    a, b = run("scaled").metrics["loss"][:, 0], run("unscaled").metrics["loss"][:, 0]
    assert (np.abs(a - b) > 2 * STEP_RTOL * np.abs(a)).all()


# --------------------------------------------------------------------------- invariances


def test_deterministic():
    first = run()
    second = train_and_evaluate(C)["scaled"]
    for name in METRICS:
        np.testing.assert_array_equal(first.metrics[name], second.metrics[name], err_msg=name)
    np.testing.assert_array_equal(first.eval_accuracy, second.eval_accuracy)


@pytest.mark.parametrize("seed", [0, 1])
def test_vmapped_seeds_equal_separate_runs(seed):
    """A seed trained alone (a program of another batch shape) starts like the same seed
    trained beside another: step 0 from the same state within two evaluations' rounding.
    (Later steps carry that rounding through training; the next test compares them
    exactly, within one compiled program.)"""
    together = run()
    alone = train(replace(C, seeds=1, seed=seed), SCALED)
    assert alone.seeds == [seed]
    params = cached_init_params(C, SCALED, seed)
    at0 = by_hand()(params, seed_keys(seed).data)["scaled"][0]
    assert_step_matches(
        alone.metrics,
        (0, 0),
        dict(at0, **{name: together.metrics[name][seed, 0] for name in METRICS}),
    )


def test_seed_runs_do_not_depend_on_their_position():
    """Seed 1 first of (1, 2) and second of (0, 1): the same compiled program (only the
    seed values differ, as inputs) on the same per-seed data, with no arithmetic across
    seeds, so every metric is bit-identical."""
    shifted, together = run(seed=1), run()
    assert shifted.seeds == [1, 2]
    first = {name: values[:1] for name, values in shifted.metrics.items()}
    assert_metrics_equal(first, together.metrics, rows=slice(1, 2))
    np.testing.assert_array_equal(shifted.eval_accuracy[:1], together.eval_accuracy[1:])


def test_chunking_invariance():
    # Exact: every chunk runs the same compiled step (the scan body) on the same states;
    # only the number of iterations per call differs.
    assert_metrics_equal(run(chunk_steps=30).metrics, run().metrics)
    np.testing.assert_array_equal(run(chunk_steps=30).eval_accuracy, run().eval_accuracy)


def test_resume_from_state_continues_the_run():
    """10 steps, then 20 more from the returned state, are the 30-step run (scaled, trained
    beside unscaled as in the run)."""
    first, first_unscaled = train_runs(both_runs(C), steps=10)
    rest = train_runs(both_runs(C, (first.state, first_unscaled.state)), start_step=10)[0]
    assert rest.start_step == 10
    assert rest.metrics["loss"].shape == (2, 20)
    full = run()
    # Exact, as for chunking: the same compiled step on the same states.
    assert_metrics_equal(first.metrics, full.metrics, rows=(slice(None), slice(0, 10)))
    assert_metrics_equal(rest.metrics, full.metrics, rows=(slice(None), slice(10, 30)))
    np.testing.assert_array_equal(rest.eval_accuracy, full.eval_accuracy)


# --------------------------------------------------------------------------- divergence


def test_divergence_raises_naming_mechanism_seed_and_step():
    """An absurd learning rate blows the parameters up after the first update: the loss of
    step start_step + 1 is the first non-finite one; the error names the earliest lane,
    scaled's first seed. (Seeds 3 and 4 from step 5, scaled beside unscaled: the compiled
    program is the one of the experiment's divergence test, seeds 0 and 1.)"""
    config = replace(C, lr=1e30, seed=3)
    with pytest.raises(DivergenceError) as info:
        train_runs(both_runs(config), start_step=5, steps=10)
    message = str(info.value)
    assert "mechanism scaled" in message
    assert "seed 3" in message
    assert "at step 6" in message
    assert "\n" not in message
    assert isinstance(info.value, RunError)


def test_earliest_nonfinite_is_the_first_step_then_the_first_lane():
    losses = np.ones((3, 10), np.float32)
    assert earliest_nonfinite(losses) is None
    losses[2, 4] = np.inf
    assert earliest_nonfinite(losses) == (2, 4)
    losses[1, 7] = np.nan
    assert earliest_nonfinite(losses) == (2, 4)
    losses[0, 4] = np.nan
    assert earliest_nonfinite(losses) == (0, 4)


# --------------------------------------------------------------------------- bad arguments


def test_train_rejects_zero_steps_naming_steps():
    with pytest.raises(ValueError, match=r"\bsteps\b"):
        train(C, SCALED, steps=0)

"""attnlab.training.lanes: the engine on a task whose answer is closed-form (gradient
descent on ``(theta - 1)^2 / 2`` from ``theta_0``: ``theta_t = 1 - (1 - lr)^t (1 -
theta_0)``), lanes rate-major and seed-minor, padded lanes dropped, the chunks joined, and
the first non-finite loss recorded, not raised."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.training.lanes import LaneBlocks, Programs, run_chunks, run_lanes


class State(NamedTuple):
    params: jax.Array


def quadratic_programs() -> Programs:
    """A lane's parameter starts at its init key's first uniform draw; each step is
    ``theta <- theta - lr (theta - 1)``; its loss ``(theta - 1)^2 / 2`` before the step;
    the evaluation's losses are one window, its extra the parameter."""

    def init(keys, data_keys):
        return State(jax.vmap(lambda k: jax.random.uniform(k))(keys))

    def chunk(state, steps, data, rates, constants):
        def lane(theta, lr, shift):
            def body(t, _):
                return t - lr * (t - 1.0), {"loss": 0.5 * (t - 1.0) ** 2 + shift}

            return jax.lax.scan(body, theta, steps)

        thetas, metrics = jax.vmap(lane)(state.params, rates, constants["shift"])
        return State(thetas), metrics

    def evaluate(params, held_out, constants):
        return (0.5 * (params - 1.0) ** 2)[:, None], params

    return Programs(init, jax.jit(chunk), jax.jit(evaluate), ("loss",))


def keys(seed):
    root = jax.random.key(seed)
    return jax.random.fold_in(root, 0), jax.random.fold_in(root, 1)


def test_the_lanes_follow_the_closed_form_in_chunks():
    """Seven steps in chunks of three (3, 3, 1): every lane's losses are the closed form's
    (float32: each step one multiply-add, within 16 eps of |theta| ~ 1 after 7 steps), the
    lanes are rate-major, the constants reach every lane."""
    lrs, seeds, steps = [0.1, 0.5], [0, 1, 2], 7
    lanes = run_lanes(quadratic_programs(), lrs, seeds, keys, {"shift": 0.0}, None, None,
                      steps, 3)  # fmt: skip
    assert lanes.lrs.tolist() == [0.1] * 3 + [0.5] * 3 and lanes.seeds.tolist() == seeds * 2
    assert lanes.metrics["loss"].shape == (6, steps)
    theta0 = np.asarray(lanes.initial_extra, np.float64)
    for i, lr in enumerate(lanes.lrs):
        t = np.arange(steps)
        expected = 0.5 * ((1 - lr) ** t * (1 - theta0[i])) ** 2
        np.testing.assert_allclose(lanes.metrics["loss"][i], expected, rtol=0,
                                   atol=16 * np.finfo(np.float32).eps)  # fmt: skip
        final = 0.5 * ((1 - lr) ** steps * (1 - theta0[i])) ** 2
        np.testing.assert_allclose(
            lanes.final_loss[i, 0], final, atol=16 * np.finfo(np.float32).eps
        )
    assert (lanes.diverged_step == -1).all()


def test_a_diverging_lane_is_recorded_not_raised():
    """At ``lr = 1e19`` the loss is ``(1e19)^2`` times larger each step: float32's 3.4e38 is
    passed at step 2 (``0.5 (1e19)^4 (1 - theta_0)^2``), so its first non-finite loss is at
    step 2 (step 0: the initial loss, step 1: about 5e37 at most); the stable lane never."""
    lanes = run_lanes(quadratic_programs(), [0.1, 1e19], [0], keys, {"shift": 0.0}, None, None,
                      4, 4)  # fmt: skip
    theta0 = float(lanes.initial_extra[1])
    first = 2 if 0.5 * 1e76 * (1 - theta0) ** 2 > float(np.finfo(np.float32).max) else 3
    assert lanes.diverged_step.tolist() == [-1, first]
    assert np.isfinite(lanes.final_loss[0]).all()


def test_the_constants_are_every_lanes():
    lanes = run_lanes(quadratic_programs(), [0.1], [0, 1], keys, {"shift": 2.0}, None, None, 2, 2)
    assert (lanes.metrics["loss"] >= 2.0).all()
    assert jnp.asarray(lanes.params).shape == (2,)


def test_blocks_pad_the_last_block_and_join_only_the_lanes():
    """Five lanes in blocks of two: three blocks, the last padded; ``advance`` runs each
    block's call and replaces its state, and the lanes come back joined, in order, without
    the padding; ``run_chunks`` stops where ``after`` says."""
    state = np.arange(5, dtype=np.float32)
    blocks = LaneBlocks(state, {"add": np.arange(5, dtype=np.float32) * 10}, 5, 2)
    assert len(blocks.blocks) == 3 and blocks.blocks[-1].state.shape == (2,)

    def call(s, args, steps, data):
        return s + args["add"] + data, {"loss": jnp.stack([s] * len(steps), axis=1)}

    seen = []

    def after(first, end, metrics):
        seen.append((first, end, metrics["loss"].shape))
        return end >= 6

    reached = run_chunks(blocks, 0, 10, 3, call, lambda steps: 1.0, after)
    assert reached == 6 and seen == [(0, 3, (5, 3)), (3, 6, (5, 3))]
    np.testing.assert_array_equal(blocks.state, state + 2 * (np.arange(5) * 10 + 1))


def test_what_the_engine_cannot_run_is_one_line():
    """No lanes, no steps, chunks of no steps, blocks of no lanes: a ValueError each, not a
    loop that never ends or an error from deep inside."""
    with pytest.raises(ValueError, match="run_lanes: needs a rate"):
        run_lanes(quadratic_programs(), [], [0], keys, {"shift": 0.0}, None, None, 2, 2)
    with pytest.raises(ValueError, match="0 steps"):
        run_lanes(quadratic_programs(), [0.1], [0], keys, {"shift": 0.0}, None, None, 0, 2)
    blocks = LaneBlocks(np.zeros(2, np.float32), {}, 2, 2)
    with pytest.raises(ValueError, match="chunk_steps must be >= 1"):
        run_chunks(blocks, 0, 4, 0, lambda *a: None, lambda steps: None, lambda *a: False)
    with pytest.raises(ValueError, match="n_lanes and block must be >= 1"):
        LaneBlocks(np.zeros(2, np.float32), {}, 2, 0)

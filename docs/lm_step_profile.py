"""Where the language model's step goes (docs/performance.md): ``jax.jit`` of the loss and
of its ``value_and_grad`` at the bench's size, and whole training steps (the bench's
``lm_step_vs_peer`` chunk), ours (``attnlab.lm``) against the ``flax.linen`` peer
(``attnlab/studies/bench/peer.py``); ours also without the per-step entropy statistic and
with the dense layers' matmul over ``[B, T, d]`` unflattened (as before issue 59), with its
one lane vmapped (as before its one-lane path), and a lane per rate of ``LANE_RATES``
vmapped against run in turn (``lax.map``). Timed as the bench times
(``interleaved_median_seconds``: round-robin, the median of ``ROUNDS`` rounds, each timing
at least ``MIN_SECONDS``), the first call (compiling) apart. Timings, not results: nothing
here is written or compared.

    .venv/bin/python docs/lm_step_profile.py
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from functools import partial
from unittest import mock

import flax.linen as nn
import jax
import jax.numpy as jnp

import attnlab.lm.model as lm_model
import attnlab.studies.bench.lm_step as bench_lm_step
from attnlab.core.references import resolve
from attnlab.lm.loss import loss_fn
from attnlab.lm.train import chunk_program, lane_chunk
from attnlab.studies.bench.config import BenchConfig
from attnlab.studies.bench.lm_step import RATE, lm_lane
from attnlab.studies.bench.peer import PeerLM, peer_loss, peer_programs
from attnlab.studies.bench.timing import interleaved_median_seconds

ROUNDS = 9
MIN_SECONDS = 0.5
BENCH = BenchConfig()
#: The bench's size (d_model 128, d_head 16, B 16, T 64), one chunk of all its steps.
CONFIG = replace(BENCH.lm, chunk_steps=BENCH.lm.steps)
NO_ENTROPY = {"entropy": lambda p: jnp.zeros(p.shape[:-1])}
#: The rates of the several-lane cases, a lane each (one seed): the LM card's.
LANE_RATES = (3e-3, 1e-2, 3e-2, 1e-1, 3e-1)
LANES = len(LANE_RATES)


def in_turn_program(model: lm_model.CausalLM, config):
    """``attnlab.lm.train.chunk_program`` with its lanes run in turn (``lax.map`` of
    ``lane_chunk``) instead of vmapped: the same steps, each lane unbatched."""
    chunk = lane_chunk(model, config)

    def lanes(state, steps, train, lr, constants):
        return jax.lax.map(lambda lane: chunk(lane[0], steps, train, *lane[1:]),
                           (state, lr, constants))  # fmt: skip

    return jax.jit(lanes)


def vmapped_program(model: lm_model.CausalLM, config):
    """``attnlab.lm.train.chunk_program`` with every lane vmapped, a single one too (as
    before issue 59's one-lane path)."""
    return jax.jit(jax.vmap(lane_chunk(model, config), in_axes=(0, None, None, 0, 0)))


def unflattened_dense(name: str, module: nn.Module, x: jax.Array, shape, std: float):
    """``attnlab.lm.model._dense`` without flattening ``x`` to ``[N, d_in]`` first."""
    w = module.param(name, nn.initializers.normal(std), shape)
    return x @ w


def compiled(call: Callable[[], object], patch: dict[str, Callable] | None = None):
    """``call`` and the seconds of its first call (compiling), traced with
    ``attnlab.lm.model``'s names of ``patch`` replaced."""
    with mock.patch.multiple(lm_model, **patch) if patch else nullcontext():
        start = time.perf_counter()
        jax.block_until_ready(call())
        return call, time.perf_counter() - start


def ours_step(
    patch: dict[str, Callable] | None = None,
    program_of: Callable = chunk_program,
    rates: tuple[float, ...] = (RATE,),
):
    """The bench's chunk of ours (``lm_lane``) for a lane per rate of ``rates``, traced anew
    with ``patch``, its program made by ``program_of``."""
    chunk_program.cache_clear()
    with mock.patch.object(bench_lm_step, "chunk_program", program_of):
        return compiled(lm_lane(BENCH, CONFIG, rates)[2], patch)


def main() -> None:
    mechanism = resolve("scaled").mechanism
    model = CONFIG.model(mechanism)
    windows = jax.random.randint(jax.random.key(0), (CONFIG.batch_size, CONFIG.seq_len + 1),
                                 0, 256)  # fmt: skip
    constants = mechanism.constant_values(CONFIG.d_head)
    params = model.init(jax.random.key(1), windows[:, :-1], constants)["params"]
    peer = PeerLM(CONFIG)
    peer_params = peer.init(jax.random.key(1), windows[:, :-1])["params"]

    def ours(p):
        return loss_fn(model, p, windows, constants, CONFIG.z_loss_weight)[0]

    def peers(p):
        return peer_loss(peer, p, windows)[0]

    def jitted(f: Callable, arg, patch: dict[str, Callable] | None = None):
        return compiled(partial(jax.jit(f), arg), patch)

    grad = jax.value_and_grad
    calls = {
        "ours: the loss (forward)": jitted(ours, params),
        "ours: value_and_grad": jitted(grad(ours), params),
        "ours: value_and_grad, no entropy statistic": jitted(grad(ours), params, NO_ENTROPY),
        "ours: value_and_grad, dense unflattened": jitted(
            grad(ours), params, {"_dense": unflattened_dense}
        ),
        "peer: the loss (forward)": jitted(peers, peer_params),
        "peer: value_and_grad": jitted(grad(peers), peer_params),
    }
    batches = lm_lane(BENCH, CONFIG)[1]  # the peer steps on the windows ours draws
    init, peer_chunk = peer_programs(CONFIG, RATE)
    steps = {
        "ours: a training step": ours_step(),
        "ours: a training step, no entropy statistic": ours_step(NO_ENTROPY),
        "ours: a training step, dense unflattened": ours_step({"_dense": unflattened_dense}),
        "ours: a training step, the lane vmapped": ours_step(program_of=vmapped_program),
        "peer: a training step": compiled(
            partial(peer_chunk, init(jax.random.key(BENCH.seed)), batches)
        ),  # fmt: skip
    }
    lanes = {
        f"ours: a lane-step of {LANES} lanes, vmapped": ours_step(rates=LANE_RATES),
        f"ours: a lane-step of {LANES} lanes, in turn": ours_step(
            program_of=in_turn_program, rates=LANE_RATES
        ),
    }
    timed = {name: call for name, (call, _) in (calls | steps | lanes).items()}
    seconds = interleaved_median_seconds(timed, ROUNDS, min_seconds=MIN_SECONDS)
    for table, per in ((calls, 1), (steps, CONFIG.steps), (lanes, CONFIG.steps * LANES)):
        for name, (_, first) in table.items():
            median = seconds[name] / per * 1e3
            print(f"{name:45s} {median:7.2f} ms   (first call, compiling: {first:.2f} s)")


if __name__ == "__main__":
    main()

"""The lanes engine: every (learning rate, seed) of a sweep as a lane of one compiled
program, stepped in ``lax.scan`` chunks.

A task hands the engine its three compiled programs (``Programs``), each with a leading
lane axis on what differs between lanes:

- ``init(init_keys [L], data_keys [L]) -> state``: each lane's parameters (the state's
  ``params``), optimizer state and data key at step 0;
- ``chunk(state, steps [n], data, rates [L], constants) -> (state, metrics)``: the steps
  ``steps`` of every lane, each metric ``[L, n, ...]``;
- ``evaluate(params, held_out, constants) -> (losses [L, W], extra [L])``: the held-out
  loss per window of every lane, and one more number per lane the task reads at step 0;

and the names of the per-step metrics kept (``metrics``, ``"loss"`` among them).

``run_lanes`` lays the lanes out (rate-major), pads them to a multiple of the device count
and shards them over the devices (``attnlab.core.parallel``), evaluates at step 0, runs the
chunks (``on_chunk(steps x lanes)`` after each, ``on_params(step, params)`` at step 0 and
after each chunk), evaluates at the end, and records the first non-finite step of each
lane's loss (``diverged_step``, -1: none), never raising on it. The programs are the
task's, so what it computes does not depend on the engine; the engine adds no arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from attnlab.core.curves import first_nonfinite_steps
from attnlab.core.parallel import device_count, pad_to_multiple, replicate, shard_batch


class Programs(NamedTuple):
    """A task's compiled programs for one mechanism and configuration (module docstring)."""

    init: Callable
    chunk: Callable
    evaluate: Callable
    metrics: tuple[str, ...]


@dataclass
class Lanes:
    """Every lane of one run: ``lrs`` and ``seeds`` ``[lanes]``, per-step ``metrics``
    ``[lanes, steps, ...]``, the held-out loss per window at step 0 and at the end
    ``[lanes, W]``, the evaluation's extra number at step 0 ``[lanes]``, the first
    non-finite step of the loss (-1: none) and the final parameters (stacked over lanes)."""

    lrs: np.ndarray
    seeds: np.ndarray
    metrics: dict[str, np.ndarray]
    initial_loss: np.ndarray
    final_loss: np.ndarray
    initial_extra: np.ndarray
    diverged_step: np.ndarray
    params: Any


def run_lanes(
    programs: Programs,
    lrs: Sequence[float],
    seeds: Sequence[int],
    seed_keys: Callable[[int], tuple[jax.Array, jax.Array]],
    constants: dict[str, float],
    data: Any,
    held_out: Any,
    steps: int,
    chunk_steps: int,
    on_chunk: Callable[[int], None] | None = None,
    on_params: Callable[[int, Any], None] | None = None,
) -> Lanes:
    """Train every (rate, seed) of ``lrs x seeds`` for ``steps`` in chunks of
    ``chunk_steps`` (module docstring): ``seed_keys(seed)`` gives a lane's initialisation
    and data keys, ``constants`` the mechanism's constant values (the same in every lane),
    ``data`` what every lane's steps read, ``held_out`` what the evaluation reads."""
    lanes = [(lr, seed) for lr in lrs for seed in seeds]
    n = len(lanes)
    keys = [seed_keys(seed) for _, seed in lanes]
    state = programs.init(jnp.stack([k for k, _ in keys]), jnp.stack([d for _, d in keys]))
    lane_constants = {k: np.full(n, v, np.float32) for k, v in constants.items()}
    rates = np.asarray([lr for lr, _ in lanes], np.float32)
    lanes_tree = jax.tree.map(np.asarray, (state, rates, lane_constants))
    state, rates, lane_constants = shard_batch(pad_to_multiple(lanes_tree, device_count())[0])
    data, held_out = replicate((data, held_out))
    initial, initial_extra = programs.evaluate(state.params, held_out, lane_constants)
    chunks = []
    if on_params is not None:
        on_params(0, state.params)
    for start in range(0, steps, chunk_steps):
        taken = jnp.arange(start, min(start + chunk_steps, steps))
        state, step_metrics = programs.chunk(state, taken, data, rates, lane_constants)
        chunks.append(jax.tree.map(np.asarray, step_metrics))
        if on_chunk is not None:
            on_chunk(len(taken) * n)
        if on_params is not None:
            on_params(int(taken[-1]) + 1, state.params)
    kept = {k: np.concatenate([c[k] for c in chunks], axis=1)[:n] for k in programs.metrics}
    final, _ = programs.evaluate(state.params, held_out, lane_constants)
    params = jax.tree.map(lambda x: np.asarray(x)[:n], state.params)
    return Lanes(
        np.asarray([lr for lr, _ in lanes]), np.asarray([s for _, s in lanes]), kept,
        np.asarray(initial)[:n], np.asarray(final)[:n], np.asarray(initial_extra)[:n],
        first_nonfinite_steps(kept["loss"]), params,
    )  # fmt: skip

"""The lanes engine both wings train on: every (run, learning rate, seed) of a training is
a *lane*, the lanes' states are stacked along a leading axis, laid out in blocks that are
each padded and sharded over the devices (``LaneBlocks``), and stepped chunk by chunk,
each chunk one call per block of a compiled ``lax.scan`` (``run_chunks``).

What a wing gives the engine is its compiled chunk and how to call it on a block
(``call(state, args, steps, data) -> (state, metrics)``: ``args`` the block's per-lane
arguments by name, ``data`` what the chunk's steps read, drawn per chunk where the wing
draws it), and what to do after each chunk (progress, the divergence record, a ledger,
diagnostics, an early stop). The engine adds no arithmetic: the compiled programs are the
wing's, called on the same arrays, so what they compute does not depend on it. The
recall wing (``attnlab.recall.trainer``) lays its lanes out in blocks that fit the CPU's
cache (``block_size``); the language model (``run_lanes``) runs all its lanes in one.

``run_lanes`` is the engine for a task that hands it three programs (``Programs``), as
``attnlab.training.tasks`` does:

- ``init(init_keys [L], data_keys [L]) -> state``: each lane's parameters (the state's
  ``params``), optimizer state and data key at step 0;
- ``chunk(state, steps [n], data, rates [L], constants) -> (state, metrics)``: the steps
  ``steps`` of every lane, each metric ``[L, n, ...]``;
- ``evaluate(params, held_out, constants) -> (losses [L, W], extra [L])``: the held-out
  loss per window of every lane, and one more number per lane the task reads at step 0;

and the names of the per-step metrics kept (``metrics``, ``"loss"`` among them). It lays
the lanes out rate-major, evaluates at step 0, runs the chunks (``on_chunk(steps x
lanes)`` after each, ``on_params(step, params)`` at step 0 and after each chunk),
evaluates at the end, and records the first non-finite step of each lane's loss
(``diverged_step``, -1: none), never raising on it.
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

#: On CPU, the working set one call of a compiled chunk may hold per device (bytes): a
#: block's parameters, optimizer moments and step activations then stay in cache.
CPU_BLOCK_BYTES = 4 * 2**20


def host_concatenate(trees: Sequence) -> object:
    """``trees`` (of one structure) concatenated leaf by leaf along the leading axis, as
    numpy arrays: stacking and slicing lanes on the host compiles nothing (an eager
    ``jnp.concatenate`` or slice compiles a program per shape)."""
    return jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs]), *trees)


def block_size(lanes: int, lanes_per_call: int | None, per_lane: int) -> int:
    """Lanes per compiled call, a multiple of the device count. Default: on CPU as many as
    fit ``CPU_BLOCK_BYTES`` per device (at least one; small models then share each call's
    kernel launches, large ones keep their state in cache); elsewhere every lane at once.
    Every block runs through the same compiled program."""
    n_dev = device_count()
    if lanes_per_call is None:
        fit = max(1, CPU_BLOCK_BYTES // per_lane) * n_dev
        lanes_per_call = fit if jax.default_backend() == "cpu" else lanes
    return -(-min(lanes_per_call, lanes) // n_dev) * n_dev


class Block(NamedTuple):
    """One block of lanes as a compiled call takes them: the lanes' ``state`` and their
    per-lane ``args`` by name, each field ``[block, ...]``, padded and sharded."""

    state: Any
    args: dict[str, Any]


class LaneBlocks:
    """``n_lanes`` lanes (``state`` and ``args``, fields ``[n_lanes, ...]`` on the host) cut
    into blocks of ``block`` lanes, the last padded to a full block (every block then runs
    through one compiled program), each sharded over the devices."""

    def __init__(self, state: Any, args: dict[str, Any], n_lanes: int, block: int):
        if n_lanes < 1 or block < 1:
            raise ValueError(f"LaneBlocks: n_lanes and block must be >= 1, got {n_lanes}, {block}")
        self.n_lanes, self.block = n_lanes, block
        self.blocks = []
        for start in range(0, n_lanes, block):
            part = jax.tree.map(lambda x, start=start: x[start : start + block], (state, args))
            self.blocks.append(Block(*shard_batch(pad_to_multiple(part, block)[0])))

    def lanes_of(self, outputs: list) -> Any:
        """Per-block outputs as numpy arrays ``[n_lanes, ...]`` (the padding removed)."""
        return jax.tree.map(lambda x: x[: self.n_lanes], host_concatenate(outputs))

    def map(self, fn: Callable[[Block], Any]) -> Any:
        """``fn`` of every block, joined over the lanes (``lanes_of``)."""
        return self.lanes_of([fn(b) for b in self.blocks])

    def advance(self, call: Callable, steps: np.ndarray, data: Any) -> dict[str, np.ndarray]:
        """One chunk of ``steps`` on every block: ``call(state, args, steps, data) ->
        (state, metrics)``, each block's state replaced; the metrics joined over the lanes."""
        outputs = []
        for i, b in enumerate(self.blocks):
            state, metrics = call(b.state, b.args, steps, data)
            self.blocks[i] = b._replace(state=state)
            outputs.append(metrics)
        return self.lanes_of(outputs)

    @property
    def state(self) -> Any:
        """Every lane's state, ``[n_lanes, ...]`` on the host."""
        return self.lanes_of([b.state for b in self.blocks])


def run_chunks(
    blocks: LaneBlocks,
    start: int,
    until: int,
    chunk_steps: int,
    call: Callable,
    draw: Callable[[np.ndarray], Any],
    after: Callable[[int, int, dict[str, np.ndarray]], bool],
) -> int:
    """Step every lane of ``blocks`` from step ``start`` to ``until`` in chunks of
    ``chunk_steps``: each chunk's ``data = draw(steps)``, ``blocks.advance(call, steps,
    data)``, then ``after(first, end, metrics)`` (the chunk's first step, the step after
    its last, the metrics ``[n_lanes, steps, ...]``), whose True stops the training early.
    Returns the step reached."""
    if chunk_steps < 1:
        raise ValueError(f"run_chunks: chunk_steps must be >= 1, got {chunk_steps}")
    step = start
    while step < until:
        end = min(step + chunk_steps, until)
        steps = np.arange(step, end)
        metrics = blocks.advance(call, steps, draw(steps))
        if after(step, end, metrics):
            return end
        step = end
    return step


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
    ``chunk_steps`` (module docstring), every lane in one block: ``seed_keys(seed)`` gives a
    lane's initialisation and data keys, ``constants`` the mechanism's constant values (the
    same in every lane), ``data`` what every lane's steps read, ``held_out`` what the
    evaluation reads. ``on_params`` receives the block's parameters, padded lanes
    included."""
    lanes = [(lr, seed) for lr in lrs for seed in seeds]
    if not lanes or steps < 1:
        raise ValueError(f"run_lanes: needs a rate, a seed and steps >= 1, got {len(lrs)} "
                         f"rates, {len(seeds)} seeds, {steps} steps")  # fmt: skip
    n = len(lanes)
    keys = [seed_keys(seed) for _, seed in lanes]
    state = programs.init(jnp.stack([k for k, _ in keys]), jnp.stack([d for _, d in keys]))
    args = {"rate": np.asarray([lr for lr, _ in lanes], np.float32),
            "constants": {k: np.full(n, v, np.float32) for k, v in constants.items()}}  # fmt: skip
    blocks = LaneBlocks(
        jax.tree.map(np.asarray, state), args, n, -(-n // device_count()) * device_count()
    )
    data, held_out = replicate((data, held_out))

    def evaluate(b: Block) -> tuple:
        return programs.evaluate(b.state.params, held_out, b.args["constants"])

    def call(state, args, steps, data):
        return programs.chunk(state, jnp.asarray(steps), data, args["rate"], args["constants"])

    initial, initial_extra = blocks.map(evaluate)
    chunks = []
    if on_params is not None:
        on_params(0, blocks.blocks[0].state.params)

    def after(first: int, end: int, metrics: dict) -> bool:
        chunks.append(metrics)
        if on_chunk is not None:
            on_chunk((end - first) * n)
        if on_params is not None:
            on_params(end, blocks.blocks[0].state.params)
        return False

    run_chunks(blocks, 0, steps, chunk_steps, call, lambda _: data, after)
    kept = {k: np.concatenate([c[k] for c in chunks], axis=1) for k in programs.metrics}
    final, _ = blocks.map(evaluate)
    params = blocks.state.params
    return Lanes(
        np.asarray([lr for lr, _ in lanes]), np.asarray([s for _, s in lanes]), kept,
        initial, final, initial_extra, first_nonfinite_steps(kept["loss"]), params,
    )  # fmt: skip

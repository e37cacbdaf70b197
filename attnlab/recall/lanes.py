"""Lanes in blocks: how ``Trainer`` lays out its lanes (every (run, seed) of a training)
for the compiled chunk. The lanes' states are stacked on the host; a block of lanes is
one call of the compiled program, padded to full size and sharded over the devices, and
every block runs through the same program.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import numpy as np

from attnlab.core.parallel import device_count, pad_to_multiple, shard_batch
from attnlab.recall.config import RecallConfig
from attnlab.recall.model import MechanismConstants
from attnlab.recall.step import TrainState


def host_concatenate(trees: Sequence) -> object:
    """``trees`` (of one structure) concatenated leaf by leaf along the leading axis, as
    numpy arrays: stacking and slicing lanes on the host compiles nothing (an eager
    ``jnp.concatenate`` or slice compiles a program per shape)."""
    return jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs]), *trees)


class LaneBlock(NamedTuple):
    """One block of lanes as a compiled call takes them, each field ``[block, ...]``."""

    state: TrainState
    seed_index: jax.Array
    rates: jax.Array
    constants: MechanismConstants


#: On CPU, the working set one call of the compiled chunk may hold per device (bytes): a
#: block's parameters, Adam moments and step activations then stay in cache.
CPU_BLOCK_BYTES = 4 * 2**20


def lane_bytes(config: RecallConfig, state: TrainState) -> int:
    """Float32 bytes one lane touches per step: its parameters and Adam's two moments
    (``state``, stacked over lanes: one lane's share), and about six ``[B, pairs, d_k]``
    activations (keys, values and their gradients)."""
    params = sum(x[0].size for x in jax.tree.leaves(state.params))
    return 4 * (3 * params + 6 * config.batch_size * config.pairs * config.d_k)


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


def split_blocks(lanes: tuple, n_lanes: int, block: int) -> list[LaneBlock]:
    """``lanes`` (fields ``[n_lanes, ...]``) cut into blocks of ``block`` lanes, the last
    padded to a full block (every block then runs through one compiled program), each
    sharded over the devices."""
    blocks = []
    for start in range(0, n_lanes, block):
        part = jax.tree.map(lambda x, start=start: x[start : start + block], lanes)
        blocks.append(LaneBlock(*shard_batch(pad_to_multiple(part, block)[0])))
    return blocks

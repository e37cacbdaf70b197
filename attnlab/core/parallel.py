"""Chunked, device-sharded evaluation of a per-item function over a batch axis.

The Monte-Carlo trials of 01-03 and the seeds of 04-05 are independent items, so they are
laid out along one batch axis that is (a) cut into chunks, which bounds peak memory, and
(b) sharded over every device in ``jax.devices()`` with a one-axis ``Mesh`` and
``NamedSharding``. XLA's SPMD partitioner then runs each device's share of a chunk where its
data lives; the same code runs on one CPU, on several GPUs, and across hosts after
``jax.distributed.initialize()``.

Each item carries its own PRNG key, so an item's random draws do not depend on the chunk
size or on the number of devices. The statistics computed from them can differ in the last
float32 bit, because XLA may vectorise a reduction differently for another batch shape; the
same flags on the same devices give bit-identical results.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, lru_cache

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

BATCH_AXIS = "batch"


@cache
def batch_mesh() -> Mesh:
    """A one-dimensional mesh over all devices, axis name ``"batch"``."""
    return Mesh(np.asarray(jax.devices()), (BATCH_AXIS,))


def batch_sharding() -> NamedSharding:
    """Shard the leading axis over the batch mesh; the other axes are replicated."""
    return NamedSharding(batch_mesh(), PartitionSpec(BATCH_AXIS))


def device_count() -> int:
    """How many devices the batch axis is sharded over."""
    return batch_mesh().size


def pad_to_multiple(tree, multiple: int):
    """Pad the leading axis of every leaf to a multiple of ``multiple`` by repeating the last
    item; returns the padded tree and the original length. Numpy leaves stay numpy (padded
    on the host, compiling nothing)."""
    n = jax.tree.leaves(tree)[0].shape[0]
    padded = -(-n // multiple) * multiple

    def pad(x):
        if padded == n:
            return x
        xp = np if isinstance(x, np.ndarray) else jnp
        return xp.concatenate([x, xp.repeat(x[-1:], padded - n, axis=0)], axis=0)

    return jax.tree.map(pad, tree), n


def _global_array(x: jax.Array, sharding: NamedSharding) -> jax.Array:
    """A global array laid out by ``sharding`` from a value every process holds in full;
    unlike ``device_put`` this also works when some devices belong to other hosts."""
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        data = _global_array(jax.random.key_data(x), sharding)
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def shard_batch(tree):
    """Place a tree whose leaves share a leading axis (a multiple of the device count) on the
    batch mesh, split along that axis."""
    sharding = batch_sharding()
    return jax.tree.map(lambda x: _global_array(x, sharding), tree)


def replicate(tree):
    """Place a tree on every device of the batch mesh, whole (inputs every lane reads)."""
    sharding = NamedSharding(batch_mesh(), PartitionSpec())
    return jax.tree.map(lambda x: _global_array(x, sharding), tree)


@lru_cache(maxsize=256)
def _batched(fn: Callable, mesh: Mesh) -> Callable:
    """``jit(vmap(fn))`` with inputs sharded over ``mesh`` and outputs replicated (so every
    host can read them); cached per function so repeated calls reuse its compilation."""
    return jax.jit(jax.vmap(fn), out_shardings=NamedSharding(mesh, PartitionSpec()))


def chunked_map(
    fn: Callable,
    items,
    chunk_size: int,
    on_chunk: Callable[[int], None] | None = None,
) -> np.ndarray | tuple:
    """``jax.vmap(fn)`` over the leading axis of ``items``, a chunk at a time, sharded.

    Args:
      fn: a function of one item (a pytree of arrays without the leading axis), returning a
        pytree of arrays; it is vmapped and jit-compiled once per chunk shape. Pass the same
        function object on every call (e.g. from a cached factory) to reuse compilations.
      items: a pytree whose leaves share a leading axis of length N (typically PRNG keys).
      chunk_size: at most this many items per compiled call: N is cut into equal chunks,
        each rounded up to a multiple of the device count; the last chunk is padded so every
        call has the same shape and compiles once.
      on_chunk: called with the number of items finished after each chunk (progress bars).

    Returns:
      The outputs of ``fn`` stacked along a leading axis of length N, as numpy arrays.
    """
    n_dev = device_count()
    n = jax.tree.leaves(items)[0].shape[0]
    n_chunks = -(-n // max(1, chunk_size))
    per_chunk = -(-n // n_chunks)  # equal chunks, so the last one pads little
    chunk = -(-per_chunk // n_dev) * n_dev  # a multiple of the device count
    batched = _batched(fn, batch_mesh())
    outputs = []
    for start in range(0, n, chunk):
        part = jax.tree.map(lambda x, s=start: x[s : s + chunk], items)
        part, length = pad_to_multiple(part, chunk)
        out = batched(shard_batch(part))
        outputs.append(jax.tree.map(lambda x, m=length: np.asarray(x)[:m], out))
        if on_chunk is not None:
            on_chunk(length)
    return jax.tree.map(lambda *xs: np.concatenate(xs, axis=0), *outputs)

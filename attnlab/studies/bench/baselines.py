"""The baselines our code is timed against: plain numpy statistics, ``jax.nn``'s attention
and the recall training step as it was before the bench's speed-ups (``reference_chunk``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax
import numpy as np

from attnlab.core.prng import rolled_threefry
from attnlab.core.sampling import CHUNK_ELEMENTS
from attnlab.core.temperature import MECHANISMS
from attnlab.recall import model as recall_model
from attnlab.recall.config import RecallConfig, make_model
from attnlab.recall.step import make_optimizer, train_step
from attnlab.recall.task import stream_batch


def numpy_row_statistics(
    rng: np.random.Generator,
    d_k: int,
    n_keys: int,
    trials: int,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> np.ndarray:
    """The statistics of ``softmax_row_statistics(sampler="direct")`` in plain numpy: per
    trial a float32 query and ``n_keys`` keys from ``rng``, logits ``K q``, and for the scaled
    and unscaled variants the max-subtracted softmax's max weight, entropy and Jacobian
    Frobenius norm (as non-negative sums, like ``jacobian_frobenius_norm``), drawn in chunks
    of about ``chunk_elements`` key entries. Returns ``[2 (scaled, unscaled), trials, 3]``.
    """
    chunk = max(1, chunk_elements // (n_keys * d_k))
    scales = np.array([1.0 / np.sqrt(d_k), 1.0], np.float32)[:, None, None]
    out = np.empty((2, trials, 3), np.float32)
    for start in range(0, trials, chunk):
        m = min(chunk, trials - start)
        q = rng.standard_normal((m, d_k), dtype=np.float32)
        keys = rng.standard_normal((m, n_keys, d_k), dtype=np.float32)
        logits = scales * np.matmul(keys, q[:, :, None])[None, :, :, 0]  # [2, m, n]
        logits -= logits.max(axis=-1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=-1, keepdims=True)
        safe_p = np.where(p > 0, p, 1.0)
        p2 = p * p
        top = p.argmax(axis=-1)[..., None]
        p2_others = p2.copy()
        np.put_along_axis(p2_others, top, 0.0, axis=-1)
        others_of_max = p2_others.sum(axis=-1, keepdims=True)
        r = p2.sum(axis=-1, keepdims=True) - p2
        np.put_along_axis(r, top, others_of_max, axis=-1)
        out[:, start : start + m, 0] = p.max(axis=-1)
        out[:, start : start + m, 1] = -np.sum(p * np.log(safe_p), axis=-1)
        out[:, start : start + m, 2] = np.sqrt(np.sum(p2 * (1.0 - p) ** 2 + p2 * r, axis=-1))
    return out


def reference_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """``jax.nn.dot_product_attention`` on one head: inputs ``[B, T, 1, H]``."""
    return jax.nn.dot_product_attention(q, k, v)


def one_hot_rows(table: jax.Array, tokens: jax.Array) -> jax.Array:
    """``table[tokens]`` as the one-hot matmul ``one_hot(tokens, n) @ table``, differentiated
    by plain autodiff: the recall model's gather before commit 57be4c8 gave it an explicit
    gradient. The forward is exact (every other product is an exact zero); its gradient
    ``dL/dtable = one_hot(tokens)^T dL/drows`` is the same sum as the scatter-add of
    ``model._rows``, computed as a product over every (token, row) pair."""
    return jax.nn.one_hot(tokens, table.shape[0], dtype=table.dtype) @ table


@contextlib.contextmanager
def autodiff_gathers() -> Iterator[None]:
    """Inside the ``with`` block ``attnlab.recall.model._rows`` is ``one_hot_rows``
    (restored on leaving). The model looks ``_rows`` up when traced, so lower and compile a
    fresh function inside the block and call the compiled program after. Process-wide: not
    thread-safe."""
    current = recall_model._rows
    recall_model._rows = one_hot_rows
    try:
        yield
    finally:
        recall_model._rows = current


def reference_chunk(config: RecallConfig, state, data_key: jax.Array, steps: jax.Array):
    """The compiled chunk of one seed as it was before the bench's speed-ups: a scan of
    ``train_step`` on the scaled model with each step's batch drawn inside the step
    (``stream_batch``), traced with the gathers' gradient by autodiff of the one-hot product
    (``autodiff_gathers``) and JAX's rolled threefry loop (``rolled_threefry``). Returns the
    program of ``(state, data_key, steps)``."""
    model = make_model(config, MECHANISMS["scaled"])
    optimizer = make_optimizer(config.lr)

    def chunk(s, key, steps):
        def step(s, t):
            batch = stream_batch(key, t, config.batch_size, config.task)
            return train_step(model, optimizer, s, batch)

        return jax.lax.scan(step, s, steps)

    with rolled_threefry(), autodiff_gathers():
        return jax.jit(chunk).lower(state, data_key, steps).compile()

"""The baselines our code is timed against: plain numpy statistics, the textbook attention,
a Python loop over a jitted training step, and the recall training step as it was before
its gathers got an explicit gradient (``autodiff_gathers``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import replace

import jax
import numpy as np

from attnlab.core.sampling import CHUNK_ELEMENTS
from attnlab.core.temperature import MECHANISMS
from attnlab.studies.recall import model as recall_model
from attnlab.studies.recall.task import stream_batch
from attnlab.studies.recall.train import (
    RecallConfig,
    initial_state,
    make_model,
    make_optimizer,
    seed_keys,
    train_step,
)


def numpy_row_statistics(
    rng: np.random.Generator,
    d_k: int,
    n_keys: int,
    trials: int,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> np.ndarray:
    """The statistics of ``softmax_row_statistics(sampler="direct")`` in plain numpy.

    The companion article's snippet grown to the full computation: per trial a float32 query
    ``q`` and ``n_keys`` keys from ``rng.standard_normal``, logits ``K q``, and for the
    scaled (``1/sqrt(d_k)``) and unscaled variants a max-subtracted softmax, its max weight,
    its entropy and the Frobenius norm of its Jacobian (grouped into non-negative sums as
    ``attnlab.core.softmax_stats.jacobian_frobenius_norm`` does). Trials are drawn in chunks of
    about ``chunk_elements`` key entries to bound memory, like ours.

    Returns:
      ``[2 variants (scaled, unscaled), trials, 3 (max weight, entropy, Jacobian norm)]``.
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


def python_loop(config: RecallConfig) -> Callable[[int], np.ndarray]:
    """A Python loop calling a jitted ``train_step`` once per step for seed ``config.seed``;
    returns a function of the step count giving the losses. As ``train`` does after each
    chunk, it fetches every metric to the host once, at the end."""
    mechanism = MECHANISMS["scaled"]
    model, optimizer = make_model(config, mechanism), make_optimizer(config)
    state = jax.tree.map(lambda x: x[0], initial_state(replace(config, seeds=1), mechanism))
    data_key = seed_keys(config.seed).data
    step = jax.jit(
        lambda s, t: train_step(
            model, optimizer, s, stream_batch(data_key, t, config.batch_size, config.task)
        )
    )

    def run(steps: int) -> np.ndarray:
        s, history = state, []
        for t in range(steps):
            s, metrics = step(s, t)
            history.append(metrics)
        return np.array([m["loss"] for m in jax.device_get(history)])

    return run


def one_hot_rows(table: jax.Array, tokens: jax.Array) -> jax.Array:
    """``table[tokens]`` as the one-hot matmul ``one_hot(tokens, n) @ table``, differentiated
    by plain autodiff: the recall model's gather before commit 57be4c8 gave it an explicit
    gradient. The forward is exact (every other product is an exact zero); its gradient
    ``dL/dtable = one_hot(tokens)^T dL/drows`` is the same sum as the current one, but XLA
    on CPU lowers autodiff's transpose of the product through copies of the cotangent."""
    return jax.nn.one_hot(tokens, table.shape[0], dtype=table.dtype) @ table


@contextlib.contextmanager
def autodiff_gathers() -> Iterator[None]:
    """Trace the recall model as it was before its gathers got a custom VJP.

    Inside the ``with`` block ``attnlab.studies.recall.model._rows`` is ``one_hot_rows``;
    it is restored on leaving, whatever happens. The model looks ``_rows`` up when it is
    traced, so only programs *traced* inside the block are the reference: lower and compile
    them there (``jax.jit(f).lower(*args).compile()``) and call the compiled program after.
    A function jitted inside and first called outside would be traced with the current
    gathers, and one traced inside must not share a jit cache entry with the current
    program (jit a fresh function object). The swap is process-wide: not thread-safe.
    """
    current = recall_model._rows
    recall_model._rows = one_hot_rows
    try:
        yield
    finally:
        recall_model._rows = current

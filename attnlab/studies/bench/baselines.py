"""The baselines our code is timed against: plain numpy statistics, the textbook attention,
a Python loop over a jitted training step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

import jax
import numpy as np

from attnlab.core.sampling import CHUNK_ELEMENTS
from attnlab.core.temperature import MECHANISMS
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
    step = jax.jit(partial(train_step, model, optimizer, config))

    def run(steps: int) -> np.ndarray:
        s, history = state, []
        for t in range(steps):
            s, metrics = step(data_key, s, t)
            history.append(metrics)
        return np.array([m["loss"] for m in jax.device_get(history)])

    return run

"""Rows ``attention_fwd_vs_jax[_suffix]`` and ``attention_fwdbwd_vs_jax[_suffix]``:
``attnlab.core.attention.dot_product_attention`` against ``jax.nn.dot_product_attention``
(one head), forward and the gradient of ``sum(output)`` with respect to q, k and v, jitted,
at each of ``BenchConfig.attention_shapes``."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp

from attnlab.core.attention import dot_product_attention
from attnlab.studies.bench.config import BenchConfig, Row
from attnlab.studies.bench.timing import compare


def _grad_of_sum(fn: Callable[..., jax.Array]) -> Callable[..., tuple[jax.Array, ...]]:
    return jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v)), argnums=(0, 1, 2))


def bench_attention(config: BenchConfig) -> list[Row]:
    """Rows ``attention_fwd_vs_jax[_suffix]`` and ``attention_fwdbwd_vs_jax[_suffix]``."""
    rows = []
    for shape in config.attention_shapes:
        keys = jax.random.split(jax.random.key(config.seed), 3)
        lengths = (shape.q_len, shape.k_len, shape.k_len)
        ours_in = tuple(jax.random.normal(k, (shape.batch, n, shape.d))
                        for k, n in zip(keys, lengths, strict=True))  # fmt: skip
        ref_in = tuple(x[:, :, None, :] for x in ours_in)  # jax.nn's [B, T, N, H], one head
        where = (f"batch {shape.batch} (heads folded into batch), {shape.q_len} queries, "
                 f"{shape.k_len} keys, d {shape.d}, float32, jitted")  # fmt: skip
        grad = "grad of sum(output) wrt q, k, v"
        for kind, wrap, what in (("fwd", lambda f: f, "forward"), ("fwdbwd", _grad_of_sum, grad)):
            ours = partial(jax.jit(wrap(dot_product_attention)), *ours_in)
            ref = partial(jax.jit(wrap(jax.nn.dot_product_attention)), *ref_in)
            pairs = zip(jax.tree.leaves(ours()), jax.tree.leaves(ref()), strict=True)
            diff = max(float(jnp.max(jnp.abs(a - b.reshape(a.shape)))) for a, b in pairs)
            rows.append(compare(config, f"attention_{kind}_vs_jax{shape.suffix}", ours, ref,
                                f"{what}; {where}; max |ours - jax.nn| = {diff:.2g}"))  # fmt: skip
    return rows

"""Where the language model's step goes (docs/performance.md): ``jax.jit`` of the loss and
of its ``value_and_grad`` at the bench's size, ours (``attnlab.lm``) against the
``flax.linen`` peer of ``lm_step_vs_peer`` (``attnlab/studies/bench/peer.py``), ours also
without the per-step entropy statistic and with the dense layers flattened to ``[N, d]``
before the matmul; timed as the bench times (``interleaved_median_seconds``: round-robin,
the median of ``ROUNDS`` rounds, each timing at least ``MIN_SECONDS``), the first call
(compiling) apart. Timings, not results: nothing here is written or compared.

    .venv/bin/python docs/lm_step_profile.py
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from unittest import mock

import flax.linen as nn
import jax
import jax.numpy as jnp

import attnlab.lm.model as lm_model
from attnlab.core.references import resolve
from attnlab.lm.train import LMConfig, loss_fn
from attnlab.studies.bench.compute import interleaved_median_seconds
from attnlab.studies.bench.peer import PeerLM, peer_loss

ROUNDS = 9
MIN_SECONDS = 0.5
CONFIG = LMConfig(d_model=128, steps=20, warmup=2)  # the bench's size (d_head 16, B 16, T 64)


def flattened_dense(name: str, module: nn.Module, x: jax.Array, shape, std: float):
    """``attnlab.lm.model._dense`` with ``x`` flattened to ``[N, d_in]`` first."""
    w = module.param(name, nn.initializers.normal(std), shape)
    return (x.reshape(-1, shape[0]) @ w).reshape(*x.shape[:-1], shape[1])


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

    def traced(f: Callable, arg, patch: dict[str, Callable] | None = None):
        """``jax.jit(f)``, compiled by one call (timed) with ``attnlab.lm.model``'s names of
        ``patch`` replaced while tracing."""
        jitted = jax.jit(f)
        with mock.patch.multiple(lm_model, **patch) if patch else nullcontext():
            start = time.perf_counter()
            jax.block_until_ready(jitted(arg))
            return jitted, arg, time.perf_counter() - start

    no_entropy = {"entropy": lambda p: jnp.zeros(p.shape[:-1])}
    cases = {
        "ours: the loss (forward)": traced(ours, params),
        "ours: value_and_grad": traced(jax.value_and_grad(ours), params),
        "ours: value_and_grad, no entropy statistic": traced(
            jax.value_and_grad(ours), params, no_entropy
        ),
        "ours: value_and_grad, dense flattened": traced(
            jax.value_and_grad(ours), params, {"_dense": flattened_dense}
        ),
        "peer: the loss (forward)": traced(peers, peer_params),
        "peer: value_and_grad": traced(jax.value_and_grad(peers), peer_params),
    }
    calls = {name: (lambda f=f, arg=arg: f(arg)) for name, (f, arg, _) in cases.items()}
    seconds = interleaved_median_seconds(calls, ROUNDS, min_seconds=MIN_SECONDS)
    for name, (_, _, first) in cases.items():
        median = seconds[name] * 1e3
        print(f"{name:45s} {median:7.2f} ms   (first call, compiling: {first:.2f} s)")


if __name__ == "__main__":
    main()

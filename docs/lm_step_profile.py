"""Where the language model's step goes (docs/performance.md): ``jax.jit`` of the loss and
of its ``value_and_grad`` at the bench's size, ours (``attnlab.lm``) against the
``flax.linen`` peer of ``lm_step_vs_peer`` (``attnlab/studies/bench/peer.py``), ours also
without the per-step entropy statistic and with the dense layers flattened to ``[N, d]``
before the matmul; every function called round-robin, 10 calls a round, the median over
``ROUNDS`` rounds, and the first call (compiling) apart. Timings, not results: nothing here
is written or compared.

    .venv/bin/python docs/lm_step_profile.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import attnlab.lm.model as lm_model
from attnlab.core.references import resolve
from attnlab.lm.train import LMConfig, loss_fn
from attnlab.studies.bench.peer import PeerLM

ROUNDS = 9
CALLS = 10
CONFIG = LMConfig(d_model=128, steps=20, warmup=2)  # the bench's size (d_head 16, B 16, T 64)
Z_LOSS = CONFIG.z_loss_weight


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
        return loss_fn(model, p, windows, constants, Z_LOSS)[0]

    def peers(p):
        logits = peer.apply({"params": p}, windows[:, :-1])
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, windows[:, 1:]).mean()
        return ce + Z_LOSS * jnp.mean(jax.nn.logsumexp(logits, -1) ** 2)

    def traced(f: Callable, arg, patch: tuple[str, Callable] | None = None):
        """``jax.jit(f)``, compiled by one call (timed) with ``attnlab.lm.model``'s ``patch``
        in place while tracing."""
        jitted = jax.jit(f)
        if patch is not None:
            saved = getattr(lm_model, patch[0])
            setattr(lm_model, patch[0], patch[1])
        start = time.perf_counter()
        jax.block_until_ready(jitted(arg))
        first = time.perf_counter() - start
        if patch is not None:
            setattr(lm_model, patch[0], saved)
        return jitted, arg, first

    no_entropy = ("entropy", lambda p: jnp.zeros(p.shape[:-1]))
    cases = {
        "ours: the loss (forward)": traced(ours, params),
        "ours: value_and_grad": traced(jax.value_and_grad(ours), params),
        "ours: value_and_grad, no entropy statistic": traced(
            jax.value_and_grad(ours), params, no_entropy
        ),
        "ours: value_and_grad, dense flattened": traced(
            jax.value_and_grad(ours), params, ("_dense", flattened_dense)
        ),
        "peer: the loss (forward)": traced(peers, peer_params),
        "peer: value_and_grad": traced(jax.value_and_grad(peers), peer_params),
    }
    seconds = {name: [] for name in cases}
    for _ in range(ROUNDS):
        for name, (f, arg, _) in cases.items():
            start = time.perf_counter()
            for _ in range(CALLS):
                out = f(arg)
            jax.block_until_ready(out)
            seconds[name].append((time.perf_counter() - start) / CALLS)
    for name, (_, _, first) in cases.items():
        median = np.median(seconds[name]) * 1e3
        print(f"{name:45s} {median:7.2f} ms   (first call, compiling: {first:.2f} s)")


if __name__ == "__main__":
    main()

"""Rows ``lm_step_vs_peer``, ``lm_step_peak_fraction``, ``lm_ledger_overhead``,
``lm_muon_step_vs_adamw`` and ``lm_qk_clip_step_vs_none``: experiment 14's language-model
chunk of steps (one lane, ``lm_lane``) against its ``flax.linen`` peer (``bench.peer``), its
fraction of the matmul peak (``lm_step_flops``), the temperature ledger's cost per step, and
the same chunk under Muon and under QK-Clip against AdamW alone."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from attnlab.core.temperature import MECHANISMS
from attnlab.lm.train import LMConfig, chunk_program, init_program, step_windows
from attnlab.lm.train import seed_keys as lm_seed_keys
from attnlab.lm.trajectory import ledger_program
from attnlab.studies.bench.config import BenchConfig, Row, make_row, peak_row, timing_note
from attnlab.studies.bench.peer import peer_programs
from attnlab.studies.bench.timing import compare, round_robin

#: ``lm_step_flops`` in words, for the rows' details.
LM_FLOPS = (
    "3 x B T [2 (12 L d^2 + 256 d) + 4 L T d] (the forward matmuls, full T x T score and "
    "value products, and their two gradients)"
)
#: The lane's peak learning rate; QK-Clip's threshold in the clip's row (Kimi K2's).
RATE, BENCH_TAU = 1e-3, 100.0


def lm_step_flops(config: LMConfig) -> int:
    """Estimated FLOPs of one training step: ``LM_FLOPS`` (elementwise work not counted)."""
    d, layers, length = config.d_model, config.n_layers, config.seq_len
    per_token = 2 * (12 * layers * d * d + 256 * d) + 4 * layers * length * d
    return 3 * config.batch_size * length * per_token


def _sizes(lm: LMConfig) -> str:
    return (f"d_model {lm.d_model}, {lm.n_layers} layers, {lm.n_heads} heads, sequence "
            f"{lm.seq_len}, batch {lm.batch_size}, scaled attention, 1 lane")  # fmt: skip


def lm_lane(config: BenchConfig, lm: LMConfig, rates: tuple[float, ...] = (RATE,)):
    """Lanes of ``lm`` (scaled attention) from ``config.seed``, one per rate: the model, the
    windows ``[steps, B, T+1]`` every lane's chunk of ``lm.steps`` steps draws, and that chunk."""
    mechanism = MECHANISMS["scaled"]
    model = lm.model(mechanism)
    init_key, data_key = lm_seed_keys(config.seed)
    keys = (jnp.stack([init_key] * len(rates)), jnp.stack([data_key] * len(rates)))
    state = init_program(model, lm)(*keys)
    rng = np.random.default_rng(config.seed)
    train = jnp.asarray(rng.integers(0, 256, 4 * lm.batch_size * (lm.seq_len + 1)), jnp.int32)
    batches = jax.vmap(lambda t: step_windows(lm, data_key, t, train))(jnp.arange(lm.steps))
    constants = {k: jnp.full((len(rates),), v, jnp.float32)
                 for k, v in mechanism.constant_values(lm.d_head).items()}  # fmt: skip
    args = (state, jnp.arange(lm.steps), train, jnp.asarray(rates, jnp.float32), constants)
    return model, batches, partial(chunk_program(model, lm), *args)


def bench_lm_step(config: BenchConfig, peak_flops: float) -> list[Row]:
    """Rows ``lm_step_vs_peer``, ``lm_step_peak_fraction`` and ``lm_ledger_overhead``, all
    from one round-robin timing."""
    lm = replace(config.lm, chunk_steps=config.lm.steps)
    model, batches, ours = lm_lane(config, lm)
    init, peer_chunk = peer_programs(lm, RATE)
    peer_state = init(jax.random.key(config.seed))
    state, metrics = ours()
    params = jax.tree.map(lambda x: x[0], state.params)  # the lane after one chunk
    ledger = ledger_program(model, None)
    constants = MECHANISMS["scaled"].constant_values(lm.d_head)
    calls = {
        "ours": ours,
        "peer": partial(peer_chunk, peer_state, batches),
        "ledger": lambda: ledger(params, batches[0, :, :-1], constants),
    }
    first = float(metrics["loss"][0, 0]), float(calls["peer"]()[1][0])
    seconds = round_robin(config, calls)
    step, flops, sizes = seconds["ours"] / lm.steps, lm_step_flops(lm), _sizes(lm)
    return [
        make_row(
            "lm_step_vs_peer", seconds["ours"], seconds["peer"],
            detail=f"seconds per {lm.steps} steps, {sizes}; experiment 14's lax.scan chunk vs "
            "the same model and AdamW step written with flax.linen, "
            "jax.nn.dot_product_attention(is_causal=True) and optax (bench/peer.py), "
            "a jitted lax.scan over the same batches drawn beforehand (ours draws each in its "
            "step and records per-layer statistics); same FLOPs; "
            f"{timing_note(config)}; first-step losses from their own inits: ours "
            f"{first[0]:.4f}, peer {first[1]:.4f} (ln 256 = {math.log(256):.4f})",
        ),
        peak_row("lm_step_peak_fraction", step, flops, LM_FLOPS, peak_flops, f"seconds per step, "
                 f"{sizes}: {lm.batch_size * lm.seq_len / step:.3g} tokens/s"),
        make_row(
            "lm_ledger_overhead", step + seconds["ledger"], step,
            detail=f"seconds per training step with the temperature ledger logged vs without "
            f"({sizes}): lm_step_vs_peer's chunk / steps, plus attnlab.lm.trajectory's "
            f"ledger_program(model, tau=None) of the lane's parameters on one step's batch, "
            f"{1e3 * seconds['ledger']:.3g} ms; logging the ledger every step would cost "
            f"{100 * seconds['ledger'] / step:.3g}% per step; {timing_note(config)}",
        ),
    ]  # fmt: skip


def bench_lm_optimizers(config: BenchConfig) -> list[Row]:
    """Rows ``lm_muon_step_vs_adamw`` and ``lm_qk_clip_step_vs_none``."""
    base = replace(config.lm, chunk_steps=config.lm.steps, optimizer="adamw", qk_clip_tau=None)
    pairs = (
        ("lm_muon_step_vs_adamw", replace(base, optimizer="muon"), "Muon on the hidden "
         "matrices (AdamW on the rest) vs AdamW"),
        ("lm_qk_clip_step_vs_none", replace(base, qk_clip_tau=BENCH_TAU), f"AdamW with "
         f"QK-Clip at tau {BENCH_TAU:g} vs without"),
    )  # fmt: skip
    where = f"seconds per {base.steps} steps, {_sizes(base)}: "
    return [compare(config, name, lm_lane(config, lm)[2], lm_lane(config, base)[2], where + what)
            for name, lm, what in pairs]  # fmt: skip

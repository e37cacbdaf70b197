"""The language-model step of experiment 14, timed: one lane's chunk of ``lax.scan`` steps
(``attnlab.lm.train.chunk_program``) against a naive loop that calls a jitted
single step from Python once per step, over the same steps from the same state; and the
chunk's tokens per second and share of the measured matmul peak."""

from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np

from attnlab.core.temperature import MECHANISMS
from attnlab.lm.train import (
    LMConfig,
    chunk_program,
    init_program,
    seed_keys,
    train_step,
)
from attnlab.studies.bench.config import BenchConfig, Row, make_row, timing_note
from attnlab.studies.bench.timing import interleaved_median_seconds

#: ``lm_step_flops`` in words, for the rows' details.
FLOPS_FORMULA = (
    "3 x B T [2 (12 L d^2 + 256 d) + 4 L T d] (the forward matmuls, full T x T score and "
    "value products, and their two gradients)"
)


def lm_step_flops(config: LMConfig) -> int:
    """Estimated FLOPs of one training step: ``FLOPS_FORMULA``; LayerNorm, softmax, GELU,
    AdamW and the other elementwise work are not counted."""
    d, layers, length = config.d_model, config.n_layers, config.seq_len
    per_token = 2 * (12 * layers * d * d + 256 * d) + 4 * layers * length * d
    return 3 * config.batch_size * length * per_token


def _lane(config: BenchConfig, lm: LMConfig):
    """One lane of ``lm`` (scaled attention, rate 1e-3) from ``config.seed``: the model, its
    state, training bytes, rate and constants (each with a lane axis), and the steps."""
    mechanism = MECHANISMS["scaled"]
    model = lm.model(mechanism)
    init_key, data_key = seed_keys(config.seed)
    state = init_program(model, lm)(init_key[None], data_key[None])
    rng = np.random.default_rng(config.seed)
    train = jnp.asarray(rng.integers(0, 256, 4 * lm.batch_size * (lm.seq_len + 1)), jnp.int32)
    rate = jnp.full((1,), 1e-3, jnp.float32)
    constants = {k: jnp.full((1,), v, jnp.float32)
                 for k, v in mechanism.constant_values(lm.d_head).items()}  # fmt: skip
    return model, state, train, rate, constants, jnp.arange(lm.steps)


def bench_lm_step(config: BenchConfig, peak_flops: float) -> list[Row]:
    """Rows ``lm_step_vs_reference`` and ``lm_step_peak_fraction``."""
    lm = replace(config.lm, chunk_steps=config.lm.steps)
    model, state, train, rate, constants, steps = _lane(config, lm)
    chunk = chunk_program(model, lm)
    one = jax.tree.map(lambda x: x[0], state)
    lane_constants = {k: v[0] for k, v in constants.items()}
    step = jax.jit(lambda s, t: train_step(model, lm, s, t, train, rate[0], lane_constants))

    def naive():
        s, losses = one, []
        for t in range(lm.steps):
            s, metrics = step(s, t)
            losses.append(metrics["loss"])
        return s, jnp.stack(losses)

    calls = {"ours": lambda: chunk(state, steps, train, rate, constants), "reference": naive}
    ours_loss = np.asarray(calls["ours"]()[1]["loss"])[0]
    naive_loss = np.asarray(naive()[1])
    seconds = interleaved_median_seconds(calls, config.repeats,
                                         min_seconds=config.min_timing_seconds)  # fmt: skip
    flops = lm_step_flops(lm)
    per_step = seconds["ours"] / lm.steps
    sizes = (f"d_model {lm.d_model}, {lm.n_layers} layers, {lm.n_heads} heads, sequence "
             f"{lm.seq_len}, batch {lm.batch_size}, scaled attention, 1 lane")  # fmt: skip
    gap = float(np.max(np.abs(ours_loss - naive_loss)))
    return [
        make_row(
            "lm_step_vs_reference",
            seconds["ours"],
            seconds["reference"],
            detail=f"seconds per {lm.steps} steps, {sizes}; the lax.scan chunk of experiment "
            "14 vs a Python loop calling the jitted step once per step; "
            f"{timing_note(config)}; losses from the same state agree to {gap:.2g}",
        ),
        make_row(
            "lm_step_peak_fraction",
            per_step,
            peak_fraction=flops / per_step / peak_flops,
            detail=f"seconds per step, {sizes}: {lm.batch_size * lm.seq_len / per_step:.3g} "
            f"tokens/s; FLOPs per step = {FLOPS_FORMULA} = {flops:.3g}: "
            f"{flops / per_step / 1e9:.3g} GFLOP/s against the peak_matmul_f32 of this run, "
            f"{peak_flops / 1e9:.3g} GFLOP/s",
        ),
    ]


#: QK-Clip's threshold in the clip's row (Kimi K2's).
BENCH_TAU = 100.0


def bench_lm_optimizers(config: BenchConfig) -> list[Row]:
    """Rows ``lm_muon_step_vs_adamw`` and ``lm_qk_clip_step_vs_none``: one lane's chunk of
    ``config.lm.steps`` steps under Muon (``attnlab.lm.optimizers``) against the same chunk
    under AdamW, and under AdamW with QK-Clip at ``BENCH_TAU`` (each head's largest logit
    kept from the forward pass, the clip after the update) against without; a speed-up
    below 1 is what the first costs per step over the second."""
    base = replace(config.lm, chunk_steps=config.lm.steps, optimizer="adamw", qk_clip_tau=None)
    pairs = (
        ("lm_muon_step_vs_adamw", replace(base, optimizer="muon"), "Muon on the hidden "
         "matrices (AdamW on the rest) vs AdamW"),
        ("lm_qk_clip_step_vs_none", replace(base, qk_clip_tau=BENCH_TAU), f"AdamW with "
         f"QK-Clip at tau {BENCH_TAU:g} vs without"),
    )  # fmt: skip
    rows = []
    for name, lm, what in pairs:
        calls = {}
        for role, setup in (("ours", lm), ("reference", base)):
            model, state, train, rate, constants, steps = _lane(config, setup)
            chunk = chunk_program(model, setup)
            calls[role] = lambda c=chunk, a=(state, steps, train, rate, constants): c(*a)
        seconds = interleaved_median_seconds(calls, config.repeats,
                                             min_seconds=config.min_timing_seconds)  # fmt: skip
        rows.append(make_row(
            name, seconds["ours"], seconds["reference"],
            detail=f"seconds per {base.steps} steps, d_model {base.d_model}, {base.n_layers} "
            f"layers, sequence {base.seq_len}, batch {base.batch_size}, 1 lane: {what}; "
            f"{timing_note(config)}",
        ))  # fmt: skip
    return rows

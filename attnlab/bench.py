"""Performance of the suite against plain baselines: every figure a ratio from one run.

Each comparison times our code and a baseline in the same process, one after the other, as
the median of ``repeats`` timed calls made after one untimed warm-up call (so compilation
is excluded), and reports ``speedup = baseline_seconds / ours_seconds``. Where a FLOP count
is meaningful, ``peak_fraction`` divides our achieved FLOP/s by the machine's float32 peak,
measured in the same run as the FLOP/s of a large jitted matmul.

Our side is timed as whole calls of the suite's functions, made as the experiments make
them: whatever a call costs beyond running its compiled program (tracing, loading the
program from the persistent compilation cache that ``cli.configure_jax`` sets up, host
transfers) is part of its time. Where that overhead matters the row's ``detail`` says so.

The rows (see ``run_bench``):

* ``statics_*``: the softmax-row statistics of experiments 02 and 03 (``direct`` and
  ``exact`` samplers) against the same computation in plain numpy.
* ``attention_*``: ``attnlab.dot_product_attention`` against
  ``jax.nn.dot_product_attention``, forward and forward+backward, jitted.
* ``train_*``: the compiled ``lax.scan`` training loop of ``attnlab.recall.train`` against
  a Python loop over a jitted step, and vmapped seeds against sequential runs.
* ``growth_*``: the log-log slope of the statistics' run time against d_k and n keys.
"""

from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.attention import dot_product_attention
from attnlab.recall.train import (
    RecallConfig,
    initial_state,
    make_model,
    make_optimizer,
    seed_keys,
    train,
    train_step,
)
from attnlab.sampling import CHUNK_ELEMENTS, mean_and_sem, softmax_row_statistics
from attnlab.statics import DEFAULT_DKS
from attnlab.temperature import MECHANISMS

#: The columns of ``results/bench.csv``; empty cells where a column does not apply.
COLUMNS = (
    "name",
    "ours_seconds",
    "baseline_seconds",
    "speedup",
    "peak_fraction",
    "slope",
    "detail",
)

#: The rows ``run_bench`` always produces, in order.
ROW_NAMES = (
    "peak_matmul_f32",
    "statics_direct_vs_numpy",
    "statics_exact_vs_numpy",
    "statics_exact_vs_direct",
    "attention_fwd_vs_jax",
    "attention_fwdbwd_vs_jax",
    "attention_fwd_vs_jax_large",
    "attention_fwdbwd_vs_jax_large",
    "train_scan_vs_python_loop",
    "train_vmap_seeds_vs_sequential",
    "growth_dk_direct",
    "growth_dk_exact",
    "growth_n_direct",
    "growth_n_exact",
)

Row = dict[str, Any]


@dataclass(frozen=True)
class AttentionShape:
    """One attention problem: ``batch`` independent heads, ``q_len`` queries over
    ``k_len`` keys of width ``d`` (heads folded into the batch)."""

    suffix: str
    batch: int
    q_len: int
    k_len: int
    d: int


@dataclass(frozen=True)
class BenchConfig:
    """Sizes of every comparison. The defaults keep ``make bench`` to a few minutes on two
    CPU cores; ``QUICK`` is a tiny setting for the tests."""

    repeats: int = 3
    seed: int = 0
    #: d_k timed for the statics rows (the default sweep of 02/03 is 1, 2, ..., 1024).
    statics_dks: tuple[int, ...] = (64, 256, 1024)
    n_keys: int = 256
    trials: int = 2000
    growth_dks: tuple[int, ...] = (64, 256, 1024)
    growth_ns: tuple[int, ...] = (256, 1024, 4096)
    #: 496 trials fill whole chunks of the direct sampler at every growth point (the chunk
    #: is 496 trials at d_k 64, n 256), so no point times padded trials.
    growth_trials: int = 496
    #: n keys of the d_k growth sweep, and d_k of the n growth sweep.
    growth_n_keys: int = 256
    growth_dk: int = 64
    attention_shapes: tuple[AttentionShape, ...] = (
        AttentionShape("", 64, 1, 16, 256),  # experiment 04
        AttentionShape("_large", 8, 1024, 1024, 64),
    )
    recall: RecallConfig = field(default=RecallConfig(steps=200, seeds=1, chunk_steps=50))
    train_seeds: int = 4
    peak_size: int = 2048
    #: Fast calls are repeated within one timing until it lasts this long.
    min_timing_seconds: float = 0.2
    #: One untimed call before the timed ones, so compilation is excluded (off in QUICK,
    #: where a warm-up would double the run time of a test that only checks the schema).
    warmup: bool = True


QUICK = BenchConfig(
    repeats=1,
    statics_dks=(8,),
    n_keys=16,
    trials=64,
    growth_dks=(4, 16),
    growth_ns=(16, 64),
    growth_trials=32,
    growth_n_keys=16,
    growth_dk=4,
    attention_shapes=(AttentionShape("", 4, 1, 4, 8), AttentionShape("_large", 2, 32, 32, 8)),
    recall=RecallConfig(
        d_k=8, d_model=8, batch_size=4, steps=4, seeds=1, chunk_steps=2, eval_size=8
    ),
    train_seeds=2,
    peak_size=128,
    min_timing_seconds=0.0,
    warmup=False,
)


def _timing(config: BenchConfig) -> str:
    if config.warmup:
        return f"median of {config.repeats} after one warm-up call (compile excluded)"
    return f"median of {config.repeats} without warm-up (compile included: --quick)"


class Timing(NamedTuple):
    """Median wall time and median process CPU time (all threads) of one call."""

    seconds: float
    cpu_seconds: float


def _timed(fn: Callable[[], Any], number: int) -> Timing:
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(number):
        jax.block_until_ready(fn())
    return Timing(
        (time.perf_counter() - start) / number, (time.process_time() - cpu_start) / number
    )


def time_calls(
    fn: Callable[[], Any], repeats: int, *, warmup: bool = True, min_seconds: float = 0.0
) -> Timing:
    """Median time of one call of ``fn()`` (its result blocked on) over ``repeats``.

    One untimed call first compiles whatever ``fn`` jits. Calls faster than
    ``min_seconds`` are repeated within each timing, which is then divided by their number.
    """
    if warmup:
        jax.block_until_ready(fn())
    number = 1
    if min_seconds > 0:
        number = max(1, math.ceil(min_seconds / max(_timed(fn, 1).seconds, 1e-9)))
    times = [_timed(fn, number) for _ in range(repeats)]
    return Timing(*(float(np.median(column)) for column in zip(*times, strict=True)))


def median_seconds(
    fn: Callable[[], Any], repeats: int, *, warmup: bool = True, min_seconds: float = 0.0
) -> float:
    """The median wall time of ``time_calls``."""
    return time_calls(fn, repeats, warmup=warmup, min_seconds=min_seconds).seconds


def loglog_slope(sizes: Sequence[float], seconds: Sequence[float]) -> float:
    """Least-squares slope of ``log(seconds)`` against ``log(sizes)``."""
    return float(np.polyfit(np.log(sizes), np.log(seconds), 1)[0])


def measure_peak(size: int, repeats: int) -> tuple[float, float]:
    """Seconds and FLOP/s (``2 size^3`` per call) of a jitted float32 square matmul."""
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (size, size), jnp.float32)
    b = jax.random.normal(kb, (size, size), jnp.float32)
    matmul = jax.jit(jnp.matmul)
    seconds = median_seconds(lambda: matmul(a, b), max(repeats, 5))
    return seconds, 2 * size**3 / seconds


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
    ``attnlab.softmax_stats.jacobian_frobenius_norm`` does). Trials are drawn in chunks of
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


def _max_z(ours: list[np.ndarray], theirs: list[np.ndarray]) -> float:
    """Largest ``|mean_a - mean_b| / sqrt(sem_a^2 + sem_b^2)`` over matching statistics."""
    worst = 0.0
    for a, b in zip(ours, theirs, strict=True):
        (ma, sa), (mb, sb) = mean_and_sem(a, axis=1), mean_and_sem(b, axis=1)
        se = np.hypot(sa, sb)
        z = np.where(se > 0, np.abs(ma - mb) / np.where(se > 0, se, 1.0), 0.0)
        worst = max(worst, float(z.max()))
    return worst


def _row(name: str, ours: float, baseline: float | None = None, **extra: Any) -> Row:
    row: Row = {"name": name, "ours_seconds": ours, "baseline_seconds": baseline}
    if baseline is not None:
        row["speedup"] = baseline / ours
    return row | extra


def bench_statics(config: BenchConfig, peak_flops: float) -> list[Row]:
    """Rows ``statics_direct_vs_numpy``, ``statics_exact_vs_numpy``, ``statics_exact_vs_direct``.

    Both variants of one ``softmax_row_statistics`` call per d_k are what experiments 02 and
    03 each compute; the baseline computes the same statistics with numpy.
    """
    key = jax.random.key(config.seed)
    dks, n, trials = config.statics_dks, config.n_keys, config.trials
    last: dict[str, list[np.ndarray]] = {}

    def ours(sampler: str) -> Callable[[], None]:
        def sweep() -> None:
            last[sampler] = []
            for d_k in dks:
                s = softmax_row_statistics(key, d_k, n, trials, sampler)
                last[sampler].append(np.stack([s.max_weight, s.entropy, s.jacobian_fro], -1))

        return sweep

    def baseline() -> None:
        rng = np.random.default_rng(config.seed)
        last["numpy"] = [numpy_row_statistics(rng, d_k, n, trials) for d_k in dks]

    direct_t = time_calls(ours("direct"), config.repeats, warmup=config.warmup)
    exact_t = time_calls(ours("exact"), config.repeats, warmup=config.warmup)
    numpy_t = time_calls(baseline, config.repeats, warmup=False)
    direct, exact, numpy_s = direct_t.seconds, exact_t.seconds, numpy_t.seconds
    flops = sum(2 * n * d_k * trials for d_k in dks)
    subset = sum(dks) / sum(DEFAULT_DKS)
    sweep = (
        f"d_k {', '.join(map(str, dks))} ({subset:.0%} of the K q work of the default sweep "
        f"d_k {DEFAULT_DKS[0]}..{DEFAULT_DKS[-1]}), n_keys {n}, trials {trials}, scaled and "
        "unscaled"
    )
    timing = f"one softmax_row_statistics call per d_k as 02/03 make it, {_timing(config)}"
    cores = (
        f"CPU-seconds per second: ours {direct_t.cpu_seconds / direct:.1f} (direct), "
        f"{exact_t.cpu_seconds / exact:.1f} (exact), numpy {numpy_t.cpu_seconds / numpy_s:.1f}"
    )
    agree = (
        f"means of all three statistics agree with numpy's within "
        f"{_max_z(last['direct'], last['numpy']):.1f} SEM (direct) and "
        f"{_max_z(last['exact'], last['numpy']):.1f} SEM (exact)"
    )
    return [
        _row(
            "statics_direct_vs_numpy",
            direct,
            numpy_s,
            peak_fraction=flops / direct / peak_flops,
            detail=f"{sweep}; {timing}; numpy float32 default_rng, chunked like ours; "
            f"{cores}; FLOPs = sum over d_k of trials * 2 * n_keys * d_k (the K q matvecs "
            f"only) = {flops:.3g}, {flops / direct / 1e9:.3g} GFLOP/s; {agree}",
        ),
        _row(
            "statics_exact_vs_numpy",
            exact,
            numpy_s,
            detail=f"{sweep}; exact sampler (|q| g, O(n) per trial) vs numpy direct; "
            f"{timing}; {cores}",
        ),
        _row(
            "statics_exact_vs_direct",
            exact,
            direct,
            detail=f"{sweep}; both ours; {timing}",
        ),
    ]


def _attention_inputs(shape: AttentionShape, seed: int) -> tuple[jax.Array, ...]:
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(kq, (shape.batch, shape.q_len, shape.d), jnp.float32)
    k = jax.random.normal(kk, (shape.batch, shape.k_len, shape.d), jnp.float32)
    v = jax.random.normal(kv, (shape.batch, shape.k_len, shape.d), jnp.float32)
    return q, k, v


def _reference_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """``jax.nn.dot_product_attention`` on one head: inputs ``[B, T, 1, H]``."""
    return jax.nn.dot_product_attention(q, k, v)


def _grad_of_sum(fn: Callable[..., jax.Array]) -> Callable[..., tuple[jax.Array, ...]]:
    return jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v)), argnums=(0, 1, 2))


def bench_attention(config: BenchConfig) -> list[Row]:
    """Rows ``attention_fwd_vs_jax[_suffix]`` and ``attention_fwdbwd_vs_jax[_suffix]``."""
    rows = []
    for shape in config.attention_shapes:
        ours_in = _attention_inputs(shape, config.seed)
        # jax.nn lays out [B, T, N, H]; one head, transposed once outside the timing.
        ref_in = tuple(x[:, :, None, :] for x in ours_in)
        where = (
            f"batch {shape.batch} (heads folded into batch), {shape.q_len} queries, "
            f"{shape.k_len} keys, d {shape.d}, float32; ours [B, T, d], jax.nn [B, T, 1, d] "
            "laid out before timing; jitted, each call blocked on"
        )
        for kind, ours_fn, ref_fn in (
            ("fwd", dot_product_attention, _reference_attention),
            ("fwdbwd", _grad_of_sum(dot_product_attention), _grad_of_sum(_reference_attention)),
        ):
            ours_jit, ref_jit = jax.jit(ours_fn), jax.jit(ref_fn)
            diff = max(
                float(jnp.max(jnp.abs(a - b.reshape(a.shape))))
                for a, b in zip(
                    jax.tree.leaves(ours_jit(*ours_in)),
                    jax.tree.leaves(ref_jit(*ref_in)),
                    strict=True,
                )
            )
            # The calls above compiled both functions: no further warm-up is needed.
            ours_s, ref_s = (
                median_seconds(
                    lambda f=f, x=x: f(*x),
                    config.repeats,
                    warmup=False,
                    min_seconds=config.min_timing_seconds,
                )
                for f, x in ((ours_jit, ours_in), (ref_jit, ref_in))
            )
            what = "forward" if kind == "fwd" else "grad of sum(output) wrt q, k, v"
            rows.append(
                _row(
                    f"attention_{kind}_vs_jax{shape.suffix}",
                    ours_s,
                    ref_s,
                    detail=f"{what}; {where}; per-call median of {config.repeats} after a "
                    f"compiling call; max |ours - jax.nn| = {diff:.2g}",
                )
            )
    return rows


def recall_step_flops(config: RecallConfig) -> int:
    """Estimated FLOPs of one training step of the recall model: 3 x the forward matmuls.

    Forward: the five table projections ``2 d_model d_k (3 n_key + 2 n_value)``, logits and
    weighted sum ``4 B pairs d_k``, readout ``2 B d_k n_value``. The backward pass costs
    twice the forward (a gradient for each operand of every matmul); softmax, Adam and the
    other elementwise work are not counted.
    """
    t = config.task
    forward = (
        2 * config.d_model * config.d_k * (3 * t.n_key_tokens + 2 * t.n_value_tokens)
        + 4 * config.batch_size * t.pairs * config.d_k
        + 2 * config.batch_size * config.d_k * t.n_value_tokens
    )
    return 3 * forward


def _python_loop(config: RecallConfig) -> Callable[[int], np.ndarray]:
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


def _train_timed(config: RecallConfig) -> tuple[float, list[float], np.ndarray]:
    """One ``train`` call: its wall time, the times of its chunks after the first (the
    intervals between ``on_chunk`` callbacks: steady state, compile excluded) and its
    losses ``[seeds, steps]``."""
    marks: list[float] = []
    start = time.perf_counter()
    result = train(
        config, MECHANISMS["scaled"], on_chunk=lambda _: marks.append(time.perf_counter())
    )
    return time.perf_counter() - start, list(np.diff(marks)), result.metrics["loss"]


def bench_training(config: BenchConfig, peak_flops: float) -> list[Row]:
    """Rows ``train_scan_vs_python_loop`` and ``train_vmap_seeds_vs_sequential``.

    Every ``train`` call runs ``recall.steps`` steps in chunks of ``recall.chunk_steps``
    (at least two chunks); the chunks after the first time the compiled scan loop alone.
    """
    recall = replace(config.recall, seeds=1)
    chunk, seeds = recall.chunk_steps, config.train_seeds
    if recall.steps < 2 * chunk:
        raise ValueError("the training benchmark needs steps >= 2 * chunk_steps")
    vmapped = replace(recall, seeds=seeds)
    sequential = [replace(recall, seed=recall.seed + i) for i in range(seeds)]
    if config.warmup:  # compile both programs
        _train_timed(vmapped)
        _train_timed(sequential[0])
    whole_vmap, whole_seq, chunks_vmap, chunks_one, diffs = [], [], [], [], []
    for _ in range(config.repeats):
        t_vmap, vmap_chunks, vmap_losses = _train_timed(vmapped)
        runs = [_train_timed(c) for c in sequential]
        whole_vmap.append(t_vmap)
        whole_seq.append(sum(t for t, _, _ in runs))
        chunks_vmap += vmap_chunks
        chunks_one += [c for _, cs, _ in runs for c in cs]
        diffs.append(float(np.max(np.abs(vmap_losses - np.concatenate([x for *_, x in runs])))))
    first_seed_losses = runs[0][2][0]

    loop = _python_loop(recall)
    loop_losses = loop(chunk)  # compiles, and the losses to compare
    loop_s = median_seconds(lambda: loop(chunk), config.repeats, warmup=False)
    scan_s = float(np.median(chunks_one))
    flops = recall_step_flops(recall)
    sizes = (
        f"d_k {recall.d_k}, d_model {recall.d_model}, batch {recall.batch_size}, "
        f"{recall.pairs} pairs, scaled attention"
    )
    steady = (
        "chunks of train() after its first (the time between successive on_chunk callbacks: "
        "one call of the jitted scan, the metrics fetched and checked; tracing and compile "
        "fall in the first chunk)"
    )
    loss_diff = float(np.max(np.abs(first_seed_losses[:chunk] - loop_losses)))
    vmap_chunk, seq_chunk = float(np.median(chunks_vmap)), seeds * scan_s
    return [
        _row(
            "train_scan_vs_python_loop",
            scan_s,
            loop_s,
            peak_fraction=flops * chunk / scan_s / peak_flops,
            detail=f"seconds per {chunk} steps of 1 seed, {sizes}; ours: median of "
            f"{len(chunks_one)} {steady}; baseline: a Python loop calling "
            f"jax.jit(train_step) {chunk} times, metrics fetched at the end, median of "
            f"{config.repeats} after a compiling run; {chunk / scan_s:.0f} vs "
            f"{chunk / loop_s:.0f} steps/s; FLOPs per step = 3 x forward = 3 x [2 d_model d_k "
            f"(3 n_key + 2 n_value) + 4 B pairs d_k + 2 B d_k n_value] = {flops:.3g}; losses "
            f"agree to {loss_diff:.2g}",
        ),
        _row(
            "train_vmap_seeds_vs_sequential",
            float(np.median(whole_vmap)),
            float(np.median(whole_seq)),
            detail=f"{recall.steps} steps in chunks of {chunk}, {sizes}; one train() call "
            f"with seeds={seeds} (vmapped) vs {seeds} train() calls with seeds=1 (seeds "
            f"{recall.seed}..{recall.seed + seeds - 1}); whole calls (initialisation, tracing or "
            f"program loading, and evaluation included), {_timing(config)}; "
            f"steady-state chunks alone: {vmap_chunk:.3g} s vs {seeds} x {scan_s:.3g} s "
            f"({seq_chunk / vmap_chunk:.2f}x); per-seed losses agree to {max(diffs):.2g}",
        ),
    ]


def bench_growth(config: BenchConfig) -> list[Row]:
    """Rows ``growth_{dk,n}_{direct,exact}``: the log-log slope of run time against size."""
    key = jax.random.key(config.seed)
    trials = config.growth_trials
    rows = []
    for axis, sizes in (("dk", config.growth_dks), ("n", config.growth_ns)):
        for sampler in ("direct", "exact"):

            def call(size: int, sampler: str = sampler, axis: str = axis) -> None:
                d_k, n = (size, config.growth_n_keys) if axis == "dk" else (config.growth_dk, size)
                softmax_row_statistics(key, d_k, n, trials, sampler)

            seconds = [
                median_seconds(partial(call, s), config.repeats, warmup=config.warmup)
                for s in sizes
            ]
            fixed = f"n_keys {config.growth_n_keys}" if axis == "dk" else f"d_k {config.growth_dk}"
            label = "d_k" if axis == "dk" else "n"
            points = ", ".join(f"{s}: {t:.3g}" for s, t in zip(sizes, seconds, strict=True))
            top = loglog_slope(sizes[-2:], seconds[-2:]) if len(sizes) > 1 else float("nan")
            rows.append(
                _row(
                    f"growth_{axis}_{sampler}",
                    seconds[-1],
                    slope=loglog_slope(sizes, seconds),
                    detail=f"{sampler} sampler, {fixed}, trials {trials}; seconds at {label} "
                    f"{points}; least-squares log-log slope over all points (last two: "
                    f"{top:.2f}); ours_seconds is the largest point; {_timing(config)} "
                    "per point",
                )
            )
    return rows


def run_bench(config: BenchConfig, on_group: Callable[[int], None] | None = None) -> pd.DataFrame:
    """Every comparison of ``ROW_NAMES``, one row each, with the columns of ``COLUMNS``.

    Call ``cli.configure_jax()`` first (the script's entry point does) so that repeated calls
    of the suite's functions load their programs from the persistent cache instead of
    compiling them again. ``on_group`` is told 1 after each of the five groups.
    """
    tick = on_group or (lambda _: None)
    peak_s, peak = measure_peak(config.peak_size, config.repeats)
    load = os.getloadavg()
    rows = [
        _row(
            "peak_matmul_f32",
            peak_s,
            detail=f"jitted float32 {config.peak_size}^3 matmul, 2 n^3 FLOPs: "
            f"{peak / 1e9:.3g} GFLOP/s, the peak every peak_fraction divides by; "
            f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
            f"jax {jax.__version__} on {jax.default_backend()} x{jax.device_count()}; "
            f"load average at start {load[0]:.1f}",
        )
    ]
    tick(1)
    for group in (
        lambda: bench_statics(config, peak),
        lambda: bench_attention(config),
        lambda: bench_training(config, peak),
        lambda: bench_growth(config),
    ):
        rows.extend(group())
        tick(1)
    frame = pd.DataFrame(rows).reindex(columns=list(COLUMNS))
    order = {name: i for i, name in enumerate(ROW_NAMES)}
    return frame.sort_values("name", key=lambda s: s.map(order), ignore_index=True)


def _fmt(value: float, spec: str) -> str:
    return "" if value is None or not np.isfinite(value) else format(value, spec)


def markdown_table(frame: pd.DataFrame) -> str:
    """The README's "Performance" table: one line per row of ``frame``, details below."""
    lines = [
        "| benchmark | ours (s) | baseline (s) | speedup | % of peak | slope |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in frame.itertuples(index=False):
        speedup = _fmt(row.speedup, ".2f")
        lines.append(
            f"| `{row.name}` | {_fmt(row.ours_seconds, '.3g')} | "
            f"{_fmt(row.baseline_seconds, '.3g')} | {speedup + 'x' if speedup else ''} | "
            f"{_fmt(100 * row.peak_fraction, '.2g')} | {_fmt(row.slope, '.2f')} |"
        )
    lines.append("")
    lines.extend(f"- `{row.name}`: {row.detail}" for row in frame.itertuples(index=False))
    return "\n".join(lines) + "\n"

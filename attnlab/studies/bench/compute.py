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
* ``train_*``: the compiled ``lax.scan`` training loop of ``attnlab.studies.recall.train`` against
  a Python loop over a jitted step, and vmapped seeds against sequential runs.
* ``train_step_*`` and ``profile_step_*``: the compiled recall training step against the
  step before its gathers got an explicit gradient, its fraction of the matmul peak, and
  its parts (``attnlab.studies.bench.step``).
* ``growth_*``: the log-log slope of the statistics' run time against d_k and n keys.
* ``make_reproduce_seconds`` (only when asked for): the wall time of ``make reproduce`` from
  an empty compilation cache.
"""

from __future__ import annotations

import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.attention import dot_product_attention
from attnlab.core.sampling import mean_and_sem, softmax_row_statistics
from attnlab.harness.cli import REPO_ROOT
from attnlab.harness.errors import RunError
from attnlab.harness.io import read_csv_checked
from attnlab.studies.article_fit.compute import SCORE_COLUMNS, best_reading
from attnlab.studies.bench.baselines import numpy_row_statistics, python_loop, reference_attention
from attnlab.studies.bench.config import (
    COLUMNS,
    OPTIONAL_ROW_NAMES,
    ROW_NAMES,
    AttentionShape,
    BenchConfig,
    Row,
    make_row,
    timing_note,
)
from attnlab.studies.bench.step import (
    FLOPS_FORMULA,
    bench_recall_step,
    fitted_step_row,
    recall_step_flops,
    train_timed,
)
from attnlab.studies.bench.timing import loglog_slope, measure_peak, median_seconds, time_calls
from attnlab.studies.statics.compute import DEFAULT_DKS


def _max_z(ours: list[np.ndarray], theirs: list[np.ndarray]) -> float:
    """Largest ``|mean_a - mean_b| / sqrt(sem_a^2 + sem_b^2)`` over matching statistics."""
    worst = 0.0
    for a, b in zip(ours, theirs, strict=True):
        (ma, sa), (mb, sb) = mean_and_sem(a, axis=1), mean_and_sem(b, axis=1)
        se = np.hypot(sa, sb)
        z = np.where(se > 0, np.abs(ma - mb) / np.where(se > 0, se, 1.0), 0.0)
        worst = max(worst, float(z.max()))
    return worst


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
    timing = f"one softmax_row_statistics call per d_k as 02/03 make it, {timing_note(config)}"
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
        make_row(
            "statics_direct_vs_numpy",
            direct,
            numpy_s,
            peak_fraction=flops / direct / peak_flops,
            detail=f"{sweep}; {timing}; numpy float32 default_rng, chunked like ours; "
            f"{cores}; FLOPs = sum over d_k of trials * 2 * n_keys * d_k (the K q matvecs "
            f"only) = {flops:.3g}, {flops / direct / 1e9:.3g} GFLOP/s; {agree}",
        ),
        make_row(
            "statics_exact_vs_numpy",
            exact,
            numpy_s,
            detail=f"{sweep}; exact sampler (|q| g, O(n) per trial) vs numpy direct; "
            f"{timing}; {cores}",
        ),
        make_row(
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
            ("fwd", dot_product_attention, reference_attention),
            ("fwdbwd", _grad_of_sum(dot_product_attention), _grad_of_sum(reference_attention)),
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
                make_row(
                    f"attention_{kind}_vs_jax{shape.suffix}",
                    ours_s,
                    ref_s,
                    detail=f"{what}; {where}; per-call median of {config.repeats} after a "
                    f"compiling call; max |ours - jax.nn| = {diff:.2g}",
                )
            )
    return rows


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
        train_timed(vmapped)
        train_timed(sequential[0])
    whole_vmap, whole_seq, chunks_vmap, chunks_one, diffs = [], [], [], [], []
    for _ in range(config.repeats):
        t_vmap, vmap_chunks, vmap_losses = train_timed(vmapped)
        runs = [train_timed(c) for c in sequential]
        whole_vmap.append(t_vmap)
        whole_seq.append(sum(t for t, _, _ in runs))
        chunks_vmap += vmap_chunks
        chunks_one += [c for _, cs, _ in runs for c in cs]
        diffs.append(float(np.max(np.abs(vmap_losses - np.concatenate([x for *_, x in runs])))))
    first_seed_losses = runs[0][2][0]

    loop = python_loop(recall)
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
        make_row(
            "train_scan_vs_python_loop",
            scan_s,
            loop_s,
            peak_fraction=flops * chunk / scan_s / peak_flops,
            detail=f"seconds per {chunk} steps of 1 seed, {sizes}; ours: median of "
            f"{len(chunks_one)} {steady}; baseline: a Python loop calling "
            f"jax.jit(train_step) {chunk} times, metrics fetched at the end, median of "
            f"{config.repeats} after a compiling run; {chunk / scan_s:.0f} vs "
            f"{chunk / loop_s:.0f} steps/s; FLOPs per step = {FLOPS_FORMULA} = {flops:.3g}; "
            f"losses agree to {loss_diff:.2g}",
        ),
        make_row(
            "train_vmap_seeds_vs_sequential",
            float(np.median(whole_vmap)),
            float(np.median(whole_seq)),
            detail=f"{recall.steps} steps in chunks of {chunk}, {sizes}; one train() call "
            f"with seeds={seeds} (vmapped) vs {seeds} train() calls with seeds=1 (seeds "
            f"{recall.seed}..{recall.seed + seeds - 1}); whole calls (initialisation, tracing or "
            f"program loading, and evaluation included), {timing_note(config)}; "
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
                make_row(
                    f"growth_{axis}_{sampler}",
                    seconds[-1],
                    slope=loglog_slope(sizes, seconds),
                    detail=f"{sampler} sampler, {fixed}, trials {trials}; seconds at {label} "
                    f"{points}; least-squares log-log slope over all points (last two: "
                    f"{top:.2f}); ours_seconds is the largest point; {timing_note(config)} "
                    "per point",
                )
            )
    return rows


#: What ``time_reproduce`` runs by default: every result regenerated, stale or not.
REPRODUCE_COMMAND = ("make", "reproduce")


def time_reproduce(command: Sequence[str] = REPRODUCE_COMMAND, cwd: os.PathLike = REPO_ROOT) -> Row:
    """Row ``make_reproduce_seconds``: the wall time of ``command`` run in ``cwd`` in a
    subprocess, with ``ATTNLAB_JAX_CACHE`` pointed at a fresh empty temporary directory so
    that every program is compiled from scratch (the directory is removed afterwards).

    Its output is captured and dropped; a non-zero exit raises RunError with its last lines.
    """
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="attnlab-jax-cache-") as cache:
        env = {**os.environ, "ATTNLAB_JAX_CACHE": cache}
        start = time.perf_counter()
        done = subprocess.run(
            list(command),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            check=False,
        )
        seconds = time.perf_counter() - start
    shown = " ".join(command)
    if done.returncode != 0:
        tail = " | ".join(done.stdout.strip().splitlines()[-3:])
        raise RunError(f"`{shown}` exited with status {done.returncode}: {tail}")
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cpus = f"{os.cpu_count()} CPUs" + (f" ({affinity} usable)" if affinity else "")
    return make_row(
        "make_reproduce_seconds",
        seconds,
        detail=f"wall time of `{shown}` in {cwd} as a subprocess (every script of make all "
        "rerun); compilation cache empty: ATTNLAB_JAX_CACHE a fresh temporary directory; "
        f"{cpus}; load average at start {load[0]:.1f}",
    )


def run_bench(
    config: BenchConfig,
    on_group: Callable[[int], None] | None = None,
    reproduce_command: Sequence[str] | None = None,
    fitted_reading: str | None = None,
) -> pd.DataFrame:
    """Every comparison of ``ROW_NAMES``, one row each, with the columns of ``COLUMNS``;
    with ``fitted_reading`` (experiment 09's, see ``fitted_reading_of``) also
    ``profile_fitted_step``, and with ``reproduce_command`` (see ``time_reproduce``)
    ``make_reproduce_seconds``.

    Call ``cli.configure_jax()`` first (the script's entry point does) so that repeated calls
    of the suite's functions load their programs from the persistent cache instead of
    compiling them again. ``on_group`` is told 1 after each of the ``groups(...)`` groups.
    """
    tick = on_group or (lambda _: None)
    peak_s, peak = measure_peak(config.peak_size, config.repeats)
    load = os.getloadavg()
    rows = [
        make_row(
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
    steps: list[Callable[[], list[Row]]] = [
        lambda: bench_statics(config, peak),
        lambda: bench_attention(config),
        lambda: bench_training(config, peak),
        lambda: bench_recall_step(config, peak),
        lambda: bench_growth(config),
    ]
    if fitted_reading is not None:
        steps.append(lambda: [fitted_step_row(config, fitted_reading)])
    if reproduce_command is not None:
        steps.append(lambda: [time_reproduce(reproduce_command)])
    for group in steps:
        rows.extend(group())
        tick(1)
    frame = pd.DataFrame(rows).reindex(columns=list(COLUMNS))
    order = {name: i for i, name in enumerate(ROW_NAMES + OPTIONAL_ROW_NAMES)}
    return frame.sort_values("name", key=lambda s: s.map(order), ignore_index=True)


def groups(reproduce: bool, fitted: bool = False) -> int:
    """How many times ``run_bench`` calls ``on_group``."""
    return 6 + reproduce + fitted


def fitted_reading_of(scores_csv: Path) -> str | None:
    """The reading experiment 09 fitted (``best_reading`` of its scores CSV), or None when
    ``scores_csv`` does not exist (09 has not run)."""
    if not scores_csv.is_file():
        return None
    scores = read_csv_checked(scores_csv, SCORE_COLUMNS, "python experiments/09_article_fit.py")
    return best_reading(scores)[0]

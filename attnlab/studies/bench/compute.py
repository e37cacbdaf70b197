"""Performance of the suite against plain baselines, every figure a ratio from one run: the
rows and their columns are described in this folder's README.md."""

from __future__ import annotations

import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.attention import dot_product_attention
from attnlab.core.estimates import mean_and_sem
from attnlab.core.sampling import softmax_row_statistics
from attnlab.harness.cli import REPO_ROOT
from attnlab.harness.errors import RunError
from attnlab.studies.bench.baselines import numpy_row_statistics, reference_attention
from attnlab.studies.bench.config import (
    COLUMNS,
    BenchConfig,
    Row,
    make_row,
    timing_note,
)
from attnlab.studies.bench.lm_step import bench_lm_optimizers, bench_lm_step
from attnlab.studies.bench.step import bench_recall_step
from attnlab.studies.bench.timing import interleaved_median_seconds, measure_peak


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
    """Rows ``statics_direct_vs_numpy`` and ``statics_exact_vs_numpy``: both variants of one
    ``softmax_row_statistics`` call per d_k (what experiments 02 and 03 compute) against the
    same statistics in numpy."""
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

    seconds = interleaved_median_seconds(
        {"direct": ours("direct"), "exact": ours("exact"), "numpy": baseline}, config.repeats
    )
    flops = sum(2 * n * d_k * trials for d_k in dks)
    sweep = (
        f"d_k {', '.join(map(str, dks))}, n_keys {n}, trials {trials}, scaled and "
        f"unscaled, one softmax_row_statistics call per d_k; {timing_note(config)}; numpy "
        "float32 default_rng, chunked like ours"
    )
    return [
        make_row(
            "statics_direct_vs_numpy",
            seconds["direct"],
            seconds["numpy"],
            peak_fraction=flops / seconds["direct"] / peak_flops,
            detail=f"{sweep}; FLOPs = sum over d_k of trials * 2 n_keys d_k (the K q matvecs) "
            f"= {flops:.3g}; means agree with numpy's within "
            f"{_max_z(last['direct'], last['numpy']):.1f} SEM",
        ),
        make_row(
            "statics_exact_vs_numpy",
            seconds["exact"],
            seconds["numpy"],
            detail=f"{sweep}; the exact sampler (|q| g, O(n) per trial) against numpy's direct "
            f"one; means agree within {_max_z(last['exact'], last['numpy']):.1f} SEM",
        ),
    ]


def _grad_of_sum(fn: Callable[..., jax.Array]) -> Callable[..., tuple[jax.Array, ...]]:
    return jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v)), argnums=(0, 1, 2))


def bench_attention(config: BenchConfig) -> list[Row]:
    """Rows ``attention_fwd_vs_jax[_suffix]`` and ``attention_fwdbwd_vs_jax[_suffix]``."""
    rows = []
    for shape in config.attention_shapes:
        keys = jax.random.split(jax.random.key(config.seed), 3)
        ours_in = tuple(
            jax.random.normal(k, (shape.batch, n, shape.d))
            for k, n in zip(keys, (shape.q_len, shape.k_len, shape.k_len), strict=True)
        )
        ref_in = tuple(x[:, :, None, :] for x in ours_in)  # jax.nn's [B, T, N, H], one head
        where = (
            f"batch {shape.batch} (heads folded into batch), {shape.q_len} queries, "
            f"{shape.k_len} keys, d {shape.d}, float32, jitted; {timing_note(config)}"
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
            seconds = interleaved_median_seconds(
                {
                    "ours": lambda f=ours_jit, x=ours_in: f(*x),
                    "jax": lambda f=ref_jit, x=ref_in: f(*x),
                },
                config.repeats,
                min_seconds=config.min_timing_seconds,
            )
            what = "forward" if kind == "fwd" else "grad of sum(output) wrt q, k, v"
            rows.append(
                make_row(
                    f"attention_{kind}_vs_jax{shape.suffix}",
                    seconds["ours"],
                    seconds["jax"],
                    detail=f"{what}; {where}; max |ours - jax.nn| = {diff:.2g}",
                )
            )
    return rows


#: What ``time_reproduce`` runs by default: every result regenerated, stale or not.
REPRODUCE_COMMAND = ("make", "reproduce")


def time_reproduce(command: Sequence[str] = REPRODUCE_COMMAND, cwd: os.PathLike = REPO_ROOT) -> Row:
    """Row ``make_reproduce_seconds``: the wall time of ``command`` run in ``cwd`` in a
    subprocess, with ``ATTNLAB_JAX_CACHE`` pointed at a fresh empty temporary directory so
    that every program is compiled from scratch (the directory is removed afterwards).
    Its output is dropped; a non-zero exit raises RunError with its last lines."""
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="attnlab-jax-cache-") as cache:
        start = time.perf_counter()
        done = subprocess.run(
            list(command),
            cwd=cwd,
            env={**os.environ, "ATTNLAB_JAX_CACHE": cache},
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
    return make_row(
        "make_reproduce_seconds",
        seconds,
        detail=f"wall time of `{shown}` (every result regenerated); compilation cache empty; "
        f"{os.cpu_count()} CPUs; load average at start {load[0]:.1f}",
    )


def run_bench(
    config: BenchConfig,
    on_group: Callable[[int], None] | None = None,
    reproduce_command: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Every row of ``ROW_NAMES`` (and, given ``reproduce_command``, ``make_reproduce_seconds``)
    in that order, with the columns of ``COLUMNS``. ``on_group`` is told 1 after each of the
    ``groups(...)`` groups of rows."""
    tick = on_group or (lambda _: None)
    peak_s, peak = measure_peak(config.peak_size, config.repeats)
    devices = f"{jax.device_count()} x {jax.devices()[0].device_kind}"
    rows = [
        make_row(
            "peak_matmul_f32",
            peak_s,
            detail=f"jitted float32 {config.peak_size}^3 matmul, 2 n^3 FLOPs: {peak / 1e9:.3g} "
            f"GFLOP/s, the peak every peak_fraction divides by; {os.cpu_count()} CPUs, "
            f"{platform.machine()}, jax {jax.__version__} on {jax.default_backend()} ({devices}); "
            f"load average at start {os.getloadavg()[0]:.1f}",
        )
    ]
    tick(1)
    groups = [
        lambda: bench_statics(config, peak),
        lambda: bench_attention(config),
        lambda: bench_recall_step(config, peak),
        lambda: bench_lm_step(config, peak),
        lambda: bench_lm_optimizers(config),
    ]
    if reproduce_command is not None:
        groups.append(lambda: [time_reproduce(reproduce_command)])
    for group in groups:
        rows.extend(group())
        tick(1)
    return pd.DataFrame(rows).reindex(columns=list(COLUMNS))


def groups(reproduce: bool) -> int:
    """How many times ``run_bench`` calls ``on_group``."""
    return 6 + reproduce

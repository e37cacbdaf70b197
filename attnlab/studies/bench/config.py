"""What ``make bench`` measures: its sizes, its rows and their columns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnlab.studies.recall.train import (
    RecallConfig,
)

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
    "train_step_vs_reference",
    "train_step_peak_fraction",
    "train_step_matmul_bound",
    "profile_step_data",
    "profile_step_forward",
    "profile_step_forward_backward",
    "profile_step_adam",
    "profile_step_full",
    "profile_step_rolled_full",
    "profile_step_reference_full",
    "profile_step_train_chunk",
    "profile_kernels_matmul",
    "profile_kernels_data",
    "profile_kernels_forward_backward",
    "profile_kernels_metrics",
    "profile_kernels_adam",
    "profile_kernels_other",
    "profile_kernels_wall",
    "growth_dk_direct",
    "growth_dk_exact",
    "growth_n_direct",
    "growth_n_exact",
)

#: The rows ``run_bench`` produces only when asked for, in order after ``ROW_NAMES``: the
#: step at experiment 09's fitted reading (``experiments/bench.py`` asks where 09's scores
#: exist) and ``make reproduce`` (``--reproduce``).
OPTIONAL_ROW_NAMES = ("profile_fitted_step", "make_reproduce_seconds")


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


def timing_note(config: BenchConfig) -> str:
    if config.warmup:
        return f"median of {config.repeats} after one warm-up call (compile excluded)"
    return f"median of {config.repeats} without warm-up (compile included: --quick)"


def make_row(name: str, ours: float, baseline: float | None = None, **extra: Any) -> Row:
    row: Row = {"name": name, "ours_seconds": ours, "baseline_seconds": baseline}
    if baseline is not None:
        row["speedup"] = baseline / ours
    return row | extra

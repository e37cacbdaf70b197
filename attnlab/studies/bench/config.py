"""What ``make bench`` measures: its sizes, its rows and their columns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnlab.lm.train import LMConfig
from attnlab.recall.config import RecallConfig

#: The columns of ``results/bench.csv``; empty cells where a column does not apply.
COLUMNS = ("name", "ours_seconds", "baseline_seconds", "speedup", "peak_fraction", "detail")

#: The rows ``run_bench`` always produces, in order.
ROW_NAMES = (
    "peak_matmul_f32",
    "statics_direct_vs_numpy", "statics_exact_vs_numpy",
    "attention_fwd_vs_jax", "attention_fwdbwd_vs_jax",
    "attention_fwd_vs_jax_large", "attention_fwdbwd_vs_jax_large",
    "train_step_vs_reference", "train_step_peak_fraction",
    "profile_step_data", "profile_step_forward_backward", "profile_step_adam", "profile_step_full",
    "lm_step_vs_peer", "lm_step_peak_fraction", "lm_ledger_overhead",
    "lm_muon_step_vs_adamw", "lm_qk_clip_step_vs_none",
)  # fmt: skip
#: The rows ``run_bench`` produces only when asked for: ``--gemma`` (``bench.gemma``), then
#: ``--reproduce``, last.
OPTIONAL_ROW_NAMES = ("gemma3_read_seconds", "gemma3_13_seconds", "make_reproduce_seconds")
#: The command ``--reproduce`` times (``reproduce.time_reproduce``): every result, stale or not.
REPRODUCE_COMMAND = ("make", "reproduce")

Row = dict[str, Any]


@dataclass(frozen=True)
class AttentionShape:
    """``batch`` independent heads, ``q_len`` queries over ``k_len`` keys of width ``d``."""

    suffix: str
    batch: int
    q_len: int
    k_len: int
    d: int


@dataclass(frozen=True)
class BenchConfig:
    """Sizes of every comparison: a few minutes on two CPU cores; ``QUICK``, the tests'."""

    #: Rounds of every round-robin timing (each program timed once per round; the median).
    repeats: int = 5
    seed: int = 0
    #: d_k timed for the statics rows (the default sweep of 02/03 is 1, 2, ..., 1024).
    statics_dks: tuple[int, ...] = (64, 256, 1024)
    n_keys: int = 256
    trials: int = 2000
    attention_shapes: tuple[AttentionShape, ...] = (
        AttentionShape("", 64, 1, 16, 256),  # experiment 04
        AttentionShape("_large", 8, 1024, 1024, 64),
    )
    #: The recall step timed: 04's sizes, one seed, chunks of 50 steps.
    recall: RecallConfig = field(default=RecallConfig(steps=50, seeds=1, chunk_steps=50))
    #: The language-model step timed: experiment 14's set-up at its widest d_model, 20 steps.
    lm: LMConfig = field(default=LMConfig(d_model=128, steps=20, warmup=2))
    peak_size: int = 2048
    #: Fast calls are repeated within one timing until it lasts this long.
    min_timing_seconds: float = 0.2


QUICK = BenchConfig(
    repeats=1, statics_dks=(8,), n_keys=16, trials=64, peak_size=128, min_timing_seconds=0.0,
    attention_shapes=(AttentionShape("", 4, 1, 4, 8), AttentionShape("_large", 2, 32, 32, 8)),
    recall=RecallConfig(d_k=8, d_model=8, batch_size=4, steps=2, seeds=1, chunk_steps=2,
                        eval_size=8),
    lm=LMConfig(d_model=16, d_head=8, n_layers=1, seq_len=8, batch_size=2, steps=2, warmup=0),
)  # fmt: skip


def make_row(name: str, ours: float, baseline: float | None = None, **extra: Any) -> Row:
    row: Row = {"name": name, "ours_seconds": ours, "baseline_seconds": baseline}
    if baseline is not None:
        row["speedup"] = baseline / ours
    return row | extra


def peak_row(name: str, per_step: float, flops: int, formula: str, peak: float, what: str) -> Row:
    """A ``*_peak_fraction`` row: ``flops`` per step (``formula`` in words) over ``per_step``
    seconds, against the ``peak`` FLOP/s of this run."""
    rate = flops / per_step
    return make_row(name, per_step, peak_fraction=rate / peak, detail=f"{what}; FLOPs per step = "
                    f"{formula} = {flops:.3g}: {rate / 1e9:.3g} GFLOP/s against the "
                    f"peak_matmul_f32 of this run, {peak / 1e9:.3g} GFLOP/s")  # fmt: skip


def timing_note(config: BenchConfig) -> str:
    rounds = f"median of {config.repeats} rounds after one compiling call each"
    return f"timed round-robin with its baseline, {rounds}"

"""The bench's table (this folder's README.md): every row, top to bottom, with its columns:
the matmul peak, the statics, attention, the recall step, the language-model step and its
optimisers, and, when asked for, Gemma 3 270M's rows and ``make reproduce``."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import jax
import pandas as pd

from attnlab.studies.bench.attention import bench_attention
from attnlab.studies.bench.config import COLUMNS, BenchConfig, make_row
from attnlab.studies.bench.gemma import time_gemma
from attnlab.studies.bench.lm_step import bench_lm_optimizers, bench_lm_step
from attnlab.studies.bench.recall_step import bench_recall_step
from attnlab.studies.bench.reproduce import time_reproduce
from attnlab.studies.bench.statics import bench_statics
from attnlab.studies.bench.timing import measure_peak


def run_bench(
    config: BenchConfig, on_group: Callable[[int], None] | None = None,
    reproduce_command: Sequence[str] | None = None, gemma: tuple[Path, str] | None = None,
) -> pd.DataFrame:  # fmt: skip
    """Every row of ``ROW_NAMES`` (and, given ``gemma``, the GGUF and 13's arguments on it,
    Gemma 3 270M's rows, ``bench.gemma.time_gemma``;
    given ``reproduce_command``, ``make_reproduce_seconds``) with the columns of
    ``COLUMNS``; ``on_group(1)`` after each of ``GROUPS`` groups (one more with each
    option)."""
    tick = on_group or (lambda _: None)
    peak_s, peak = measure_peak(config.peak_size, config.repeats)
    devices = f"{jax.device_count()} x {jax.devices()[0].device_kind}"
    detail = (f"jitted float32 {config.peak_size}^3 matmul, 2 n^3 FLOPs: {peak / 1e9:.3g} "
              f"GFLOP/s, the peak every peak_fraction divides by; {os.cpu_count()} CPUs, "
              f"{platform.machine()}, jax {jax.__version__} on {jax.default_backend()} "
              f"({devices}); load average at start {os.getloadavg()[0]:.1f}")  # fmt: skip
    rows = [make_row("peak_matmul_f32", peak_s, detail=detail)]
    tick(1)
    groups = [partial(bench_statics, config, peak), partial(bench_attention, config),
              partial(bench_recall_step, config, peak), partial(bench_lm_step, config, peak),
              partial(bench_lm_optimizers, config)]  # fmt: skip
    if gemma is not None:
        groups.append(partial(time_gemma, *gemma))
    if reproduce_command is not None:
        groups.append(lambda: [time_reproduce(reproduce_command)])
    for group in groups:
        rows.extend(group())
        tick(1)
    return pd.DataFrame(rows).reindex(columns=list(COLUMNS))


#: How many times ``run_bench`` calls ``on_group`` (without ``reproduce_command``).
GROUPS = 6

"""How the bench times: each call blocked on its result, sides timed round-robin (every round
times each side once, after one untimed compiling call each) and the median of the rounds
kept, so a machine that changes speed during the run shifts both sides alike; and the
float32 matmul peak every ``peak_fraction`` divides by (``2 n^3`` FLOPs per call)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from attnlab.studies.bench.config import BenchConfig, Row, make_row, timing_note


def _timed(fn: Callable[[], Any], number: int) -> float:
    """Wall seconds of one call of ``fn`` (result blocked on), averaged over ``number``."""
    start = time.perf_counter()
    for _ in range(number):
        jax.block_until_ready(fn())
    return (time.perf_counter() - start) / number


def interleaved_median_seconds(
    fns: Mapping[str, Callable[[], Any]], rounds: int, *, min_seconds: float = 0.0
) -> dict[str, float]:
    """Median wall time of one call of each ``fn``, round-robin over ``rounds`` after one
    untimed call each; calls faster than ``min_seconds`` are repeated within a timing."""
    numbers = {}
    for name, fn in fns.items():
        first = _timed(fn, 1)
        numbers[name] = max(1, math.ceil(min_seconds / max(first, 1e-9))) if min_seconds else 1
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(_timed(fn, numbers[name]))
    return {name: float(np.median(t)) for name, t in times.items()}


def round_robin(config: BenchConfig, fns: Mapping[str, Callable[[], Any]]) -> dict[str, float]:
    """``interleaved_median_seconds`` at ``config``'s rounds and shortest timing."""
    return interleaved_median_seconds(fns, config.repeats, min_seconds=config.min_timing_seconds)


def compare(config: BenchConfig, name: str, ours: Callable, baseline: Callable, what: str) -> Row:
    """Row ``name``: ``ours`` against ``baseline``, round-robin; ``what`` they time."""
    seconds = round_robin(config, {"ours": ours, "baseline": baseline})
    return make_row(name, seconds["ours"], seconds["baseline"],
                    detail=f"{what}; {timing_note(config)}")  # fmt: skip


def measure_peak(size: int, repeats: int) -> tuple[float, float]:
    """Seconds and FLOP/s (``2 size^3`` per call) of a jitted float32 square matmul."""
    a, b = (jax.random.normal(k, (size, size), jnp.float32)
            for k in jax.random.split(jax.random.key(0)))  # fmt: skip
    matmul = jax.jit(jnp.matmul)
    seconds = interleaved_median_seconds({"peak": lambda: matmul(a, b)}, max(repeats, 5))["peak"]
    return seconds, 2 * size**3 / seconds

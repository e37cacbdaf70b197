"""Timing primitives: median wall and CPU time of repeated calls, the matmul peak, slopes."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


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


def _calls_per_timing(fn: Callable[[], Any], min_seconds: float) -> int:
    """Calls per timing so that one timing lasts at least ``min_seconds`` (one call timed
    to find out; 1 without a minimum)."""
    if min_seconds <= 0:
        return 1
    return max(1, math.ceil(min_seconds / max(_timed(fn, 1).seconds, 1e-9)))


def time_calls(
    fn: Callable[[], Any], repeats: int, *, warmup: bool = True, min_seconds: float = 0.0
) -> Timing:
    """Median time of one call of ``fn()`` (its result blocked on) over ``repeats``.

    One untimed call first compiles whatever ``fn`` jits. Calls faster than
    ``min_seconds`` are repeated within each timing, which is then divided by their number.
    """
    if warmup:
        jax.block_until_ready(fn())
    number = _calls_per_timing(fn, min_seconds)
    times = [_timed(fn, number) for _ in range(repeats)]
    return Timing(*(float(np.median(column)) for column in zip(*times, strict=True)))


def median_seconds(
    fn: Callable[[], Any], repeats: int, *, warmup: bool = True, min_seconds: float = 0.0
) -> float:
    """The median wall time of ``time_calls``."""
    return time_calls(fn, repeats, warmup=warmup, min_seconds=min_seconds).seconds


def interleaved_median_seconds(
    fns: Mapping[str, Callable[[], Any]], rounds: int, *, min_seconds: float = 0.0
) -> dict[str, float]:
    """Median wall time of one call of each ``fn`` (result blocked on), timed round-robin:
    every round times each ``fn`` once, so a machine that slows down or speeds up during the
    measurement shifts all of them alike and their ratios stay meaningful. One untimed call
    of each first; calls faster than ``min_seconds`` are repeated within each timing."""
    numbers = {}
    for name, fn in fns.items():
        jax.block_until_ready(fn())
        numbers[name] = _calls_per_timing(fn, min_seconds)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(_timed(fn, numbers[name]).seconds)
    return {name: float(np.median(t)) for name, t in times.items()}


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

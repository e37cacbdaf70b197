"""Timing primitives: round-robin median wall times and the matmul peak."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def _timed(fn: Callable[[], Any], number: int) -> float:
    """Wall seconds of one call of ``fn`` (result blocked on), averaged over ``number``."""
    start = time.perf_counter()
    for _ in range(number):
        jax.block_until_ready(fn())
    return (time.perf_counter() - start) / number


def interleaved_median_seconds(
    fns: Mapping[str, Callable[[], Any]], rounds: int, *, min_seconds: float = 0.0
) -> dict[str, float]:
    """Median wall time of one call of each ``fn`` (result blocked on), timed round-robin:
    every round times each ``fn`` once, so a machine that slows down or speeds up during the
    measurement shifts all of them alike and their ratios stay meaningful. One untimed call
    of each first (it compiles); calls faster than ``min_seconds`` are repeated within each
    timing, which is divided by their number."""
    numbers = {}
    for name, fn in fns.items():
        first = _timed(fn, 1)
        numbers[name] = max(1, math.ceil(min_seconds / max(first, 1e-9))) if min_seconds else 1
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(_timed(fn, numbers[name]))
    return {name: float(np.median(t)) for name, t in times.items()}


def measure_peak(size: int, repeats: int) -> tuple[float, float]:
    """Seconds and FLOP/s (``2 size^3`` per call) of a jitted float32 square matmul."""
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (size, size), jnp.float32)
    b = jax.random.normal(kb, (size, size), jnp.float32)
    matmul = jax.jit(jnp.matmul)
    seconds = interleaved_median_seconds({"peak": lambda: matmul(a, b)}, max(repeats, 5))["peak"]
    return seconds, 2 * size**3 / seconds

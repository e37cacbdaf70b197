"""Rows ``statics_direct_vs_numpy`` and ``statics_exact_vs_numpy``: the softmax-row
statistics of 02 and 03 (``softmax_row_statistics``, ``direct`` and ``exact`` samplers)
against the same computation in plain numpy, with how far their means lie apart in SEMs."""

from __future__ import annotations

from functools import partial

import jax
import numpy as np

from attnlab.core.estimates import mean_and_sem
from attnlab.core.sampling import CHUNK_ELEMENTS, softmax_row_statistics
from attnlab.studies.bench.config import BenchConfig, Row, make_row, timing_note
from attnlab.studies.bench.timing import interleaved_median_seconds


def numpy_row_statistics(
    rng: np.random.Generator, d_k: int, n_keys: int, trials: int, chunk: int = CHUNK_ELEMENTS
) -> np.ndarray:
    """``softmax_row_statistics(sampler="direct")`` in plain numpy, drawn in chunks of about
    ``chunk`` key entries: ``[2 (scaled, unscaled), trials, 3]``."""
    chunk = max(1, chunk // (n_keys * d_k))
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
        p2 = p * p
        top = p.argmax(axis=-1)[..., None]
        p2_others = p2.copy()
        np.put_along_axis(p2_others, top, 0.0, axis=-1)
        others_of_max = p2_others.sum(axis=-1, keepdims=True)
        r = p2.sum(axis=-1, keepdims=True) - p2
        np.put_along_axis(r, top, others_of_max, axis=-1)
        out[:, start : start + m, 0] = p.max(axis=-1)
        out[:, start : start + m, 1] = -np.sum(p * np.log(np.where(p > 0, p, 1.0)), axis=-1)
        out[:, start : start + m, 2] = np.sqrt(np.sum(p2 * (1.0 - p) ** 2 + p2 * r, axis=-1))
    return out


def _max_z(ours: list[np.ndarray], theirs: list[np.ndarray]) -> float:
    """Largest ``|mean_a - mean_b| / sqrt(sem_a^2 + sem_b^2)`` over matching statistics."""
    z = [0.0]
    for a, b in zip(ours, theirs, strict=True):
        (ma, sa), (mb, sb) = mean_and_sem(a, axis=1), mean_and_sem(b, axis=1)
        se = np.hypot(sa, sb)
        z.append(np.where(se > 0, np.abs(ma - mb) / np.where(se > 0, se, 1.0), 0.0).max())
    return float(max(z))


def bench_statics(config: BenchConfig, peak_flops: float) -> list[Row]:
    """Rows ``statics_direct_vs_numpy`` and ``statics_exact_vs_numpy``."""
    key = jax.random.key(config.seed)
    dks, n, trials = config.statics_dks, config.n_keys, config.trials
    last: dict[str, list[np.ndarray]] = {}

    def ours(sampler: str) -> None:
        runs = (softmax_row_statistics(key, d_k, n, trials, sampler) for d_k in dks)
        last[sampler] = [np.stack([s.max_weight, s.entropy, s.jacobian_fro], -1) for s in runs]

    def numpy() -> None:
        rng = np.random.default_rng(config.seed)
        last["numpy"] = [numpy_row_statistics(rng, d_k, n, trials) for d_k in dks]

    calls = {"direct": partial(ours, "direct"), "exact": partial(ours, "exact"), "numpy": numpy}
    seconds = interleaved_median_seconds(calls, config.repeats)
    flops = sum(2 * n * d_k * trials for d_k in dks)
    sweep = (
        f"d_k {', '.join(map(str, dks))}, n_keys {n}, trials {trials}, scaled and "
        f"unscaled, one softmax_row_statistics call per d_k; {timing_note(config)}; numpy "
        "float32 default_rng, chunked like ours"
    )
    return [
        make_row(
            "statics_direct_vs_numpy", seconds["direct"], seconds["numpy"],
            peak_fraction=flops / seconds["direct"] / peak_flops,
            detail=f"{sweep}; FLOPs = sum over d_k of trials * 2 n_keys d_k (the K q matvecs) "
            f"= {flops:.3g}; means agree with numpy's within "
            f"{_max_z(last['direct'], last['numpy']):.1f} SEM",
        ),
        make_row(
            "statics_exact_vs_numpy", seconds["exact"], seconds["numpy"],
            detail=f"{sweep}; the exact sampler (|q| g, O(n) per trial) against numpy's direct "
            f"one; means agree within {_max_z(last['exact'], last['numpy']):.1f} SEM",
        ),
    ]  # fmt: skip

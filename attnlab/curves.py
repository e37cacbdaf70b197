"""Features of measured curves: where one curve crosses another, milestones, plateaus."""

from __future__ import annotations

import numpy as np


def crossing_dk(d_k: np.ndarray, diff: np.ndarray) -> tuple[int, int, float] | None:
    """The first bracket ``(d_lo, d_hi)`` where ``diff`` turns from > 0 to <= 0 after its
    maximum, and the crossing interpolated linearly in ``log2 d_k``; None if it never does."""
    start = int(np.argmax(diff))
    for i in range(start, len(diff) - 1):
        if diff[i] > 0 >= diff[i + 1]:
            t = diff[i] / (diff[i] - diff[i + 1])
            log_cross = np.log2(d_k[i]) + t * (np.log2(d_k[i + 1]) - np.log2(d_k[i]))
            return int(d_k[i]), int(d_k[i + 1]), float(2.0**log_cross)
    return None

"""Monte-Carlo estimates and their standard errors, in numpy alone (no JAX): the samplers'
results are summarised here, and the reports that read them import this without JAX."""

from __future__ import annotations

import numpy as np


def mean_and_sem(x: np.ndarray, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Sample mean and its standard error ``s / sqrt(N)`` (``s`` with ddof=1), in float64."""
    x = np.asarray(x, np.float64)
    n = x.shape[axis]
    return x.mean(axis=axis), x.std(axis=axis, ddof=1) / np.sqrt(n)


def std_and_se(x: np.ndarray) -> tuple[float, float]:
    """Sample standard deviation and its standard error, in float64.

    ``s = sqrt(m2)`` with central moments ``m_k = mean((x - mean x)^k)``; by the delta method
    ``se(s) = sqrt((m4 - m2^2) / N) / (2 s)``, which uses the sample kurtosis and so holds
    for the heavy-tailed product of two normals (excess kurtosis 6/d_k), not only for
    Gaussian data.
    """
    x = np.asarray(x, np.float64)
    centred = x - x.mean()
    m2 = np.mean(centred**2)
    m4 = np.mean(centred**4)
    s = float(np.sqrt(m2))
    return s, float(np.sqrt((m4 - m2**2) / x.size) / (2 * s))

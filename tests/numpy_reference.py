"""Every built-in mechanism written again in numpy float64, from its paper's formula and
not from attnlab's code, with the float32 error bound the tests compare against.

For one query row ``q [d]`` and keys ``k [n, d]`` at the mechanism's initial scalars:
``reference_logits`` gives ``z [n]``, ``reference_weights`` the weights ``p [n]``,
``reference_jacobian`` ``dp/dz`` by central differences (independent of both softmax's
closed form and autodiff), and ``row_reference`` the card's five statistics.
"""

from __future__ import annotations

import math

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)
#: The l2-normalisation's epsilon (``x / sqrt(|x|^2 + 1e-6)``, QK-norm and cosine).
L2_EPS = 1e-6
#: Softpick's epsilon in the denominator.
SOFTPICK_EPS = 1e-8
#: Central-difference step: truncation ~h^2 |p'''| and rounding ~1e-16 / h, both < 1e-9.
FD_STEP = 1e-5


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + L2_EPS)


def reference_logits(name: str, q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``z_j`` of the built-in ``name`` for query ``q [d]`` and keys ``k [n, d]``."""
    d, n = q.shape[-1], k.shape[0]
    dot = k @ q
    cosine = _normalise(k) @ _normalise(q)
    return {
        "scaled": dot / math.sqrt(d),
        "unscaled": dot,
        "folded_init": dot,  # the fold acts on W_Q and W_K, not on given q and k
        "qk_norm": math.sqrt(d) * cosine,
        "learned_temperature": dot / math.sqrt(d),
        "inv_d": dot / d,
        "softcap30": 30.0 * np.tanh(dot / 30.0),
        "softcap50": 50.0 * np.tanh(dot / 50.0),
        "ssmax": 0.43 * math.log(n) * dot / math.sqrt(d),
        "sigmoid": dot / math.sqrt(d) - math.log(n),
        "softpick": dot / math.sqrt(d),
        "cosine_tau": 10.0 * cosine,  # 1 / tau = exp(log 10) at initialisation
    }[name]


def reference_weights(name: str, z: np.ndarray) -> np.ndarray:
    """The weights of logits ``z [n]``: softmax, or sigmoid's or softpick's rule."""
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-z))
    if name == "softpick":
        e = np.expm1(z)
        return np.maximum(e, 0.0) / (np.sum(np.abs(e)) + SOFTPICK_EPS)
    e = np.exp(z - z.max())
    return e / e.sum()


def reference_jacobian(name: str, z: np.ndarray) -> np.ndarray:
    """``dp_i/dz_j`` by central differences in float64."""
    columns = []
    for j in range(z.shape[0]):
        step = np.zeros_like(z)
        step[j] = FD_STEP
        up, down = reference_weights(name, z + step), reference_weights(name, z - step)
        columns.append((up - down) / (2 * FD_STEP))
    return np.stack(columns, axis=1)


def row_reference(name: str, q: np.ndarray, k: np.ndarray) -> dict[str, float]:
    """The card's statistics of one row: max weight, entropy of the normalised row, mass,
    ``|dp/dz|_F`` and the logits' std (ddof 0)."""
    z = reference_logits(name, q, k)
    p = reference_weights(name, z)
    r = p / p.sum()
    nonzero = r[r > 0]
    return {
        "max_weight": float(p.max()),
        "entropy": float(-np.sum(nonzero * np.log(nonzero))),
        "mass": float(p.sum()),
        "jacobian_fro": float(np.linalg.norm(reference_jacobian(name, z))),
        "logit_std": float(np.std(z)),
    }


def multiplier(name: str, d: int, n: int) -> float:
    """The factor between the (normalised) dot product and the logits at initialisation."""
    return {
        "scaled": 1 / math.sqrt(d),
        "learned_temperature": 1 / math.sqrt(d),
        "sigmoid": 1 / math.sqrt(d),
        "softpick": 1 / math.sqrt(d),
        "inv_d": 1 / d,
        "ssmax": 0.43 * math.log(n) / math.sqrt(d),
        "qk_norm": math.sqrt(d),
        "cosine_tau": 10.0,
    }.get(name, 1.0)


def float32_bound(name: str, q: np.ndarray, k: np.ndarray) -> float:
    """An upper bound on any statistic's float32 error for this row, from first-order
    perturbation theory: the logits' rounding ``dz`` (a d-term dot product: Higham's
    ``gamma_d = d eps / (1 - d eps)`` times ``sum_i |q_i k_ji|`` times the multiplier, with
    ``|z| eps`` for the tanh, log and normalisation that follow), amplified by the weights'
    conditioning ``|dp/dz|_F sqrt(n)``, plus ``(n + 8) eps`` per unit of the statistics'
    size for the reductions (sum, max, log) over the row. The entropy's sensitivity is at
    most ``(1 + |log p_min|)`` times that of the weights; the bound carries that factor
    for every statistic."""
    d, n = q.shape[-1], k.shape[0]
    gamma = d * EPS32 / (1 - d * EPS32)
    z = reference_logits(name, q, k)
    dots = np.abs(k) @ np.abs(q)
    if name in ("qk_norm", "cosine_tau"):  # unit vectors; the normalisation adds ~d eps
        dots = np.abs(_normalise(k)) @ np.abs(_normalise(q)) + 2 * gamma
    dz = gamma * np.max(dots) * multiplier(name, d, n) + 4 * EPS32 * (np.max(np.abs(z)) + 1)
    p = reference_weights(name, z)
    conditioning = np.linalg.norm(reference_jacobian(name, z)) * math.sqrt(n)
    log_factor = 1.0 + abs(math.log(max(p[p > 0].min() / p.sum(), 1e-300)))
    size = max(1.0, float(np.max(np.abs(z))), float(p.sum()))
    return log_factor * (conditioning * dz + (n + 8) * EPS32 * size)

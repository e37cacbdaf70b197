"""Experiment 08: the quantitative claims of the companion article, measured.

Article 000 ("Why Scaled Dot-Product Attention Divides by the Square Root of the Key
Dimension") makes three checkable statements:

1. Top logit. With ``n`` i.i.d. logits of spread ``sigma`` the largest sits "roughly
   ``sigma sqrt(2 ln n)``" above the mean: "about 3.5 sigma" for ``n = 512``, so "nearly 28"
   at ``d_k = 64`` (``sigma = 8``), and the row is "near one-hot". ``sqrt(2 ln n)`` is the
   leading term of the expected maximum of ``n`` standard normals; the exact value is

       E[max_i g_i] = int x n phi(x) Phi(x)^(n-1) dx   (3.04 for n = 512, not 3.53).

2. Model width. With ``d_model = 512`` and 8 heads (``d_k = 64``) the divisor is
   ``sqrt(64) = 8``, not ``sqrt(512) = 22.6``; the latter shrinks every logit by
   ``sqrt(512 / 64) = sqrt(8) = 2.83`` and over-flattens the softmax. For logits of small
   spread ``sigma`` the entropy is ``ln n - sigma^2 / 2`` to second order, so the entropy
   deficit ``ln n - H`` shrinks by the factor 8.

3. Folding. Dividing ``W_Q`` by ``s = sqrt(d_k)`` (or ``W_Q`` and ``W_K`` each by
   ``d_k^(1/4)``) and dropping the runtime division gives identical logits, but not the
   same optimisation. If ``f(W_Q)`` is the loss with the runtime division and
   ``g(W') = f(c^-1 W')`` the loss of the folded weight ``W' = c W_Q``, then

       grad g(W') = c^-1 grad f(W_Q),

   so the folded gradient is the runtime one times ``1/c = sqrt(d_k)`` (``d_k^(1/4)`` when
   both are folded). An SGD step of rate ``eta`` on ``W'`` moves ``W_Q = W' / c`` by
   ``eta / c^2`` times the runtime step: first-order logit changes ``d_k`` times larger
   (``sqrt(d_k)`` when both are folded). Folding ``d_k^(-1/4)`` into ``W_Q`` alone, as the
   article words it, is not identical: it leaves the logits ``d_k^(1/4)`` times too large.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.attention import attention_logits, attention_weights, dot_product_attention
from attnlab.core.estimates import mean_and_sem
from attnlab.core.parallel import chunked_map
from attnlab.core.sampling import CHUNK_ELEMENTS, chunk_for, trial_keys
from attnlab.core.softmax_stats import entropy, max_weight
from attnlab.harness.memory import DRAW_COPIES, FLOAT32_BYTES, KEY_BYTES, Need, product, size
from attnlab.studies.companion.study import TABLE

#: The CSV's columns, declared with their rules in study.py.
COLUMNS = tuple(TABLE.column_names)

TOP_LOGIT = "top logit"
MODEL_WIDTH = "model-width divisor"
FOLDING = "folded scale"


@dataclass(frozen=True)
class CompanionConfig:
    """Rows of ``n_keys`` keys at head width ``d_k``; ``d_model`` split into heads."""

    n_keys: int = 512
    d_k: int = 64
    d_model: int = 512
    trials: int = 2000
    fold_tokens: int = 16
    fold_setups: int = 8
    seed: int = 0


def expected_max_normal(n: int) -> float:
    """``E[max of n i.i.d. N(0, 1)] = int x n phi(x) Phi(x)^(n-1) dx``, by the trapezoid
    rule on [-10, 10] (the integrand is below 1e-20 outside)."""
    x = np.linspace(-10.0, 10.0, 20001)
    cdf = 0.5 * (1.0 + np.asarray([math.erf(v / math.sqrt(2.0)) for v in x]))
    pdf = np.exp(-0.5 * x**2) / math.sqrt(2.0 * math.pi)
    return float(np.trapezoid(x * n * pdf * cdf ** (n - 1), x))


def _root_keys(seed: int) -> jax.Array:
    """Two independent keys: the softmax rows (claims 1-2) and the folding setups (claim 3)."""
    return jax.random.split(jax.random.key(seed))


def _row(
    claim: str,
    quantity: str,
    setting: str,
    value: float,
    sem: float = 0.0,
    predicted: float = np.nan,
) -> dict[str, object]:
    return {
        "claim": claim,
        "quantity": quantity,
        "setting": setting,
        "value": float(value),
        "sem": float(sem),
        "predicted": float(predicted),
    }


def row_statistics(
    config: CompanionConfig, on_chunk: Callable[[int], None] | None = None
) -> dict[str, np.ndarray]:
    """Per-trial statistics of one query against ``n_keys`` keys, all standard normal in
    ``d_k`` dims (the direct sampler), each an array over trials:

    top-logit gap ``max - mean`` (absolute, and over the row std), gap between the two
    largest logits, unscaled max weight; and, for the divisors ``sqrt(d_k)`` ("head") and
    ``sqrt(d_model)`` ("model"), the std of the divided logits, max weight and entropy of
    ``attention_weights(q, K, scale=1/divisor)``.
    """
    scales = {
        "unscaled": 1.0,
        "head": 1.0 / math.sqrt(config.d_k),
        "model": 1.0 / math.sqrt(config.d_model),
    }

    def one(key: jax.Array) -> dict[str, jax.Array]:
        kq, kk = jax.random.split(key)
        q = jax.random.normal(kq, (1, config.d_k))
        keys = jax.random.normal(kk, (config.n_keys, config.d_k))
        z = attention_logits(q, keys, scale=1.0)[0]
        top2 = jax.lax.top_k(z, 2)[0]
        out = {
            "gap": top2[0] - jnp.mean(z),
            "gap_std": (top2[0] - jnp.mean(z)) / jnp.std(z),
            "top_two_gap": top2[0] - top2[1],
        }
        for name, scale in scales.items():
            p = attention_weights(q, keys, scale=scale)[0]
            out[f"max_weight_{name}"] = max_weight(p)
            out[f"entropy_{name}"] = entropy(p)
            out[f"logit_std_{name}"] = jnp.std(z * scale)
        return out

    keys = trial_keys(_root_keys(config.seed)[0], config.d_k, config.trials)
    elements = config.n_keys * (config.d_k + 2 * len(scales))
    with jax.threefry_partitionable(False):
        return chunked_map(one, keys, min(config.trials, chunk_for(elements)), on_chunk)


def top_logit_rows(config: CompanionConfig, stats: dict[str, np.ndarray]) -> list[dict]:
    """Claim 1 against ``sqrt(2 ln n)`` (article) and the exact expected maximum."""
    n, sigma = config.n_keys, math.sqrt(config.d_k)
    setting = f"n = {n}, d_k = {config.d_k}, unscaled"
    e_max = expected_max_normal(n)
    asymptotic = math.sqrt(2.0 * math.log(n))
    return [
        _row(TOP_LOGIT, "expected_max_normal", f"n = {n}, exact integral", e_max),
        _row(TOP_LOGIT, "sqrt_2_ln_n", f"n = {n}", asymptotic),
        _row(
            TOP_LOGIT,
            "standardized_top_gap",
            setting + ", (max - mean) / row std",
            *mean_and_sem(stats["gap_std"]),
            predicted=e_max,
        ),
        _row(
            TOP_LOGIT,
            "absolute_top_gap",
            setting + ", max - mean",
            *mean_and_sem(stats["gap"]),
            predicted=sigma * e_max,
        ),
        _row(
            TOP_LOGIT,
            "top_two_gap",
            setting + ", max - second max",
            *mean_and_sem(stats["top_two_gap"]),
        ),
        _row(
            TOP_LOGIT,
            "max_weight_unscaled",
            setting + ", max softmax weight",
            *mean_and_sem(stats["max_weight_unscaled"]),
        ),
    ]


def model_width_rows(config: CompanionConfig, stats: dict[str, np.ndarray]) -> list[dict]:
    """Claim 2: divisors, logit spread, max weight and entropy per head vs model width."""
    n, head, model = config.n_keys, math.sqrt(config.d_k), math.sqrt(config.d_model)
    heads = config.d_model // config.d_k
    # The two logit rows differ by a constant factor, so its spread is float rounding only.
    factor = np.mean(stats["logit_std_head"]) / np.mean(stats["logit_std_model"])
    rows = [
        _row(MODEL_WIDTH, "divisor_per_head", f"sqrt(d_k), d_k = {config.d_k}", head),
        _row(
            MODEL_WIDTH,
            "divisor_model_width",
            f"sqrt(d_model), d_model = {config.d_model}",
            model,
        ),
        _row(
            MODEL_WIDTH,
            "over_flattening_factor",
            f"logit std per head / model width, {heads} heads",
            factor,
            predicted=model / head,
        ),
    ]
    spread = {"head": math.sqrt(config.d_k) / head, "model": math.sqrt(config.d_k) / model}
    for name, label in (("head", "per_head"), ("model", "model_width")):
        setting = f"n = {n}, d_k = {config.d_k}, divisor {head if name == 'head' else model:.4g}"
        rows += [
            _row(
                MODEL_WIDTH,
                f"logit_std_{label}",
                setting,
                *mean_and_sem(stats[f"logit_std_{name}"]),
                predicted=spread[name],
            ),
            _row(
                MODEL_WIDTH,
                f"max_weight_{label}",
                setting,
                *mean_and_sem(stats[f"max_weight_{name}"]),
            ),
            _row(
                MODEL_WIDTH,
                f"entropy_{label}",
                setting + " (nats)",
                *mean_and_sem(stats[f"entropy_{name}"]),
                predicted=math.log(n) - spread[name] ** 2 / 2,
            ),
        ]
    rows.append(_row(MODEL_WIDTH, "entropy_uniform", f"ln n, n = {n}", math.log(n)))
    return rows


#: Folded parameterisations: (multiplier of W_Q, multiplier of W_K) as powers of d_k, and
#: the runtime scale they use (1: no division).
FOLDS: dict[str, tuple[float, float]] = {
    "W_Q * d_k^-1/2": (-0.5, 0.0),
    "W_Q, W_K * d_k^-1/4": (-0.25, -0.25),
    "W_Q * d_k^-1/4 only": (-0.25, 0.0),
}


def _fold_setup(key: jax.Array, config: CompanionConfig) -> tuple[jax.Array, ...]:
    """Tokens ``x ~ N(0, I)``, weights ``W ~ N(0, 1/d_model)`` and a regression target."""
    kx, kq, kk, kv, ky = jax.random.split(key, 5)
    shape = (config.d_model, config.d_k)
    std = 1.0 / math.sqrt(config.d_model)
    x = jax.random.normal(kx, (config.fold_tokens, config.d_model))
    w_q, w_k, w_v = (std * jax.random.normal(k, shape) for k in (kq, kk, kv))
    y = jax.random.normal(ky, (config.fold_tokens, config.d_k))
    return x, w_q, w_k, w_v, y


def fold_measurements(config: CompanionConfig) -> dict[str, np.ndarray]:
    """Claim 3 on ``fold_setups`` random setups: per fold, the relative logit difference
    ``max |z_fold - z| / max |z|``, the ratio ``|grad_W' L| / |grad_W_Q L|`` and the ratio
    of first-order logit changes under one SGD step on ``W_Q`` alone.

    ``L = mean((softmax(scale q k^T) v - y)^2)`` with ``q, k, v = x W_Q, x W_K, x W_V``.
    """
    scale = 1.0 / math.sqrt(config.d_k)

    def logits(w_q, w_k, x, s):
        return attention_logits(x @ w_q, x @ w_k, scale=s)

    def loss(w_q, w_k, x, w_v, y, s):
        return jnp.mean((dot_product_attention(x @ w_q, x @ w_k, x @ w_v, scale=s) - y) ** 2)

    def sgd_logit_change(w_q, w_k, x, w_v, y, s):
        """``|J_WQ (grad_WQ L)|``: the first-order logit change of a unit-rate SGD step."""
        grad = jax.grad(loss)(w_q, w_k, x, w_v, y, s)
        return grad, jax.jvp(lambda w: logits(w, w_k, x, s), (w_q,), (grad,))[1]

    @jax.jit
    def measure(key: jax.Array) -> dict[str, jax.Array]:
        x, w_q, w_k, w_v, y = _fold_setup(key, config)
        z = logits(w_q, w_k, x, scale)
        grad, dz = sgd_logit_change(w_q, w_k, x, w_v, y, scale)
        out = {}
        for name, (power_q, power_k) in FOLDS.items():
            f_q, f_k = w_q * config.d_k**power_q, w_k * config.d_k**power_k
            z_f = logits(f_q, f_k, x, 1.0)
            grad_f, dz_f = sgd_logit_change(f_q, f_k, x, w_v, y, 1.0)
            out[f"{name}/logit_rel_diff"] = jnp.max(jnp.abs(z_f - z)) / jnp.max(jnp.abs(z))
            out[f"{name}/grad_ratio"] = jnp.linalg.norm(grad_f) / jnp.linalg.norm(grad)
            out[f"{name}/sgd_logit_change_ratio"] = jnp.linalg.norm(dz_f) / jnp.linalg.norm(dz)
        return out

    fold_key = _root_keys(config.seed)[1]
    results = [measure(jax.random.fold_in(fold_key, s)) for s in range(config.fold_setups)]
    return {k: np.asarray([r[k] for r in results], np.float64) for k in results[0]}


def fold_rows(config: CompanionConfig, measured: dict[str, np.ndarray]) -> list[dict]:
    """Claim 3 rows: mean over setups with its SEM, against the derivation."""
    rows = []
    setting = f"d_model = {config.d_model}, d_k = {config.d_k}, {config.fold_setups} setups"
    for name, (power_q, _) in FOLDS.items():
        identical = name != "W_Q * d_k^-1/4 only"
        predicted = {
            "logit_rel_diff": 0.0 if identical else config.d_k**0.25 - 1.0,
            "grad_ratio": config.d_k ** (-power_q) if identical else np.nan,
            "sgd_logit_change_ratio": config.d_k ** (-2 * power_q) if identical else np.nan,
        }
        for quantity, value in predicted.items():
            rows.append(
                _row(
                    FOLDING,
                    f"{quantity} [{name}]",
                    setting,
                    *mean_and_sem(measured[f"{name}/{quantity}"]),
                    predicted=value,
                )
            )
    return rows


#: Bytes per softmax row of claims 1-2 beside its chunk: its key, its twelve statistics
#: (float32) and ``mean_and_sem``'s float64 copies of one of them (2 x 8).
TRIAL_BYTES = KEY_BYTES + 12 * FLOAT32_BYTES + 16
#: Bytes per setup of claim 3: nine measurements kept as JAX arrays until the end, each
#: an object of about a kilobyte on the host.
FOLD_SETUP_BYTES = 9 * 1024


def companion_needs(config: CompanionConfig) -> list[Need]:
    """Experiment 08's largest allocations (``attnlab.harness.memory``):

    * claims 1-2, the rows: ``trials * TRIAL_BYTES``;
    * claims 1-2, one chunk: ``max(CHUNK_ELEMENTS, n_keys (d_k + 6)) * 4 * DRAW_COPIES``
      (fixed: no flag sets n_keys or d_k);
    * claim 3: ``fold_setups * FOLD_SETUP_BYTES``.
    """
    default = CompanionConfig()
    chunk = max(CHUNK_ELEMENTS, config.n_keys * (config.d_k + 6))
    return [
        Need(
            product(config.trials, TRIAL_BYTES),
            "the statistics of every softmax row",
            (size("--trials", config.trials, default.trials),),
        ),
        Need(product(chunk, FLOAT32_BYTES, DRAW_COPIES), "one chunk of keys and logits", ()),
        Need(
            product(config.fold_setups, FOLD_SETUP_BYTES),
            "the measurements of every fold setup",
            (size("--fold-setups", config.fold_setups, default.fold_setups),),
        ),
    ]


def run_companion(
    config: CompanionConfig, on_progress: Callable[[int], None] | None = None
) -> pd.DataFrame:
    """All three claims as one long table; columns ``COLUMNS``. ``predicted`` is our
    derivation (NaN where there is none); the article's numbers live in
    ``attnlab.studies.companion.study.CLAIMS``."""
    stats = row_statistics(config, on_progress)
    rows = top_logit_rows(config, stats) + model_width_rows(config, stats)
    rows += fold_rows(config, fold_measurements(config))
    return pd.DataFrame(rows, columns=list(COLUMNS))

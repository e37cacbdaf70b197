"""The card's readings of a trained model: who owns the temperature, and static drift.

Both read the models of the card's training section (04's task) on each seed's held-out
sequences (``held_out_batches``), at step 0 and after training:

- *ownership* (``trained_frames``' first table): the elasticity
  ``e(alpha) = d ln s / d ln alpha`` of the logits' scale ``s`` to ``q, k -> alpha q, alpha k``
  (``attnlab.core.elasticity``), with q and k as they leave the projections and the
  mechanism's scalars as trained, at every ``alpha`` of ``ALPHAS``; 2 where the weights own
  the temperature, 0 where the mechanism does, falling from 2 under a cap
  (``verdicts.owner_words`` names the owner).
- *static drift* (``trained_frames``' second table): the trained model with ``W_Q, W_K``
  (and ``b_Q, b_K``) multiplied by ``alpha`` of ``DRIFT_ALPHAS``, everything else fixed (the
  weight-norm growth of long runs): held-out loss, accuracy, attention entropy (of the
  normalised row ``p / sum p``, nats), max weight and the attention logits' scale
  ``logit_std`` (``attnlab.core.elasticity.logit_scale`` of the logits the mechanism
  computes: the root mean square over rows of their within-row std), which grows as
  ``alpha^2`` where the weights own the temperature and stays where the mechanism does;
  and the attention sink: the weight on the first slot (``first_weight``; the slots come
  in random order, so no slot can be a sink: ``1/pairs`` on average for a row that ignores
  the order) and on nothing (``null_weight``, ``1 - sum_j p_j``: a learned sink's share).

Means and standard errors over seeds; a seed whose training diverged is left out (``seeds``
counts the rest).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd

from attnlab.core.elasticity import logit_elasticity, logit_scale
from attnlab.core.estimates import mean_and_sem
from attnlab.core.mechanism import Mechanism
from attnlab.core.owner import ALPHAS
from attnlab.core.softmax_stats import entropy, first_key_weight, max_weight, null_weight
from attnlab.recall.config import RecallConfig, make_model
from attnlab.recall.model import QUERY_KEY_PARAMS, RecallModel
from attnlab.recall.step import held_out_batches
from attnlab.recall.task import Batch
from attnlab.recall.trainer import TrainResult

#: The multipliers of W_Q and W_K of the static drift (4: the verdict's).
DRIFT_ALPHAS: tuple[float, ...] = (1.0, math.sqrt(2.0), 2.0, 4.0, 8.0)
#: Readings of the static-drift table, in its column order.
DRIFT_READINGS = ("loss", "accuracy", "entropy", "max_weight", "logit_std", "first_weight",
                  "null_weight")  # fmt: skip


def _forward(model: RecallModel, params: dict, batch: Batch) -> dict[str, jax.Array]:
    """The value logits, the attention weights, q and k as they leave the projections, and
    the attention logits ``z`` as the mechanism computes them (``[B, pairs]``, sown)."""
    (logits, p), state = model.apply({"params": params}, batch, mutable=["intermediates"])
    sown = {name: values[0] for name, values in state["intermediates"].items()}
    return {"logits": logits, "weights": p, "q": sown["q"], "k": sown["k"], "z": sown["logits"]}


@cache
def _drift_program(model: RecallModel):
    """``DRIFT_READINGS`` of ``params`` with the projections times ``alpha``."""

    def readings(params: dict, batch: Batch, alpha: jax.Array) -> jax.Array:
        params = {n: (v * alpha if n in QUERY_KEY_PARAMS else v) for n, v in params.items()}
        out = _forward(model, params, batch)
        loss = optax.softmax_cross_entropy_with_integer_labels(out["logits"], batch.target)
        p = out["weights"]
        mass = jnp.sum(p, axis=-1, keepdims=True)
        normalised = p / jnp.where(mass > 0, mass, 1.0)
        return jnp.stack(
            [
                jnp.mean(loss),
                jnp.mean(jnp.argmax(out["logits"], -1) == batch.target),
                jnp.mean(entropy(normalised)),
                jnp.mean(max_weight(p)),
                logit_scale(out["z"]),  # every slot allowed: the recall model masks none
                first_key_weight(p),  # slot 0's: the slots are in random order
                jnp.mean(null_weight(p[:, None, :])),
            ]
        )

    return jax.jit(readings)


@cache
def _elasticity_program(model: RecallModel):
    """The elasticity of ``params``' logits at ``ALPHAS``, q and k from the projections and
    the mechanism's scalars as in ``params``."""
    mechanism: Mechanism = model.mechanism

    def elasticity(params: dict, batch: Batch) -> jax.Array:
        out = _forward(model, params, batch)
        theta = dict(mechanism.constant_values(model.d_k))
        theta.update({n: params[n] for n in mechanism.param_values(model.d_k)})
        return logit_elasticity(mechanism, out["q"], out["k"], ALPHAS, theta)

    return jax.jit(elasticity)


def _seed_params(result: TrainResult, i: int) -> dict:
    return jax.tree.map(lambda x: x[i], result.state.params)


def _finite(params: dict) -> bool:
    return all(bool(np.isfinite(np.asarray(x)).all()) for x in jax.tree.leaves(params))


def _summaries(name: str, values: list[np.ndarray], columns: Sequence[str]) -> dict:
    """``<column>_mean``, ``_sem`` over seeds of ``values`` (one array per seed)."""
    row: dict = {"mechanism": name, "seeds": len(values)}
    for j, column in enumerate(columns):
        column_values = np.array([v[j] for v in values])
        mean, sem = mean_and_sem(column_values) if len(values) > 1 else (np.nan, np.nan)
        if len(values) == 1:
            mean = column_values[0]
        row[f"{column}_mean"], row[f"{column}_sem"] = float(mean), float(sem)
    return row


def trained_frames(
    config: RecallConfig,
    mechanisms: Sequence[Mechanism],
    initial: Sequence[TrainResult | dict],
    results: Sequence[TrainResult],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(ownership, drift)``: ``ownership`` one row per (mechanism, stage init/trained,
    alpha) with ``elasticity_mean, _sem``; ``drift`` one row per (mechanism, alpha) with
    ``DRIFT_READINGS``' means and SEs. ``initial[m]``: mechanism m's step-0 parameters
    stacked over seeds; ``results[m]``: its training."""
    held_out = held_out_batches(config)
    ownership_rows, drift_rows = [], []
    for mechanism, start, result in zip(mechanisms, initial, results, strict=True):
        model = make_model(config, mechanism)
        elasticity = _elasticity_program(model)
        drift = _drift_program(model)
        batches = [jax.tree.map(lambda x, i=i: x[i], held_out) for i in range(config.seeds)]
        stages = {"init": [], "trained": []}
        per_alpha: dict[float, list] = {a: [] for a in DRIFT_ALPHAS}
        for i, batch in enumerate(batches):
            trained = _seed_params(result, i)
            step0 = jax.tree.map(lambda x, i=i: x[i], start)
            stages["init"].append(np.asarray(elasticity(step0, batch)))
            if not _finite(trained):
                continue
            stages["trained"].append(np.asarray(elasticity(trained, batch)))
            for alpha in DRIFT_ALPHAS:
                per_alpha[alpha].append(np.asarray(drift(trained, batch, jnp.float32(alpha))))
        for stage, values in stages.items():
            for j, alpha in enumerate(ALPHAS):
                row = _summaries(mechanism.name, [v[j : j + 1] for v in values], ["elasticity"])
                ownership_rows.append({**row, "stage": stage, "alpha": alpha})
        for alpha, values in per_alpha.items():
            drift_rows.append({**_summaries(mechanism.name, values, DRIFT_READINGS),
                               "alpha": alpha})  # fmt: skip
    ownership = pd.DataFrame(ownership_rows)
    ownership = ownership[
        ["mechanism", "stage", "alpha", "seeds", "elasticity_mean", "elasticity_sem"]
    ]
    columns = [f"{c}_{s}" for c in DRIFT_READINGS for s in ("mean", "sem")]
    return ownership, pd.DataFrame(drift_rows)[["mechanism", "alpha", "seeds", *columns]]

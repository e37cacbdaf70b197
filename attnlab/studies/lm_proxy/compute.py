"""Experiment 14's computation: the learning-rate sweep of a byte-level causal LM per
mechanism and width (``attnlab.training.tasks.lm``), its tables, and who owns the attention
temperature in the trained weights at the best rate and at ``DRIFT_FACTOR`` times it.

Each (mechanism, width) is one ``Piece`` (``attnlab.harness.workers``): its rates and seeds
are lanes of one compiled program, and its tables do not depend on how many workers run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cache

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.mechanism import Mechanism, causal_context
from attnlab.core.owner import owner
from attnlab.core.ownership import logit_elasticity, logit_scale
from attnlab.core.references import load_mechanism
from attnlab.harness.workers import Piece, Progress
from attnlab.models.causal_lm import CausalLM, causal_mask
from attnlab.studies.lm_proxy.checkpoints import Saved, best_model
from attnlab.studies.lm_proxy.study import (
    DRIFT_FACTOR,
    LRS,
    ONE_WIDTH,
    ONE_WIDTH_D_MODEL,
    RECORD_EVERY,
    SWEPT,
    WIDTHS,
)
from attnlab.training.tasks.lm import LMConfig, Split, SweepResult, split_text, train_lanes

#: The q, k multipliers the ownership table reads the elasticity at.
OWNERSHIP_ALPHAS = (1.0, 8.0)
#: Held-out windows the ownership is read on (bilinear logits give 2 on any rows).
OWNERSHIP_WINDOWS = 4


@dataclass(frozen=True)
class ProxyConfig:
    """The sweep: ``swept`` at every width of ``widths``, ``one_width`` at
    ``one_width_d_model``, each at every rate of ``lrs`` on ``seeds`` seeds from ``seed``;
    ``lm`` the rest of the set-up (its ``d_model`` replaced by each width)."""

    lm: LMConfig = field(default_factory=LMConfig)
    widths: tuple[int, ...] = WIDTHS
    swept: tuple[str, ...] = SWEPT
    one_width: tuple[str, ...] = ONE_WIDTH
    one_width_d_model: int = ONE_WIDTH_D_MODEL
    lrs: tuple[float, ...] = LRS
    seeds: int = 1
    seed: int = 0

    @property
    def seed_values(self) -> tuple[int, ...]:
        return tuple(range(self.seed, self.seed + self.seeds))

    def cells(self) -> list[tuple[str, int]]:
        """Every (mechanism reference, d_model) swept, in table order."""
        cells = [(m, d) for m in self.swept for d in self.widths]
        return cells + [(m, self.one_width_d_model) for m in self.one_width if m not in self.swept]

    def width(self, d_model: int) -> LMConfig:
        return replace(self.lm, d_model=d_model)


def cost(config: ProxyConfig, d_model: int) -> float:
    """A piece's expected cost, in lane-steps of d_model 64 (parameters grow as d^2)."""
    lanes = len(config.lrs) * config.seeds
    return lanes * config.lm.steps * (d_model / 64) ** 2


def pieces(config: ProxyConfig, tokens: np.ndarray) -> list[Piece]:
    """One piece per cell; its units are its lane-steps (the progress bar's)."""
    units = len(config.lrs) * config.seeds * config.lm.steps
    return [
        Piece(sweep_cell, (config, reference, d, tokens), units, cost(config, d))
        for reference, d in config.cells()
    ]


def sweep_cell(
    config: ProxyConfig, reference: str, d_model: int, tokens: np.ndarray, on_progress: Progress
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, Saved | None]:
    """One cell's rows of the sweep, curves and ownership tables, and at
    ``one_width_d_model`` with learned positions its model at the best rate (``Saved``)."""
    mechanism = load_mechanism(reference)
    lm = config.width(d_model)
    split = split_text(tokens, lm)
    result = train_lanes(lm, mechanism, list(config.lrs), list(config.seed_values), split,
                         on_progress)  # fmt: skip
    sweep = sweep_rows(result)
    saved = None
    if d_model == config.one_width_d_model and lm.positions == "learned":
        saved = best_model(result, best_lane_rates(sweep)[0], mechanism, reference)
    return sweep, curve_rows(result), ownership_rows(result, sweep, split, mechanism), saved


def sweep_rows(result: SweepResult) -> pd.DataFrame:
    """One row per lane: held-out loss (mean and SE over windows) at step 0 and at the end,
    the output logits' variance at step 0, the largest attention logit per layer over
    training, the final entropy and q, k norms of layer 0, the first non-finite step."""
    lm = result.config
    windows = result.initial_loss.shape[1]
    metrics = result.metrics
    final = metrics["loss"].shape[1] // 10 or 1  # the last tenth of the steps
    frame = pd.DataFrame({
        "mechanism": result.mechanism,
        "d_model": lm.d_model,
        "lr": result.lrs,
        "seed": result.seeds,
        "n_layers": lm.n_layers,
        "n_heads": lm.n_heads,
        "initial_val_loss": result.initial_loss.mean(axis=1),
        "initial_val_loss_se": result.initial_loss.std(axis=1, ddof=1) / math.sqrt(windows),
        "initial_logit_var": result.initial_logit_var,
        "final_val_loss": result.final_loss.mean(axis=1),
        "final_val_loss_se": result.final_loss.std(axis=1, ddof=1) / math.sqrt(windows),
    })  # fmt: skip
    for layer in range(lm.n_layers):
        frame[f"max_attn_logit_layer{layer}"] = _nanmax(metrics["max_logit"][:, :, layer])
    frame["final_entropy_layer0"] = np.mean(metrics["entropy"][:, -final:, 0], axis=1)
    frame["final_q_norm_layer0"] = np.mean(metrics["q_norm"][:, -final:, 0], axis=1)
    frame["final_k_norm_layer0"] = np.mean(metrics["k_norm"][:, -final:, 0], axis=1)
    frame["diverged_step"] = result.diverged_step
    return frame


def _nanmax(values: np.ndarray) -> np.ndarray:
    """Largest finite value per row (inf if a value overflowed, NaN if none is finite)."""
    finite = np.where(np.isnan(values), -np.inf, values)
    out = finite.max(axis=1)
    return np.where(np.isneginf(out), np.nan, out)


def curve_rows(result: SweepResult) -> pd.DataFrame:
    """Every ``RECORD_EVERY``-th step of every lane and layer: training loss, max logit,
    entropy, q and k norms."""
    metrics = result.metrics
    steps = np.arange(0, metrics["loss"].shape[1], RECORD_EVERY)
    frames = []
    for lane in range(len(result.lrs)):
        for layer in range(result.config.n_layers):
            frames.append(pd.DataFrame({
                "mechanism": result.mechanism,
                "d_model": result.config.d_model,
                "lr": result.lrs[lane],
                "seed": result.seeds[lane],
                "layer": layer,
                "step": steps,
                "train_loss": metrics["loss"][lane, steps],
                **{k: metrics[k][lane, steps, layer]
                   for k in ("max_logit", "entropy", "q_norm", "k_norm")},
            }))  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def best_lane_rates(sweep: pd.DataFrame) -> tuple[float, float | None]:
    """The rate of the lowest mean held-out loss (non-finite counts as worst), and the swept
    rate ``DRIFT_FACTOR`` times it (None if the grid has none)."""
    by_rate = sweep.groupby("lr").final_val_loss.mean().fillna(np.inf)
    best = float(by_rate.idxmin())
    drifted = [r for r in by_rate.index if math.isclose(r, DRIFT_FACTOR * best, rel_tol=1e-6)]
    return best, (float(drifted[0]) if drifted else None)


def ownership_rows(
    result: SweepResult, sweep: pd.DataFrame, split: Split, mechanism: Mechanism
) -> pd.DataFrame:
    """Per seed, layer and head, at the best rate (``weights="best"``) and at
    ``DRIFT_FACTOR`` times it (``"drifted"``): the logit scale (within-row std of the
    logits, ``logit_scale``) and the ownership elasticity at ``OWNERSHIP_ALPHAS``, on the
    first ``OWNERSHIP_WINDOWS`` held-out windows, with the owner it names."""
    lm = result.config
    windows = jnp.asarray(split.held_out[:OWNERSHIP_WINDOWS, :-1])
    constants = mechanism.constant_values(lm.d_head)
    program = _ownership_program(lm.model(mechanism))
    best, drifted = best_lane_rates(sweep)
    rows = []
    for role, rate in (("best", best), ("drifted", drifted)):
        if rate is None:
            continue
        for lane in np.flatnonzero(np.isclose(result.lrs, rate)):
            params = jax.tree.map(lambda x, i=lane: x[i], result.params)
            scale, e = (np.asarray(x, float) for x in program(params, windows, constants))
            for layer, head in np.ndindex(scale.shape):
                rows.append({
                    "mechanism": result.mechanism, "d_model": lm.d_model,
                    "seed": int(result.seeds[lane]), "weights": role, "layer": layer,
                    "head": head, "lr": float(rate), "logit_scale": scale[layer, head],
                    "elasticity_1": e[layer, head, 0], "elasticity_8": e[layer, head, 1],
                    "owner": owner(e[layer, head, 0]),
                })  # fmt: skip
    return pd.DataFrame(rows)


@cache
def _ownership_program(model: CausalLM):
    """``(params, windows, constants) -> (scale [L, H], elasticity [L, H, alphas])``: per
    layer and head, the logits' within-row spread and the ownership elasticity of the
    mechanism on that layer's q and k (its learned scalars as trained), causal mask."""
    mechanism = model.mechanism
    causal = causal_mask(model.max_length)
    heads = causal_context(model.max_length, model.n_heads)

    def head(q, k, index, own, theta):
        context = heads._replace(head=index)
        theta = {**theta, **own}
        z, _, mask = mechanism.attend(q, k, theta, causal, context)
        e = logit_elasticity(mechanism, q, k, OWNERSHIP_ALPHAS, theta, causal, context)
        return logit_scale(z, mask), e

    def run(params, windows, constants):
        _, state = model.apply({"params": params}, windows, constants,
                               mutable=["intermediates"])  # fmt: skip
        scales, elasticities = [], []
        for layer in range(model.n_layers):
            found = state["intermediates"][f"h_{layer}"]["attn"]
            q, k = found["q"][0], found["k"][0]  # [W, H, T, d_h]
            learned = params[f"h_{layer}"]["attn"]
            shared = {n: learned[n] for n, _ in mechanism.params if n not in mechanism.per_head}
            own = {n: learned[n] for n in mechanism.per_head}  # [H] each
            index = jnp.arange(model.n_heads)
            s, e = jax.vmap(head, in_axes=(1, 1, 0, 0, None))(q, k, index, own,
                                                            {**constants, **shared})  # fmt: skip
            scales.append(s)
            elasticities.append(e)
        return jnp.stack(scales), jnp.stack(elasticities)

    return jax.jit(run)


def tables(
    results: list[tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, Saved | None]],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[Saved]]:
    """The pieces' rows joined: the sweep, curves and ownership tables; the saved models."""
    *frames, saved = zip(*results, strict=True)
    joined = (pd.concat(part, ignore_index=True) for part in frames)
    return (*joined, [s for s in saved if s is not None])

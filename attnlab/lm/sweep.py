"""The tables of a language model's learning-rate sweep, from its trained lanes
(``attnlab.lm.train.SweepResult``): one row per lane (``sweep_rows``), the curves
(``curve_rows``), who owns the attention temperature in the trained weights at the best rate
and at a multiple of it (``ownership_rows``), and the held-out loss of the best rate's
model at longer sequences than it was trained on (``length_rows``). Experiment 14 and the
card's language-model task write them alike.
"""

from __future__ import annotations

import math
from functools import cache

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.context import causal_context
from attnlab.core.elasticity import logit_elasticity, logit_scale
from attnlab.core.mechanism import Mechanism
from attnlab.core.owner import owner
from attnlab.core.softmax_stats import SINK_THRESHOLD, first_key_weight, null_weight
from attnlab.lm.loss import held_out_loss
from attnlab.lm.model import CausalLM, causal_mask
from attnlab.lm.sweep_tables import best_lane_rates
from attnlab.lm.train import LAYER_CLIP_METRICS, Split, SweepResult, held_out_windows

#: The q, k multipliers the ownership table reads the elasticity at.
OWNERSHIP_ALPHAS = (1.0, 8.0)
#: Held-out windows the ownership is read on (bilinear logits give 2 on any rows).
OWNERSHIP_WINDOWS = 4


def sweep_rows(result: SweepResult) -> pd.DataFrame:
    """One row per lane: held-out loss (mean and SE over windows) at step 0 and at the end,
    the output logits' variance at step 0, the largest attention logit per layer over
    training, the final entropy and q, k norms of layer 0, the first non-finite step; with
    QK-Clip, the fraction of heads it clipped in the first and the last quarter of the
    steps, and in the last quarter per layer."""
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
    if "clip_fraction" in metrics:  # QK-Clip: how often it fired, first and last quarter
        quarter = max(metrics["clip_fraction"].shape[1] // 4, 1)
        for name, part in (("first", slice(0, quarter)), ("last", slice(-quarter, None))):
            frame[f"clip_fraction_{name}_quarter"] = np.mean(
                metrics["clip_fraction"][:, part, :], axis=(1, 2)
            )
        for layer in range(lm.n_layers):  # the card's owner: where the clip still fires
            frame[f"clip_fraction_last_quarter_layer{layer}"] = np.mean(
                metrics["clip_fraction"][:, -quarter:, layer], axis=1
            )
    frame["diverged_step"] = result.diverged_step
    return frame


def _nanmax(values: np.ndarray) -> np.ndarray:
    """Largest finite value per row (inf if a value overflowed, NaN if none is finite)."""
    finite = np.where(np.isnan(values), -np.inf, values)
    out = finite.max(axis=1)
    return np.where(np.isneginf(out), np.nan, out)


def curve_rows(result: SweepResult, record_every: int) -> pd.DataFrame:
    """Every ``record_every``-th step of every lane and layer: training loss, max logit,
    entropy, q and k norms, and with QK-Clip the largest signed logit and the fraction of
    heads clipped (``LAYER_CLIP_METRICS``)."""
    metrics = result.metrics
    steps = np.arange(0, metrics["loss"].shape[1], record_every)
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
                   for k in ("max_logit", "entropy", "q_norm", "k_norm", *LAYER_CLIP_METRICS)
                   if k in metrics},
            }))  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def ownership_rows(
    result: SweepResult,
    sweep: pd.DataFrame,
    split: Split,
    mechanism: Mechanism,
    drift_factor: float,
) -> pd.DataFrame:
    """Per seed, layer and head, at the best rate (``weights="best"``) and at
    ``drift_factor`` times it (``"drifted"``, ``best_lane_rates``): the logit scale
    (within-row std of the logits, ``logit_scale``) and the ownership elasticity at
    ``OWNERSHIP_ALPHAS``, on the first ``OWNERSHIP_WINDOWS`` held-out windows, with the owner
    it names; and the attention sink there: the mean weight on the first position
    (``first_key_weight``, Gu et al.'s alpha_1), whether it exceeds ``SINK_THRESHOLD``
    (``sink_head``), and the weight on nothing (``null_weight``: a learned sink's)."""
    lm = result.config
    windows = jnp.asarray(split.held_out[:OWNERSHIP_WINDOWS, :-1])
    constants = mechanism.constant_values(lm.d_head)
    program = ownership_program(lm.model(mechanism))
    best, drifted = best_lane_rates(sweep, drift_factor)
    rows = []
    for role, rate in (("best", best), ("drifted", drifted)):
        if rate is None:
            continue
        for lane in np.flatnonzero(np.isclose(result.lrs, rate)):
            params = jax.tree.map(lambda x, i=lane: x[i], result.params)
            scale, e, first, null = (np.asarray(x, float)
                                     for x in program(params, windows, constants))  # fmt: skip
            for layer, head in np.ndindex(scale.shape):
                rows.append({
                    "mechanism": result.mechanism, "d_model": lm.d_model,
                    "seed": int(result.seeds[lane]), "weights": role, "layer": layer,
                    "head": head, "lr": float(rate), "logit_scale": scale[layer, head],
                    "elasticity_1": e[layer, head, 0], "elasticity_8": e[layer, head, 1],
                    "owner": owner(e[layer, head, 0]),
                    "first_weight": first[layer, head], "null_weight": null[layer, head],
                    "sink_head": bool(first[layer, head] > SINK_THRESHOLD),
                })  # fmt: skip
    return pd.DataFrame(rows)


@cache
def ownership_program(model: CausalLM):
    """``(params, windows, constants) -> (scale [L, H], elasticity [L, H, alphas], first
    [L, H], null [L, H])``: per layer and head, the logits' within-row spread, the ownership
    elasticity of the mechanism on that layer's q and k (its learned scalars as trained),
    causal mask, and the weights' mean on the first position and on nothing (over windows
    and queries)."""
    mechanism = model.mechanism
    causal = causal_mask(model.max_length)
    heads = causal_context(model.max_length, model.n_heads)

    def head(q, k, index, own, theta):
        context = heads._replace(head=index)
        theta = {**theta, **own}
        z, p, mask = mechanism.attend(q, k, theta, causal, context)
        e = logit_elasticity(mechanism, q, k, OWNERSHIP_ALPHAS, theta, causal, context)
        return logit_scale(z, mask), e, jnp.mean(first_key_weight(p)), jnp.mean(null_weight(p))

    def run(params, windows, constants):
        _, state = model.apply({"params": params}, windows, constants,
                               mutable=["intermediates"])  # fmt: skip
        per_layer = []
        for layer in range(model.n_layers):
            found = state["intermediates"][f"h_{layer}"]["attn"]
            q, k = found["q"][0], found["k"][0]  # [W, H, T, d_h]
            learned = params[f"h_{layer}"]["attn"]
            shared = {n: learned[n] for n, _ in mechanism.params if n not in mechanism.per_head}
            own = {n: learned[n] for n in mechanism.per_head}  # [H] each
            index = jnp.arange(model.n_heads)
            per_layer.append(jax.vmap(head, in_axes=(1, 1, 0, 0, None))(
                q, k, index, own, {**constants, **shared}))  # fmt: skip
        return tuple(jnp.stack(x) for x in zip(*per_layer, strict=True))

    return jax.jit(run)


def length_rows(
    result: SweepResult, rate: float, split: Split, mechanism: Mechanism, factors
) -> pd.DataFrame:
    """Per seed of the lanes at ``rate`` and per factor ``f`` of ``factors``: the held-out
    loss (nats per byte, mean and SE over windows) of the trained model on sequences of
    ``f`` times its training length, every position counted (Press et al. 2022's
    extrapolation), on the held-out part's disjoint windows (at most ``eval_windows``;
    ``held_out_windows``). Empty for a model with learned positions, which cannot read past
    its table."""
    lm = result.config
    if lm.positions == "learned":
        return pd.DataFrame()
    program = _length_program(lm.model(mechanism))
    constants = mechanism.constant_values(lm.d_head)
    rows = []
    for lane in np.flatnonzero(np.isclose(result.lrs, rate)):
        params = jax.tree.map(lambda x, i=lane: x[i], result.params)
        for factor in factors:
            window = factor * lm.seq_len + 1
            count = min(lm.eval_windows, len(split.rest) // window)
            windows = held_out_windows(split.rest, window, count)
            losses = np.asarray(program(params, jnp.asarray(windows), constants), float)
            rows.append({
                "mechanism": result.mechanism, "d_model": lm.d_model,
                "seed": int(result.seeds[lane]), "lr": float(rate),
                "positions": lm.positions, "factor": int(factor),
                "length": factor * lm.seq_len, "windows": count,
                "loss": losses.mean(), "loss_se": losses.std(ddof=1) / math.sqrt(count),
            })  # fmt: skip
    return pd.DataFrame(rows)


@cache
def _length_program(model: CausalLM):
    """``(params, windows, constants) -> per-window held-out loss``, any window length."""
    return jax.jit(lambda params, windows, constants: held_out_loss(model, params, windows,
                                                                    constants)[0])  # fmt: skip

"""Experiment 13 on a causal checkpoint (a decoder family of ``attnlab.models.registry``):
the same tables as for the encoder, with causal rows and the model's own mechanism.

Rows of text are ``T`` tokens: the tokenizer's opening special tokens (a BOS where the
model's tokenizer adds one, as its users read it; none for GPT-2's), then consecutive tokens
of the text. Query ``i`` of a row attends to keys ``0 .. i`` (a sliding layer: the last
``W`` of them), so each attention row has its own length ``n_i``; the statistics
of a head are taken over every row with ``n_i >= 2`` (the first query, with one key, has no
spread): with ``z`` the row's logits over its ``n_i`` keys (the mechanism's, as trained) and
``p`` its weights, the std of ``z``, ``max p``, ``entropy(p) / ln n_i``, the Jacobian norm and
the saturated share; ``|q|`` and ``|k|`` per token as the projections give them; ``sigma`` of
``W_Q,h W_K,h^T / sqrt(d)``; and the ownership elasticity of the mechanism's logits' scale
under ``q, k -> alpha q, alpha k`` as attention sees them (causal mask; after any q/k norm:
the norm's gains' handle), and ``elasticity_w``, under the layer's own ``W_q, W_k -> w W_q,
w W_k`` at ``w = 1`` (before the norm), from which the owner is named
(``attnlab.core.owner.owner_before_norm``: under QK-norm the gains, not the weights). The
static drift's effect is measured on the model's output as the next-token loss (nats per
token) and the share of positions whose top-1 prediction is unchanged, where the encoder's
tables give the embedding cosine.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.attention import weighted_values
from attnlab.core.context import causal_context
from attnlab.core.elasticity import logit_elasticity, logit_scale
from attnlab.core.owner import ALPHAS, owner_before_norm
from attnlab.core.softmax_stats import entropy, jacobian_frobenius_norm, max_weight
from attnlab.core.temperature import BUILTINS
from attnlab.models.files import Checkpoint
from attnlab.models.layers import next_token_loss
from attnlab.models.registry import Family, family_of
from attnlab.studies.real_model.compute import (
    ROW_SHARES,
    ROW_STATS,
    RealModelConfig,
    head_columns,
    head_sigma,
)
from attnlab.studies.real_model.ledger import LEDGER_MODEL_TYPES, ledger_frame
from attnlab.studies.real_model.study import (
    CAUSAL_COUNTERFACTUALS_CSV,
    CAUSAL_HEADS_CSV,
    CAUSAL_LAYERS_CSV,
    DRIFT_ALPHAS,
    FLOAT16_MAX,
    LEDGER_CSV,
    MODELS,
    QUANTILES,
    SATURATED_AT,
)

Array = jax.Array
Params = dict[str, Array]
#: A causal family's configuration: its ``n_layer``, ``n_head``, ``head_dim``, the
#: mechanism every head runs (``attention``) and its name (``mechanism``).
CausalConfig = Any
#: Rows of text the elasticity is read on (bilinear logits give 2 on any rows).
ELASTICITY_ROWS = 4
#: Row statistics taken over every query, the first (one key) too: the largest logits.
EVERY_ROW = ("max_logit", "max_abs_logit")
#: The next-token logits one forward of the counterfactuals may hold, in bytes: a vocabulary
#: of 262,144 (Gemma 3) makes them 1 MiB a token.
LOGITS_BYTES = 2**30


def opening_tokens(tokenizer) -> list[int]:
    """The special tokens the tokenizer puts before a text (``add_special_tokens``: a
    Llama, Gemma or GGUF tokenizer's BOS; none for GPT-2's): the model was trained on rows
    that open so."""
    encoding = tokenizer.encode("a", add_special_tokens=True)
    opening = []
    for token, special in zip(encoding.ids, encoding.special_tokens_mask, strict=True):
        if not special:
            break
        opening.append(token)
    return opening


def causal_rows(tokenizer, text: str, tokens: int, length: int) -> np.ndarray:
    """Rows ``[n, length]`` of token ids: the tokenizer's ``opening_tokens`` (a BOS, or
    none), then consecutive tokens of the first ``tokens`` of ``text``, ``n = tokens //
    (length - len(opening))``."""
    ids = np.asarray(tokenizer.encode(text, add_special_tokens=False).ids[:tokens], np.int32)
    opening = np.asarray(opening_tokens(tokenizer), np.int32)
    width = length - len(opening)
    n = len(ids) // width
    body = ids[: n * width].reshape(n, width)
    return np.concatenate([np.broadcast_to(opening, (n, len(opening))), body], axis=1)


def causal_row_statistics(z: Array, p: Array, mask: Array) -> dict[str, Array]:
    """Per attention row ``[..., T]`` of logits ``z`` and weights ``p`` ``[..., T, T]`` over
    the keys ``mask`` allows (``n`` of them): the std of ``z``, max weight, entropy / ln n
    (0 where ``n = 1``), Jacobian norm, saturated (0/1), the largest signed logit (QK-Clip's
    S) and the largest |logit|, and the weight on the first key (the sink's share: a head
    whose rows put more than ``SINK_AT`` there on average is a sink head, Gu et al. 2024;
    NaN in a row that does not see it, a sliding layer's beyond its window)."""
    mask = jnp.broadcast_to(mask, z.shape)
    n = jnp.sum(mask, axis=-1)
    mean = jnp.sum(jnp.where(mask, z, 0.0), axis=-1) / n
    var = jnp.sum(jnp.where(mask, jnp.square(z - mean[..., None]), 0.0), axis=-1) / n
    top = max_weight(p)
    return {
        "logit_std": jnp.sqrt(var),
        "max_weight": top,
        "entropy_ratio": entropy(p) / jnp.log(jnp.maximum(n, 2)),
        "jacobian_norm": jacobian_frobenius_norm(p),
        "saturated": (top >= SATURATED_AT).astype(jnp.float32),
        "max_logit": jnp.max(jnp.where(mask, z, -jnp.inf), axis=-1),
        "max_abs_logit": jnp.max(jnp.where(mask, jnp.abs(z), 0.0), axis=-1),
        "first_key_weight": jnp.where(mask[..., 0], p[..., 0], jnp.nan),
    }


def _layer(
    config: CausalConfig, q: Array, k: Array, theta: dict, allowed: Array
) -> tuple[dict, Array]:
    """One layer's row statistics ``[B, H, T - 1]`` (rows with two keys or more) under its
    mask ``allowed`` ``[T, T]``, and the mask; the largest logits (``EVERY_ROW``) over
    every row ``[B, H, T]``, the first query's one logit too (QK-Clip's S is the largest
    logit the softmax sees)."""
    T = q.shape[-2]
    z, p, mask = config.attention.attend(q, k, theta, allowed, causal_context(T, config.n_head))
    stats = causal_row_statistics(z, p, mask)
    return {n: v if n in EVERY_ROW else v[..., 1:] for n, v in stats.items()}, mask


def _elasticity(config: CausalConfig, q: Array, k: Array, theta: dict, allowed: Array) -> Array:
    """``[H, len(ALPHAS)]``: each head's elasticity of its logits' scale (mask ``allowed``)."""
    mechanism, T = config.attention, q.shape[-2]
    context = causal_context(T, config.n_head)
    own = {n: v for n, v in theta.items() if jnp.ndim(v) == 3}  # per head: [H, 1, 1]
    shared = {n: v for n, v in theta.items() if n not in own}

    def head(qh: Array, kh: Array, index: Array, mine: dict) -> Array:
        return logit_elasticity(mechanism, qh, kh, ALPHAS, {**shared, **mine}, allowed,
                                context._replace(head=index))  # fmt: skip

    return jax.vmap(head, in_axes=(1, 1, 0, 0))(q, k, jnp.arange(config.n_head), own)


def weight_elasticity(family: Family, params: Params, config: CausalConfig, ids: Array) -> Array:
    """``[n_layer, H]``: ``d ln s_lh / d ln w_l`` at ``w = 1``, ``s_lh`` the logit scale of
    layer ``l``'s head ``h`` on ``ids`` (causal mask) and ``w_l`` the layer's own
    ``W_q, W_k -> w W_q, w W_k`` (``forward``'s ``w_scale``: before any q/k norm), the
    layers below keeping their weights: the layer's own response (2 for bilinear logits,
    about 0 under a q/k norm or a normalising mechanism). One forward-mode pass for every
    layer at once: the forward holds each layer's input constant for derivatives
    (``layer_local``), so the tangent of all the ``w_l`` together reaches layer ``l``'s
    logits through its own ``w_l`` alone."""
    n_layer, T = config.n_layer, ids.shape[-1]
    context, masks = causal_context(T, config.n_head), family.masks(config, T)

    def log_scales(log_w: Array) -> Array:
        _, trace = family.forward(params, config, ids, w_scale=jnp.exp(log_w), layer_local=True)
        rows = []
        for layer in range(n_layer):
            theta = {n: v[layer] for n, v in trace.theta.items()}
            z, _, allowed = config.attention.attend(trace.q[layer], trace.k[layer], theta,
                                                    masks[layer], context)  # fmt: skip
            allowed = jnp.broadcast_to(allowed, z.shape)
            rows.append(jax.vmap(lambda zh, mh: jnp.log(logit_scale(zh, mh)),
                                 in_axes=(1, 1))(z, allowed))  # fmt: skip
        return jnp.stack(rows)

    zeros = jnp.zeros(n_layer, jnp.float32)
    return jax.jvp(log_scales, (zeros,), (jnp.ones(n_layer, jnp.float32),))[1]  # [L, H]


@functools.partial(jax.jit, static_argnums=(0, 2))
def _summarise(
    family: Family, params: Params, config: CausalConfig, ids: Array
) -> dict[str, Array]:
    """Per layer and head: each row statistic at ``QUANTILES``, the saturated share and the
    first key's (the sink's) share, the largest signed and |logit| over the rows, |q| and
    |k| at ``QUANTILES``, the elasticity at ``ALPHAS`` and ``weight_elasticity``."""
    _, trace = family.forward(params, config, ids)

    def one_layer(qkt: tuple[Array, Array, dict, Array]) -> dict[str, Array]:
        q, k, theta, allowed = qkt
        stats, _ = _layer(config, q, k, theta, allowed)
        stats |= {"q_norm": jnp.linalg.norm(q, axis=-1), "k_norm": jnp.linalg.norm(k, axis=-1)}
        out = {}
        for name, value in stats.items():
            rows = jnp.moveaxis(value, 1, 0).reshape(value.shape[1], -1)  # [heads, rows]
            if name in ROW_SHARES:  # means over the rows
                out[name] = jnp.nanmean(rows, axis=-1)  # the first key's: rows that see it
            elif name in ("max_logit", "max_abs_logit"):
                out[name] = jnp.max(rows, axis=-1)
            else:
                out[name] = jnp.quantile(rows, jnp.asarray(QUANTILES), axis=-1).T
        out["elasticity"] = _elasticity(config, q[:ELASTICITY_ROWS], k[:ELASTICITY_ROWS], theta,
                                        allowed)  # fmt: skip
        return out

    masks = family.masks(config, ids.shape[1])
    summary = jax.lax.map(one_layer, (trace.q, trace.k, trace.theta, masks))
    return summary | {"elasticity_w": weight_elasticity(family, params, config,
                                                         ids[:ELASTICITY_ROWS])}  # fmt: skip


def causal_heads_frame(
    family: Family, tensors: dict[str, np.ndarray], config: CausalConfig,
    rows: dict[int, np.ndarray], model: str, checkpoint: str,
) -> pd.DataFrame:  # fmt: skip
    """One row per (row length, layer, head) of ``model``'s statistics; ``rows`` counts the
    attention rows summarised (two keys or more)."""
    params = {name: jnp.asarray(value) for name, value in tensors.items()}
    qk = functools.partial(family.qk_weights, tensors, config)
    sigma = head_sigma(qk, config.n_layer, config.head_dim)
    records = []
    for length, ids in rows.items():
        summary = _summarise(family, params, config, jnp.asarray(ids))
        summary = jax.tree.map(np.asarray, summary)
        for layer, head in np.ndindex(config.n_layer, config.n_head):
            record = {"checkpoint": checkpoint, "mechanism": config.mechanism, "model": model,
                      "row_length": length, "layer": layer, "head": head,
                      "rows": ids.shape[0] * (length - 1)}  # fmt: skip
            columns = head_columns(summary, sigma, layer, head)
            e_w = float(summary["elasticity_w"][layer, head])
            columns.pop("owner")
            clip = {"max_signed_logit": float(summary["max_logit"][layer, head]),
                    "max_abs_logit": float(summary["max_abs_logit"][layer, head]),
                    "sink_share": float(summary["first_key_weight"][layer, head])}  # fmt: skip
            records.append({**record, **columns, **clip, "elasticity_w": e_w,
                            "owner": owner_before_norm(e_w, columns["elasticity_1"])})  # fmt: skip
    return pd.DataFrame.from_records(records)


def rows_at_once(rows: int, length: int, vocab_size: int) -> int:
    """How many rows of text one forward reads where it keeps its next-token logits
    (``rows x length x vocab_size`` float32): all of them, or as many as keep the logits
    within ``LOGITS_BYTES`` (at least one)."""
    return max(1, min(rows, LOGITS_BYTES // (4 * length * vocab_size)))


@functools.partial(jax.jit, static_argnums=(0, 2))
def _counterfactual(
    family: Family, params: Params, config: CausalConfig, ids: Array, qk_scale: Array
) -> dict:
    """The forward of ``ids`` under the drift ``qk_scale``: medians of the row statistics
    pooled over layers, heads and rows, the saturated share, per-row next-token loss and
    the predictions; rows read ``rows_at_once`` at a time (``lax.map``)."""
    masks = family.masks(config, ids.shape[1])

    def forward(rows: Array) -> tuple[dict, Array, Array]:
        logits, trace = family.forward(params, config, rows, qk_scale=qk_scale)
        stats = jax.lax.map(lambda qkt: _layer(config, *qkt)[0],
                            (trace.q, trace.k, trace.theta, masks))  # fmt: skip
        return stats, next_token_loss(logits, rows), jnp.argmax(logits, axis=-1)

    batch = rows_at_once(*ids.shape, config.vocab_size)
    if batch == ids.shape[0]:
        stats, loss, top1 = forward(ids)
    else:
        stats, loss, top1 = jax.lax.map(lambda row: forward(row[None]), ids, batch_size=batch)
    out = {name: jnp.median(stats[name]) for name in ROW_STATS}
    out["saturated"] = jnp.mean(stats["saturated"])
    out["loss"] = jnp.ravel(loss)
    out["top1"] = top1.reshape(ids.shape)
    return out


def causal_counterfactuals_frame(
    family: Family, tensors: dict[str, np.ndarray], config: CausalConfig, ids: np.ndarray,
    checkpoint: str,
) -> pd.DataFrame:  # fmt: skip
    """The trained model under the static drift ``alpha`` (``DRIFT_ALPHAS``, the first the
    model itself) and, for a scaled model, with the divisor removed (``alpha = d^(1/4)``):
    the pooled row statistics, the next-token loss and its change from the model's, and
    the share of positions whose top-1 prediction is the model's."""
    params = {name: jnp.asarray(value) for name, value in tensors.items()}
    settings = [("drift", a, a * a) for a in DRIFT_ALPHAS]
    if config.attention is BUILTINS["scaled"]:  # GPT-2's q.k / sqrt(d), not a namesake
        settings.append(("divisor removed", config.head_dim**0.25, math.sqrt(config.head_dim)))
    records, base = [], None
    for name, alpha, factor in settings:
        out = _counterfactual(family, params, config, jnp.asarray(ids), jnp.float32(alpha))
        out = jax.tree.map(np.asarray, out)
        base = out if base is None else base
        loss = float(np.mean(out["loss"]))
        records.append({
            "checkpoint": checkpoint, "counterfactual": name, "qk_scale": alpha,
            "logit_factor": factor, "row_length": ids.shape[1],
            **{f"{n}_median": float(out[n]) for n in ROW_STATS},
            "saturated_share": float(out["saturated"]),
            "next_token_loss": loss,
            "next_token_loss_change": loss - float(np.mean(base["loss"])),
            "top1_agreement": float(np.mean(out["top1"] == base["top1"])),
        })  # fmt: skip
    return pd.DataFrame.from_records(records)


@functools.partial(jax.jit, static_argnums=(0, 2))
def _float16_check(
    family: Family, params: Params, config: CausalConfig, ids: Array
) -> dict[str, Array]:
    """Per layer: the largest ``|q . k|`` over causal entries, the largest logit of the
    mechanism, and the largest error of attention from float16 q, k, v (logits from float16
    q, k; weights in float32; output float16) against float32, relative to the largest
    output, through the mechanism and unscaled (``q . k``)."""
    _, trace = family.forward(params, config, ids)
    T = ids.shape[1]
    context = causal_context(T, config.n_head)
    unscaled = BUILTINS["unscaled"]

    def attend(mechanism, q, k, v, theta, causal):
        q, k = mechanism.prepare(q, k)
        z = mechanism.scores(q, k, theta, causal, context).astype(jnp.float32)
        p = mechanism.normalise(z, causal, theta).astype(v.dtype)
        return z, weighted_values(p, v).astype(jnp.float32)

    def one_layer(qkvt: tuple) -> dict[str, Array]:
        q, k, v, theta, causal = qkvt
        raw = jnp.where(causal, jnp.einsum("...qd,...kd->...qk", q, k), 0.0)
        z, _ = attend(config.attention, q, k, v, theta, causal)
        out = {"max_abs_qk": jnp.max(jnp.abs(raw)), "max_abs_logit": jnp.max(
            jnp.where(causal, jnp.abs(z), 0.0))}  # fmt: skip
        half = [x.astype(jnp.float16) for x in (q, k, v)]
        for tag, mechanism, th in (("mechanism", config.attention, theta),
                                   ("unscaled", unscaled, {"scale": 1.0})):  # fmt: skip
            _, exact = attend(mechanism, q, k, v, th, causal)
            _, rounded = attend(mechanism, *half, th, causal)
            out[f"float16_error_{tag}"] = jnp.max(jnp.abs(rounded - exact)) / jnp.max(
                jnp.abs(exact)
            )
        return out

    masks = family.masks(config, T)
    return jax.lax.map(one_layer, (trace.q, trace.k, trace.v, trace.theta, masks))


def causal_layers_frame(
    family: Family, tensors: dict[str, np.ndarray], config: CausalConfig, ids: np.ndarray,
    checkpoint: str,
) -> pd.DataFrame:  # fmt: skip
    """One row per layer of the trained model: ``_float16_check`` beside float16's largest
    finite value."""
    params = {name: jnp.asarray(value) for name, value in tensors.items()}
    out = _float16_check(family, params, config, jnp.asarray(ids))
    out = jax.tree.map(np.asarray, out)
    return pd.DataFrame({
        "checkpoint": checkpoint,
        "mechanism": config.mechanism,
        "layer": np.arange(config.n_layer),
        "row_length": ids.shape[1],
        "max_abs_qk": out["max_abs_qk"].astype(float),
        "max_abs_logit": out["max_abs_logit"].astype(float),
        "float16_max": FLOAT16_MAX,
        "float16_error_mechanism": out["float16_error_mechanism"].astype(float),
        "float16_error_unscaled": out["float16_error_unscaled"].astype(float),
    })  # fmt: skip


def run_causal(
    config: RealModelConfig,
    checkpoints: list[Checkpoint],
    text: str,
    on_progress: Callable[[int], None] = lambda n: None,
) -> dict[str, pd.DataFrame]:
    """Every causal CSV of experiment 13 by name, each checkpoint's rows in turn (named by
    its folder), and the temperature ledger (``LEDGER_CSV``) of those of the Llama family;
    ``on_progress(1)`` after each of ``causal_progress_steps`` parts."""
    heads, counterfactuals, layers, ledgers = [], [], [], []
    for checkpoint in checkpoints:
        name, tensors, model_config = (
            checkpoint.directory.name, checkpoint.tensors, checkpoint.config
        )  # fmt: skip
        family = family_of(checkpoint)
        rows = {T: causal_rows(checkpoint.tokenizer, text, config.tokens, T)
                for T in config.lengths}  # fmt: skip
        initial = family.init(model_config, jax.random.key(config.seed))
        by_model = {}
        for model, weights in zip(MODELS, (tensors, initial), strict=True):
            by_model[model] = causal_heads_frame(family, weights, model_config, rows, model, name)
            heads.append(by_model[model])
            on_progress(1)
        ids = rows[config.counterfactual_length]
        counterfactuals.append(
            causal_counterfactuals_frame(family, tensors, model_config, ids, name)
        )
        layers.append(causal_layers_frame(family, tensors, model_config, ids, name))
        if checkpoint.model_type in LEDGER_MODEL_TYPES:
            trained = by_model[MODELS[0]]  # the checkpoint's own weights
            ledgers.append(ledger_frame(family, tensors, model_config, ids, trained, name))
        on_progress(1)
    frames = {
        CAUSAL_HEADS_CSV: pd.concat(heads, ignore_index=True),
        CAUSAL_COUNTERFACTUALS_CSV: pd.concat(counterfactuals, ignore_index=True),
        CAUSAL_LAYERS_CSV: pd.concat(layers, ignore_index=True),
    }
    if ledgers:  # Llama-family checkpoints only: GPT-2's runs write what they always did
        frames[LEDGER_CSV] = pd.concat(ledgers, ignore_index=True)
    return frames


def causal_progress_steps(checkpoints: int) -> int:
    """The parts ``run_causal`` reports: per checkpoint, two models and the trained
    model's counterfactuals with float16."""
    return 3 * checkpoints

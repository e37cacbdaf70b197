"""Experiment 13: the attention temperature of a pretrained BERT encoder, measured offline.

The checkpoint (default: all-MiniLM-L6-v2, 6 layers x 12 heads of width 32) reads English
prose cut into rows of each length ``T`` (``[CLS]``, ``T - 2`` text tokens, ``[SEP]``,
consecutive and disjoint). For every layer and head, over every attention row (query) of
every row of text, with ``z`` the row's logits and ``p = softmax(z)``:

- ``logit_std``: the std of ``z`` over the keys (1 at initialisation is what
  ``1/sqrt(d)`` aims at), ``max_weight``, ``entropy / ln T``, the softmax-Jacobian norm
  (``attnlab.core.softmax_stats``) and the share of saturated rows (max weight >= 0.5);
- what sets them: ``|q|`` and ``|k|`` per token, the spectral norm ``sigma`` of
  ``W_Q,h^T W_K,h / sqrt(d)`` (the bilinear form of the head's logits, the sigma of Zhai et
  al. 2023's entropy bound), and the card's ownership elasticity ``d ln s / d ln alpha`` of
  the logits' scale under ``q, k -> alpha q, alpha k`` (``attnlab.core.elasticity``);

each summarised by its median and 10th and 90th percentiles over rows, for the trained
weights and for the same architecture re-initialised as BERT initialises it (``bert_init``,
``N(0, 0.02)``). On the trained weights, at one row length: counterfactuals at inference
(the static drift ``q, k -> alpha q, alpha k`` and the divisor removed) with the change in
the model's output, the cosine of each row's sentence embedding to the original; and per
layer, the largest ``|q . k|`` against float16's largest finite 65504 and the error of
attention computed from float16 q, k, v.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.attention import attention_logits, dot_product_attention, masked_softmax
from attnlab.core.elasticity import logit_elasticity
from attnlab.core.owner import ALPHAS, owner
from attnlab.core.softmax_stats import entropy, jacobian_frobenius_norm, max_weight
from attnlab.core.temperature import MECHANISMS
from attnlab.core.text import TextSource
from attnlab.models.bert import (
    PACKAGE_DIST,
    BertConfig,
    Params,
    bert_init,
    encode,
    qk_weights,
    sentence_embedding,
)
from attnlab.models.files import Checkpoint
from attnlab.models.layers import Trace
from attnlab.models.ledger import spectral_norms
from attnlab.studies.real_model.study import (
    COUNTERFACTUALS_CSV,
    DRIFT_ALPHAS,
    FLOAT16_MAX,
    HEADS_CSV,
    LAYERS_CSV,
    MODELS,
    QUANTILE_TAGS,
    QUANTILES,
    SATURATED_AT,
)

Array = jax.Array
#: The elasticity is read on this many rows of text per length: for logits bilinear in
#: q and k it is 2 on any rows (``attnlab.core.elasticity``), so more rows only cost time.
ELASTICITY_ROWS = 4


@dataclass(frozen=True)
class RealModelConfig:
    """Experiment 13's settings; the defaults are the committed run.

    Attributes:
      lengths: row lengths ``T`` in tokens, ``[CLS]`` and ``[SEP]`` included.
      tokens: text tokens used, from the start of the text (each length tiles them).
      counterfactual_length: the row length of the counterfactuals and the float16 check.
      seed: the key of the re-initialised model.
    """

    lengths: tuple[int, ...] = (32, 128, 256)
    tokens: int = 5120
    counterfactual_length: int = 128
    seed: int = 0


def text_rows(checkpoint: Checkpoint, text: str, tokens: int, length: int) -> np.ndarray:
    """Rows ``[n, length]`` of token ids: ``[CLS]``, ``length - 2`` consecutive tokens of the
    first ``tokens`` of ``text``, ``[SEP]``; ``n = tokens // (length - 2)`` (no padding)."""
    tokenizer = checkpoint.tokenizer
    ids = np.asarray(tokenizer.encode(text, add_special_tokens=False).ids[:tokens], np.int32)
    body = length - 2
    n = len(ids) // body
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    rows = ids[: n * body].reshape(n, body)
    return np.concatenate(
        [np.full((n, 1), cls, np.int32), rows, np.full((n, 1), sep, np.int32)], axis=1
    )


def text_tokens(checkpoint: Checkpoint, text: str) -> int:
    """How many tokens (no special tokens) the checkpoint's tokenizer makes of ``text``."""
    return len(checkpoint.tokenizer.encode(text, add_special_tokens=False).ids)


def head_sigma(
    qk: Callable[[int], tuple[np.ndarray, np.ndarray]], layers: int, d: int
) -> np.ndarray:
    """``[layers, heads]``: the spectral norm of ``W_Q,h W_K,h^T / sqrt(d)``, the matrix
    ``A_h`` of the head's logits ``z_ij = x_i A_h x_j^T`` (biases, norms and positions
    aside), in float64, from ``qk(layer)``, the family's query and key weights per head
    (``registry.Family.qk_weights``): ``ledger.spectral_norms`` over ``sqrt(d)``."""
    return spectral_norms(qk, layers) / math.sqrt(d)


def row_statistics(q: Array, k: Array, scale: float | None = None) -> dict[str, Array]:
    """Per attention row of one layer, ``[B, heads, T]``: the logits' std over keys, max
    weight, entropy / ln T, Jacobian norm, saturated (0/1), the weight on the first key
    (``[CLS]``: the sink's share, Gu et al. 2024); per token, ``|q|`` and ``|k|``.
    ``q, k`` are ``[B, heads, T, d]``, every key attended (rows hold no padding)."""
    z = attention_logits(q, k, scale=scale)
    p = masked_softmax(z)
    T = z.shape[-1]
    top = max_weight(p)
    return {
        "logit_std": jnp.std(z, axis=-1),
        "max_weight": top,
        "entropy_ratio": entropy(p) / math.log(T),
        "jacobian_norm": jacobian_frobenius_norm(p),
        "saturated": (top >= SATURATED_AT).astype(jnp.float32),
        "first_key_weight": p[..., 0],
        "q_norm": jnp.linalg.norm(q, axis=-1),
        "k_norm": jnp.linalg.norm(k, axis=-1),
    }


def head_summary(trace: Trace) -> dict[str, Array]:
    """Each of ``row_statistics``' quantities at ``QUANTILES`` over the rows of every
    layer and head (``[layers, heads, len(QUANTILES)]``), the saturated share
    (``[layers, heads]``), and the elasticity at ``ALPHAS`` (``[layers, heads,
    len(ALPHAS)]``) on the first ``ELASTICITY_ROWS`` rows of text."""
    scaled = MECHANISMS["scaled"]
    elasticity = jax.vmap(lambda qh, kh: logit_elasticity(scaled, qh, kh, ALPHAS), (1, 1))

    def one_layer(q: Array, k: Array) -> dict[str, Array]:
        out = {}
        for name, value in row_statistics(q, k).items():
            rows = jnp.moveaxis(value, 1, 0).reshape(value.shape[1], -1)  # [heads, B T]
            if name in ROW_SHARES:
                out[name] = jnp.mean(rows, axis=-1)
            else:
                out[name] = jnp.quantile(rows, jnp.asarray(QUANTILES), axis=-1).T
        out["elasticity"] = elasticity(q[:ELASTICITY_ROWS], k[:ELASTICITY_ROWS])
        return out

    return jax.lax.map(lambda qk: one_layer(*qk), (trace.q, trace.k))


@functools.partial(jax.jit, static_argnums=1)
def _summarise(params: Params, config: BertConfig, ids: Array) -> dict[str, Array]:
    """``head_summary`` of the forward of ``ids`` (one program per row shape)."""
    return head_summary(encode(params, config, ids)[1])


def heads_frame(
    tensors: dict[str, np.ndarray], config: BertConfig, rows: dict[int, np.ndarray], model: str
) -> pd.DataFrame:
    """One row per (row length, layer, head) of ``model``'s statistics."""
    params = {name: jnp.asarray(value) for name, value in tensors.items()}
    qk = functools.partial(qk_weights, tensors, config)
    sigma = head_sigma(qk, config.num_hidden_layers, config.head_dim)
    records = []
    for length, ids in rows.items():
        summary = jax.tree.map(np.asarray, _summarise(params, config, jnp.asarray(ids)))
        for layer in range(config.num_hidden_layers):
            for head in range(config.num_attention_heads):
                record = {
                    "model": model,
                    "row_length": length,
                    "layer": layer,
                    "head": head,
                    "rows": ids.shape[0] * length,
                }
                sink = {"sink_share": float(summary["first_key_weight"][layer, head])}
                records.append({**record, **head_columns(summary, sigma, layer, head), **sink})
    return pd.DataFrame.from_records(records)


#: The row statistics the heads tables summarise by their mean over the rows (shares), not
#: by quantiles.
ROW_SHARES = ("saturated", "first_key_weight")
#: The statistics of every attention row the heads table summarises by quantiles.
ROW_STATS = ("logit_std", "max_weight", "entropy_ratio", "jacobian_norm")


def head_columns(summary: dict, sigma: np.ndarray, layer: int, head: int) -> dict[str, object]:
    """One head's columns of the heads table, in its order: the quantiles of each
    ``ROW_STATS``, the saturated share, the quantiles of |q| and |k|, ``sigma``, the
    elasticity at each of ``ALPHAS`` and the owner it names (encoder and decoder alike)."""
    record: dict[str, object] = {}
    for name in (*ROW_STATS, "saturated", "q_norm", "k_norm"):
        if name == "saturated":
            record["saturated_share"] = float(summary[name][layer, head])
            continue
        for tag, value in zip(QUANTILE_TAGS, summary[name][layer, head], strict=True):
            record[f"{name}_{tag}"] = float(value)
    record["sigma"] = float(sigma[layer, head])
    elasticity = summary["elasticity"][layer, head]
    for alpha, value in zip(ALPHAS, elasticity, strict=True):
        record[f"elasticity_{alpha:g}"] = float(value)
    record["owner"] = owner(float(elasticity[0]))
    return record


@functools.partial(jax.jit, static_argnums=1)
def _counterfactual(
    params: Params, config: BertConfig, ids: Array, qk_scale: Array, scale: Array
) -> dict[str, Array]:
    """The forward of ``ids`` with ``q, k -> qk_scale q, qk_scale k`` and logit multiplier
    ``scale``: medians of the row statistics pooled over every layer, head and row, the
    saturated share, and each row's sentence embedding."""
    hidden, trace = encode(params, config, ids, qk_scale=qk_scale, scale=scale)
    stats = jax.lax.map(lambda qk: row_statistics(*qk, scale=scale), (trace.q, trace.k))
    out = {
        name: jnp.median(stats[name])
        for name in ("logit_std", "max_weight", "entropy_ratio", "jacobian_norm")
    }
    out["saturated"] = jnp.mean(stats["saturated"])
    out["embedding"] = sentence_embedding(hidden)
    return out


def counterfactuals_frame(
    tensors: dict[str, np.ndarray], config: BertConfig, ids: np.ndarray
) -> pd.DataFrame:
    """The trained model at inference under the static drift ``alpha`` (``DRIFT_ALPHAS``;
    the first, 1, is the model itself and gives the original embeddings) and with the
    divisor removed (``scale = 1``: logits ``sqrt(d)`` times larger, the drift
    ``alpha = d^(1/4)``), one row each; ``cosine_*``: each row's sentence-embedding cosine
    to the original."""
    params = {name: jnp.asarray(value) for name, value in tensors.items()}
    ids = jnp.asarray(ids)
    d = config.head_dim
    settings = [("drift", a, 1 / math.sqrt(d), a * a) for a in DRIFT_ALPHAS]
    settings.append(("divisor removed", 1.0, 1.0, math.sqrt(d)))
    records, base = [], None
    for name, alpha, scale, factor in settings:
        out = _counterfactual(params, config, ids, jnp.float32(alpha), jnp.float32(scale))
        out = jax.tree.map(np.asarray, out)
        base = out["embedding"] if base is None else base
        cosine = np.sum(out["embedding"] * base, axis=-1)
        records.append(
            {
                "counterfactual": name,
                "qk_scale": alpha,
                "logit_factor": factor,
                "row_length": ids.shape[1],
                "logit_std_median": float(out["logit_std"]),
                "max_weight_median": float(out["max_weight"]),
                "entropy_ratio_median": float(out["entropy_ratio"]),
                "jacobian_norm_median": float(out["jacobian_norm"]),
                "saturated_share": float(out["saturated"]),
                "cosine_mean": float(np.mean(cosine)),
                "cosine_min": float(np.min(cosine)),
            }
        )
    return pd.DataFrame.from_records(records)


@functools.partial(jax.jit, static_argnums=1)
def _float16_check(params: Params, config: BertConfig, ids: Array) -> dict[str, Array]:
    """Per layer: the largest ``|q . k|`` and scaled logit of the forward of ``ids``, and
    the largest error of attention from float16 q, k, v (the suite's policy: softmax in
    float32, output float16) against float32, relative to the largest output, scaled and
    with the divisor removed."""
    _, trace = encode(params, config, ids)

    def one_layer(qkv: tuple[Array, Array, Array]) -> dict[str, Array]:
        q, k, v = qkv
        raw = attention_logits(q, k, scale=1.0)
        out = {"max_abs_qk": jnp.max(jnp.abs(raw))}
        half = [x.astype(jnp.float16) for x in qkv]
        for tag, scale in (("scaled", None), ("unscaled", 1.0)):
            exact = dot_product_attention(q, k, v, scale=scale)
            rounded = dot_product_attention(*half, scale=scale).astype(jnp.float32)
            error = jnp.max(jnp.abs(rounded - exact)) / jnp.max(jnp.abs(exact))
            out[f"float16_error_{tag}"] = error
        return out

    return jax.lax.map(one_layer, (trace.q, trace.k, trace.v))


def layers_frame(
    tensors: dict[str, np.ndarray], config: BertConfig, ids: np.ndarray
) -> pd.DataFrame:
    """One row per layer of the trained model: ``_float16_check`` beside float16's largest
    finite value."""
    params = {name: jnp.asarray(value) for name, value in tensors.items()}
    out = jax.tree.map(np.asarray, _float16_check(params, config, jnp.asarray(ids)))
    d = config.head_dim
    return pd.DataFrame(
        {
            "layer": np.arange(config.num_hidden_layers),
            "row_length": ids.shape[1],
            "max_abs_qk": out["max_abs_qk"].astype(float),
            "max_abs_logit": out["max_abs_qk"].astype(float) / math.sqrt(d),
            "float16_max": FLOAT16_MAX,
            "float16_error_scaled": out["float16_error_scaled"].astype(float),
            "float16_error_unscaled": out["float16_error_unscaled"].astype(float),
        }
    )


def run_real_model(
    config: RealModelConfig,
    checkpoint: Checkpoint,
    text: str,
    on_progress: Callable[[int], None] = lambda n: None,
) -> dict[str, pd.DataFrame]:
    """Every CSV of experiment 13 by name; ``on_progress(1)`` after each of its
    ``progress_steps(config)`` parts."""
    rows = {T: text_rows(checkpoint, text, config.tokens, T) for T in config.lengths}
    initial = bert_init(checkpoint.config, jax.random.key(config.seed))
    frames = []
    for model, tensors in zip(MODELS, (checkpoint.tensors, initial), strict=True):
        frames.append(heads_frame(tensors, checkpoint.config, rows, model))
        on_progress(1)
    ids = rows[config.counterfactual_length]
    counterfactuals = counterfactuals_frame(checkpoint.tensors, checkpoint.config, ids)
    on_progress(1)
    layers = layers_frame(checkpoint.tensors, checkpoint.config, ids)
    on_progress(1)
    return {
        HEADS_CSV: pd.concat(frames, ignore_index=True),
        COUNTERFACTUALS_CSV: counterfactuals,
        LAYERS_CSV: layers,
    }


def progress_steps(config: RealModelConfig) -> int:
    """The parts ``run_real_model`` reports: two models, counterfactuals, float16."""
    return len(MODELS) + 2


def provenance(
    checkpoint: Checkpoint, source: TextSource, config: RealModelConfig, packaged: bool
) -> dict:
    """What the sidecars add to the flags: the checkpoint (the package and its version when
    ``packaged``, else its directory), its weights' SHA-256, the text's source and SHA-256,
    and how many of its tokens were read."""
    from importlib.metadata import version

    name = f"{PACKAGE_DIST}=={version(PACKAGE_DIST)}" if packaged else str(checkpoint.directory)
    return {
        "checkpoint": name,
        "weights_sha256": checkpoint.weights_sha256,
        "text_source": source.source,
        "text_sha256": source.sha256,
        "text_tokens_used": config.tokens,
    }

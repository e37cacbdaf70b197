"""Experiment 13's temperature ledger of a Llama-family checkpoint (``attnlab.models.ledger``
gives each factor's formula): per layer and head, what sets the scale of the logits the
softmax sees, itemised, as a table (``ledger_frame``), and its static part printed from a
``config.json`` alone (``config_ledger_text``, ``13 --config``).

The table's row of a head: ``static_ledger``'s columns of its layer; ``q_norm_gain`` and
``k_norm_gain`` (RMS of the gains, 1 where none); ``spectral_norm``
``sigma_max(W_q,h W_k,h^T)``; ``near_cap_share``, the share of the logits over the causal
entries of the rows at ``--counterfactual-length`` with ``|z| >= 0.9 c`` (empty where no
cap); and the owner by elasticity with the elasticity at alpha = 1, from the heads table's
trained row at that length.
"""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.context import causal_context
from attnlab.models import attnlab_llama
from attnlab.models.config_keys import model_type_of
from attnlab.models.decoder import decoder_forward
from attnlab.models.decoder_config import DecoderConfig
from attnlab.models.files import CheckpointError, read_json
from attnlab.models.ledger import (
    CAP_MARGIN,
    STATIC_COLUMNS,
    head_gains,
    near_cap_share,
    spectral_norms,
    static_ledger,
)
from attnlab.models.registry import FAMILIES, Family
from attnlab.studies.real_model.study import LEDGER_CSV

Params = dict[str, jax.Array]
#: The ``model_type`` values with a ledger: the families on the shared decoder
#: (``attnlab.models.decoder``), the Llama family's published layouts. Not
#: ``attnlab_llama`` (14's models in that layout): their mechanism, not the divisor the
#: ledger reads from the config, sets their logits' scale.
LEDGER_MODEL_TYPES = tuple(
    k for k, f in FAMILIES.items() if f.forward is decoder_forward and k != attnlab_llama.MODEL_TYPE
)


@functools.partial(jax.jit, static_argnums=(0, 2))
def _near_cap(family: Family, params: Params, config: DecoderConfig, ids: jax.Array) -> jax.Array:
    """``[layers, heads]``: ``near_cap_share`` of each layer's logits as the softmax sees
    them (the mechanism's, capped), causal entries."""
    _, trace = family.forward(params, config, ids)
    T = ids.shape[1]
    context = causal_context(T, config.n_head)

    def one_layer(qktm: tuple) -> jax.Array:
        *qkt, allowed = qktm
        z, _, _ = config.attention.attend(*qkt, allowed, context)
        return near_cap_share(z, allowed, config.cap)

    masks = family.masks(config, T)
    return jax.lax.map(one_layer, (trace.q, trace.k, trace.theta, masks))


def ledger_frame(
    family: Family, tensors: dict[str, np.ndarray], config: DecoderConfig, ids: np.ndarray,
    heads: pd.DataFrame, checkpoint: str,
) -> pd.DataFrame:  # fmt: skip
    """One row per (layer, head) of the trained checkpoint's ledger (module docstring):
    ``ids`` the rows of text ``[B, T]`` the cap's share is read on, ``heads`` the
    checkpoint's heads table (its trained rows at length ``T`` give the owner)."""
    gains = head_gains(config, tensors)
    sigma = spectral_norms(lambda layer: family.qk_weights(tensors, config, layer), config.n_layer)
    near = None
    if config.cap is not None:
        params = {name: jnp.asarray(value) for name, value in tensors.items()}
        near = np.asarray(_near_cap(family, params, config, jnp.asarray(ids)))
    T = ids.shape[1]
    trained = heads[(heads.model == "trained") & (heads.row_length == T)]
    owned = trained.set_index(["layer", "head"])
    records = []
    for row in static_ledger(config):
        layer = row["layer"]
        for head in range(config.n_head):
            records.append({
                "checkpoint": checkpoint, "model_type": config.model_type, **row,
                "head": head, "kv_head": head // (config.n_head // config.n_kv_head),
                "q_norm_gain": gains[layer, head, 0], "k_norm_gain": gains[layer, head, 1],
                "spectral_norm": sigma[layer, head],
                "near_cap_share": None if near is None else float(near[layer, head]),
                "row_length": T,
                "elasticity_1": float(owned.loc[(layer, head), "elasticity_1"]),
                "owner": owned.loc[(layer, head), "owner"],
            })  # fmt: skip
    return pd.DataFrame.from_records(records)


def _layers_text(layers: list[int]) -> str:
    """``layers 0-45``, ``layers 1, 3, ..., 45``, ``layers 0-2, 4-6, ..., 28-30``: runs of
    consecutive layers, the middle ones elided where more than three share one stride."""
    runs: list[list[int]] = []
    for layer in layers:
        if runs and layer == runs[-1][-1] + 1:
            runs[-1].append(layer)
        else:
            runs.append([layer])
    texts = [f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs]
    strides = {b[0] - a[0] for a, b in zip(runs, runs[1:], strict=False)}
    if len(runs) > 3 and len(strides) == 1 and len({len(r) for r in runs}) == 1:
        texts = [texts[0], texts[1], "...", texts[-1]]
    return ("layer " if layers == [layers[0]] else "layers ") + ", ".join(texts)


def static_ledger_text(config: DecoderConfig, source: str) -> str:
    """The static ledger (``static_ledger``) as readable lines: a head line, then one line
    per group of layers that share every factor."""
    rows = static_ledger(config)
    groups: dict[tuple, list[int]] = {}
    for row in rows:
        key = tuple(row[c] for c in STATIC_COLUMNS if c != "layer")
        groups.setdefault(key, []).append(row["layer"])
    lines = [
        f"{source}: {config.model_type}, {config.n_layer} layers, {config.n_head} query heads"
        f" / {config.n_kv_head} key-value heads of width {config.head_dim}",
        "  logit = [cap c tanh(./c)] divisor * rope_factor^2 * N_q(q).N_k(k)",
    ]
    for key, layers in groups.items():
        row = dict(zip((c for c in STATIC_COLUMNS if c != "layer"), key, strict=True))
        width = row["divisor_width"]
        divisor = f"divisor {width:g}^-1/2 = {row['divisor']:.6g}"
        if abs(width - config.head_dim) > 1e-9 * width:
            divisor += f" (head_dim {config.head_dim}^-1/2 would be {config.head_dim**-0.5:.6g})"
        cap = "none" if row["softcap"] is None else f"{row['softcap']:g}"
        lines.append(
            f"  {_layers_text(layers)} ({row['layer_type']}): {divisor}; rope {row['rope_type']}"
            f" theta {row['rope_theta']:g}, attention factor^2 "
            f"{row['rope_attention_factor_sq']:.6g}; q/k norm {row['qk_norm']}"
            f"{'' if row['qk_norm'] != 'none' else ' (gain 1)'}; soft-cap {cap}; "
            f"logit multiplier {row['logit_multiplier']:.6g}"
        )
    lines.append(
        "  from the weights (13 --checkpoint DIR, " + LEDGER_CSV + "): the q/k norm gains' "
        "RMS, sigma_max(W_q,h W_k,h^T), the share of logits within "
        f"{CAP_MARGIN:.0%} of the cap and the owner by elasticity"
    )
    return "\n".join(lines)


def config_ledger_text(path: Path) -> str:
    """``static_ledger_text`` of the ``config.json`` at ``path`` (a file, or a folder holding
    one), parsed by the family of its ``model_type``; ``CheckpointError`` naming the file
    and the key for a ``model_type`` without a Llama-family parser or for anything the
    family does not compute (a ``rope_scaling`` type, ...)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    raw = read_json(path)
    kind = model_type_of(raw, str(path))
    if kind not in LEDGER_MODEL_TYPES:
        raise CheckpointError(
            f"{path}: model_type {kind!r} has no temperature ledger here (only "
            f"{', '.join(LEDGER_MODEL_TYPES)})"
        )
    return static_ledger_text(FAMILIES[kind].parse(raw, str(path)), str(path))

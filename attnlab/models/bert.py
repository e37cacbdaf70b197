"""A BERT encoder (Hugging Face ``BertModel`` layout, Devlin et al. 2019) on the suite's
attention, ``attnlab.core.attention.dot_product_attention``.

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

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from attnlab.core.attention import dot_product_attention
from attnlab.models.checkpoint import BertConfig, Checkpoint

Array = jax.Array
Params = dict[str, Array]


class Trace(NamedTuple):
    """Each layer's queries, keys and values, ``[layers, batch, heads, T, d]``."""

    q: Array
    k: Array
    v: Array


def layer_norm(x: Array, scale: Array, bias: Array, eps: float) -> Array:
    """``(x - mean) / sqrt(var + eps) * scale + bias`` over the last axis."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * scale + bias


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
      params: tensors by ``BertModel`` name (``attnlab.models.checkpoint.tensor_shapes``).
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
    return x, Trace(*(jnp.stack(parts) for parts in zip(*trace, strict=True)))


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

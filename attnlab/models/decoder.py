"""The decoder the Llama-layout families share, one module a family on it: ``llama`` (Llama
and Mistral), ``attnlab_llama``, ``qwen3``, ``olmo2``, ``gemma2`` and ``gemma3`` each parse
their ``config.json`` into a ``DecoderConfig`` (``decoder_config.parse_decoder`` with the
family's choices) and run ``decoder_forward`` on the tensors ``decoder_shapes`` names
(Hugging Face's), read by ``load_decoder``.

For token ids ``t`` of a row of length ``T`` and ``L`` blocks of ``H`` query heads and
``KV`` key/value heads of width ``d = head_dim`` (read from the config):

    x = E[t]  (times sqrt(hidden_size) for Gemma)
    per block:  a = N_in(x)                                          (pre-norm; none: OLMo 2)
                q, k, v = a W_q^T, a W_k^T, a W_v^T, split into heads
                q, k = N_q(q), N_k(k)     (Qwen3, Gemma 3: per head; OLMo 2: full width,
                                           before the split)
                q, k = rope(q), rope(k)   (half-split; rope_scaling / rope_parameters)
                k, v repeated to H heads  (grouped-query attention)
                z, p = mechanism(a_qk q, a_qk k), causal: z = s q.k (s = head_dim^-1/2, or
                       query_pre_attn_scalar^-1/2), capped c tanh(z / c) for Gemma 2
                y = (p v) W_o^T;  x = x + y  (OLMo 2, Gemma: x + N_post(y))
                m = down(act(gate(b)) * up(b)),  b = N_mlp(x) (OLMo 2: b = x)
                x = x + m  (OLMo 2, Gemma: x + N_post_ff(m))
    logits = N_f(x) W_head^T   (W_head = E when tie_word_embeddings; Gemma 2: capped at
                                final_logit_softcapping)

Every ``N`` is RMSNorm (``layers.rms_norm``; Gemma's multiplies by ``1 + w``); ``act`` is
SiLU (SwiGLU) or Gemma's tanh GELU. Weights of any float dtype (float16, bfloat16) are read
and computed in float32. A sliding window ``W`` (Mistral, Gemma) is a mask: in a sliding
layer query ``i`` sees key ``j`` only if ``i - W < j <= i`` (``layers.causal_masks``),
the global layers every key up to ``i``, so rows read may be as long as
``max_position_embeddings``.

What experiment 14's model (``attnlab.lm.model``) has and Llama has not, ``attnlab_llama``
sets and this same forward computes: ``DecoderConfig.mlp`` ``"plain"`` (GPT-2's MLP,
``m = down(act(up(b)))``, no ``gate_proj``), ``positions`` ``"learned"`` (``x = E[t] +
P[0..T-1]``, ``P`` the tensor ``POSITION_TABLE``, no rotary) or ``"none"`` (neither), and
an ``attention`` mechanism whose learned scalars are
``model.layers.{i}.self_attn.attnlab.<name>`` (``learned_name``; ``[]``, or ``[H]`` per
head). ``write_random_decoder`` writes a random checkpoint of any of the families, for tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from attnlab.core.attention import weighted_values
from attnlab.core.context import causal_context
from attnlab.models.decoder_config import ACTIVATIONS, DecoderConfig
from attnlab.models.files import CONFIG, TOKENIZER, WEIGHTS, Checkpoint, load_directory
from attnlab.models.layers import (
    Trace,
    causal_masks,
    inverse_frequencies,
    repeat_kv,
    rms_norm,
    rope_tables,
    rotate,
)

Array = jax.Array
Params = dict[str, Array]
#: The learned position table of ``positions: learned`` (``attnlab_llama`` only).
POSITION_TABLE = "model.embed_positions.weight"


def learned_name(layer: int, name: str) -> str:
    """The tensor of layer ``layer``'s learned mechanism scalar ``name`` (``attnlab_llama``)."""
    return f"model.layers.{layer}.self_attn.attnlab.{name}"


#: The norms of a block by ``DecoderConfig.block``.
BLOCK_NORMS = {
    "pre": ("input_layernorm", "post_attention_layernorm"),
    "post": ("post_attention_layernorm", "post_feedforward_layernorm"),
    "sandwich": ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                 "post_feedforward_layernorm"),
}  # fmt: skip


def decoder_shapes(config: DecoderConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the decoder reads, by its Hugging Face name (``model.`` prefix;
    ``lm_head.weight`` only when untied), linear weights ``[out, in]``; ``attnlab_llama``'s
    position table and the mechanism's learned scalars (``learned_name``) where it has
    them."""
    D, inner, d = config.hidden_size, config.intermediate_size, config.head_dim
    H, KV = config.n_head, config.n_kv_head
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config.vocab_size, D)}
    if config.positions == "learned":
        shapes[POSITION_TABLE] = (config.context, D)
    mechanism = config.attention
    for i in range(config.n_layer):
        p = f"model.layers.{i}."
        shapes |= {
            f"{p}self_attn.q_proj.weight": (H * d, D),
            f"{p}self_attn.k_proj.weight": (KV * d, D),
            f"{p}self_attn.v_proj.weight": (KV * d, D),
            f"{p}self_attn.o_proj.weight": (D, H * d),
            f"{p}mlp.gate_proj.weight": (inner, D),
            f"{p}mlp.up_proj.weight": (inner, D),
            f"{p}mlp.down_proj.weight": (D, inner),
        }
        if config.mlp == "plain":
            del shapes[f"{p}mlp.gate_proj.weight"]
        shapes |= {f"{p}{name}.weight": (D,) for name in BLOCK_NORMS[config.block]}
        if config.qk_norm:
            full = config.qk_norm == "full"
            shapes[f"{p}self_attn.q_norm.weight"] = (H * d,) if full else (d,)
            shapes[f"{p}self_attn.k_norm.weight"] = (KV * d,) if full else (d,)
        for name, _ in mechanism.params:
            shapes[learned_name(i, name)] = (H,) if name in mechanism.per_head else ()
    shapes["model.norm.weight"] = (D,)
    if not config.tied:
        shapes["lm_head.weight"] = (config.vocab_size, D)
    return shapes


def load_decoder(directory: Path | str, parse: Callable[[dict, str], DecoderConfig]) -> Checkpoint:
    """Read and check the checkpoint in ``directory`` with the family's ``parse``
    (``files.load_directory``): ``CheckpointError`` naming the file if one is missing or
    unreadable, if ``config.json`` is not what ``parse`` computes, or if a tensor is
    missing, has another shape than ``config.json`` implies, or is not finite floating
    point (float16 and bfloat16 read as float32)."""
    return load_directory(
        directory, parse, decoder_shapes,
        lambda config: ("num_hidden_layers", config.n_layer, "model.layers."),
        lambda config: config.context,
    )  # fmt: skip


def decoder_forward(
    params: Params,
    config: DecoderConfig,
    ids: ArrayLike,
    *,
    qk_scale: ArrayLike = 1.0,
    w_scale: ArrayLike = 1.0,
    layer_local: bool = False,
) -> tuple[Array, Trace]:
    """Next-token logits ``[B, T, vocab_size]`` of ``ids`` ``[B, T]`` and every layer's q, k
    (after their norms and rotary positions, repeated to the query heads, times the drift
    ``qk_scale``), v and the mechanism's constants (``Trace``). ``w_scale`` (a scalar or
    ``[n_layer]``) multiplies each layer's W_q, W_k, before any q/k norm: under QK-norm it
    changes no logit, where ``qk_scale`` (after the norm) scales them as the norm's gains
    do. ``layer_local``: each layer's input held constant for derivatives
    (``stop_gradient``), so that a derivative of layer ``l``'s q and k through ``w_scale``
    is layer ``l``'s own (``attnlab.studies.real_model.causal.weight_elasticity``)."""
    ids = jnp.asarray(ids)
    B, T = ids.shape
    H, KV, d, D = config.n_head, config.n_kv_head, config.head_dim, config.hidden_size
    mechanism = config.attention
    constants = {n: jnp.float32(v) for n, v in mechanism.constant_values(d).items()}
    masks = causal_masks(T, config.windows)
    context = causal_context(T, H)
    act = ACTIVATIONS[config.activation]

    def norm(x: Array, name: str) -> Array:
        return rms_norm(x, params[f"{name}.weight"], config.eps, config.norm_offset)

    def heads(y: Array, n: int) -> Array:  # [B, T, n d] -> [B, n, T, d]
        return y.reshape(B, T, n, d).transpose(0, 2, 1, 3)

    x = params["model.embed_tokens.weight"][ids]
    if config.embed_scale:
        x = x * jnp.sqrt(jnp.float32(D))
    if config.positions == "learned":
        x = x + params[POSITION_TABLE][:T]
    trace = []
    for i, rope in enumerate(config.ropes):
        p = f"model.layers.{i}."
        x = jax.lax.stop_gradient(x) if layer_local else x
        a = x if config.block == "post" else norm(x, f"{p}input_layernorm")
        w = jnp.broadcast_to(jnp.asarray(w_scale, jnp.float32), (config.n_layer,))[i]
        q = w * (a @ params[f"{p}self_attn.q_proj.weight"].T)
        k = w * (a @ params[f"{p}self_attn.k_proj.weight"].T)
        v = heads(a @ params[f"{p}self_attn.v_proj.weight"].T, KV)
        if config.qk_norm == "full":
            q, k = norm(q, f"{p}self_attn.q_norm"), norm(k, f"{p}self_attn.k_norm")
        q, k = heads(q, H), heads(k, KV)
        if config.qk_norm == "head":
            q, k = norm(q, f"{p}self_attn.q_norm"), norm(k, f"{p}self_attn.k_norm")
        if config.positions == "rotary":
            cos, sin = rope_tables(inverse_frequencies(rope, d), rope.attention_factor, T)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
        q, k = qk_scale * q, qk_scale * k
        theta = dict(constants)
        for name, _ in mechanism.params:
            value = params[learned_name(i, name)]
            theta[name] = value[:, None, None] if name in mechanism.per_head else value
        trace.append((q, k, v, theta))
        _, weights, _ = mechanism.attend(q, k, theta, masks[i], context)
        out = weighted_values(weights, v).transpose(0, 2, 1, 3).reshape(B, T, H * d)
        out = out @ params[f"{p}self_attn.o_proj.weight"].T
        if config.block != "pre":
            out = norm(out, f"{p}post_attention_layernorm")
        x = x + out
        b = {"pre": f"{p}post_attention_layernorm", "sandwich": f"{p}pre_feedforward_layernorm"}
        h = norm(x, b[config.block]) if config.block in b else x
        up = h @ params[f"{p}mlp.up_proj.weight"].T
        if config.mlp == "plain":
            hidden = act(up)
        else:
            hidden = act(h @ params[f"{p}mlp.gate_proj.weight"].T) * up
        m = hidden @ params[f"{p}mlp.down_proj.weight"].T
        if config.block != "pre":
            m = norm(m, f"{p}post_feedforward_layernorm")
        x = x + m
    x = norm(x, "model.norm")
    head = params["model.embed_tokens.weight"] if config.tied else params["lm_head.weight"]
    logits = x @ head.T
    if config.final_cap is not None:
        logits = config.final_cap * jnp.tanh(logits / config.final_cap)
    q, k, v, thetas = zip(*trace, strict=True)
    stacked = {n: jnp.stack([jnp.asarray(t[n]) for t in thetas]) for n in thetas[0]}
    return logits, Trace(jnp.stack(q), jnp.stack(k), jnp.stack(v), stacked)


def decoder_init(config: DecoderConfig, key: jax.Array) -> dict[str, np.ndarray]:
    """Tensors of a freshly initialised decoder as Hugging Face initialises it
    (``_init_weights``): linear weights and embeddings ``N(0, initializer_range^2)``,
    RMSNorm weights 1 (0 for Gemma's ``(1 + w)``, so the norm starts at 1), the
    mechanism's learned scalars (``attnlab_llama``) their initial values at ``head_dim``;
    one ``jax.random`` key per tensor, folded in by position."""
    mechanism, d = config.attention, config.head_dim
    initial = {**mechanism.param_values(d), **mechanism.head_values(d, config.n_head)}
    learned = {learned_name(i, n): n for i in range(config.n_layer) for n in initial}
    tensors = {}
    for i, (name, shape) in enumerate(decoder_shapes(config).items()):
        if name in learned:
            value = jnp.broadcast_to(initial[learned[name]], shape)
        elif len(shape) == 1:
            value = jnp.full(shape, 1.0 - config.norm_offset)
        else:
            draw = jax.random.normal(jax.random.fold_in(key, i), shape, jnp.float32)
            value = config.initializer_range * draw
        tensors[name] = np.asarray(value, np.float32)
    return tensors


def decoder_qk_weights(tensors: dict[str, np.ndarray], config: DecoderConfig, layer: int) -> tuple:
    """Layer ``layer``'s query and key weights per query head in float64, each ``[H, D,
    d]``: head ``h`` reads key/value head ``h // (H / KV)`` (before norms and rotary)."""
    d, groups = config.head_dim, config.n_head // config.n_kv_head
    p = f"model.layers.{layer}.self_attn."
    wq = tensors[f"{p}q_proj.weight"].astype(np.float64)
    wk = tensors[f"{p}k_proj.weight"].astype(np.float64)
    return (
        np.stack([wq[h * d : (h + 1) * d].T for h in range(config.n_head)]),
        np.stack([wk[(h // groups) * d : (h // groups + 1) * d].T for h in range(config.n_head)]),
    )


def byte_level_tokenizer():
    """A ``tokenizers`` byte-level BPE with no merges: 256 tokens, one a byte (GPT-2's
    byte-to-character table, ids in the order of those characters), for tiny test
    checkpoints."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    table = pre_tokenizers.ByteLevel.alphabet()
    chars = sorted(table, key=lambda c: ord(c))
    vocab = {c: i for i, c in enumerate(chars)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def write_random_decoder(
    directory: Path, raw: dict[str, Any], parse: Callable[[dict, str], DecoderConfig],
    seed: int = 0, dtype: str = "F32", std: float = 0.5,
) -> Path:  # fmt: skip
    """A random checkpoint of the family ``parse`` reads, for tests: ``raw`` as
    ``config.json``, every tensor of ``decoder_shapes`` drawn ``N(0, std^2)`` (norm weights
    ``1 + N(0, std^2) / 4``, or around 0 for Gemma's ``(1 + w)``) from numpy's ``seed``,
    stored as ``dtype`` (``F32``, ``F16`` or ``BF16``: bfloat16 by truncating float32's
    low 16 bits, written byte by byte as safetensors lays a file out), and the byte-level
    tokenizer (``byte_level_tokenizer``)."""
    import json

    config = parse(raw, CONFIG)
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in decoder_shapes(config).items():
        value = rng.normal(0, std, shape)
        if len(shape) == 1:
            value = 1.0 - config.norm_offset + value / 4
        tensors[name] = value.astype(np.float32)
    directory.mkdir(parents=True, exist_ok=True)
    header, chunks, offset = {}, [], 0
    for name, value in tensors.items():
        if dtype == "BF16":
            data = (value.view("<u4") >> 16).astype("<u2").tobytes()
        else:
            data = value.astype({"F32": "<f4", "F16": "<f2"}[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(value.shape),
                        "data_offsets": [offset, offset + len(data)]}  # fmt: skip
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (directory / WEIGHTS).write_bytes(len(text).to_bytes(8, "little") + text + b"".join(chunks))
    (directory / CONFIG).write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    byte_level_tokenizer().save(str(directory / TOKENIZER))
    return directory

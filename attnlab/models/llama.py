"""The Llama family (Touvron et al. 2023; Hugging Face ``LlamaForCausalLM`` layout, and
``MistralForCausalLM``, which the same code computes), and the decoder its descendants
share: ``qwen3``, ``olmo2``, ``gemma2`` and ``gemma3`` parse their configs into a
``DecoderConfig`` and run ``decoder_forward``.

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
``max_position_embeddings``. What is not computed is refused in one line naming the key:
biases in attention or MLP, another activation, a ``rope_type`` not in
``layers.ROPE_TYPES``, mixture-of-experts, a partial rotary factor.

``attnlab_llama`` (``ATTNLAB_MODEL_TYPE``) is this layout with what experiment 14's model
(``attnlab.lm.model``) has and Llama has not, each set in ``config.json``'s ``attnlab``
object and computed by this same forward: ``mlp: "plain"`` (GPT-2's MLP,
``m = down(act(up(b)))``, no ``gate_proj``), ``positions: "learned"`` (``x = E[t] +
P[0..T-1]``, ``P`` the tensor ``model.embed_positions.weight``, no rotary) or ``"none"``
(neither), and ``mechanism``, any built-in or supplied ``Mechanism`` (``files.mechanism_of``)
whose learned scalars are ``model.layers.{i}.self_attn.attnlab.<name>`` (``[]``, or ``[H]``
per head). A Llama reader refuses the ``model_type`` rather than compute another model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from attnlab.core.attention import weighted_values
from attnlab.core.context import causal_context
from attnlab.core.hooks import capped_logits, scaled_logits
from attnlab.core.mechanism import Mechanism
from attnlab.core.temperature import BUILTINS
from attnlab.models.files import (
    CONFIG,
    TOKENIZER,
    WEIGHTS,
    Checkpoint,
    CheckpointError,
    an_object,
    boolean,
    check_layers,
    check_token_ids,
    check_weights_header,
    choice,
    files_present,
    mechanism_of,
    model_type_of,
    positive_int,
    positive_number,
    read_json,
    read_tensors,
    read_tokenizer,
    sha256,
    weights,
)
from attnlab.models.layers import (
    Rope,
    Trace,
    causal_masks,
    inverse_frequencies,
    read_rope,
    repeat_kv,
    rms_norm,
    rope_tables,
    rotate,
)

Array = jax.Array
Params = dict[str, Array]
#: The activations computed: SiLU (SwiGLU) and tanh GELU (Gemma's GeGLU).
ACTIVATIONS = {"silu": jax.nn.silu, "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, True)}
#: Keys whose presence (true or a number) means a model this code does not compute.
REFUSED_KEYS = ("attention_bias", "mlp_bias", "num_experts", "num_local_experts",
                "vision_config", "use_qk_norm")  # fmt: skip
#: The layer types computed (``layer_types``): full attention and a sliding window.
LAYER_TYPES = ("full_attention", "sliding_attention")
#: ``DecoderConfig.mlp``: Llama's gated MLP, or GPT-2's plain one (``attnlab_llama``).
MLPS = ("gated", "plain")
#: ``DecoderConfig.positions``: rotary (every family), learned or none (``attnlab_llama``).
POSITIONS = ("rotary", "learned", "none")
#: ``model_type`` of this layout with ``attnlab``'s extensions (module docstring).
ATTNLAB_MODEL_TYPE = "attnlab_llama"
#: The learned position table of ``positions: learned`` (``attnlab_llama`` only).
POSITION_TABLE = "model.embed_positions.weight"


@dataclass(frozen=True)
class DecoderConfig:
    """What a Llama-family decoder computes from ``config.json``.

    Attributes:
      model_type: the config's.
      qk_norm: ``""`` (none), ``"head"`` (RMSNorm over each head's ``d``: Qwen3, Gemma 3) or
        ``"full"`` (over the whole projection: OLMo 2).
      block: ``"pre"`` (Llama, Qwen3), ``"post"`` (OLMo 2: norms on the outputs of
        attention and MLP) or ``"sandwich"`` (Gemma: both).
      norm_offset: 0, or 1 for Gemma's ``(1 + w)``.
      ropes: each layer's rotary positions.
      attention: the mechanism every head runs; ``divisor`` and ``cap`` its scale and
        soft-cap (None: none).
      embed_scale: multiply the embeddings by ``sqrt(hidden_size)`` (Gemma).
      final_cap: the soft-cap of the output logits (Gemma 2), None: none.
      context: the longest row read (``max_position_embeddings``).
      layer_types: each layer's ``LAYER_TYPES`` entry (full attention or a sliding window).
      mlp: ``"gated"`` (``down(act(gate(b)) * up(b))``) or ``"plain"``
        (``down(act(up(b)))``, ``attnlab_llama``).
      positions: ``"rotary"``, ``"learned"`` (``POSITION_TABLE`` added to the embeddings,
        no rotary) or ``"none"`` (``attnlab_llama``).
      window: the sliding layers' window (``sliding_window``), None where no layer slides.
    """

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    n_layer: int
    n_head: int
    n_kv_head: int
    head_dim: int
    eps: float
    tied: bool
    activation: str
    qk_norm: str
    block: str
    norm_offset: float
    ropes: tuple[Rope, ...]
    divisor: float
    cap: float | None
    embed_scale: bool
    final_cap: float | None
    context: int
    initializer_range: float
    attention: Mechanism
    layer_types: tuple[str, ...] = ()
    mlp: str = "gated"
    positions: str = "rotary"
    window: int | None = None

    @property
    def mechanism(self) -> str:
        """The name of ``attention``."""
        return self.attention.name

    @property
    def windows(self) -> tuple[int | None, ...]:
        """Each layer's sliding window, None for a layer that sees every earlier key."""
        return tuple(self.window if kind == LAYER_TYPES[1] else None for kind in self.layer_types)


def attention_of(model_type: str, head_dim: int, divisor: float, cap: float | None) -> Mechanism:
    """The mechanism of logits ``divisor * q.k`` (capped ``cap tanh(z / cap)`` where ``cap``
    is given): the built-in ``scaled`` where ``divisor`` is ``head_dim^-1/2`` and nothing
    caps, else one named after the model type with ``divisor`` and ``cap`` as constants."""
    if cap is None and divisor == head_dim**-0.5:
        return BUILTINS["scaled"]
    if cap is None:
        return Mechanism(f"{model_type}_scaled", scaled_logits, constants={"scale": divisor})
    constants = {"scale": divisor, "cap": cap}
    return Mechanism(f"{model_type}_capped", capped_logits, constants=constants)


def refuse(raw: dict[str, Any], where: str, keys: tuple[str, ...] = REFUSED_KEYS) -> None:
    """``CheckpointError`` naming the first of ``keys`` that ``raw`` sets (true, or a
    number), and for a ``partial_rotary_factor`` other than 1."""
    for key in keys:
        if raw.get(key):
            raise CheckpointError(f"{where}: {key} is {raw[key]!r}, which is not computed here")
    if raw.get("partial_rotary_factor", 1.0) != 1.0:
        raise CheckpointError(f"{where}: partial_rotary_factor must be 1 (rotary on all of d)")


def layer_types(raw: dict[str, Any], n_layer: int, where: str, sliding: Callable) -> tuple:
    """Each layer's type: ``layer_types`` where given, else ``sliding(i)`` ->
    ``sliding_attention`` / ``full_attention``; ``CheckpointError`` for another type (an
    entry that is not a name too)."""
    given = raw.get("layer_types")
    if given is None:
        return tuple(LAYER_TYPES[1] if sliding(i) else LAYER_TYPES[0] for i in range(n_layer))
    if (
        not isinstance(given, list)
        or len(given) != n_layer
        or not all(isinstance(kind, str) and kind in LAYER_TYPES for kind in given)
    ):
        raise CheckpointError(
            f"{where}: layer_types must list {n_layer} of {', '.join(LAYER_TYPES)}"
        )
    return tuple(given)


def rope_params(raw: dict[str, Any], layer_type: str) -> tuple[Any, str]:
    """The rotary parameters of a layer of ``layer_type`` and the key they came from:
    transformers v5's ``rope_parameters`` (flat, or by layer type), else ``rope_scaling``
    (as given: ``layers.read_rope`` checks that they are an object)."""
    given = raw.get("rope_parameters")
    if isinstance(given, dict) and layer_type in given:
        return given[layer_type], f"rope_parameters.{layer_type}"
    if given is not None:
        return given, "rope_parameters"
    return raw.get("rope_scaling"), "rope_scaling"


def parse_decoder(raw: dict[str, Any], where: str, **family: Any) -> DecoderConfig:
    """The ``DecoderConfig`` of ``raw``, the common keys read and checked, the family's own
    choices in ``family`` (``qk_norm``, ``block``, ``norm_offset``, ``activation_key``,
    ``default_activation``, ``divisor``, ``cap``, ``embed_scale``, ``final_cap``,
    ``sliding`` (layer -> bool, where ``layer_types`` is absent), ``local_theta`` (the
    sliding layers' own rope base, no scaling), ``default_head_dim``, and
    ``attnlab_llama``'s ``attention`` (a ``Mechanism``, default ``attention_of``'s),
    ``mlp`` and ``positions``)."""
    refuse(raw, where)
    model_type = model_type_of(raw, where)
    D = positive_int(raw, "hidden_size", where)
    H = positive_int(raw, "num_attention_heads", where)
    KV = positive_int(raw, "num_key_value_heads", where, H)
    if H % KV:
        raise CheckpointError(
            f"{where}: num_attention_heads {H} is not a multiple of num_key_value_heads {KV}"
        )
    head_dim = raw.get("head_dim") or family.get("default_head_dim") or D // H
    head_dim = positive_int({"head_dim": head_dim}, "head_dim", where)
    if head_dim % 2:
        raise CheckpointError(f"{where}: head_dim {head_dim} is odd; rotary needs pairs")
    key = family.get("activation_key", "hidden_act")
    activation = choice(
        raw, key, where, tuple(ACTIVATIONS), family.get("default_activation", "silu")
    )
    n_layer = positive_int(raw, "num_hidden_layers", where)
    check_layers(n_layer, where)  # before anything is built per layer
    positions = positive_int(raw, "max_position_embeddings", where)
    window = raw.get("sliding_window")
    types = layer_types(raw, n_layer, where, family.get("sliding", lambda i: window is not None))
    rope_of = {}  # a layer's rotary positions depend on its type alone: read once a type
    for kind in dict.fromkeys(types):
        params, rope_key = rope_params(raw, kind)
        if kind == LAYER_TYPES[1] and family.get("local_theta") and rope_key == "rope_scaling":
            params, rope_key = {"rope_theta": family["local_theta"]}, "rope_local_base_freq"
        theta = raw.get("rope_theta", 10000.0)
        rope_of[kind] = read_rope(params, theta, positions, where, rope_key)
    ropes = [rope_of[kind] for kind in types]
    window = None
    if LAYER_TYPES[1] in types:
        window = positive_int(raw, "sliding_window", where)
    divisor = family.get("divisor") or head_dim**-0.5
    cap = family.get("cap")
    return DecoderConfig(
        model_type=model_type,
        vocab_size=positive_int(raw, "vocab_size", where),
        hidden_size=D,
        intermediate_size=positive_int(raw, "intermediate_size", where),
        n_layer=n_layer,
        n_head=H,
        n_kv_head=KV,
        head_dim=head_dim,
        eps=positive_number(raw, "rms_norm_eps", where, 1e-6),
        tied=boolean(raw, "tie_word_embeddings", where, family.get("tied", False)),
        activation=activation,
        qk_norm=family.get("qk_norm", ""),
        block=family.get("block", "pre"),
        norm_offset=family.get("norm_offset", 0.0),
        ropes=tuple(ropes),
        divisor=divisor,
        cap=cap,
        embed_scale=family.get("embed_scale", False),
        final_cap=family.get("final_cap"),
        context=positions,
        initializer_range=positive_number(raw, "initializer_range", where, 0.02),
        attention=family.get("attention") or attention_of(model_type, head_dim, divisor, cap),
        layer_types=types,
        mlp=family.get("mlp", MLPS[0]),
        positions=family.get("positions", POSITIONS[0]),
        window=window,
    )


#: ``model_type`` values this module's parser reads.
MODEL_TYPES = ("llama", "mistral")


def parse_llama_config(raw: dict[str, Any], where: str = CONFIG) -> DecoderConfig:
    """A Llama or Mistral ``config.json``: pre-norm, SwiGLU, ``head_dim^-1/2``; Mistral's
    ``sliding_window`` on every layer."""
    if raw.get("model_type") not in MODEL_TYPES:
        raise CheckpointError(f"{where}: model_type {raw.get('model_type')!r} is not llama")
    return parse_decoder(raw, where)


def parse_attnlab_llama_config(
    raw: dict[str, Any], where: str = CONFIG, mechanisms: Mapping[str, Mechanism] | None = None
) -> DecoderConfig:
    """An ``attnlab_llama`` ``config.json``: Llama's keys, and the ``attnlab`` object's
    ``mlp`` (``MLPS``), ``positions`` (``POSITIONS``) and ``mechanism`` (a built-in or one
    of ``mechanisms``: ``files.mechanism_of``); ``CheckpointError`` naming the key
    otherwise."""
    if raw.get("model_type") != ATTNLAB_MODEL_TYPE:
        raise CheckpointError(
            f"{where}: model_type {raw.get('model_type')!r} is not {ATTNLAB_MODEL_TYPE!r}"
        )
    ours = an_object(raw, "attnlab", where) or {}
    for key, allowed in (("mlp", MLPS), ("positions", POSITIONS)):
        choice(ours, key, where, allowed, allowed[0], f"attnlab.{key}")
    name = ours.get("mechanism", "scaled")
    if not isinstance(name, str) or not name:
        raise CheckpointError(f"{where}: attnlab.mechanism must be a name, got {name!r}")
    attention = mechanism_of(name, ours.get("made_by"), mechanisms or {}, where)
    return parse_decoder(
        raw, where, attention=attention, mlp=ours.get("mlp", MLPS[0]),
        positions=ours.get("positions", POSITIONS[0]),
    )  # fmt: skip


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
    """Read and check the checkpoint in ``directory`` with the family's ``parse``:
    ``CheckpointError`` naming the file if one is missing or unreadable, if ``config.json``
    is not what ``parse`` computes, or if a tensor is missing, has another shape than
    ``config.json`` implies, or is not finite floating point (float16 and bfloat16 read
    as float32)."""
    directory = Path(directory)
    files_present(directory)
    raw = read_json(directory / CONFIG)
    where = str(directory / CONFIG)
    config = parse(raw, where)
    path = weights(directory)
    layers = ("num_hidden_layers", config.n_layer, "model.layers.")
    check_weights_header(path, "", layers, lambda: decoder_shapes(config), where)
    tensors = read_tensors(path, decoder_shapes(config), "")
    tokenizer = read_tokenizer(directory / TOKENIZER)
    check_token_ids(tokenizer, config.vocab_size, directory / TOKENIZER)
    return Checkpoint(
        raw["model_type"], config, tensors, tokenizer, directory, sha256(path), config.context,
        raw.get("attnlab", {}),
    )  # fmt: skip


def load_llama(directory: Path | str, mechanisms: Any = None) -> Checkpoint:
    """A Llama or Mistral checkpoint (``load_decoder`` with ``parse_llama_config``)."""
    return load_decoder(directory, parse_llama_config)


def load_attnlab_llama(
    directory: Path | str, mechanisms: Mapping[str, Mechanism] | None = None
) -> Checkpoint:
    """An ``attnlab_llama`` checkpoint, its mechanism a built-in or one of ``mechanisms``
    (``load_decoder`` with ``parse_attnlab_llama_config``)."""
    return load_decoder(directory, lambda raw, where: parse_attnlab_llama_config(
        raw, where, mechanisms))  # fmt: skip


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


#: A tiny Llama: 2 layers, grouped-query attention (4 query heads, 2 key/value heads),
#: head_dim 6 where hidden_size / heads is 4, untied head, Llama 3's rope scaling.
TINY = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256,
    "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 6,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
    "tie_word_embeddings": False, "hidden_act": "silu",
}  # fmt: skip

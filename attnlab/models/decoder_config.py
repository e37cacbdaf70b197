"""What the decoder of the Llama-layout families (``attnlab.models.decoder``) computes, read
from a ``config.json``: ``DecoderConfig``, and ``parse_decoder``, which reads and checks
the keys every family shares (sizes, query and key/value heads, ``head_dim``, the
activation, ``rms_norm_eps``, tied embeddings, ``max_position_embeddings``, each layer's
type (``layer_types``: full attention, or a sliding window of ``sliding_window``) and its
rotary positions (``rope_theta`` and ``rope_scaling``, or transformers v5's
``rope_parameters``, by layer type where so given)), with the family's own choices passed
in: which q/k norm, which norms a block has, Gemma's ``(1 + w)``, the divisor and the caps
(``attention_of``), or ``attnlab_llama``'s MLP, positions and mechanism.

What is not computed is refused in one line naming the key (``CheckpointError``): biases
in attention or MLP, another activation, a ``rope_type`` not in ``layers.ROPE_TYPES``,
mixture-of-experts, a partial rotary factor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax

from attnlab.core.hooks import capped_logits, scaled_logits
from attnlab.core.mechanism import Mechanism
from attnlab.core.temperature import BUILTINS
from attnlab.models.config_keys import (
    boolean,
    check_layers,
    choice,
    model_type_of,
    positive_int,
    positive_number,
)
from attnlab.models.files import CheckpointError
from attnlab.models.layers import Rope, read_rope

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
      positions: ``"rotary"``, ``"learned"`` (``decoder.POSITION_TABLE`` added to the
        embeddings, no rotary) or ``"none"`` (``attnlab_llama``).
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

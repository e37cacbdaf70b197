"""The GPT-2 family (Radford et al. 2019; Hugging Face ``GPT2LMHeadModel`` layout) read
from a checkpoint directory and run on the suite's one attention, ``Mechanism.attend``.

For token ids ``t`` of a row of length ``T <= n_positions`` and ``L`` blocks of ``H`` heads
of width ``d = n_embd / H``:

    x = wte[t] + wpe[0..T-1]
    per block:  a = LN_1(x);  q | k | v = a W_attn + b_attn      (Conv1D: W is [in, out])
                z, p = mechanism(a_qk q, a_qk k; theta), causal (key j <= query i)
                x = x + (p v) W_proj + b_proj                    (heads joined)
                x = x + act(LN_2(x) W_fc + b_fc) W_mlp + b_mlp
    logits = LN_f(x) W_head^T     (W_head = wte when tie_word_embeddings, else lm_head.weight)

``act`` is ``activation_function``: ``gelu_new`` / ``gelu_pytorch_tanh`` (tanh GELU, GPT-2's)
or ``gelu`` (erf). The mechanism is GPT-2's ``q.k / sqrt(d)`` (``scaled``; ``unscaled`` when
``scale_attn_weights`` is false) unless the config's own ``attnlab`` object names another
(``attnlab.mechanism``): a built-in (the recall task's fourteen or the language model's
positional ones, as experiment 14 saves them) or one the reader supplies by name (a
researcher's own, ``load_gpt2(..., mechanisms=)``), whose learned scalars are tensors
``attnlab.h.<i>.attn.<name>`` (shape ``[]``, or ``[H]`` per head) and whose constants are
its own at ``d``. ``a_qk`` (1 for the model as trained) is the static drift
``q, k -> a q, a k`` before the mechanism.

``load_gpt2`` checks every file, every config field it computes from and every tensor's
shape (the sizes against the weights file's header and the machine's memory before any
tensor is read, each tensor's numbers finite floats: ``files.load_directory``), and
raises ``CheckpointError`` naming the file and what is wrong; tensor names with or without
the ``transformer.`` prefix are read, others (attention-mask buffers) ignored.
``gpt2_init`` is GPT-2's initialisation of any configuration (13's re-initialised model).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from attnlab.core.attention import weighted_values
from attnlab.core.context import causal_context
from attnlab.core.mechanism import Mechanism
from attnlab.models.config_keys import an_object, boolean, choice, positive_int
from attnlab.models.files import (
    CONFIG,
    Checkpoint,
    CheckpointError,
    load_directory,
    mechanism_of,
)
from attnlab.models.layers import Trace, layer_norm

Array = jax.Array
Params = dict[str, Array]
#: ``activation_function`` values computed here: tanh GELU or erf GELU.
ACTIVATIONS = {"gelu_new": True, "gelu_pytorch_tanh": True, "gelu": False}
#: Config fields GPT-2 readers honour that change the computation; true is refused.
REFUSED_FLAGS = (
    "scale_attn_by_inverse_layer_idx",
    "reorder_and_upcast_attn",
    "add_cross_attention",
)
#: Where positions come from: GPT-2's learned table only.
POSITIONS = ("learned",)
PREFIX = "transformer."
#: GPT-2's ``initializer_range``: the std of its initial weights and embeddings.
INITIALIZER_RANGE = 0.02
#: ``model_type`` of a GPT-2-layout model whose attention GPT-2 does not compute (a mechanism
#: other than scaled or unscaled, ``attnlab.lm.export``): a GPT-2 reader refuses it;
#: this module reads it as ``gpt2``, the mechanism from ``attnlab.mechanism``.
MODEL_TYPE = "attnlab_gpt2"


@dataclass(frozen=True)
class GPT2Config:
    """What the model computes from ``config.json``: GPT-2's fields, and the mechanism
    (``attnlab.mechanism`` or GPT-2's scaled attention), ``attention``."""

    vocab_size: int
    n_positions: int
    n_embd: int
    n_layer: int
    n_head: int
    n_inner: int
    layer_norm_epsilon: float
    tanh_gelu: bool
    tied: bool
    attention: Mechanism

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def mechanism(self) -> str:
        """The name of ``attention`` (as ``config.json`` names it)."""
        return self.attention.name


def parse_gpt2_config(
    raw: dict[str, Any], where: str = CONFIG, mechanisms: Mapping[str, Mechanism] | None = None
) -> GPT2Config:
    """A ``GPT2Config`` from a parsed ``config.json``; ``CheckpointError`` naming the field
    unless it describes a GPT-2 this module computes. ``attnlab.mechanism`` names a
    built-in or one of ``mechanisms`` (by name; a supplied namesake of a built-in is taken
    over it); another name, or a built-in's name the maker recorded as made from another
    reference, is an ``UnknownMechanismError``."""
    if raw.get("model_type") not in ("gpt2", MODEL_TYPE):
        raise CheckpointError(
            f"{where}: model_type {raw.get('model_type')!r} is not 'gpt2' or {MODEL_TYPE!r}"
        )
    for name in REFUSED_FLAGS:
        if raw.get(name):
            raise CheckpointError(f"{where}: {name} is true, which is not computed here")
    act = choice(raw, "activation_function", where, tuple(ACTIVATIONS), "gelu_new")
    eps = raw.get("layer_norm_epsilon", 1e-5)
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 < eps < 1:
        raise CheckpointError(f"{where}: layer_norm_epsilon must be in (0, 1), got {eps!r}")
    ours = an_object(raw, "attnlab", where) or {}
    default = "scaled" if boolean(raw, "scale_attn_weights", where, True) else "unscaled"
    mechanism = ours.get("mechanism", default)
    if not isinstance(mechanism, str) or not mechanism:
        raise CheckpointError(f"{where}: attnlab.mechanism must be a name, got {mechanism!r}")
    attention = mechanism_of(mechanism, ours.get("made_by"), mechanisms or {}, where)
    choice(ours, "positions", where, POSITIONS, POSITIONS[0], "attnlab.positions")
    n_embd = positive_int(raw, "n_embd", where)
    n_head = positive_int(raw, "n_head", where)
    if n_embd % n_head:
        raise CheckpointError(f"{where}: n_embd {n_embd} is not a multiple of n_head {n_head}")
    inner = raw.get("n_inner") or 4 * n_embd
    return GPT2Config(
        vocab_size=positive_int(raw, "vocab_size", where),
        n_positions=positive_int(raw, "n_positions", where),
        n_embd=n_embd,
        n_layer=positive_int(raw, "n_layer", where),
        n_head=n_head,
        n_inner=positive_int({"n_inner": inner}, "n_inner", where),
        layer_norm_epsilon=float(eps),
        tanh_gelu=ACTIVATIONS[act],
        tied=boolean(raw, "tie_word_embeddings", where, True),
        attention=attention,
    )


def gpt2_shapes(config: GPT2Config) -> dict[str, tuple[int, ...]]:
    """Every tensor the model reads, by its ``GPT2LMHeadModel`` name without the
    ``transformer.`` prefix (``lm_head.weight`` only when untied), and the mechanism's
    learned scalars; Conv1D weights are ``[in, out]``, ``lm_head`` ``[V, d]``."""
    D, inner, H = config.n_embd, config.n_inner, config.n_head
    shapes: dict[str, tuple[int, ...]] = {
        "wte.weight": (config.vocab_size, D),
        "wpe.weight": (config.n_positions, D),
    }
    mechanism = config.attention
    for i in range(config.n_layer):
        p = f"h.{i}."
        shapes |= {
            f"{p}ln_1.weight": (D,), f"{p}ln_1.bias": (D,),
            f"{p}attn.c_attn.weight": (D, 3 * D), f"{p}attn.c_attn.bias": (3 * D,),
            f"{p}attn.c_proj.weight": (D, D), f"{p}attn.c_proj.bias": (D,),
            f"{p}ln_2.weight": (D,), f"{p}ln_2.bias": (D,),
            f"{p}mlp.c_fc.weight": (D, inner), f"{p}mlp.c_fc.bias": (inner,),
            f"{p}mlp.c_proj.weight": (inner, D), f"{p}mlp.c_proj.bias": (D,),
        }  # fmt: skip
        for name, _ in mechanism.params:
            shapes[learned_name(i, name)] = (H,) if name in mechanism.per_head else ()
    shapes |= {"ln_f.weight": (D,), "ln_f.bias": (D,)}
    if not config.tied:
        shapes["lm_head.weight"] = (config.vocab_size, D)
    return shapes


#: The names of the mechanism's learned scalars start so (``learned_name``).
LEARNED_PREFIX = "attnlab."


def learned_name(layer: int, name: str) -> str:
    """The tensor of layer ``layer``'s learned mechanism scalar ``name`` (ours, not GPT-2's)."""
    return f"{LEARNED_PREFIX}h.{layer}.attn.{name}"


def load_gpt2(
    directory: Path | str, mechanisms: Mapping[str, Mechanism] | None = None
) -> Checkpoint:
    """Read and check the GPT-2 checkpoint in ``directory``: ``CheckpointError`` naming the
    file if one is missing or unreadable, if ``config.json`` is not a GPT-2 computed here
    (its mechanism a built-in or one of ``mechanisms``: ``parse_gpt2_config``), or if a
    tensor is missing or has another shape than ``config.json`` implies, or is a learned
    scalar (``LEARNED_PREFIX``) the mechanism read does not have."""
    return load_directory(
        directory, lambda raw, where: parse_gpt2_config(raw, where, mechanisms), gpt2_shapes,
        lambda config: ("n_layer", config.n_layer, "h."), lambda config: config.n_positions,
        PREFIX, owned=LEARNED_PREFIX,
    )  # fmt: skip


def _conv1d(x: Array, params: Params, name: str) -> Array:
    """GPT-2's Conv1D: ``x W + b`` with ``W`` stored ``[in, out]``."""
    return x @ params[f"{name}.weight"] + params[f"{name}.bias"]


def layer_theta(params: Params, config: GPT2Config, layer: int) -> dict[str, Array]:
    """The mechanism's scalars of block ``layer``: its constants at ``d``, its learned
    params from the layer's tensors (per-head ones shaped ``[H, 1, 1]``)."""
    mechanism = config.attention
    theta: dict[str, Any] = dict(mechanism.constant_values(config.head_dim))
    for name, _ in mechanism.params:
        value = jnp.asarray(params[learned_name(layer, name)])
        theta[name] = value[:, None, None] if name in mechanism.per_head else value
    return theta


def gpt2_forward(
    params: Params,
    config: GPT2Config,
    ids: ArrayLike,
    *,
    qk_scale: ArrayLike = 1.0,
    w_scale: ArrayLike = 1.0,
    layer_local: bool = False,
) -> tuple[Array, Trace]:
    """Next-token logits ``[B, T, vocab_size]`` of ``ids`` ``[B, T]`` and every layer's
    q, k, v and scalars (``Trace``); ``qk_scale`` is the drift ``a_qk``; ``w_scale``
    (a scalar or ``[n_layer]``) multiplies each layer's W_Q, W_K and their biases (GPT-2
    has no q/k norm: the same place as ``qk_scale``, layer by layer); ``layer_local``:
    each layer's input held constant for derivatives (``decoder.decoder_forward``'s)."""
    ids = jnp.asarray(ids)
    T, H, d = ids.shape[1], config.n_head, config.head_dim
    eps = config.layer_norm_epsilon
    mechanism = config.attention
    causal = jnp.arange(T)[None, :] <= jnp.arange(T)[:, None]
    context = causal_context(T, H)
    x = params["wte.weight"][ids] + params["wpe.weight"][:T]

    def heads(y: Array) -> Array:  # [B, T, D] -> [B, H, T, d]
        return y.reshape(*y.shape[:2], H, d).transpose(0, 2, 1, 3)

    trace = []
    for i in range(config.n_layer):
        p = f"h.{i}."
        x = jax.lax.stop_gradient(x) if layer_local else x
        a = layer_norm(x, params[f"{p}ln_1.weight"], params[f"{p}ln_1.bias"], eps)
        q, k, v = jnp.split(_conv1d(a, params, f"{p}attn.c_attn"), 3, axis=-1)
        w = jnp.broadcast_to(jnp.asarray(w_scale, jnp.float32), (config.n_layer,))[i]
        q, k, v = qk_scale * w * heads(q), qk_scale * w * heads(k), heads(v)
        theta = layer_theta(params, config, i)
        trace.append((q, k, v, theta))
        _, weights, _ = mechanism.attend(q, k, theta, causal, context)
        out = weighted_values(weights, v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = x + _conv1d(out, params, f"{p}attn.c_proj")
        a = layer_norm(x, params[f"{p}ln_2.weight"], params[f"{p}ln_2.bias"], eps)
        hidden = jax.nn.gelu(_conv1d(a, params, f"{p}mlp.c_fc"), approximate=config.tanh_gelu)
        x = x + _conv1d(hidden, params, f"{p}mlp.c_proj")
    x = layer_norm(x, params["ln_f.weight"], params["ln_f.bias"], eps)
    head = params["wte.weight"] if config.tied else params["lm_head.weight"]
    q, k, v, theta = zip(*trace, strict=True)
    stacked = {n: jnp.stack([t[n] for t in theta]) for n in theta[0]}
    return x @ head.T, Trace(jnp.stack(q), jnp.stack(k), jnp.stack(v), stacked)


def gpt2_init(config: GPT2Config, key: jax.Array) -> dict[str, np.ndarray]:
    """Tensors of a freshly initialised GPT-2 (``GPT2PreTrainedModel._init_weights``):
    weights and embeddings ``N(0, 0.02^2)``, the ``c_proj`` weights ``N(0, (0.02 /
    sqrt(2 L))^2)``, biases 0, LayerNorm scales 1, the mechanism's learned scalars their
    initial values at ``d``; one ``jax.random`` key per tensor, folded in by position."""
    mechanism = config.attention
    initial = {**mechanism.param_values(config.head_dim),
               **mechanism.head_values(config.head_dim, config.n_head)}  # fmt: skip
    tensors = {}
    for i, (name, shape) in enumerate(gpt2_shapes(config).items()):
        if name.startswith("attnlab."):
            value = jnp.broadcast_to(initial[name.rsplit(".", 1)[1]], shape)
        elif name.endswith("bias"):
            value = jnp.zeros(shape)
        elif ".ln_" in name or name.startswith("ln_"):
            value = jnp.ones(shape)
        else:
            std = (
                INITIALIZER_RANGE / math.sqrt(2 * config.n_layer)
                if "c_proj" in name
                else INITIALIZER_RANGE
            )
            value = std * jax.random.normal(jax.random.fold_in(key, i), shape, jnp.float32)
        tensors[name] = np.asarray(value, np.float32)
    return tensors


def qk_weights(tensors: dict[str, np.ndarray], config: GPT2Config, layer: int) -> tuple:
    """Block ``layer``'s query and key weights per head in float64, each ``[heads, D, d]``
    (the columns of ``c_attn``: q then k then v, head ``h`` the ``h``-th ``d`` of each)."""
    D, d = config.n_embd, config.head_dim
    w = tensors[f"h.{layer}.attn.c_attn.weight"].astype(np.float64)
    return tuple(
        np.stack([w[:, start + h * d : start + (h + 1) * d] for h in range(config.n_head)])
        for start in (0, D)
    )

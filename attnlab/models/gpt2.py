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
(``attnlab.mechanism``): a built-in (the recall task's twelve or the language model's
positional ones, as experiment 14 saves them) or one the reader supplies by name (a
researcher's own, ``load_gpt2(..., mechanisms=)``), whose learned scalars are tensors
``attnlab.h.<i>.attn.<name>`` (shape ``[]``, or ``[H]`` per head) and whose constants are
its own at ``d``. ``a_qk`` (1 for the model as trained) is the static drift
``q, k -> a q, a k`` before the mechanism.

``load_gpt2`` checks every file, every config field it computes from and every tensor's
shape (the sizes against the weights file's header and the machine's memory before any
tensor is read, each tensor's numbers finite floats: ``checkpoint.check_weights_header``,
``checkpoint.read_tensors``), and raises ``CheckpointError`` naming the file and what is
wrong; tensor names with or without the ``transformer.`` prefix are read, others
(attention-mask buffers) ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from attnlab.core.attention import weighted_values
from attnlab.core.context import causal_context
from attnlab.core.mechanism import Mechanism
from attnlab.core.references import ALL_BUILTINS
from attnlab.models.checkpoint import (
    CONFIG,
    TOKENIZER,
    WEIGHTS,
    Checkpoint,
    CheckpointError,
    _read_json,
    check_weights_header,
    files_present,
    is_file,
    load_checkpoint,
    read_tensors,
    read_tokenizer,
    sha256,
)

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


class UnknownMechanismError(CheckpointError):
    """A checkpoint's ``attnlab.mechanism`` that is no built-in and was not supplied:
    ``name``, and ``made_from``, the reference its maker recorded (None if none)."""

    def __init__(self, message: str, name: str, made_from: str | None) -> None:
        super().__init__(message)
        self.name, self.made_from = name, made_from


def _positive_int(raw: dict[str, Any], name: str, where: str, default: Any = None) -> int:
    value = raw.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CheckpointError(f"{where}: {name} must be a positive integer, got {value!r}")
    return value


def _mechanism_of(
    name: str, made_by: Any, supplied: Mapping[str, Mechanism], where: str
) -> Mechanism:
    """The mechanism ``attnlab.mechanism`` names: one ``supplied`` under that name, else the
    built-in of the name unless the maker recorded another reference (``made_by.mechanism``:
    a researcher's namesake of a built-in is never read as the built-in)."""
    made_from = made_by.get("mechanism") if isinstance(made_by, dict) else None
    made_from = made_from if isinstance(made_from, str) else None
    if name in supplied:
        return supplied[name]
    if name in ALL_BUILTINS and made_from in (None, name):
        return ALL_BUILTINS[name]
    if name in ALL_BUILTINS:
        why = f"was made from {made_from!r}, not the built-in of its name, and was not supplied"
    elif made_from:
        why = f"is not a built-in and was not supplied (it was made from {made_from!r})"
    else:
        why = f"is neither a built-in ({', '.join(ALL_BUILTINS)}) nor supplied"
    raise UnknownMechanismError(f"{where}: attnlab.mechanism {name!r} {why}", name, made_from)


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
    act = raw.get("activation_function", "gelu_new")
    if act not in ACTIVATIONS:
        raise CheckpointError(
            f"{where}: activation_function {act!r}, only {', '.join(ACTIVATIONS)}"
        )
    eps = raw.get("layer_norm_epsilon", 1e-5)
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 < eps < 1:
        raise CheckpointError(f"{where}: layer_norm_epsilon must be in (0, 1), got {eps!r}")
    ours = raw.get("attnlab", {})
    if not isinstance(ours, dict):
        raise CheckpointError(f"{where}: attnlab must be an object")
    default = "scaled" if raw.get("scale_attn_weights", True) else "unscaled"
    mechanism = ours.get("mechanism", default)
    if not isinstance(mechanism, str) or not mechanism:
        raise CheckpointError(f"{where}: attnlab.mechanism must be a name, got {mechanism!r}")
    attention = _mechanism_of(mechanism, ours.get("made_by"), mechanisms or {}, where)
    positions = ours.get("positions", "learned")
    if positions not in POSITIONS:
        raise CheckpointError(f"{where}: attnlab.positions {positions!r}, only learned")
    n_embd = _positive_int(raw, "n_embd", where)
    n_head = _positive_int(raw, "n_head", where)
    if n_embd % n_head:
        raise CheckpointError(f"{where}: n_embd {n_embd} is not a multiple of n_head {n_head}")
    inner = raw.get("n_inner") or 4 * n_embd
    return GPT2Config(
        vocab_size=_positive_int(raw, "vocab_size", where),
        n_positions=_positive_int(raw, "n_positions", where),
        n_embd=n_embd,
        n_layer=_positive_int(raw, "n_layer", where),
        n_head=n_head,
        n_inner=_positive_int({"n_inner": inner}, "n_inner", where),
        layer_norm_epsilon=float(eps),
        tanh_gelu=ACTIVATIONS[act],
        tied=bool(raw.get("tie_word_embeddings", True)),
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


@dataclass(frozen=True)
class GPT2Checkpoint:
    """A loaded GPT-2 checkpoint: its configuration, tensors by ``gpt2_shapes`` name
    (float32 numpy), tokenizer (no padding, no truncation), where it came from, its
    weights' checksum, the longest row (``n_positions``) and ``config.json``'s ``attnlab``
    object (empty for a checkpoint not written here)."""

    config: GPT2Config
    tensors: dict[str, np.ndarray]
    tokenizer: Any  # tokenizers.Tokenizer
    directory: Path
    weights_sha256: str
    max_seq_length: int
    attnlab: dict[str, Any]


def load_gpt2(
    directory: Path | str, mechanisms: Mapping[str, Mechanism] | None = None
) -> GPT2Checkpoint:
    """Read and check the GPT-2 checkpoint in ``directory``: ``CheckpointError`` naming the
    file if one is missing or unreadable, if ``config.json`` is not a GPT-2 computed here
    (its mechanism a built-in or one of ``mechanisms``: ``parse_gpt2_config``), or if a
    tensor is missing or has another shape than ``config.json`` implies, or is a learned
    scalar (``LEARNED_PREFIX``) the mechanism read does not have."""
    directory = Path(directory)
    files_present(directory)
    raw = _read_json(directory / CONFIG)
    where = str(directory / CONFIG)
    config = parse_gpt2_config(raw, where, mechanisms)
    path = directory / WEIGHTS
    layers = ("n_layer", config.n_layer, "h.")
    check_weights_header(path, PREFIX, layers, lambda: gpt2_shapes(config), where)
    tensors = read_tensors(path, gpt2_shapes(config), PREFIX, owned=LEARNED_PREFIX)
    tokenizer = read_tokenizer(directory / TOKENIZER)
    if tokenizer.get_vocab_size() > config.vocab_size:
        raise CheckpointError(
            f"{directory / TOKENIZER}: {tokenizer.get_vocab_size()} tokens, more than "
            f"config.json's vocab_size {config.vocab_size}"
        )
    return GPT2Checkpoint(
        config, tensors, tokenizer, directory, sha256(path), config.n_positions,
        raw.get("attnlab", {}),
    )  # fmt: skip


def model_type(directory: Path | str) -> str | None:
    """``config.json``'s ``model_type`` in ``directory``, None where the file is missing
    (the loader then names it); ``CheckpointError`` where it cannot be looked at."""
    path = Path(directory) / CONFIG
    return _read_json(path).get("model_type") if is_file(path) else None


def read_checkpoint(
    directory: Path | str | None, mechanisms: Mapping[str, Mechanism] | None = None
) -> GPT2Checkpoint | Checkpoint:
    """The checkpoint in ``directory`` by its ``model_type``: GPT-2 (``load_gpt2``, with
    ``mechanisms`` supplied), else a BERT encoder (``load_checkpoint``; None: the packaged
    one); ``CheckpointError`` naming ``config.json`` for another model type."""
    if directory is None:
        return load_checkpoint(None)
    kind = model_type(directory)
    if kind in ("gpt2", MODEL_TYPE):
        return load_gpt2(directory, mechanisms)
    if kind not in (None, "bert"):
        raise CheckpointError(
            f"{Path(directory) / CONFIG}: model_type {kind!r}, only 'bert', 'gpt2' and "
            f"{MODEL_TYPE!r} are read"
        )
    return load_checkpoint(directory)


class Trace(NamedTuple):
    """Each layer's queries, keys and values as the projections give them (times the
    drift ``a_qk``), ``[layers, batch, heads, T, d]``, and the mechanism's scalars per layer
    (each ``[layers]``, or ``[layers, heads, 1, 1]`` per head)."""

    q: Array
    k: Array
    v: Array
    theta: dict[str, Array]


def layer_norm(x: Array, scale: Array, bias: Array, eps: float) -> Array:
    """``(x - mean) / sqrt(var + eps) * scale + bias`` over the last axis."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * scale + bias


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
    params: Params, config: GPT2Config, ids: ArrayLike, *, qk_scale: ArrayLike = 1.0
) -> tuple[Array, Trace]:
    """Next-token logits ``[B, T, vocab_size]`` of ``ids`` ``[B, T]`` and every layer's
    q, k, v and scalars (``Trace``); ``qk_scale`` is the drift ``a_qk``."""
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
        a = layer_norm(x, params[f"{p}ln_1.weight"], params[f"{p}ln_1.bias"], eps)
        q, k, v = jnp.split(_conv1d(a, params, f"{p}attn.c_attn"), 3, axis=-1)
        q, k, v = qk_scale * heads(q), qk_scale * heads(k), heads(v)
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


def next_token_loss(logits: ArrayLike, ids: ArrayLike) -> Array:
    """Per-row mean next-token cross-entropy ``[B]`` (nats per token) of ``logits``
    ``[B, T, V]`` on ``ids`` ``[B, T]``: position ``t`` predicts ``ids[:, t + 1]``."""
    logits = jnp.asarray(logits)[:, :-1]
    targets = jnp.asarray(ids)[:, 1:]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0], axis=-1)

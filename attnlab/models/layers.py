"""What the checkpoint families share inside a forward: the normalisations and the
per-layer record of what attention saw (``Trace``).

``layer_norm``: ``(x - mean) / sqrt(var + eps) * scale + bias`` over the last axis (Ba et
al. 2016; BERT's and GPT-2's). ``rms_norm``: RMSNorm, with Gemma's ``(1 + w)`` or without.
``Rope``, ``read_rope`` and ``inverse_frequencies``: a config's rotary positions
(``rope_theta``, ``rope_scaling`` or transformers v5's ``rope_parameters``; the types
``default``, ``linear``, ``llama3`` and ``yarn``), and ``rope_tables`` and ``rotate`` to
apply them. ``repeat_kv``:
grouped-query attention's key/value heads shared by their query heads.
``next_token_loss``: a decoder's mean next-token cross-entropy per row.

``attnlab.lm.model`` keeps its own ``rotate``: the same half-split rotation at ``rope_theta``
10000, with its angles computed in float32 inside the trained program (``rope_tables`` here
rounds float64 tables once); sharing these would move 14's rotary results in the last bits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from attnlab.models.config_keys import an_object, boolean, positive_int, positive_number
from attnlab.models.files import CheckpointError

Array = jax.Array
#: The ``rope_type`` values computed here.
ROPE_TYPES = ("default", "linear", "llama3", "yarn")


class Trace(NamedTuple):
    """Each layer's queries, keys and values as attention sees them, ``[layers, batch,
    heads, T, d]``, and the mechanism's scalars per layer (each ``[layers]``, or ``[layers,
    heads, 1, 1]`` per head; empty for a model whose attention has none)."""

    q: Array
    k: Array
    v: Array
    theta: dict[str, Array]


def layer_norm(x: Array, scale: Array, bias: Array, eps: float) -> Array:
    """``(x - mean) / sqrt(var + eps) * scale + bias`` over the last axis."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * scale + bias


def next_token_loss(logits: ArrayLike, ids: ArrayLike) -> Array:
    """Per-row mean next-token cross-entropy ``[B]`` (nats per token) of ``logits``
    ``[B, T, V]`` on ``ids`` ``[B, T]``: position ``t`` predicts ``ids[:, t + 1]``."""
    logits = jnp.asarray(logits)[:, :-1]
    targets = jnp.asarray(ids)[:, 1:]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0], axis=-1)


def causal_masks(length: int, windows: tuple[int | None, ...]) -> Array:
    """``[len(windows), length, length]``: per layer, which key ``j`` query ``i`` sees:
    ``j <= i``, and ``i - W < j`` where the layer's window ``W`` is given (a sliding layer;
    None: every earlier key)."""
    i, j = jnp.arange(length)[:, None], jnp.arange(length)[None, :]
    reach = jnp.asarray([length if w is None else w for w in windows])[:, None, None]
    return (j <= i) & (i - j < reach)


def rms_norm(x: Array, weight: Array, eps: float, offset: float = 0.0) -> Array:
    """RMSNorm (Zhang & Sennrich 2019) over the last axis, in float32:
    ``x / sqrt(mean(x^2) + eps) * (offset + w)``; ``offset`` 0 for Llama, Qwen3 and OLMo 2,
    1 for Gemma's ``(1 + w)`` (its weights are stored as the deviation from 1)."""
    x = jnp.asarray(x, jnp.float32)
    return x * jax.lax.rsqrt(jnp.mean(jnp.square(x), -1, keepdims=True) + eps) * (offset + weight)


def repeat_kv(x: Array, groups: int) -> Array:
    """Grouped-query attention's keys or values ``[B, KV, T, d]`` repeated to the query
    heads, ``[B, KV * groups, T, d]``: query head ``h`` reads key/value head
    ``h // groups`` (Ainslie et al. 2023; Hugging Face's ``repeat_kv``)."""
    return jnp.repeat(x, groups, axis=1)


def rotate(x: Array, cos: Array, sin: Array) -> Array:
    """Rotary positions (RoPE, Su et al. 2021) in the half-split layout of Hugging Face's
    ``rotate_half``: with ``x = [x1, x2]`` along the last axis,
    ``x cos + [-x2, x1] sin``, ``cos`` and ``sin`` ``[T, d]`` (``rope_tables``)."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    return x * cos + jnp.concatenate([-x2, x1], axis=-1) * sin


def rope_tables(inv_freq: np.ndarray, attention_factor: float, length: int) -> tuple:
    """``cos`` and ``sin`` ``[length, d]`` of positions ``0 .. length - 1`` at the
    frequencies ``inv_freq`` ``[d / 2]`` (each repeated for both halves), times
    ``attention_factor`` (YaRN's: it multiplies cos and sin, so the logits by its square),
    computed in float64 and rounded to float32 once."""
    angles = np.outer(np.arange(length, dtype=np.float64), np.asarray(inv_freq, np.float64))
    angles = np.concatenate([angles, angles], axis=-1)
    tables = (np.cos(angles) * attention_factor, np.sin(angles) * attention_factor)
    return tuple(jnp.asarray(t, jnp.float32) for t in tables)


@dataclass(frozen=True)
class Rope:
    """Rotary positions as a config gives them: the base ``theta``, the ``rope_type`` and
    its parameters (Hugging Face's names and defaults; ``original`` is
    ``original_max_position_embeddings``)."""

    theta: float
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original: int = 0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float = 1.0
    truncate: bool = True


def read_rope(params: Any, theta: Any, max_positions: int, where: str, key: str) -> Rope:
    """The ``Rope`` of a config's rotary parameters ``params`` (its ``rope_scaling``, or a
    ``rope_parameters`` object, which may carry its own ``rope_theta``; None: plain RoPE)
    at base ``theta``; ``key`` names them in errors. ``CheckpointError`` (one line naming
    ``where`` and the key, through ``files``' checks) for parameters that are not an
    object, a type not in ``ROPE_TYPES``, a parameter that is not a positive number, an
    ``original_max_position_embeddings`` that is not a positive integer, Llama 3's
    ``high_freq_factor`` not above its ``low_freq_factor`` (its blend divides by their
    difference) and YaRN at ``rope_theta`` 1 or less (its correction divides by
    ``ln theta``). YaRN's ``attention_factor`` defaults to ``0.1 ln(factor) + 1`` (or the
    ratio of the two ``mscale`` terms where ``mscale`` and ``mscale_all_dim`` are given);
    ``original_max_position_embeddings`` defaults to ``max_positions``."""
    params = dict(an_object({key: params}, key, where) or {})
    theta = positive_number(params, "rope_theta", where, theta)
    params.pop("rope_theta", None)
    kind = params.get("rope_type", params.get("type", "default"))
    if not isinstance(kind, str) or kind not in ROPE_TYPES:
        raise CheckpointError(
            f"{where}: {key}.rope_type {kind!r} is not computed here (only {', '.join(ROPE_TYPES)})"
        )
    rope = Rope(theta, kind)
    if kind == "default":
        return rope
    factor = positive_number(params, "factor", where, label=f"{key}.factor")
    name = "original_max_position_embeddings"
    given = {name: params.get(name) or max_positions}  # null or 0: the model's positions
    original = positive_int(given, name, where, label=f"{key}.{name}")
    values = {"factor": factor, "original": original}
    if kind == "llama3":
        for name in ("low_freq_factor", "high_freq_factor"):
            values[name] = positive_number(params, name, where, label=f"{key}.{name}")
        if values["high_freq_factor"] <= values["low_freq_factor"]:
            raise CheckpointError(
                f"{where}: {key}.high_freq_factor must be more than its low_freq_factor"
            )
    if kind == "yarn":
        if theta <= 1:
            raise CheckpointError(
                f"{where}: rope_theta must be more than 1 for YaRN (its correction divides by "
                f"ln rope_theta), got {theta:g}"
            )
        for name in ("beta_fast", "beta_slow"):
            default = getattr(rope, name)
            values[name] = positive_number(params, name, where, default, f"{key}.{name}")
        values["truncate"] = boolean(params, "truncate", where, True, f"{key}.truncate")
        values["attention_factor"] = _yarn_attention_factor(params, factor, where, key)
    return Rope(rope.theta, kind, **values)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_attention_factor(params: dict[str, Any], factor: float, where: str, key: str) -> float:
    """YaRN's factor on cos and sin (Peng et al. 2023, sec. 3.4; Hugging Face's
    ``_compute_yarn_parameters``): the given ``attention_factor``, else
    ``mscale(factor, mscale) / mscale(factor, mscale_all_dim)`` where both are given
    (positive numbers; 0 or null: not given), else ``mscale(factor) = 0.1 ln(factor) + 1``."""
    if params.get("attention_factor") is not None:
        return positive_number(params, "attention_factor", where, label=f"{key}.attention_factor")
    given = {}
    for name in ("mscale", "mscale_all_dim"):
        if params.get(name) not in (None, 0):
            given[name] = positive_number(params, name, where, label=f"{key}.{name}")
    if len(given) == 2:
        return _yarn_mscale(factor, given["mscale"]) / _yarn_mscale(factor, given["mscale_all_dim"])
    return _yarn_mscale(factor)


def inverse_frequencies(rope: Rope, dim: int) -> np.ndarray:
    """The rotary frequencies ``[dim / 2]`` (float64) of ``rope`` for heads of width ``dim``:
    ``theta^(-2i / dim)``, then per ``rope_type`` (Hugging Face's ``ROPE_INIT_FUNCTIONS``):
    ``linear`` divides them by ``factor``; ``llama3`` divides those of wavelength above
    ``original / low_freq_factor`` by ``factor``, keeps those below ``original /
    high_freq_factor`` and blends between; ``yarn`` blends interpolated (``/ factor``) and
    original frequencies by a linear ramp between the correction dimensions of
    ``beta_fast`` and ``beta_slow`` rotations over ``original`` positions."""
    base = rope.theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    inv = 1.0 / base
    if rope.rope_type == "linear":
        return inv / rope.factor
    if rope.rope_type == "llama3":
        low_wavelength = rope.original / rope.low_freq_factor
        high_wavelength = rope.original / rope.high_freq_factor
        wavelength = 2 * math.pi / inv
        scaled = np.where(wavelength > low_wavelength, inv / rope.factor, inv)
        smooth = (rope.original / wavelength - rope.low_freq_factor) / (
            rope.high_freq_factor - rope.low_freq_factor
        )
        blended = (1 - smooth) * scaled / rope.factor + smooth * scaled
        medium = (wavelength >= high_wavelength) & (wavelength <= low_wavelength)
        return np.where(medium, blended, scaled)
    if rope.rope_type == "yarn":

        def correction(rotations: float) -> float:
            return (
                dim
                * math.log(rope.original / (rotations * 2 * math.pi))
                / (2 * math.log(rope.theta))
            )

        low, high = correction(rope.beta_fast), correction(rope.beta_slow)
        if rope.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        high = high + 0.001 if low == high else high
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
        extrapolation = 1 - ramp
        return inv / rope.factor * (1 - extrapolation) + inv * extrapolation
    return inv

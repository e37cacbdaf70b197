"""A small causal language model (GPT-2's layout, Flax linen) whose every head runs a
``Mechanism``: the model experiment 14 trains.

For tokens ``t_1 .. t_T`` (bytes, vocabulary 256) and ``L`` blocks of ``H`` heads of width
``d_h = d_model / H``:

    x_0 = E[t] + P[1..T]                                 (learned positions, GPT-2)
    a   = LN(x)  (scale only, no bias)
    q, k, v = a W_Q, a W_K, a W_V          split into H heads   [H, T, d_h]
    p   = weights(logits(q, k, **theta), causal)          (the mechanism, every head)
    x   = x + (p v) W_O                                   (heads joined)
          (with a gate: (p v) * sigmoid(a W_gate) per element or per head, before W_O)
    x   = x + GELU(LN(x) W_1) W_2                         (MLP of width 4 d_model)
    logits = LN(x_L) W_head                               (untied head)   [T, 256]

Pre-LN, no biases, GELU (tanh approximation, GPT-2's ``gelu_new``), untied head. Every
head passes the mechanism its ``Context`` (positions ``0 .. T-1``, its index of ``H``), so
mechanisms that ask for ``q_pos``, ``k_pos``, ``head`` or ``n_heads`` (ALiBi, SSMax by
position) run here, with their own mask (a sliding window) combined with the causal one,
and ``per_head`` params are learned as vectors ``[H]``. With
``positions="rotary"`` there is no ``P``; q and k are rotated by their positions (RoPE, Su
et al. 2021, the half-split form of GPT-NeoX) before the mechanism sees them, as in
Wortsman et al. 2023; with ``positions="none"`` neither (NoPE: the causal mask alone tells
order, as ALiBi's model has no position embeddings, Press et al. 2022). Only learned
positions bound the length a model reads (``max_length``). The causal mask is the boolean
``k_pos <= q_pos``; a mechanism that asks for the row length (``row_length``, SSMax,
sigmoid) gets each row's own, ``q_pos + 1``.

Initialisation (GPT-2 / nanoGPT): every weight and embedding N(0, 0.02^2), the two
projections that write into the residual stream (``W_O``, ``W_2``) N(0, (0.02 /
sqrt(2 L))^2); W_Q and W_K times ``d_h ** qk_init_exponent`` (the folded mechanism); LN
scales 1; the mechanism's learned scalars their initial values at ``d_h``, one per layer
(shared by the layer's heads).

The model returns the next-byte logits and, per layer, the statistics the sweep records
(``LayerStats``): the largest attention logit ``max |z|`` over the allowed entries, the
mean attention entropy and the mean query and key norms as the logits see them.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from attnlab.core.attention import weighted_values
from attnlab.core.context import causal_context
from attnlab.core.hooks import gated_output
from attnlab.core.mechanism import Mechanism
from attnlab.core.softmax_stats import entropy

Positions = Literal["learned", "rotary", "none"]
POSITIONS: tuple[str, ...] = ("learned", "rotary", "none")
#: Bytes.
VOCAB = 256
#: GPT-2's initialisation std.
INIT_STD = 0.02
#: RoPE's base (Su et al. 2021).
ROPE_BASE = 10000.0
#: LayerNorm's epsilon (GPT-2's).
LN_EPS = 1e-5


class LayerStats(NamedTuple):
    """Per-layer statistics of one forward pass, each ``[n_layers]``."""

    max_logit: jax.Array
    entropy: jax.Array
    q_norm: jax.Array
    k_norm: jax.Array


def causal_mask(length: int) -> jax.Array:
    """``[T, T]`` boolean, True where key ``j <= `` query ``i``."""
    positions = jnp.arange(length)
    return positions[None, :] <= positions[:, None]


def rotate(x: jax.Array, base: float = ROPE_BASE) -> jax.Array:
    """RoPE on ``x`` ``[..., T, d]`` (``d`` even), half-split form: with ``x = [x1; x2]`` and
    angles ``theta_{t,i} = t base^(-2i/d)``, ``[x1 cos - x2 sin; x2 cos + x1 sin]``. Dot
    products of rotated q and k depend on positions only through ``i - j``."""
    length, d = x.shape[-2], x.shape[-1]
    half = d // 2
    freq = base ** (-jnp.arange(half, dtype=jnp.float32) * 2 / d)
    angle = jnp.arange(length, dtype=jnp.float32)[:, None] * freq[None, :]
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _dense(name: str, module: nn.Module, x: jax.Array, shape: tuple[int, int], std: float):
    """``x W`` for ``x`` ``[..., d_in]`` and a learned ``W`` ``[d_in, d_out]``, with ``x``
    flattened to ``[N, d_in]`` first: the same products, but the weight gradient ``x^T dy``
    becomes one 2-D matmul, where XLA's CPU backend lowers the contraction over several
    leading axes to a slower one (docs/performance.md)."""
    w = module.param(name, nn.initializers.normal(std), shape)
    return (x.reshape(-1, shape[0]) @ w).reshape(*x.shape[:-1], shape[1])


class LayerNorm(nn.Module):
    """``(x - mean) / sqrt(var + eps) * g``: LayerNorm with a learned scale, no bias."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        g = self.param("scale", nn.initializers.ones, (x.shape[-1],))
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + LN_EPS) * g


class CausalSelfAttention(nn.Module):
    """``n_heads`` causal heads through ``mechanism``; returns the output and its stats
    ``(max |z|, mean entropy, mean |q|, mean |k|)`` as scalars."""

    mechanism: Mechanism
    n_heads: int
    n_layers: int
    positions: Positions = "learned"

    @nn.compact
    def __call__(self, a: jax.Array, constants: dict | None = None):
        mech = self.mechanism
        length, d = a.shape[-2], a.shape[-1]
        d_h = d // self.n_heads
        fold = d_h**mech.qk_init_exponent
        q = _dense("W_Q", self, a, (d, d), INIT_STD * fold)
        k = _dense("W_K", self, a, (d, d), INIT_STD * fold)
        v = _dense("W_V", self, a, (d, d), INIT_STD)

        def heads(x: jax.Array) -> jax.Array:  # [..., T, H w] -> [..., H, T, w]
            return jnp.swapaxes(x.reshape(*x.shape[:-1], self.n_heads, -1), -2, -3)

        q, k, v = heads(q), heads(k), heads(v)
        if self.positions == "rotary":
            q, k = rotate(q), rotate(k)
        # q and k before the mechanism, for its ownership (recorded with
        # mutable=["intermediates"] only).
        self.sow("intermediates", "q", q)
        self.sow("intermediates", "k", k)
        theta = dict(mech.constant_values(d_h) if constants is None else constants)
        for name, value in mech.param_values(d_h).items():
            if name not in mech.per_head:
                theta[name] = self.param(name, nn.initializers.constant(value), ())
        for name, value in mech.head_values(d_h, self.n_heads).items():  # [H] -> [H, 1, 1]
            learned = self.param(name, lambda *_, v=value: v, (self.n_heads,))
            theta[name] = learned[:, None, None]
        context = causal_context(length, self.n_heads)
        z, p, mask = mech.attend(q, k, theta, causal_mask(length), context)
        o = weighted_values(p, v)  # [..., H, T, d_h]
        if mech.gate is not None:  # sigmoid(a W_gate), elementwise or one per head
            width = d if mech.gate == "element" else self.n_heads
            g = heads(_dense("W_gate", self, a, (d, width), INIT_STD))
            o = gated_output(o, g)
        o = jnp.swapaxes(o, -2, -3).reshape(*a.shape)
        out = _dense("W_O", self, o, (d, d), INIT_STD / math.sqrt(2 * self.n_layers))
        if self.is_mutable_collection("intermediates"):  # QK-Clip's S_h (attnlab.lm.train)
            heads_axes = tuple(i for i in range(z.ndim) if i != z.ndim - 3)
            self.sow("intermediates", "head_max_logit",
                     jnp.max(jnp.where(mask, z, -jnp.inf), axis=heads_axes))  # fmt: skip
            self.sow("intermediates", "head_max_abs_logit",
                     jnp.max(jnp.where(mask, jnp.abs(z), 0.0), axis=heads_axes))  # fmt: skip
        seen_q, seen_k = mech.prepare(q, k)  # q and k as the logits see them
        stats = (
            jnp.max(jnp.where(mask, jnp.abs(z), 0.0)),
            jnp.mean(entropy(p)),
            jnp.mean(jnp.linalg.norm(seen_q, axis=-1)),
            jnp.mean(jnp.linalg.norm(seen_k, axis=-1)),
        )
        return out, stats


class Block(nn.Module):
    """One pre-LN block: attention, then the GELU MLP, each added to the residual stream."""

    mechanism: Mechanism
    n_heads: int
    n_layers: int
    positions: Positions = "learned"

    @nn.compact
    def __call__(self, x: jax.Array, constants: dict | None = None):
        d = x.shape[-1]
        attn = CausalSelfAttention(self.mechanism, self.n_heads, self.n_layers, self.positions,
                                   name="attn")  # fmt: skip
        out, stats = attn(LayerNorm(name="ln_1")(x), constants)
        x = x + out
        h = _dense("W_1", self, LayerNorm(name="ln_2")(x), (d, 4 * d), INIT_STD)
        h = jax.nn.gelu(h, approximate=True)
        x = x + _dense("W_2", self, h, (4 * d, d), INIT_STD / math.sqrt(2 * self.n_layers))
        return x, stats


class CausalLM(nn.Module):
    """The causal LM of the module docstring.

    Attributes:
      mechanism: how every head turns q and k into attention weights.
      d_model: residual width; ``d_model / n_heads`` is the head width ``d_h``.
      n_layers: blocks.
      n_heads: heads per block.
      max_length: the longest sequence with learned positions (rows of their table); a
        model with rotary or no positions reads any length.
      positions: ``learned`` (GPT-2), ``rotary`` (RoPE, Wortsman et al.) or ``none``.
    """

    mechanism: Mechanism
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    max_length: int = 64
    positions: Positions = "learned"

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @nn.compact
    def __call__(
        self, tokens: jax.Array, constants: dict | None = None
    ) -> tuple[jax.Array, LayerStats]:
        """Next-byte logits ``[..., T, 256]`` of ``tokens`` ``[..., T]`` and ``LayerStats``.
        ``constants`` (default: the mechanism's own at ``d_h``) may be traced."""
        if self.d_model % self.n_heads or self.d_head % 2:
            raise ValueError(
                f"CausalLM: d_model {self.d_model} must split into {self.n_heads} heads of even "
                "width"
            )
        if self.positions not in POSITIONS:
            raise ValueError(f"CausalLM.positions must be one of {POSITIONS}")
        length = tokens.shape[-1]
        if self.positions == "learned" and length > self.max_length:
            raise ValueError(
                f"CausalLM: {length} tokens exceed max_length {self.max_length} (the rows of "
                "its position table)"
            )
        wte = self.param("wte", nn.initializers.normal(INIT_STD), (VOCAB, self.d_model))
        x = jnp.take(wte, tokens, axis=0)
        if self.positions == "learned":
            wpe = self.param(
                "wpe", nn.initializers.normal(INIT_STD), (self.max_length, self.d_model)
            )
            x = x + wpe[:length]
        stats = []
        for layer in range(self.n_layers):
            block = Block(self.mechanism, self.n_heads, self.n_layers, self.positions,
                          name=f"h_{layer}")  # fmt: skip
            x, layer_stats = block(x, constants)
            stats.append(layer_stats)
        x = LayerNorm(name="ln_f")(x)
        logits = _dense("lm_head", self, x, (self.d_model, VOCAB), INIT_STD)
        return logits, LayerStats(*(jnp.stack(s) for s in zip(*stats, strict=True)))


def program_lm(model: CausalLM) -> CausalLM:
    """``model`` with what only sets initial values put to canonical ones
    (``Mechanism.program``): models with equal ``program_lm`` share one compiled step."""
    return model.clone(mechanism=model.mechanism.program())

"""The single-head attention model of the recall demo (Flax linen).

One attention head reads one memory slot per key-value pair and a linear readout names the
value. With the defaults (``slot="concat"``, ``init_rule="natural"``, ``bias=False``), the
model the 04 demo has always trained:

    x_q = E_key[query]                       [d_model]
    x_i = [E_key[key_i] ; E_val[value_i]]    [2 d_model]
    q = x_q W_Q,  k_i = x_i W_K,  v_i = x_i W_V          (no biases; width d_k)
    o = p v,  p = weights(logits(q, k))  (the mechanism: ``attnlab.core.mechanism``)
    o = o * sigmoid(x_q W_gate)             (a gated mechanism only: W_gate [d_model, d_k or 1])
    logits = o W_O                            [n_value_tokens]

The article leaves open how a pair becomes a slot and how parameters are initialised; the
readings of ``attnlab.recall.readings`` choose among these laws.

``slot`` (how a pair becomes a slot; the query is always the key token asked for):

=============  ==========================================================================
``concat``     ``x_i = [E_key[k_i]; E_val[v_i]]``; W_K, W_V are ``(2 d_model, d_k)``
``sum``        ``x_i = E_key[k_i] + E_val[v_i]``; W_K, W_V are ``(d_model, d_k)``
``separate``   ``k_i = E_key[k_i] W_K`` (key token only), ``v_i = E_val[v_i] W_V`` (value
               token only); W_K, W_V are ``(d_model, d_k)``
``onehot``     no embedding tables: tokens are one-hot vectors fed to the linear layers;
               ``q = onehot(query) W_Q`` with W_Q ``(n_key_tokens, d_k)``, ``x_i =
               [onehot(k_i); onehot(v_i)]`` with W_K, W_V ``(n_key + n_value, d_k)``;
               ``d_model`` is unused
=============  ==========================================================================

W_O is always ``(d_k, n_value_tokens)``. ``bias=True`` adds ``b_Q, b_K, b_V`` (``[d_k]``) to
q, k, v and ``b_O`` (``[n_value_tokens]``) to the logits.

``init`` (the model's ``init_rule``; fan-in and fan-out of a ``(rows, cols)`` weight are
``rows`` and ``cols``; of an embedding table ``(n_tokens, d_model)``, ``n_tokens`` and
``d_model``):

=============  ==========================================================================
``natural``    embeddings N(0, embed_init_std^2); W_Q, W_K truncated-normal with variance
               ``d_k^(2 e) / fan_in`` (``e`` = the mechanism's ``qk_init_exponent``); W_V,
               W_O LeCun-normal (truncated normal, variance 1/fan_in); biases 0
``pytorch``    embeddings N(0, 1) (``nn.Embedding``); every weight and bias U(-1/sqrt(fan_in),
               1/sqrt(fan_in)) (``nn.Linear``; a bias takes its weight's fan_in)
``glorot``     every weight and embedding table U(-l, l), ``l = sqrt(6 / (fan_in +
               fan_out))``; biases 0
``gpt``        every weight and embedding N(0, 0.02^2); biases 0
=============  ==========================================================================

For every init but ``natural`` (which folds it into the variance as above) W_Q and W_K,
and b_Q and b_K if present, are multiplied by the folding factor ``d_k^e``, so q and k, and
hence folded logits, are ``d_k^e`` times their unfolded values at step 0.
``embed_init_std`` applies to ``natural`` only (``RecallConfig`` rejects it elsewhere).

The natural initialisation follows the article's variance argument: with standard normal
embeddings and LeCun-normal projections, q and k (concat slots) have unit-variance entries
at step 0 and unscaled logits have std sqrt(d_k).

Every input is a token, so projecting the token tables (32 rows each) and then gathering
rows gives exactly the projections of every slot; the step's cost is then independent of
the batch size and sequence length.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import flax.linen as nn
import jax
import jax.numpy as jnp

from attnlab.core.attention import weighted_values
from attnlab.core.hooks import gated_output
from attnlab.core.mechanism import Mechanism, MechanismError, refusal
from attnlab.recall.task import Batch, RecallTask

Slot = Literal["concat", "sum", "separate", "onehot"]
Init = Literal["natural", "pytorch", "glorot", "gpt"]
#: The slot encodings and initialisation conventions, in the order of the readings table.
SLOTS: tuple[str, ...] = ("concat", "sum", "separate", "onehot")
INITS: tuple[str, ...] = ("natural", "pytorch", "glorot", "gpt")
#: The std of every weight and embedding entry under ``init="gpt"``.
GPT_STD = 0.02
#: The model's biases (``bias=True`` only), and the projections of queries and keys,
#: which static drift multiplies.
BIAS_PARAMS = ("b_Q", "b_K", "b_V", "b_O")
QUERY_KEY_PARAMS = ("W_Q", "W_K", "b_Q", "b_K")
#: The model's own parameter names (``attnlab.core.mechanism.RESERVED_PREFIXES`` keeps a
#: mechanism's scalars from reusing them).
MODEL_PARAMS = ("E_key", "E_val", "W_Q", "W_K", "W_V", "W_O", "W_gate", *BIAS_PARAMS)
#: A mechanism's fixed scalars by name (``Mechanism.constant_values``), possibly traced.
MechanismConstants = dict

Initializer = Callable[..., jax.Array]


@jax.custom_vjp
def _rows(table: jax.Array, tokens: jax.Array) -> jax.Array:
    """``table[tokens]``, whose gradient with respect to ``table`` is the scatter-add

        dL/dtable[v] = sum_i [tokens_i = v] dL/drows_i

    (``jax.ops.segment_sum`` over the flattened tokens: one row addition per token, where
    autodiff's transpose of a one-hot product would multiply every token by every row)."""
    return jnp.take(table, tokens, axis=0)


def _rows_fwd(table: jax.Array, tokens: jax.Array) -> tuple[jax.Array, tuple]:
    return _rows(table, tokens), (table.shape[0], tokens)


def _rows_bwd(residuals: tuple, g: jax.Array) -> tuple[jax.Array, None]:
    n_rows, tokens = residuals
    flat = g.reshape(-1, g.shape[-1])
    return jax.ops.segment_sum(flat, tokens.reshape(-1), num_segments=n_rows), None


_rows.defvjp(_rows_fwd, _rows_bwd)


def _uniform(limit: float) -> Initializer:
    """U(-limit, limit) entries."""

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -limit, limit)

    return init


def _normal(std: float) -> Initializer:
    """N(0, std^2) entries (not truncated)."""

    def init(key, shape, dtype=jnp.float32):
        return std * jax.random.normal(key, shape, dtype)

    return init


def _times(init: Initializer, factor: float) -> Initializer:
    """``init`` multiplied by ``factor`` (the identity when ``factor`` is 1)."""
    if factor == 1.0:
        return init
    return lambda key, shape, dtype=jnp.float32: init(key, shape, dtype) * factor


class RecallModel(nn.Module):
    """Single-head attention over the pairs of a recall sequence (laws: module docstring).

    Attributes:
      task: the task's sizes.
      mechanism: how the head turns q and k into attention weights.
      d_k: head width (queries, keys and values).
      d_model: embedding width of one token (unused by ``slot="onehot"``).
      embed_init_std: std of the embedding entries at initialisation (``init="natural"``).
      slot: how a key-value pair becomes a slot: concat, sum, separate or onehot.
      init_rule: initialisation convention: natural, pytorch, glorot or gpt (``init`` in
        ``RecallConfig``; a linen Module's ``init`` is its initialisation method).
      bias: biases on the Q, K, V projections and on the readout W_O.
    """

    task: RecallTask
    mechanism: Mechanism
    d_k: int = 256
    d_model: int = 256
    embed_init_std: float = 1.0
    slot: Slot = "concat"
    init_rule: Init = "natural"
    bias: bool = False

    def _fold(self, fold: bool) -> float:
        """The folding factor ``d_k^e`` of W_Q, W_K (and b_Q, b_K); 1 for the others."""
        return self.d_k**self.mechanism.qk_init_exponent if fold else 1.0

    def _weight(self, shape: tuple[int, int], fold: bool) -> Initializer:
        """The initialiser of a ``(fan_in, fan_out)`` weight; ``fold``: W_Q or W_K."""
        if self.init_rule == "natural":
            if fold:
                scale = self.d_k ** (2 * self.mechanism.qk_init_exponent)
                return nn.initializers.variance_scaling(scale, "fan_in", "truncated_normal")
            return nn.initializers.lecun_normal()
        if self.init_rule == "pytorch":
            return _times(_uniform(1 / math.sqrt(shape[0])), self._fold(fold))
        if self.init_rule == "glorot":
            return _times(_uniform(math.sqrt(6 / (shape[0] + shape[1]))), self._fold(fold))
        if self.init_rule == "gpt":
            return _times(_normal(GPT_STD), self._fold(fold))
        raise ValueError(f"RecallModel.init_rule must be one of {INITS}, got {self.init_rule!r}")

    def _embedding(self, shape: tuple[int, int]) -> Initializer:
        if self.init_rule == "natural":
            return nn.initializers.normal(self.embed_init_std)
        if self.init_rule == "pytorch":
            return _normal(1.0)
        if self.init_rule == "glorot":
            return _uniform(math.sqrt(6 / (shape[0] + shape[1])))
        return _normal(GPT_STD)

    def _bias(self, fan_in: int, fold: bool) -> Initializer:
        if self.init_rule == "pytorch":
            return _times(_uniform(1 / math.sqrt(fan_in)), self._fold(fold))
        return nn.initializers.zeros

    def _param_weight(self, name: str, shape: tuple[int, int], fold: bool = False) -> jax.Array:
        return self.param(name, self._weight(shape, fold), shape)

    @nn.compact
    def __call__(
        self, batch: Batch, constants: MechanismConstants | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """Value logits ``[B, n_value_tokens]`` and attention weights ``[B, pairs]``.

        ``constants`` (default: the mechanism's own, ``Mechanism.constant_values``) may be
        traced.
        With ``mutable=["intermediates"]`` the model also records ``q``, ``k`` (as they leave
        the projections), ``q_attn``, ``k_attn`` (as the logits see them), ``logits`` and
        ``weights`` (``[B, pairs]``)."""
        mech, task, d = self.mechanism, self.task, self.d_model
        if self.slot not in SLOTS:
            raise ValueError(f"RecallModel.slot must be one of {SLOTS}, got {self.slot!r}")
        # Parameters are created in one fixed order (flax draws their keys in call order):
        # E_key, E_val, W_Q, W_K, W_V, W_O, then the biases; the mechanism's own last.
        if self.slot == "onehot":
            q_in, kv_in = task.n_key_tokens, task.n_key_tokens + task.n_value_tokens
        else:
            E_key = self.param(
                "E_key", self._embedding((task.n_key_tokens, d)), (task.n_key_tokens, d)
            )
            E_val = self.param(
                "E_val", self._embedding((task.n_value_tokens, d)), (task.n_value_tokens, d)
            )
            q_in, kv_in = d, (2 * d if self.slot == "concat" else d)
        W_Q = self._param_weight("W_Q", (q_in, self.d_k), fold=True)
        W_K = self._param_weight("W_K", (kv_in, self.d_k), fold=True)
        W_V = self._param_weight("W_V", (kv_in, self.d_k))
        W_O = self._param_weight("W_O", (self.d_k, task.n_value_tokens))

        # Project the token tables, then gather: x W = (E W)[token] for one-hot inputs.
        if self.slot == "concat":
            q = _rows(E_key @ W_Q, batch.query)[:, None, :]  # [B, 1, d_k]
            k = _rows(E_key @ W_K[:d], batch.keys) + _rows(E_val @ W_K[d:], batch.values)
            v = _rows(E_key @ W_V[:d], batch.keys) + _rows(E_val @ W_V[d:], batch.values)
        elif self.slot == "sum":
            q = _rows(E_key @ W_Q, batch.query)[:, None, :]
            k = _rows(E_key @ W_K, batch.keys) + _rows(E_val @ W_K, batch.values)
            v = _rows(E_key @ W_V, batch.keys) + _rows(E_val @ W_V, batch.values)
        elif self.slot == "separate":
            q = _rows(E_key @ W_Q, batch.query)[:, None, :]
            k = _rows(E_key @ W_K, batch.keys)
            v = _rows(E_val @ W_V, batch.values)
        else:  # onehot: the weight rows are the projected tokens
            n = task.n_key_tokens
            q = _rows(W_Q, batch.query)[:, None, :]
            k = _rows(W_K[:n], batch.keys) + _rows(W_K[n:], batch.values)
            v = _rows(W_V[:n], batch.keys) + _rows(W_V[n:], batch.values)
        if self.bias:
            q = q + self.param("b_Q", self._bias(q_in, fold=True), (self.d_k,))
            k = k + self.param("b_K", self._bias(kv_in, fold=True), (self.d_k,))
            v = v + self.param("b_V", self._bias(kv_in, fold=False), (self.d_k,))
            b_O = self.param("b_O", self._bias(self.d_k, fold=False), (task.n_value_tokens,))
        # For diagnostics (experiment 10): recorded only when "intermediates" is mutable,
        # and otherwise removed by XLA as unused.
        self.sow("intermediates", "q", q)
        self.sow("intermediates", "k", k)
        q, k = mech.prepare(q, k)
        theta = dict(mech.constant_values(self.d_k) if constants is None else constants)
        if mech.needs_positions():  # one head over unordered slots: no positions to give
            raise MechanismError(refusal(mech, mech.needs_positions()))
        mech.head_values(self.d_k, 1)  # one head: a per-head vector must have one value
        for name, value in mech.param_values(self.d_k).items():
            if name in MODEL_PARAMS:
                raise ValueError(f"mechanism {mech.name!r}: parameter {name!r} is the model's")
            theta[name] = self.param(name, nn.initializers.constant(value), ())

        # The mechanism's weights, kept for the metrics; then attention's weighted values.
        z = mech.scores(q, k, theta)[:, 0]  # [B, pairs]
        p = mech.normalise(z, None, theta)
        self.sow("intermediates", "q_attn", q)
        self.sow("intermediates", "k_attn", k)
        self.sow("intermediates", "logits", z)
        self.sow("intermediates", "weights", p)
        o = weighted_values(p[:, None, :], v)[:, 0]
        if mech.gate is not None:  # sigmoid(x W_gate) of the query's input row x
            W_gate = self._param_weight("W_gate", (q_in, self.d_k if mech.gate == "element" else 1))
            table = W_gate if self.slot == "onehot" else E_key @ W_gate
            o = gated_output(o, _rows(table, batch.query))
        logits = o @ W_O
        return (logits + b_O if self.bias else logits), p


def program_model(model: RecallModel) -> RecallModel:
    """``model`` with everything that only sets its initial parameters or its mechanism's
    constants put to canonical values (``Mechanism.program``): two models with equal
    ``program_model`` compute the same function of (parameters, batch, constants), so they
    can share one compiled training program (``attnlab.recall.trainer.Trainer``)."""
    return model.clone(mechanism=model.mechanism.program(), init_rule="natural", embed_init_std=1.0)

"""The single-head attention model of the recall demo (Flax linen).

Each key-value pair of a sequence is one memory slot, the concatenation of its key token's
and its value token's embeddings; the query is the embedding of the key asked for. One
attention head reads the slots and a linear readout names the value:

    x_q = E_key[query]                       [d_model]
    x_i = [E_key[key_i] ; E_val[value_i]]    [2 d_model]
    q = x_q W_Q,  k_i = x_i W_K,  v_i = x_i W_V          (no biases; width d_k)
    o = attention(q, k, v)  (the mechanism sets the logit scale, ``attnlab.core.temperature``)
    logits = o W_O                            [n_value_tokens]

Initialisation follows the article's variance argument: embeddings have standard normal
entries (``embed_init_std`` = 1) and the projections are LeCun-normal (variance 1/fan-in),
so q and k have unit-variance entries at step 0 and unscaled logits have std sqrt(d_k).

Every input is a token, so projecting the two embedding tables (32 rows each) and then
gathering rows gives exactly the projections of every slot; the step's cost is then
independent of the batch size and sequence length.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from attnlab.core.attention import attention_weights, dot_product_attention
from attnlab.core.temperature import Mechanism
from attnlab.studies.recall.task import Batch, RecallTask


def _rows(table: jax.Array, tokens: jax.Array) -> jax.Array:
    """``table[tokens]`` as a one-hot matmul: exact, and on CPU its gradient is a matmul
    rather than a scatter-add, which makes a training step about a quarter faster."""
    return jax.nn.one_hot(tokens, table.shape[0], dtype=table.dtype) @ table


def _l2_normalize(x: jax.Array, eps: float = 1e-6) -> jax.Array:
    return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


class RecallModel(nn.Module):
    """Single-head attention over the pairs of a recall sequence.

    Attributes:
      task: the task's sizes.
      mechanism: how the head sets its logit scale.
      d_k: head width (queries, keys and values).
      d_model: embedding width of one token.
      embed_init_std: std of the embedding entries at initialisation.
    """

    task: RecallTask
    mechanism: Mechanism
    d_k: int = 256
    d_model: int = 256
    embed_init_std: float = 1.0

    @nn.compact
    def __call__(self, batch: Batch) -> tuple[jax.Array, jax.Array]:
        """Return value logits ``[B, n_value_tokens]`` and attention weights ``[B, pairs]``."""
        mech = self.mechanism
        embed = nn.initializers.normal(self.embed_init_std)
        qk_init = nn.initializers.variance_scaling(
            self.d_k ** (2 * mech.qk_init_exponent), "fan_in", "truncated_normal"
        )
        E_key = self.param("E_key", embed, (self.task.n_key_tokens, self.d_model))
        E_val = self.param("E_val", embed, (self.task.n_value_tokens, self.d_model))
        W_Q = self.param("W_Q", qk_init, (self.d_model, self.d_k))
        W_K = self.param("W_K", qk_init, (2 * self.d_model, self.d_k))
        W_V = self.param("W_V", nn.initializers.lecun_normal(), (2 * self.d_model, self.d_k))
        W_O = self.param(
            "W_O", nn.initializers.lecun_normal(), (self.d_k, self.task.n_value_tokens)
        )

        # Project the token tables, then gather: x W = (E W)[token] for one-hot inputs.
        d = self.d_model
        q = _rows(E_key @ W_Q, batch.query)[:, None, :]  # [B, 1, d_k]
        k = _rows(E_key @ W_K[:d], batch.keys) + _rows(E_val @ W_K[d:], batch.values)
        v = _rows(E_key @ W_V[:d], batch.keys) + _rows(E_val @ W_V[d:], batch.values)
        if mech.normalize_qk:
            q, k = _l2_normalize(q), _l2_normalize(k)

        scale = mech.fixed_scale(self.d_k)
        if mech.scale_rule == "learned":
            scale = self.param("inv_temperature", nn.initializers.constant(scale), ())

        o = dot_product_attention(q, k, v, scale=scale, logit_cap=mech.logit_cap)[:, 0]
        # The weights again, for diagnostics; under jit XLA computes the softmax once.
        p = attention_weights(q, k, scale=scale, logit_cap=mech.logit_cap)[:, 0]
        return o @ W_O, p

"""Experiment 14's language model and AdamW step as a JAX user would write them: flax.linen,
``jax.nn.dot_product_attention`` and optax, with ``attnlab.lm``'s shapes, initialisation,
loss and optimiser settings."""

from __future__ import annotations

import math
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from attnlab.lm.train import LMConfig

Dense = partial(nn.DenseGeneral, use_bias=False, kernel_init=nn.initializers.normal(0.02))
LayerNorm = partial(nn.LayerNorm, epsilon=1e-5, use_bias=False)


class PeerLM(nn.Module):
    config: LMConfig

    @nn.compact
    def __call__(self, tokens):
        c, init = self.config, nn.initializers.normal(0.02)
        out_init = nn.initializers.normal(0.02 / math.sqrt(2 * c.n_layers))  # W_O and W_2
        x = nn.Embed(256, c.d_model, embedding_init=init)(tokens)
        x = x + self.param("wpe", init, (c.seq_len, c.d_model))
        for _ in range(c.n_layers):
            h = LayerNorm()(x)
            q, k, v = [Dense((c.n_heads, c.d_head))(h) for _ in "qkv"]
            o = jax.nn.dot_product_attention(q, k, v, is_causal=True)
            x = x + Dense(c.d_model, axis=(-2, -1), kernel_init=out_init)(o)
            h = nn.gelu(Dense(4 * c.d_model)(LayerNorm()(x)))  # tanh approximation
            x = x + Dense(c.d_model, kernel_init=out_init)(h)
        return Dense(256)(LayerNorm()(x))


def peer_loss(model: PeerLM, params, windows):
    """``CE + z_loss_weight z_loss`` of ``model`` on ``windows`` ``[B, T+1]``, and the CE."""
    logits = model.apply({"params": params}, windows[:, :-1])
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, windows[:, 1:]).mean()
    return ce + model.config.z_loss_weight * jnp.mean(jax.nn.logsumexp(logits, -1) ** 2), ce


def peer_programs(config: LMConfig, lr: float):
    """``init(key) -> carry``, ``carry = (params, opt_state)``, and the jitted ``chunk(carry,
    batches [steps, B, T+1]) -> (carry, losses)``: AdamW steps on ``peer_loss`` (``lax.scan``);
    optax's warmup starts a step behind ``attnlab.training.schedules``'s; its decay is given
    over the rate."""
    model = PeerLM(config)
    schedule = optax.warmup_cosine_decay_schedule(0.0, lr, config.warmup, config.steps)
    adamw = optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=config.weight_decay / lr,
                        mask=lambda p: jax.tree.map(lambda x: x.ndim >= 2, p))  # fmt: skip
    optimizer = optax.chain(optax.clip_by_global_norm(config.clip), adamw)

    def step(carry, windows):
        params, opt_state = carry
        (_, ce), grads = jax.value_and_grad(peer_loss, 1, has_aux=True)(model, params, windows)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), ce

    def init(key):
        params = model.init(key, jnp.zeros((1, config.seq_len), jnp.int32))["params"]
        return params, optimizer.init(params)

    return init, jax.jit(partial(jax.lax.scan, step))

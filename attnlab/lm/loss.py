"""The language model's loss, readable top to bottom: next-byte cross-entropy, the z-loss,
their sum the step differentiates, and the held-out loss.

For a window ``x`` of ``T + 1`` bytes and the model's output logits ``o`` ``[T, 256]``:

    CE(x)   = mean_t -log softmax(o_t)[x_{t+1}]            (nats per byte)
    z(x)    = mean_t (log sum_v exp(o_{t,v}))^2              (PaLM's z-loss)
    loss(x) = CE(x) + z_loss_weight z(x)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from attnlab.lm.model import CausalLM


def cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Per-window mean next-byte cross-entropy ``[...]`` (nats per byte)."""
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    return jnp.mean(losses, axis=-1)


def z_loss(logits: jax.Array) -> jax.Array:
    """``mean (log Z)^2``, ``Z = sum_v exp(logits_v)``: the output-logit penalty of PaLM
    (Chowdhery et al. 2022) and Wortsman et al., weighted ``1e-4`` there."""
    return jnp.mean(jnp.square(jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1)))


def loss_fn(
    model: CausalLM,
    params: dict,
    windows: jax.Array,
    constants: dict,
    z_weight: float,
    clip: bool = False,
) -> tuple[jax.Array, tuple]:
    """``CE + z_weight z_loss`` of ``windows`` ``[B, T+1]``, with the CE, the stats and, with
    ``clip``, each layer's largest signed and largest |logit| per head (``head_logits``,
    the same forward pass's, for QK-Clip), else None."""
    if not clip:
        logits, stats = model.apply({"params": params}, windows[:, :-1], constants)
        heads = None
    else:
        (logits, stats), sown = model.apply(
            {"params": params}, windows[:, :-1], constants, mutable=["intermediates"]
        )
        heads = head_logits(sown, model.n_layers)
    ce = jnp.mean(cross_entropy(logits, windows[:, 1:]))
    return ce + z_weight * z_loss(logits), (ce, stats, heads)


def head_logits(sown: dict, n_layers: int) -> dict[str, jax.Array]:
    """``{"signed", "abs"}``: each layer's largest signed and largest |logit| per head
    ``[n_layers, H]``, from a forward pass's ``intermediates`` (``attnlab.lm.model``)."""
    layers = [sown["intermediates"][f"h_{i}"]["attn"] for i in range(n_layers)]
    return {"signed": jnp.stack([layer["head_max_logit"][0] for layer in layers]),
            "abs": jnp.stack([layer["head_max_abs_logit"][0] for layer in layers])}  # fmt: skip


def held_out_loss(
    model: CausalLM, params: dict, windows: jax.Array, constants: dict
) -> tuple[jax.Array, jax.Array]:
    """Per-window held-out cross-entropy ``[eval_windows]``, and the output logits' variance
    over the vocabulary averaged over every position (at step 0 the ``v`` of ``E[loss_0] ~
    ln 256 + v / 2``)."""
    logits, _ = model.apply({"params": params}, windows[:, :-1], constants)
    return cross_entropy(logits, windows[:, 1:]), jnp.mean(jnp.var(logits, axis=-1))

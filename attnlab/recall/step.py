"""One training step of the recall model, readable top to bottom: the state, Adam, the
loss, ``train_step`` (forward, backward, the per-step ``METRICS``, the update), the batches
of a chunk, ``scan_steps`` (a chunk of steps inside ``lax.scan``), held-out accuracy and the
step-0 state. ``attnlab.recall.trainer`` runs these for many lanes at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cache
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from attnlab.core.mechanism import Mechanism
from attnlab.core.softmax_stats import entropy, max_weight
from attnlab.recall.config import RecallConfig, make_model, seed_keys
from attnlab.recall.model import MechanismConstants, RecallModel
from attnlab.recall.task import Batch, RecallTask, example_batch, sample_batch, stream_batches
from attnlab.training.optimizers import make_optimizer

#: Per-step diagnostics recorded for every seed (the CSV columns of the curves).
METRICS = (
    "loss",
    "accuracy",
    "grad_norm_wq",
    "grad_norm_wk",
    "grad_norm_wv",
    "attn_entropy",
    "attn_max_weight",
)


class TrainState(NamedTuple):
    params: dict
    opt_state: optax.OptState


#: 04's optimizer (``attnlab.training.optimizers``): Adam at a constant rate, no clipping,
#: no decay (the article's demo names none).
OPTIMIZER = "adam"


def recall_optimizer(lr: float | jax.Array) -> optax.GradientTransformation:
    """``OPTIMIZER`` at learning rate ``lr`` (a float or a traced scalar), without a recipe."""
    return make_optimizer(OPTIMIZER, lr)


def init_params(config: RecallConfig, mechanism: Mechanism, seed: int) -> dict:
    """The parameters of ``mechanism`` at step 0 for ``seed`` (``initial_state``'s)."""
    one = replace(config, seed=seed, seeds=1)
    return jax.tree.map(lambda x: x[0], initial_state(one, mechanism).params)


def loss_and_aux(
    model: RecallModel, params: dict, batch: Batch, constants: MechanismConstants | None = None
):
    """Mean cross-entropy of the value logits, with the logits and attention weights."""
    logits, weights = model.apply({"params": params}, batch, constants)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch.target).mean()
    return loss, (logits, weights)


def train_step(
    model: RecallModel,
    optimizer: optax.GradientTransformation,
    state: TrainState,
    batch: Batch,
    constants: MechanismConstants | None = None,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One Adam step on ``batch``; the ``METRICS`` are taken before the update.

    Its parts run under ``jax.named_scope`` (``forward_backward``, ``metrics``, ``adam``),
    which names them in profiles and compiled HLO and changes nothing computed.
    """
    with jax.named_scope("forward_backward"):
        grad_fn = jax.value_and_grad(
            lambda p: loss_and_aux(model, p, batch, constants), has_aux=True
        )
        (loss, (logits, weights)), grads = grad_fn(state.params)
    with jax.named_scope("metrics"):
        metrics = {
            "loss": loss,
            "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch.target),
            "grad_norm_wq": jnp.linalg.norm(grads["W_Q"]),
            "grad_norm_wk": jnp.linalg.norm(grads["W_K"]),
            "grad_norm_wv": jnp.linalg.norm(grads["W_V"]),
            "attn_entropy": jnp.mean(entropy(weights)),
            "attn_max_weight": jnp.mean(max_weight(weights)),
        }
    with jax.named_scope("adam"):
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
    return TrainState(params, opt_state), metrics


@cache
def _draw_program(batch_size: int, task: RecallTask):
    return jax.jit(jax.vmap(lambda key, steps: stream_batches(key, steps, batch_size, task),
                            in_axes=(0, None)))  # fmt: skip


def draw_chunk(data_keys: jax.Array, steps: jax.Array, batch_size: int, task: RecallTask) -> Batch:
    """The batches of a chunk for every seed: ``stream_batches`` of each key of ``data_keys``
    (``[seeds]``), fields ``[seeds, len(steps), batch_size, ...]``. One compiled program per
    batch size, task, chunk length and seed count, whatever the model or mechanism."""
    return _draw_program(batch_size, task)(data_keys, steps)


def scan_steps(
    model: RecallModel,
    optimizer: optax.GradientTransformation,
    state: TrainState,
    batches: Batch,
    metrics: tuple[str, ...] = METRICS,
    constants: MechanismConstants | None = None,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """``train_step`` on each of ``batches`` (fields ``[steps, batch_size, ...]``) in turn, a
    ``lax.scan``. Returns the state after the last step and the ``metrics`` named, each
    ``[steps]``. ``Trainer`` and the recall ``Task`` (``recall_task``) compile it, vmapped
    over their lanes."""

    def body(s: TrainState, batch: Batch) -> tuple[TrainState, dict[str, jax.Array]]:
        s, m = train_step(model, optimizer, s, batch, constants)
        return s, {k: m[k] for k in metrics}

    return jax.lax.scan(body, state, batches)


def held_out_batches(config: RecallConfig) -> Batch:
    """Every seed's held-out set, stacked: ``eval_size`` sequences from its eval key."""
    keys = jnp.stack([seed_keys(s).eval for s in config.seed_values])
    return jax.vmap(lambda k: sample_batch(k, config.eval_size, config.task))(keys)


def evaluate(
    model: RecallModel, params: dict, batch: Batch, constants: MechanismConstants | None = None
) -> jax.Array:
    """Accuracy of the predicted value on a held-out batch."""
    logits, _ = model.apply({"params": params}, batch, constants)
    return jnp.mean(jnp.argmax(logits, -1) == batch.target)


@cache
def init_program(model: RecallModel, task: RecallTask) -> Callable[[jax.Array], TrainState]:
    """``TrainState`` at step 0 from an init key, vmapped over keys and jitted: one program
    per model, where an eager ``model.init`` compiles each of its operations apart (jitted,
    ``std * normal`` may round differently from the eager product by an ulp). Adam's state
    does not depend on the learning rate."""
    dummy = example_batch(task)

    def step0(key: jax.Array) -> TrainState:
        params = model.init(key, dummy)["params"]
        return TrainState(params, recall_optimizer(1.0).init(params))

    return jax.jit(jax.vmap(step0))


def initial_state(config: RecallConfig, mechanism: Mechanism) -> TrainState:
    """Step-0 training states of every seed, stacked along a leading seed axis."""
    keys = jnp.stack([seed_keys(seed).init for seed in config.seed_values])
    return init_program(make_model(config, mechanism), config.task)(keys)

"""04's associative recall as a ``Task`` of the registry (``attnlab.training.tasks``), its
programs in the lanes engine's form (``attnlab.training.lanes``): a lane's state is its
``TrainState`` and data key; its chunk is ``step.scan_steps`` on the lane's own stream at
its rate (the recall optimizer, ``step.recall_optimizer``); its evaluation is the
per-sequence cross-entropy of one held-out batch of ``eval_size`` sequences (the first
seed's held-out key, every lane the same), with the accuracy as its extra number.

The studies that train recall (04, 05, 09, 10, 12, the recall card, the bench) run it
through ``attnlab.recall.trainer``, whose lanes mix widths and mechanisms; this ``Task``
is the same model, loss and step for what asks by name (a card on a task the card has no
section of its own for)."""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from attnlab.core.mechanism import Mechanism
from attnlab.core.references import recall_refusal
from attnlab.recall.config import RecallConfig, make_model, seed_keys
from attnlab.recall.model import RecallModel
from attnlab.recall.step import METRICS, TrainState, init_program, recall_optimizer, scan_steps
from attnlab.recall.task import Batch, RecallTask, sample_batch, stream_batches
from attnlab.training.lanes import Programs
from attnlab.training.tasks import Task


class RecallLane(NamedTuple):
    """A lane's parameters, optimizer state and data key (raw ``key_data``)."""

    params: dict
    opt_state: optax.OptState
    data_key: jax.Array


def recall_defaults(quick: bool = False, seed: int = 0) -> RecallConfig:
    """04's defaults (300 steps and 500 held-out sequences under ``quick``), one seed."""
    base = RecallConfig(steps=300, eval_size=500) if quick else RecallConfig()
    return dataclasses.replace(base, seed=seed, seeds=1)


@cache
def _chunk(model: RecallModel, batch_size: int, task: RecallTask):
    def chunk(state: RecallLane, steps, data, lr, constants):
        del data  # each lane draws its own stream from its key
        batches = stream_batches(jax.random.wrap_key_data(state.data_key), steps, batch_size,
                                 task)  # fmt: skip
        trained, metrics = scan_steps(model, recall_optimizer(lr),
                                      TrainState(state.params, state.opt_state), batches,
                                      METRICS, constants)  # fmt: skip
        return RecallLane(trained.params, trained.opt_state, state.data_key), metrics

    return jax.jit(jax.vmap(chunk, in_axes=(0, None, None, 0, 0)))


@cache
def _evaluate(model: RecallModel):
    def evaluate(params, batch: Batch, constants):
        logits, _ = model.apply({"params": params}, batch, constants)
        losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch.target)
        return losses, jnp.mean(jnp.argmax(logits, -1) == batch.target)

    return jax.jit(jax.vmap(evaluate, in_axes=(0, None, 0)))


def recall_programs(config: RecallConfig, mechanism: Mechanism) -> Programs:
    """The lanes engine's programs of ``mechanism`` on the recall task (module docstring)."""
    model = make_model(config, mechanism)

    def init(init_keys: jax.Array, data_keys: jax.Array) -> RecallLane:
        state = init_program(model, config.task)(init_keys)
        return RecallLane(state.params, state.opt_state, jax.random.key_data(data_keys))

    return Programs(init, _chunk(model, config.batch_size, config.task), _evaluate(model),
                    METRICS)  # fmt: skip


def recall_data(config: RecallConfig) -> tuple[None, Batch]:
    """No shared training data (each lane draws its stream), and the held-out batch."""
    return None, sample_batch(seed_keys(config.seed).eval, config.eval_size, config.task)


RECALL_TASK = Task(
    name="recall",
    about="article 004's associative recall: one head over key-value slots",
    defaults=recall_defaults,
    programs=recall_programs,
    data=recall_data,
    seed_keys=lambda seed: tuple(seed_keys(seed)[:2]),
    constants=lambda config, mechanism: mechanism.constant_values(config.d_k),
    refusal=lambda mechanism, config: recall_refusal(mechanism),
    lrs=(1e-4, 3e-4, 1e-3, 3e-3),
)

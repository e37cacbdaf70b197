"""Rows ``train_step_vs_reference``, ``train_step_peak_fraction`` and ``profile_step_*``:
Trainer.run's chunk of recall steps against the step before the speed-ups
(``bench.reference``), its fraction of the matmul peak (``recall_step_flops``) and its parts
(``PARTS``: data, forward and backward, Adam), all from one round-robin timing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from attnlab.core.temperature import MECHANISMS
from attnlab.recall.config import RecallConfig, make_model, seed_keys
from attnlab.recall.step import TrainState, loss_and_aux, recall_optimizer
from attnlab.recall.task import Batch
from attnlab.recall.trainer import Run, Trainer
from attnlab.studies.bench.config import BenchConfig, Row, make_row, peak_row, timing_note
from attnlab.studies.bench.reference import reference_chunk
from attnlab.studies.bench.timing import round_robin

#: ``recall_step_flops`` in words, for the rows' details.
RECALL_FLOPS = (
    "3 x [2 d_model d_k (3 n_key + 2 n_value) + 4 B pairs d_k + 2 B d_k n_value] (the forward "
    "matmuls and their two gradients; the gathers' gradients are scatter-adds, not counted)"
)


def recall_step_flops(config: RecallConfig) -> int:
    """Estimated FLOPs of one recall training step (concat slot): ``RECALL_FLOPS``."""
    t, b, d_k = config.task, config.batch_size, config.d_k
    tables = 2 * config.d_model * d_k * (3 * t.n_key_tokens + 2 * t.n_value_tokens)
    return 3 * (tables + 4 * b * t.pairs * d_k + 2 * b * d_k * t.n_value_tokens)


#: How far ``forward_backward`` moves the parameters along their gradient each step: far
#: below a float32 ulp, so they barely move, but they change from step to step as in training
#: (with fixed parameters XLA would hoist the token-table projections out of the loop).
NUDGE = 1e-12


#: What each profiled program computes, for the rows' details.
PARTS = {
    "data": "data generation alone (the data program of Trainer.run)",
    "forward_backward": "value_and_grad of train_step's loss on the chunk's batches",
    "adam": "the Adam update alone (optimizer.update and apply_updates of a fixed gradient)",
    "full": "Trainer.run's chunk: the data program, then the compiled chunk (train_step: "
    "forward, backward, metrics, Adam, for each step)",
}


def step_programs(recall: RecallConfig) -> tuple[dict[str, Callable[[], Any]], dict]:
    """The calls timed by ``bench_recall_step``: every part of ``PARTS`` and ``reference``,
    each one chunk; and the losses of ``full`` and ``reference`` from the same state."""
    trainer = Trainer([Run(recall, MECHANISMS["scaled"])])
    draw, train = trainer.chunk_programs()
    batches = jax.tree.map(lambda x: x[:1], draw())  # the one seed's, [1, steps, ...]
    state, key = trainer.state, seed_keys(recall.seed).data
    model, optimizer = make_model(recall, MECHANISMS["scaled"]), recall_optimizer(recall.lr)
    steps = jnp.arange(recall.chunk_steps)
    value_and_grad = jax.value_and_grad(loss_and_aux, argnums=1, has_aux=True)

    def forward_backward(params: dict, batches: Batch) -> jax.Array:
        def body(p: dict, batch: Batch):
            (loss, _), grads = value_and_grad(model, p, batch)
            return jax.tree.map(lambda x, g: x - NUDGE * g, p, grads), loss

        return jax.lax.scan(body, params, batches)[1]

    def adam(s: TrainState, grads: dict) -> TrainState:
        def body(s: TrainState, _):
            updates, opt_state = optimizer.update(grads, s.opt_state, s.params)
            return TrainState(optax.apply_updates(s.params, updates), opt_state), None

        return jax.lax.scan(body, s, steps)[0]

    def compiled(fn, *args):
        return partial(jax.jit(jax.vmap(fn)).lower(*args).compile(), *args)

    first = jax.tree.map(lambda x: x[:, 0], batches)
    grads = jax.vmap(lambda p, b: value_and_grad(model, p, b)[1])(state.params, first)
    one = jax.tree.map(lambda x: x[0], state)
    calls = {
        "data": draw,
        "forward_backward": compiled(forward_backward, state.params, batches),
        "adam": compiled(adam, state, grads),
        "full": lambda: train(draw()),
        "reference": partial(reference_chunk(recall, one, key, steps), one, key, steps),
    }
    losses = {"full": np.asarray(calls["full"]()[1]["loss"])[0],
              "reference": np.asarray(calls["reference"]()[1]["loss"])}  # fmt: skip
    return calls, losses


def bench_recall_step(config: BenchConfig, peak_flops: float) -> list[Row]:
    """Rows ``train_step_vs_reference``, ``train_step_peak_fraction`` and
    ``profile_step_*``, all from one round-robin timing."""
    recall = replace(config.recall, seeds=1)
    calls, losses = step_programs(recall)
    seconds = round_robin(config, calls)
    chunk, note = recall.chunk_steps, timing_note(config)
    sizes = (f"d_k {recall.d_k}, d_model {recall.d_model}, batch {recall.batch_size}, "
             f"{recall.pairs} pairs, scaled attention, 1 seed")  # fmt: skip
    gap = float(np.max(np.abs(losses["full"] - losses["reference"])))
    parts = sum(seconds[p] for p in ("data", "forward_backward", "adam")) / chunk
    rows = [
        make_row(
            "train_step_vs_reference", seconds["full"], seconds["reference"],
            detail=f"seconds per {chunk} steps, {sizes}; Trainer.run's chunk vs the chunk "
            "before the speed-ups (each step's batch drawn inside the step, the gathers' "
            "gradient by autodiff of a one-hot product, JAX's rolled threefry loop on CPU); "
            f"{note}; losses from the same state agree to {gap:.2g}",
        ),
        peak_row("train_step_peak_fraction", seconds["full"] / chunk, recall_step_flops(recall),
                 RECALL_FLOPS, peak_flops, f"seconds per step of Trainer.run's chunk, {sizes}"),
    ]  # fmt: skip
    for part, what in PARTS.items():
        extra = f"; data + forward_backward + adam = {1e3 * parts:.3g} ms" if part == "full" else ""
        detail = f"seconds per step: {what}; a lax.scan over {chunk} steps, {sizes}; {note}{extra}"
        rows.append(make_row(f"profile_step_{part}", seconds[part] / chunk, detail=detail))
    return rows

"""The recall training step: timed whole and in parts, and against the step it replaced.

Every program here is what ``attnlab.studies.recall.train.train`` compiles for one chunk of
``chunk_steps`` steps, or a part of it: a ``jax.lax.scan`` over the chunk's steps, vmapped
over a seed axis (of one seed), jitted, and compiled ahead of timing (``lower().compile()``)
so that compilation is never timed. Each time is the median of ``repeats`` calls of the
compiled program after one warm-up call, its outputs blocked on, divided by the chunk's
steps where a row reports seconds per step.

The reference step is the step as it was before the speed-ups of this bench: the same model
and ``train_step`` traced under ``baselines.autodiff_gathers`` (the gathers of projected
token tables as the one-hot matmul differentiated by plain autodiff, as before commit
57be4c8) and ``attnlab.core.prng.rolled_threefry`` (random bits by JAX's rolled CPU loop, as
before the unrolled lowering). ``rolled_full`` isolates the second change: today's step
with only the random bits lowered the old way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from attnlab.core.prng import rolled_threefry
from attnlab.core.softmax_stats import entropy, max_weight
from attnlab.core.temperature import MECHANISMS
from attnlab.studies.bench.baselines import autodiff_gathers
from attnlab.studies.bench.config import BenchConfig, Row, make_row
from attnlab.studies.bench.kernels import MATMUL, OTHER, KernelProfile, combined, kernel_profile
from attnlab.studies.bench.timing import interleaved_median_seconds, median_seconds
from attnlab.studies.recall.model import RecallModel
from attnlab.studies.recall.readings import get_reading, reading_config
from attnlab.studies.recall.task import Batch, stream_batch, stream_batches
from attnlab.studies.recall.train import (
    RecallConfig,
    TrainState,
    draw_chunk,
    initial_state,
    loss_and_aux,
    make_model,
    make_optimizer,
    scan_steps,
    seed_keys,
    train,
    train_step,
)

#: ``recall_step_flops`` as the bench's details write it.
FLOPS_FORMULA = (
    "3 x [2 d_model d_k (3 n_key + 2 n_value) + 4 B pairs d_k + 2 B d_k n_value] + "
    "2 d_k [B n_key + 2 B pairs (n_key + n_value)] (3 x the forward matmuls, plus the "
    "gathers' one-hot gradients)"
)


def recall_step_flops(config: RecallConfig) -> int:
    """Estimated FLOPs of one training step of the recall model (concat slot): 3 x the
    forward matmuls, plus the gathers' gradients.

    Forward: the five table projections ``2 d_model d_k (3 n_key + 2 n_value)``, logits and
    weighted sum ``4 B pairs d_k``, readout ``2 B d_k n_value``. The backward pass costs
    twice the forward (a gradient for each operand of every matmul), and each gather's
    table gradient is a one-hot product (``model._rows``) over its tokens: ``2 d_k [B n_key
    + 2 B pairs (n_key + n_value)]`` for the query's, the keys' and the values' gathers.
    Softmax, Adam and the other elementwise work are not counted. The bench's kernel
    profile counts the compiled program's dots (``kernel_profile``) against this.
    """
    t, b = config.task, config.batch_size
    forward = (
        2 * config.d_model * config.d_k * (3 * t.n_key_tokens + 2 * t.n_value_tokens)
        + 4 * b * t.pairs * config.d_k
        + 2 * b * config.d_k * t.n_value_tokens
    )
    tokens = t.n_key_tokens + t.n_value_tokens
    gathers = 2 * config.d_k * (b * t.n_key_tokens + 2 * b * t.pairs * tokens)
    return 3 * forward + gathers


def train_timed(config: RecallConfig) -> tuple[float, list[float], np.ndarray]:
    """One ``train`` call with the scaled mechanism: its wall time, the times of its chunks
    after the first (the intervals between ``on_chunk`` callbacks: steady state, compile
    excluded) and its losses ``[seeds, steps]``."""
    marks: list[float] = []
    start = time.perf_counter()
    result = train(
        config, MECHANISMS["scaled"], on_chunk=lambda _: marks.append(time.perf_counter())
    )
    return time.perf_counter() - start, list(np.diff(marks)), result.metrics["loss"]


def _forward_metrics(
    model: RecallModel, params: dict, batch: Batch
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The loss and the metrics ``train_step`` takes from the forward pass."""
    loss, (logits, weights) = loss_and_aux(model, params, batch)
    return loss, {
        "loss": loss,
        "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch.target),
        "attn_entropy": jnp.mean(entropy(weights)),
        "attn_max_weight": jnp.mean(max_weight(weights)),
    }


#: The step of ``nudge``: far below a float32 ulp of the parameters, so they barely move.
NUDGE = 1e-12


def nudge(params: dict, direction: dict) -> dict:
    """``params - NUDGE * direction``: a plain SGD step that keeps the parameters of a
    profiled part changing from step to step, as in training. With parameters fixed, XLA
    hoists the work that depends on them alone (the token-table projections, most of the
    step's FLOPs) out of the loop and the part looks cheaper than it is in the step."""
    return jax.tree.map(lambda p, d: p - NUDGE * d, params, direction)


def _compile(fn: Callable[..., Any], *args: Any) -> Callable[..., Any]:
    """``fn`` vmapped over a leading seed axis of every argument but the last (the steps),
    jitted and compiled for ``args``."""
    in_axes = (*(0 for _ in args[:-1]), None)
    return jax.jit(jax.vmap(fn, in_axes=in_axes)).lower(*args).compile()


@dataclass(frozen=True)
class StepTimes:
    """Seconds per chunk of each program, the chunk's losses of the current and the
    reference step (``[steps]``), and ``train()``'s steady chunks."""

    chunk: int
    seconds: dict[str, float]
    losses: np.ndarray
    reference_losses: np.ndarray
    train_chunk_seconds: float
    train_chunks: int
    matmul_seconds: float
    kernels: KernelProfile
    parameters: int


#: The named scopes of ``train_step``, as the kernel profile charges them.
TRAIN_SCOPES = ("forward_backward", "metrics", "adam")
#: The categories of the kernel profile, in the order of their rows: the training program's
#: and the data program's (``stream_batches``, scope ``data``).
KERNEL_CATEGORIES = (MATMUL, "data", *TRAIN_SCOPES, OTHER)


@dataclass(frozen=True)
class ChunkPrograms:
    """``train()``'s chunk for one seed, compiled: the data program ``draw`` (``draw_chunk``)
    and the training program ``train`` (``scan_steps`` vmapped over the seed), with the
    step-0 ``state``, the seed's ``data_keys``, the chunk's ``steps`` and its ``batches``."""

    draw: Any
    train: Any
    state: TrainState
    data_keys: jax.Array
    steps: jax.Array
    batches: Batch

    def run(self, draw: Callable[..., Batch] | None = None) -> Any:
        """One chunk as ``train()`` runs it: the batches drawn (by ``draw``, default the
        data program), then the steps on them."""
        batches = (draw or self.draw)(self.data_keys, self.steps)
        return self.train(self.state, batches)

    def kernels(self) -> KernelProfile:
        """``kernel_profile`` of the training and the data program, per step."""
        chunk = len(self.steps)
        return combined(
            kernel_profile(
                self.train, lambda: self.train(self.state, self.batches), TRAIN_SCOPES, chunk
            ),
            kernel_profile(
                self.draw, lambda: self.draw(self.data_keys, self.steps), ("data",), chunk
            ),  # fmt: skip
        )


def compile_chunk(recall: RecallConfig) -> ChunkPrograms:
    """``ChunkPrograms`` of the scaled mechanism for ``recall``'s first seed, compiled ahead
    (so that compilation is never timed)."""
    recall, mechanism = replace(recall, seeds=1), MECHANISMS["scaled"]
    model, optimizer = make_model(recall, mechanism), make_optimizer(recall)
    state = initial_state(recall, mechanism)  # stacked over the one seed
    data_keys = jnp.stack([seed_keys(s).data for s in recall.seed_values])
    steps = jnp.arange(recall.chunk_steps)
    draw = draw_chunk.lower(data_keys, steps, recall.batch_size, recall.task).compile()
    batches = draw(data_keys, steps)  # [seeds, chunk, ...]
    train = jax.jit(jax.vmap(partial(scan_steps, model, optimizer)))
    return ChunkPrograms(draw, train.lower(state, batches).compile(), state, data_keys, steps,
                         batches)  # fmt: skip


#: The parts ``measure_step`` times, in the order of their rows.
PARTS = ("data", "forward", "forward_backward", "adam", "full", "rolled_full", "reference_full")


def measure_step(config: BenchConfig) -> StepTimes:
    """Time one chunk of steps of ``config.recall`` (one seed, the scaled mechanism) whole,
    in parts, and as the reference step; then ``train()``'s steady chunks.

    The parts: ``data`` draws the chunk's batches (``draw_chunk``, ``compile_chunk``);
    ``forward`` and ``forward_backward`` are scans over those batches from the step-0
    parameters, moved each step by ``nudge`` (so that no parameter-only work is
    loop-invariant); ``adam`` applies the step-0 gradient to the carried state with
    ``optimizer.update`` and ``optax.apply_updates``; ``full`` is ``train()``'s chunk, the
    data program then ``scan_steps`` on its batches (``ChunkPrograms.run``); ``rolled_full``
    the same with the data program traced again under ``rolled_threefry``;
    ``reference_full`` the step as it was: each batch drawn inside its step, traced under
    both ``rolled_threefry`` and ``autodiff_gathers``. The kernel profile
    (``ChunkPrograms.kernels``) traces the training and the data program.
    """
    recall = replace(config.recall, seeds=1)
    chunk = recall.chunk_steps
    model, optimizer = make_model(recall, MECHANISMS["scaled"]), make_optimizer(recall)
    programs = compile_chunk(recall)
    state, data_keys, steps = programs.state, programs.data_keys, programs.steps
    batches = programs.batches

    def data(key: jax.Array, steps: jax.Array) -> Batch:
        return stream_batches(key, steps, recall.batch_size, recall.task)

    def forward(params: dict, batches: Batch, steps: jax.Array) -> dict[str, jax.Array]:
        def body(p: dict, batch: Batch) -> tuple[dict, dict[str, jax.Array]]:
            loss, metrics = _forward_metrics(model, p, batch)
            return nudge(p, jax.tree.map(lambda x: loss, p)), metrics

        return jax.lax.scan(body, params, batches)[1]

    def forward_backward(params: dict, batches: Batch, steps: jax.Array) -> dict[str, jax.Array]:
        def body(p: dict, batch: Batch) -> tuple[dict, dict[str, jax.Array]]:
            grad_fn = jax.value_and_grad(lambda q: _forward_metrics(model, q, batch), has_aux=True)
            (_, metrics), grads = grad_fn(p)
            norms = {
                f"grad_norm_{name.replace('_', '').lower()}": jnp.linalg.norm(grads[name])
                for name in ("W_Q", "W_K", "W_V")
            }
            return nudge(p, grads), metrics | norms

        return jax.lax.scan(body, params, batches)[1]

    def adam(state: TrainState, grads: dict, steps: jax.Array) -> TrainState:
        def body(s: TrainState, _) -> tuple[TrainState, None]:
            updates, opt_state = optimizer.update(grads, s.opt_state, s.params)
            return TrainState(optax.apply_updates(s.params, updates), opt_state), None

        return jax.lax.scan(body, state, steps)[0]

    def data_in_step(state: TrainState, key: jax.Array, steps: jax.Array):
        def body(s: TrainState, t: jax.Array):
            return train_step(model, optimizer, s, stream_batch(key, t, recall.batch_size,
                                                                recall.task))  # fmt: skip

        return jax.lax.scan(body, state, steps)

    first = jax.tree.map(lambda x: x[:, 0], batches)
    grads = jax.jit(jax.vmap(jax.grad(lambda p, b: loss_and_aux(model, p, b)[0])))(
        state.params, first
    )
    on_batches = (state.params, batches, steps)
    compiled = {
        part: _compile(fn, *args)
        for part, fn, args in (
            ("forward", forward, on_batches),
            ("forward_backward", forward_backward, on_batches),
            ("adam", adam, (state, grads, steps)),
        )
    }
    with rolled_threefry():  # trace and compile the old programs; the swaps end here
        compiled["rolled_data"] = _compile(data, data_keys, steps)
        with autodiff_gathers():
            compiled["reference_full"] = _compile(data_in_step, state, data_keys, steps)

    calls = {
        "data": lambda: programs.draw(data_keys, steps),
        **{part: lambda f=compiled[part]: f(*on_batches) for part in PARTS[1:3]},
        "adam": lambda: compiled["adam"](state, grads, steps),
        "full": programs.run,
        "rolled_full": lambda: programs.run(compiled["rolled_data"]),
        "reference_full": lambda: compiled["reference_full"](state, data_keys, steps),
    }
    # Round-robin, so that the parts and the reference share the machine's moods: timed one
    # after the other, the same program measured up to 30% apart on this 2-core machine.
    # Compiled already, so the warm-up calls are cheap even in QUICK.
    seconds = interleaved_median_seconds(
        calls, step_rounds(config), min_seconds=config.min_timing_seconds
    )
    kernels = programs.kernels()
    losses, reference_losses = (
        np.asarray(calls[part]()[1]["loss"])[0] for part in ("full", "reference_full")
    )
    matmul_seconds = _projection_matmul_seconds(config)
    # train() itself: the same program, plus its host work between chunks.
    train_config = replace(recall, steps=max(recall.steps, 2 * chunk))
    if config.warmup:
        train_timed(train_config)
    train_chunks = [c for _ in range(config.repeats) for c in train_timed(train_config)[1]]
    return StepTimes(
        chunk,
        seconds,
        losses,
        reference_losses,
        float(np.median(train_chunks)),
        len(train_chunks),
        matmul_seconds,
        kernels,
        sum(x.size for x in jax.tree.leaves(state.params)),
    )


def projection_shape(recall: RecallConfig) -> tuple[int, int, int]:
    """``(rows, d_model, d_k)`` of the recall step's token-table projections (a table of
    ``n_key_tokens`` rows times ``W``), which carry most of its FLOPs."""
    return recall.task.n_key_tokens, recall.d_model, recall.d_k


def _projection_matmul_seconds(config: BenchConfig) -> float:
    """Seconds per product ``[rows, d_model] @ [d_model, d_k]`` at the step's projection
    shape: a lax.scan over ``chunk_steps`` different tables times one weight (every product
    computed and stored, none loop-invariant), jitted and compiled ahead; median of
    ``repeats`` calls after a warm-up, per product."""
    rows, d_model, d_k = projection_shape(config.recall)
    chunk = config.recall.chunk_steps
    tables = jax.random.normal(jax.random.key(0), (chunk, rows, d_model))
    weight = jax.random.normal(jax.random.key(1), (d_model, d_k))

    def products(w: jax.Array, tables: jax.Array) -> jax.Array:
        return jax.lax.scan(lambda _, x: (None, x @ w), None, tables)[1]

    program = jax.jit(products).lower(weight, tables).compile()
    seconds = median_seconds(lambda: program(weight, tables), config.repeats, warmup=True,
                             min_seconds=config.min_timing_seconds)  # fmt: skip
    return seconds / chunk


def step_rounds(config: BenchConfig) -> int:
    """Rounds of the interleaved timing of the step's programs: three per repeat."""
    return 3 * config.repeats


def _timing(config: BenchConfig) -> str:
    return (
        f"median of {step_rounds(config)} calls of the program compiled ahead, timed "
        "round-robin with the other step programs, after one warm-up call"
    )


def _sizes(recall: RecallConfig) -> str:
    return (
        f"d_k {recall.d_k}, d_model {recall.d_model}, batch {recall.batch_size}, "
        f"{recall.pairs} pairs, scaled attention, 1 seed"
    )


def max_loss_difference(times: StepTimes) -> float:
    """``max_t |loss_t - reference_loss_t|`` over the chunk."""
    return float(np.max(np.abs(times.losses - times.reference_losses)))


def step_rows(config: BenchConfig, times: StepTimes, peak_flops: float) -> list[Row]:
    """Rows ``train_step_vs_reference`` and ``train_step_peak_fraction`` from ``times``.

    ``peak_fraction = recall_step_flops / step_seconds / peak_flops``, the step's seconds
    those of the compiled scan alone (``profile_step_full``).
    """
    recall, chunk = config.recall, times.chunk
    ours, reference = times.seconds["full"], times.seconds["reference_full"]
    diff = max_loss_difference(times)
    same = "bitwise identical" if diff == 0 else f"max |loss difference| {diff:.3g}"
    flops = recall_step_flops(recall)
    step = ours / chunk
    return [
        make_row(
            "train_step_vs_reference",
            ours,
            reference,
            detail=f"seconds per {chunk} steps, {_sizes(recall)}; train()'s compiled chunk "
            "(scan_steps: the chunk's batches drawn together, then a lax.scan of train_step; "
            "vmapped over seeds, jitted) vs the same with each step's batch drawn inside its "
            "step, the gathers' gradient by plain autodiff of one_hot(tokens) @ table (as "
            "before commit 57be4c8) and the random bits by JAX's rolled threefry loop on CPU "
            f"(as before attnlab.core.prng); {_timing(config)}; losses of the "
            f"chunk from the same state: {same}",
        ),
        make_row(
            "train_step_peak_fraction",
            step,
            peak_fraction=flops / step / peak_flops,
            detail=f"seconds per step of train()'s compiled chunk ({chunk} steps, "
            f"{_sizes(recall)}), host work excluded; FLOPs per step = {FLOPS_FORMULA} = "
            f"{flops:.3g}, "
            f"{flops / step / 1e9:.3g} GFLOP/s of the in-run peak {peak_flops / 1e9:.3g}",
        ),
        matmul_bound_row(recall, times, peak_flops),
    ]


def matmul_bound_row(recall: RecallConfig, times: StepTimes, peak_flops: float) -> Row:
    """Row ``train_step_matmul_bound``: the step's FLOPs at the speed this CPU reaches on a
    product of the step's projection shape, ``recall_step_flops / (2 rows d_model d_k /
    matmul_seconds)``, against the step's seconds; ``peak_fraction`` is that speed over the
    in-run peak (a 2048^3 product)."""
    rows, d_model, d_k = projection_shape(recall)
    speed = 2 * rows * d_model * d_k / times.matmul_seconds
    flops = recall_step_flops(recall)
    bound = flops / speed
    step = times.seconds["full"] / times.chunk
    t = recall.task
    share = 3 * 2 * d_model * d_k * (3 * t.n_key_tokens + 2 * t.n_value_tokens) / flops
    return make_row(
        "train_step_matmul_bound",
        bound,
        peak_fraction=speed / peak_flops,
        detail=f"seconds per step if every FLOP of the step ran at the speed of one "
        f"[{rows}, {d_model}] @ [{d_model}, {d_k}] product (the token-table projections, "
        f"{share:.0%} of the step's FLOPs): {speed / 1e9:.3g} GFLOP/s, a lax.scan of "
        f"{times.chunk} such products (median per product {times.matmul_seconds:.3g} s); "
        f"the step takes {step:.3g} s, {step / bound:.2g}x this bound; {_sizes(recall)}",
    )


#: What each profile row includes.
PROFILE_WHAT = {
    "data": "data generation alone: stream_batches, the chunk's batches drawn together as "
    "train() draws them",
    "forward": "forward alone: loss and the forward metrics of train_step, on the chunk's "
    "batches drawn beforehand, from the step-0 parameters moved each step by 1e-12 x the "
    "loss (so XLA cannot hoist their projections out of the loop)",
    "forward_backward": "forward and backward: value_and_grad of the loss with train_step's "
    "metrics and gradient norms, on the chunk's batches drawn beforehand, from the step-0 "
    "parameters moved each step by a plain SGD step of rate 1e-12 (every gradient used; no "
    "loop-invariant projections)",
    "adam": "the Adam update alone: optimizer.update and apply_updates of a fixed gradient",
    "full": "train()'s chunk: its batches drawn together, then train_step (forward, "
    "backward, metrics, Adam) for each",
    "rolled_full": "train()'s chunk with the random bits by JAX's rolled threefry loop "
    "on CPU (attnlab.core.prng.rolled_threefry; the bits are the same)",
    "reference_full": "the chunk as before the bench's speed-ups: each step's batch drawn "
    "inside its step (stream_batch), the gathers' gradient by plain autodiff of the one-hot "
    "matmul (before commit 57be4c8) and the rolled threefry loop",
}


def profile_rows(config: BenchConfig, times: StepTimes) -> list[Row]:
    """Rows ``profile_step_<part>`` (seconds per step of each part of ``PARTS``) and
    ``profile_step_train_chunk``: ``train()``'s steady chunks per step, whose difference
    from ``profile_step_full`` is the host work between chunks."""
    chunk = times.chunk
    per_step = {part: s / chunk for part, s in times.seconds.items()}
    where = (
        f"{_sizes(config.recall)}; a lax.scan over {chunk} steps vmapped over the seed as "
        f"train() compiles it, {_timing(config)}; seconds per "
        "step = chunk time / steps"
    )
    parts = per_step["data"] + per_step["forward_backward"] + per_step["adam"]
    rows = [
        make_row(f"profile_step_{part}", per_step[part], detail=f"{PROFILE_WHAT[part]}; {where}")
        for part in PARTS
    ]
    rows[PARTS.index("full")]["detail"] += (
        f"; data + forward_backward + adam = {parts:.3g} s ({parts / per_step['full']:.0%} of "
        "the full step)"
    )
    host = times.train_chunk_seconds - times.seconds["full"]
    rows.append(
        make_row(
            "profile_step_train_chunk",
            times.train_chunk_seconds / chunk,
            detail=f"train()'s steady chunks per step: median of {times.train_chunks} chunks "
            "after the first (the time between successive on_chunk callbacks: the compiled "
            "chunk, the metrics fetched to numpy and checked for divergence); host work = "
            f"this - profile_step_full = {host:.3g} s per chunk of {chunk} steps "
            f"({host / times.train_chunk_seconds:.0%} of the chunk); {_sizes(config.recall)}",
        )
    )
    return rows


#: Where the kernel profile's seconds come from.
KERNEL_SOURCE = (
    "XLA's trace of the compiled data and training programs, summed over XLA's threads; "
    "attnlab.studies.bench.kernels"
)
#: What each category of the kernel profile holds.
KERNEL_WHAT = {
    MATMUL: "every kernel computing a dot (the projections of the token tables, the "
    "attention logits and weighted sums, the readout, and their gradients)",
    "data": "drawing the chunk's batches (the data program, stream_batches: threefry, the "
    "key shuffles)",
    "forward_backward": "the forward and backward pass less its matmuls (gathers, softmax, "
    "cross-entropy, their gradients, layout copies)",
    "metrics": "the per-step diagnostics (accuracy, gradient norms, attention entropy and "
    "max weight)",
    "adam": "the Adam update and apply_updates",
    OTHER: "kernels no scope names: the loop's bookkeeping (copies of the carried state, "
    "slicing the chunk's batches)",
}


def kernel_rows(config: BenchConfig, times: StepTimes) -> list[Row]:
    """Rows ``profile_kernels_<category>`` (kernel seconds per step of each category of
    ``KERNEL_CATEGORIES``, summed over XLA's threads) and ``profile_kernels_wall`` (wall
    seconds per step of the same traced calls), from ``train()``'s compiled chunk."""
    k = times.kernels
    where = (
        f"kernel seconds per step ({KERNEL_SOURCE}) of train()'s chunk of {times.chunk} "
        f"steps, {_sizes(config.recall)}"
    )
    rows = []
    for category in KERNEL_CATEGORIES:
        detail = f"{KERNEL_WHAT[category]}; {where}; {k.launches[category]:.3g} launches per step"
        if category == MATMUL:
            estimate = recall_step_flops(config.recall)
            detail += (
                f"; their dots (shapes from the compiled HLO) compute {k.matmul_flops:.4g} "
                f"FLOPs per step (recall_step_flops estimates {estimate:.4g}), "
                f"{k.matmul_flops / k.seconds[category] / 1e9:.3g} GFLOP/s of kernel time"
            )
        if category == "adam":
            # Adam reads the parameters, gradients and both moments and writes three back.
            gb = 7 * 4 * times.parameters / k.seconds[category] / 1e9
            detail += (
                f"; {times.parameters} parameters, so at least 7 x 4 bytes each read or "
                f"written per step: {gb:.3g} GB/s"
            )
        rows.append(make_row(f"profile_kernels_{category}", k.seconds[category], detail=detail))
    total = sum(k.seconds.values())
    rows.append(
        make_row(
            "profile_kernels_wall",
            k.wall_seconds,
            detail=f"wall seconds per step of the traced calls (the trace's overhead "
            f"included); their kernels sum to {total:.3g} s per step over XLA's threads, "
            f"{sum(k.launches.values()):.3g} launches",
        )
    )
    return rows


def bench_recall_step(config: BenchConfig, peak_flops: float) -> list[Row]:
    """``step_rows``, ``profile_rows`` and ``kernel_rows`` from one ``measure_step``."""
    times = measure_step(config)
    return (
        step_rows(config, times, peak_flops)
        + profile_rows(config, times)
        + kernel_rows(config, times)
    )


def fitted_step_row(config: BenchConfig, reading: str) -> Row:
    """Row ``profile_fitted_step``: seconds per step of ``train()``'s chunk (data program
    then training program, one seed, scaled attention) at experiment 09's fitted
    ``reading`` (``config.recall`` supplies the rest: chunk, task, d_k), median of
    ``config.repeats`` calls after a warm-up; the detail gives its kernel profile."""
    recall = reading_config(get_reading(reading), config.recall)
    programs = compile_chunk(recall)
    seconds = median_seconds(programs.run, config.repeats, min_seconds=config.min_timing_seconds)
    kernels = programs.kernels()
    chunk = recall.chunk_steps
    spent = ", ".join(f"{c} {1e3 * kernels.seconds[c]:.3g} ms" for c in KERNEL_CATEGORIES)
    return make_row(
        "profile_fitted_step",
        seconds / chunk,
        detail=f"seconds per step of train()'s chunk at experiment 09's fitted reading "
        f"{reading} ({_sizes(recall)}), {chunk} steps, median of {config.repeats} calls "
        f"after a warm-up; kernel seconds per step ({KERNEL_SOURCE}): {spent}; "
        f"{sum(kernels.launches.values()):.3g} launches; dots {kernels.matmul_flops:.4g} "
        "FLOPs per step",
    )

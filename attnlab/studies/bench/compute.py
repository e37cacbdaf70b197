"""The bench's rows (this folder's README.md), top to bottom: the round-robin timing, the
statics, attention, the recall step, the language-model step, ``make reproduce``, the run."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd

from attnlab.core.attention import dot_product_attention
from attnlab.core.estimates import mean_and_sem
from attnlab.core.prng import rolled_threefry
from attnlab.core.sampling import CHUNK_ELEMENTS, softmax_row_statistics
from attnlab.core.temperature import MECHANISMS
from attnlab.harness.cli import REPO_ROOT
from attnlab.harness.errors import RunError
from attnlab.lm.train import LMConfig, chunk_program, init_program, step_windows
from attnlab.lm.train import seed_keys as lm_seed_keys
from attnlab.lm.trajectory import ledger_program
from attnlab.recall import model as recall_model
from attnlab.recall.config import RecallConfig, make_model, seed_keys
from attnlab.recall.step import TrainState, loss_and_aux, recall_optimizer, train_step
from attnlab.recall.task import Batch, stream_batch
from attnlab.recall.trainer import Run, Trainer
from attnlab.studies.bench.config import COLUMNS, BenchConfig, Row, make_row, peak_row, timing_note
from attnlab.studies.bench.gemma import time_gemma
from attnlab.studies.bench.peer import peer_programs


def _timed(fn: Callable[[], Any], number: int) -> float:
    """Wall seconds of one call of ``fn`` (result blocked on), averaged over ``number``."""
    start = time.perf_counter()
    for _ in range(number):
        jax.block_until_ready(fn())
    return (time.perf_counter() - start) / number


def interleaved_median_seconds(
    fns: Mapping[str, Callable[[], Any]], rounds: int, *, min_seconds: float = 0.0
) -> dict[str, float]:
    """Median wall time of one call of each ``fn``, round-robin over ``rounds`` after one
    untimed call each; calls faster than ``min_seconds`` are repeated within a timing."""
    numbers = {}
    for name, fn in fns.items():
        first = _timed(fn, 1)
        numbers[name] = max(1, math.ceil(min_seconds / max(first, 1e-9))) if min_seconds else 1
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(_timed(fn, numbers[name]))
    return {name: float(np.median(t)) for name, t in times.items()}


def round_robin(config: BenchConfig, fns: Mapping[str, Callable[[], Any]]) -> dict[str, float]:
    """``interleaved_median_seconds`` at ``config``'s rounds and shortest timing."""
    return interleaved_median_seconds(fns, config.repeats, min_seconds=config.min_timing_seconds)


def compare(config: BenchConfig, name: str, ours: Callable, baseline: Callable, what: str) -> Row:
    """Row ``name``: ``ours`` against ``baseline``, round-robin; ``what`` they time."""
    seconds = round_robin(config, {"ours": ours, "baseline": baseline})
    return make_row(name, seconds["ours"], seconds["baseline"],
                    detail=f"{what}; {timing_note(config)}")  # fmt: skip


def measure_peak(size: int, repeats: int) -> tuple[float, float]:
    """Seconds and FLOP/s (``2 size^3`` per call) of a jitted float32 square matmul."""
    a, b = (jax.random.normal(k, (size, size), jnp.float32)
            for k in jax.random.split(jax.random.key(0)))  # fmt: skip
    matmul = jax.jit(jnp.matmul)
    seconds = interleaved_median_seconds({"peak": lambda: matmul(a, b)}, max(repeats, 5))["peak"]
    return seconds, 2 * size**3 / seconds


def numpy_row_statistics(
    rng: np.random.Generator, d_k: int, n_keys: int, trials: int, chunk: int = CHUNK_ELEMENTS
) -> np.ndarray:
    """``softmax_row_statistics(sampler="direct")`` in plain numpy, drawn in chunks of about
    ``chunk`` key entries: ``[2 (scaled, unscaled), trials, 3]``."""
    chunk = max(1, chunk // (n_keys * d_k))
    scales = np.array([1.0 / np.sqrt(d_k), 1.0], np.float32)[:, None, None]
    out = np.empty((2, trials, 3), np.float32)
    for start in range(0, trials, chunk):
        m = min(chunk, trials - start)
        q = rng.standard_normal((m, d_k), dtype=np.float32)
        keys = rng.standard_normal((m, n_keys, d_k), dtype=np.float32)
        logits = scales * np.matmul(keys, q[:, :, None])[None, :, :, 0]  # [2, m, n]
        logits -= logits.max(axis=-1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=-1, keepdims=True)
        p2 = p * p
        top = p.argmax(axis=-1)[..., None]
        p2_others = p2.copy()
        np.put_along_axis(p2_others, top, 0.0, axis=-1)
        others_of_max = p2_others.sum(axis=-1, keepdims=True)
        r = p2.sum(axis=-1, keepdims=True) - p2
        np.put_along_axis(r, top, others_of_max, axis=-1)
        out[:, start : start + m, 0] = p.max(axis=-1)
        out[:, start : start + m, 1] = -np.sum(p * np.log(np.where(p > 0, p, 1.0)), axis=-1)
        out[:, start : start + m, 2] = np.sqrt(np.sum(p2 * (1.0 - p) ** 2 + p2 * r, axis=-1))
    return out


def _max_z(ours: list[np.ndarray], theirs: list[np.ndarray]) -> float:
    """Largest ``|mean_a - mean_b| / sqrt(sem_a^2 + sem_b^2)`` over matching statistics."""
    z = [0.0]
    for a, b in zip(ours, theirs, strict=True):
        (ma, sa), (mb, sb) = mean_and_sem(a, axis=1), mean_and_sem(b, axis=1)
        se = np.hypot(sa, sb)
        z.append(np.where(se > 0, np.abs(ma - mb) / np.where(se > 0, se, 1.0), 0.0).max())
    return float(max(z))


def bench_statics(config: BenchConfig, peak_flops: float) -> list[Row]:
    """Rows ``statics_direct_vs_numpy`` and ``statics_exact_vs_numpy``."""
    key = jax.random.key(config.seed)
    dks, n, trials = config.statics_dks, config.n_keys, config.trials
    last: dict[str, list[np.ndarray]] = {}

    def ours(sampler: str) -> None:
        runs = (softmax_row_statistics(key, d_k, n, trials, sampler) for d_k in dks)
        last[sampler] = [np.stack([s.max_weight, s.entropy, s.jacobian_fro], -1) for s in runs]

    def numpy() -> None:
        rng = np.random.default_rng(config.seed)
        last["numpy"] = [numpy_row_statistics(rng, d_k, n, trials) for d_k in dks]

    calls = {"direct": partial(ours, "direct"), "exact": partial(ours, "exact"), "numpy": numpy}
    seconds = interleaved_median_seconds(calls, config.repeats)
    flops = sum(2 * n * d_k * trials for d_k in dks)
    sweep = (
        f"d_k {', '.join(map(str, dks))}, n_keys {n}, trials {trials}, scaled and "
        f"unscaled, one softmax_row_statistics call per d_k; {timing_note(config)}; numpy "
        "float32 default_rng, chunked like ours"
    )
    return [
        make_row(
            "statics_direct_vs_numpy", seconds["direct"], seconds["numpy"],
            peak_fraction=flops / seconds["direct"] / peak_flops,
            detail=f"{sweep}; FLOPs = sum over d_k of trials * 2 n_keys d_k (the K q matvecs) "
            f"= {flops:.3g}; means agree with numpy's within "
            f"{_max_z(last['direct'], last['numpy']):.1f} SEM",
        ),
        make_row(
            "statics_exact_vs_numpy", seconds["exact"], seconds["numpy"],
            detail=f"{sweep}; the exact sampler (|q| g, O(n) per trial) against numpy's direct "
            f"one; means agree within {_max_z(last['exact'], last['numpy']):.1f} SEM",
        ),
    ]  # fmt: skip


def _grad_of_sum(fn: Callable[..., jax.Array]) -> Callable[..., tuple[jax.Array, ...]]:
    return jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v)), argnums=(0, 1, 2))


def bench_attention(config: BenchConfig) -> list[Row]:
    """Rows ``attention_fwd_vs_jax[_suffix]`` and ``attention_fwdbwd_vs_jax[_suffix]``."""
    rows = []
    for shape in config.attention_shapes:
        keys = jax.random.split(jax.random.key(config.seed), 3)
        lengths = (shape.q_len, shape.k_len, shape.k_len)
        ours_in = tuple(jax.random.normal(k, (shape.batch, n, shape.d))
                        for k, n in zip(keys, lengths, strict=True))  # fmt: skip
        ref_in = tuple(x[:, :, None, :] for x in ours_in)  # jax.nn's [B, T, N, H], one head
        where = (f"batch {shape.batch} (heads folded into batch), {shape.q_len} queries, "
                 f"{shape.k_len} keys, d {shape.d}, float32, jitted")  # fmt: skip
        grad = "grad of sum(output) wrt q, k, v"
        for kind, wrap, what in (("fwd", lambda f: f, "forward"), ("fwdbwd", _grad_of_sum, grad)):
            ours = partial(jax.jit(wrap(dot_product_attention)), *ours_in)
            ref = partial(jax.jit(wrap(jax.nn.dot_product_attention)), *ref_in)
            pairs = zip(jax.tree.leaves(ours()), jax.tree.leaves(ref()), strict=True)
            diff = max(float(jnp.max(jnp.abs(a - b.reshape(a.shape)))) for a, b in pairs)
            rows.append(compare(config, f"attention_{kind}_vs_jax{shape.suffix}", ours, ref,
                                f"{what}; {where}; max |ours - jax.nn| = {diff:.2g}"))  # fmt: skip
    return rows


def one_hot_rows(table: jax.Array, tokens: jax.Array) -> jax.Array:
    """``table[tokens]`` as ``one_hot(tokens, n) @ table`` under plain autodiff (the gather
    before commit 57be4c8): the same forward, the same gradient sum as a dense product."""
    return jax.nn.one_hot(tokens, table.shape[0], dtype=table.dtype) @ table


def autodiff_gathers() -> AbstractContextManager:
    """``attnlab.recall.model._rows`` is ``one_hot_rows`` inside the block (looked up when
    traced: compile inside, call after). Process-wide: not thread-safe."""
    return mock.patch.object(recall_model, "_rows", one_hot_rows)


def reference_chunk(config: RecallConfig, state, data_key: jax.Array, steps: jax.Array):
    """The compiled program ``(state, data_key, steps)`` of one seed's chunk before the
    speed-ups: each step's batch drawn inside it (``stream_batch``), ``autodiff_gathers``
    and JAX's rolled threefry loop (``rolled_threefry``)."""
    model = make_model(config, MECHANISMS["scaled"])
    optimizer = recall_optimizer(config.lr)

    def chunk(s, key, steps):
        def step(s, t):
            batch = stream_batch(key, t, config.batch_size, config.task)
            return train_step(model, optimizer, s, batch)

        return jax.lax.scan(step, s, steps)

    with rolled_threefry(), autodiff_gathers():
        return jax.jit(chunk).lower(state, data_key, steps).compile()


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


#: ``lm_step_flops`` in words, for the rows' details.
LM_FLOPS = (
    "3 x B T [2 (12 L d^2 + 256 d) + 4 L T d] (the forward matmuls, full T x T score and "
    "value products, and their two gradients)"
)
#: The lane's peak learning rate; QK-Clip's threshold in the clip's row (Kimi K2's).
RATE, BENCH_TAU = 1e-3, 100.0


def lm_step_flops(config: LMConfig) -> int:
    """Estimated FLOPs of one training step: ``LM_FLOPS`` (elementwise work not counted)."""
    d, layers, length = config.d_model, config.n_layers, config.seq_len
    per_token = 2 * (12 * layers * d * d + 256 * d) + 4 * layers * length * d
    return 3 * config.batch_size * length * per_token


def _sizes(lm: LMConfig) -> str:
    return (f"d_model {lm.d_model}, {lm.n_layers} layers, {lm.n_heads} heads, sequence "
            f"{lm.seq_len}, batch {lm.batch_size}, scaled attention, 1 lane")  # fmt: skip


def lm_lane(config: BenchConfig, lm: LMConfig, rates: tuple[float, ...] = (RATE,)):
    """Lanes of ``lm`` (scaled attention) from ``config.seed``, one per rate: the model, the
    windows ``[steps, B, T+1]`` every lane's chunk of ``lm.steps`` steps draws, and that chunk."""
    mechanism = MECHANISMS["scaled"]
    model = lm.model(mechanism)
    init_key, data_key = lm_seed_keys(config.seed)
    keys = (jnp.stack([init_key] * len(rates)), jnp.stack([data_key] * len(rates)))
    state = init_program(model, lm)(*keys)
    rng = np.random.default_rng(config.seed)
    train = jnp.asarray(rng.integers(0, 256, 4 * lm.batch_size * (lm.seq_len + 1)), jnp.int32)
    batches = jax.vmap(lambda t: step_windows(lm, data_key, t, train))(jnp.arange(lm.steps))
    constants = {k: jnp.full((len(rates),), v, jnp.float32)
                 for k, v in mechanism.constant_values(lm.d_head).items()}  # fmt: skip
    args = (state, jnp.arange(lm.steps), train, jnp.asarray(rates, jnp.float32), constants)
    return model, batches, partial(chunk_program(model, lm), *args)


def bench_lm_step(config: BenchConfig, peak_flops: float) -> list[Row]:
    """Rows ``lm_step_vs_peer``, ``lm_step_peak_fraction`` and ``lm_ledger_overhead``, all
    from one round-robin timing."""
    lm = replace(config.lm, chunk_steps=config.lm.steps)
    model, batches, ours = lm_lane(config, lm)
    init, peer_chunk = peer_programs(lm, RATE)
    peer_state = init(jax.random.key(config.seed))
    state, metrics = ours()
    params = jax.tree.map(lambda x: x[0], state.params)  # the lane after one chunk
    ledger = ledger_program(model, None)
    constants = MECHANISMS["scaled"].constant_values(lm.d_head)
    calls = {
        "ours": ours,
        "peer": partial(peer_chunk, peer_state, batches),
        "ledger": lambda: ledger(params, batches[0, :, :-1], constants),
    }
    first = float(metrics["loss"][0, 0]), float(calls["peer"]()[1][0])
    seconds = round_robin(config, calls)
    step, flops, sizes = seconds["ours"] / lm.steps, lm_step_flops(lm), _sizes(lm)
    return [
        make_row(
            "lm_step_vs_peer", seconds["ours"], seconds["peer"],
            detail=f"seconds per {lm.steps} steps, {sizes}; experiment 14's lax.scan chunk vs "
            "the same model and AdamW step written with flax.linen, "
            "jax.nn.dot_product_attention(is_causal=True) and optax (bench/peer.py), "
            "a jitted lax.scan over the same batches drawn beforehand (ours draws each in its "
            "step and records per-layer statistics); same FLOPs; "
            f"{timing_note(config)}; first-step losses from their own inits: ours "
            f"{first[0]:.4f}, peer {first[1]:.4f} (ln 256 = {math.log(256):.4f})",
        ),
        peak_row("lm_step_peak_fraction", step, flops, LM_FLOPS, peak_flops, f"seconds per step, "
                 f"{sizes}: {lm.batch_size * lm.seq_len / step:.3g} tokens/s"),
        make_row(
            "lm_ledger_overhead", step + seconds["ledger"], step,
            detail=f"seconds per training step with the temperature ledger logged vs without "
            f"({sizes}): lm_step_vs_peer's chunk / steps, plus attnlab.lm.trajectory's "
            f"ledger_program(model, tau=None) of the lane's parameters on one step's batch, "
            f"{1e3 * seconds['ledger']:.3g} ms; logging the ledger every step would cost "
            f"{100 * seconds['ledger'] / step:.3g}% per step; {timing_note(config)}",
        ),
    ]  # fmt: skip


def bench_lm_optimizers(config: BenchConfig) -> list[Row]:
    """Rows ``lm_muon_step_vs_adamw`` and ``lm_qk_clip_step_vs_none``."""
    base = replace(config.lm, chunk_steps=config.lm.steps, optimizer="adamw", qk_clip_tau=None)
    pairs = (
        ("lm_muon_step_vs_adamw", replace(base, optimizer="muon"), "Muon on the hidden "
         "matrices (AdamW on the rest) vs AdamW"),
        ("lm_qk_clip_step_vs_none", replace(base, qk_clip_tau=BENCH_TAU), f"AdamW with "
         f"QK-Clip at tau {BENCH_TAU:g} vs without"),
    )  # fmt: skip
    where = f"seconds per {base.steps} steps, {_sizes(base)}: "
    return [compare(config, name, lm_lane(config, lm)[2], lm_lane(config, base)[2], where + what)
            for name, lm, what in pairs]  # fmt: skip


REPRODUCE_COMMAND = ("make", "reproduce")  # time_reproduce's: every result, stale or not


def script_seconds(results: Path) -> dict[str, float]:
    """Each experiment's seconds in the sidecars under ``results`` (``NN_``, 11 for ``cards/``,
    ``runs/`` left out), distinct times summed (a script's stages)."""
    found: dict[str, set] = {}
    for path in results.rglob("*.json"):
        parts = path.relative_to(results).parts
        number = "11" if parts[0] == "cards" else path.name[:2]
        if parts[0] != "runs" and number.isdigit():
            found.setdefault(number, set()).add(json.loads(path.read_text()).get("wall_time_s"))
    return {number: sum(filter(None, times)) for number, times in sorted(found.items())}


def time_reproduce(command: Sequence[str] = REPRODUCE_COMMAND, cwd: os.PathLike = REPO_ROOT) -> Row:
    """Row ``make_reproduce_seconds``: ``command`` in ``cwd`` with ``ATTNLAB_JAX_CACHE`` a fresh
    empty directory (the programs written there counted), each experiment's share; RunError."""
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="attnlab-jax-cache-") as cache:
        start = time.perf_counter()
        env = {**os.environ, "ATTNLAB_JAX_CACHE": cache}
        done = subprocess.run(list(command), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", check=False)  # fmt: skip
        seconds = time.perf_counter() - start
        programs = len(list(Path(cache).glob("*-cache")))
    shown = " ".join(command)
    if done.returncode != 0:
        tail = " | ".join(done.stdout.strip().splitlines()[-3:])
        raise RunError(f"`{shown}` exited with status {done.returncode}: {tail}")
    shares = ", ".join(f"{n} {s:.0f}" for n, s in script_seconds(Path(cwd) / "results").items())
    detail = (f"wall time of `{shown}` (every result regenerated); compilation cache empty: "
              f"{programs} XLA programs compiled; each experiment's seconds (its sidecars): "
              f"{shares}; {os.cpu_count()} CPUs; load average at start {load[0]:.1f}")  # fmt: skip
    return make_row("make_reproduce_seconds", seconds, detail=detail)


def run_bench(
    config: BenchConfig, on_group: Callable[[int], None] | None = None,
    reproduce_command: Sequence[str] | None = None, gemma: tuple[Path, str] | None = None,
) -> pd.DataFrame:  # fmt: skip
    """Every row of ``ROW_NAMES`` (and, given ``gemma``, the GGUF and 13's arguments on it,
    Gemma 3 270M's rows, ``bench.gemma.time_gemma``;
    given ``reproduce_command``, ``make_reproduce_seconds``) with the columns of
    ``COLUMNS``; ``on_group(1)`` after each of ``GROUPS`` groups (one more with each
    option)."""
    tick = on_group or (lambda _: None)
    peak_s, peak = measure_peak(config.peak_size, config.repeats)
    devices = f"{jax.device_count()} x {jax.devices()[0].device_kind}"
    detail = (f"jitted float32 {config.peak_size}^3 matmul, 2 n^3 FLOPs: {peak / 1e9:.3g} "
              f"GFLOP/s, the peak every peak_fraction divides by; {os.cpu_count()} CPUs, "
              f"{platform.machine()}, jax {jax.__version__} on {jax.default_backend()} "
              f"({devices}); load average at start {os.getloadavg()[0]:.1f}")  # fmt: skip
    rows = [make_row("peak_matmul_f32", peak_s, detail=detail)]
    tick(1)
    groups = [partial(bench_statics, config, peak), partial(bench_attention, config),
              partial(bench_recall_step, config, peak), partial(bench_lm_step, config, peak),
              partial(bench_lm_optimizers, config)]  # fmt: skip
    if gemma is not None:
        groups.append(partial(time_gemma, *gemma))
    if reproduce_command is not None:
        groups.append(lambda: [time_reproduce(reproduce_command)])
    for group in groups:
        rows.extend(group())
        tick(1)
    return pd.DataFrame(rows).reindex(columns=list(COLUMNS))


#: How many times ``run_bench`` calls ``on_group`` (without ``reproduce_command``).
GROUPS = 6

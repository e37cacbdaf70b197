"""The language-model task, readable top to bottom: byte-level next-token prediction on a
text, its configuration, data, loss, step and the lanes of a learning-rate sweep.

Data: the text's bytes, split once: the first ``1 - held_out`` of them train, the rest are
held out. A training batch at step ``t`` of a seed is ``batch_size`` windows of
``seq_len + 1`` bytes at offsets drawn from ``fold_in(data_key(seed), t)``, so every
mechanism and rate of a seed sees the same batches in the same order. The held-out loss is
the mean next-byte cross-entropy (nats per byte) over ``eval_windows`` windows at evenly
spaced offsets of the held-out part, with the standard error over windows.

Training: ``CausalLM`` (``attnlab.lm.model``), the optimizer of ``config.optimizer``
(``attnlab.training.optimizers``: 14's AdamW, Muon on the hidden matrices with its AdamW
side at ``side_lr`` or the lane's rate, Lion, or any registered) with warmup and a
decaying schedule (``schedule``: 14's cosine or K2's warmup-stable-decay), clipping and
weight decay (``decay``: independent of the rate, 14's, or coupled to it), optionally
QK-Clip after each step (``qk_clip_tau``, ``attnlab.lm.qk_clip``, on each head's largest
signed logit or, ``qk_clip_on="abs"``, its largest |logit|), loss ``CE + z_loss_weight *
z_loss``. A *lane* is one (learning rate, seed); the lanes of one mechanism and width are
vmapped through one compiled program (the rate and the mechanism's constants traced),
steps run in ``lax.scan`` chunks of ``chunk_steps``, and every step records the loss and,
per layer, the largest attention logit, the attention entropy and the mean q and k norms.
A lane whose loss turns non-finite is recorded (``diverged_step``), never raised.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from attnlab.core.mechanism import Mechanism
from attnlab.lm.loss import head_logits, held_out_loss, loss_fn
from attnlab.lm.model import POSITIONS, CausalLM, program_lm
from attnlab.lm.qk_clip import check_tau, clip_factors, qk_clip
from attnlab.training.lanes import Programs, run_lanes
from attnlab.training.optimizers import OPTIMIZERS, Recipe, hyperparameters, make_optimizer
from attnlab.training.schedules import DECAYS, SCHEDULES

#: What every step records per lane: the loss, then each ``LayerStats`` field per layer.
STEP_METRICS = ("loss", "max_logit", "entropy", "q_norm", "k_norm")
#: What a step with QK-Clip records besides, per layer: the largest signed logit over its
#: heads (the clip's S, before that step's clip) and the fraction of heads clipped ...
LAYER_CLIP_METRICS = ("max_signed_logit", "clip_fraction")
#: ... and per layer and head ``[n_layers, H]``, each head's largest signed and |logit|.
CLIP_METRICS = (*LAYER_CLIP_METRICS, "head_signed_logit", "head_abs_logit")
#: What a probed step records besides (``probe_every``), per layer and head, NaN at the
#: steps not probed: the clip's quantity S (signed or |logit|, ``qk_clip_on``) before the
#: update, after the update on the same batch, and after the clip on the same batch.
PROBE_METRICS = ("probe_before", "probe_after_update", "probe_after_clip")
#: What QK-Clip may read of each head (``LMConfig.qk_clip_on``): Kimi K2's largest signed
#: logit, or the largest |logit| (not K2's: it clips negative logits too).
CLIP_ON = ("signed", "abs")


@dataclass(frozen=True)
class LMConfig:
    """One width of the language-model sweep. Defaults: a small-scale proxy in the manner
    of Wortsman et al. 2023, sized for two CPU cores (this study's README)."""

    d_model: int = 64
    d_head: int = 16
    n_layers: int = 2
    seq_len: int = 64
    batch_size: int = 16
    steps: int = 500
    warmup: int = 50
    weight_decay: float = 1e-4
    clip: float = 1.0
    z_loss_weight: float = 1e-4
    eval_windows: int = 128
    held_out: float = 0.1
    chunk_steps: int = 100
    positions: str = "learned"
    optimizer: str = "adamw"
    qk_clip_tau: float | None = None
    schedule: str = "cosine"
    decay: str = "independent"
    side_lr: float | None = None
    qk_clip_on: str = "signed"
    probe_every: int = 0

    def __post_init__(self) -> None:
        for name in ("d_model", "d_head", "n_layers", "seq_len", "batch_size", "steps",
                     "eval_windows", "chunk_steps"):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"LMConfig.{name} must be an integer >= 1, got {value!r}")
        if self.d_model % self.d_head or self.d_head % 2:
            raise ValueError(
                f"LMConfig: d_model {self.d_model} must be a multiple of d_head {self.d_head},"
                " which must be even"
            )
        for name in ("clip", "weight_decay", "z_loss_weight"):
            value = getattr(self, name)
            bound = "> 0" if name == "clip" else ">= 0"
            low_ok = value > 0 if name == "clip" else value >= 0
            if isinstance(value, bool) or not (np.isfinite(value) and low_ok):
                raise ValueError(f"LMConfig.{name} must be a finite number {bound}, got {value!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int):
            raise ValueError(f"LMConfig.warmup must be an integer, got {self.warmup!r}")
        if not 0 <= self.warmup < self.steps:
            raise ValueError(f"LMConfig.warmup must be in [0, steps), got {self.warmup}")
        if not 0 < self.held_out < 1:
            raise ValueError(f"LMConfig.held_out must be in (0, 1), got {self.held_out}")
        if self.positions not in POSITIONS:
            raise ValueError(f"LMConfig.positions must be one of {POSITIONS}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"LMConfig.optimizer must be one of {list(OPTIMIZERS)}")
        if self.qk_clip_tau is not None:
            check_tau(self.qk_clip_tau, "LMConfig.qk_clip_tau")
        for name, allowed in (("schedule", SCHEDULES), ("decay", DECAYS),
                              ("qk_clip_on", CLIP_ON)):  # fmt: skip
            if getattr(self, name) not in allowed:
                raise ValueError(f"LMConfig.{name} must be one of {allowed}")
        side = self.side_lr
        if side is not None and (
            "side_lr" not in hyperparameters(self.optimizer)
            or isinstance(side, bool)
            or not isinstance(side, int | float)
            or not (np.isfinite(side) and side > 0)
        ):
            raise ValueError(
                f"LMConfig.side_lr must be None or, under an optimizer with a side rate "
                f"(muon), a finite rate > 0, got "
                f"{self.side_lr!r} under {self.optimizer}"
            )
        probe = self.probe_every
        if isinstance(probe, bool) or not isinstance(probe, int) or probe < 0:
            raise ValueError(f"LMConfig.probe_every must be an integer >= 0, got {probe!r}")
        if probe and self.qk_clip_tau is None:
            raise ValueError("LMConfig.probe_every probes QK-Clip: it needs qk_clip_tau")

    @property
    def n_heads(self) -> int:
        return self.d_model // self.d_head

    @property
    def metrics(self) -> tuple[str, ...]:
        """What every step records (``STEP_METRICS``, and ``CLIP_METRICS`` with QK-Clip,
        ``PROBE_METRICS`` with ``probe_every``)."""
        clip = CLIP_METRICS if self.qk_clip_tau is not None else ()
        return STEP_METRICS + clip + (PROBE_METRICS if self.probe_every else ())

    def model(self, mechanism: Mechanism) -> CausalLM:
        return CausalLM(mechanism, self.d_model, self.n_layers, self.n_heads, self.seq_len,
                        self.positions)  # fmt: skip


# ------------------------------------------------------------------------------- data


class Split(NamedTuple):
    """A text's bytes: the training part, the held-out windows ``[eval_windows, T+1]`` and
    the held-out part whole (``held_out_windows`` cuts windows of other lengths from it)."""

    train: np.ndarray
    held_out: np.ndarray
    rest: np.ndarray


def held_out_windows(rest: np.ndarray, window: int, count: int) -> np.ndarray:
    """``count`` windows ``[count, window]`` of ``rest`` at evenly spaced offsets, from its
    first byte to its last whole window (they overlap where ``count * window`` exceeds
    it); a ``ValueError`` if ``rest`` is shorter than one window."""
    if len(rest) < window:
        raise ValueError(f"the held-out part has {len(rest)} bytes, fewer than a window {window}")
    starts = np.linspace(0, len(rest) - window, count).round().astype(int)
    return np.stack([rest[s : s + window] for s in starts])


def split_text(tokens: np.ndarray, config: LMConfig) -> Split:
    """The fixed split of the module docstring; a ``ValueError`` if either part is shorter
    than one window."""
    tokens = np.asarray(tokens, np.int32)
    cut = int(len(tokens) * (1 - config.held_out))
    train, rest = tokens[:cut], tokens[cut:]
    window = config.seq_len + 1
    if len(train) < window or len(rest) < window:
        raise ValueError(
            f"the text has {len(tokens)} bytes; its training and held-out parts must each "
            f"hold a window of seq_len + 1 = {window} bytes"
        )
    return Split(train, held_out_windows(rest, window, config.eval_windows), rest)


def sample_windows(key: jax.Array, train: jax.Array, batch_size: int, length: int) -> jax.Array:
    """``batch_size`` windows ``[batch_size, length]`` of ``train`` at offsets drawn from
    ``key`` uniformly over every whole window."""
    starts = jax.random.randint(key, (batch_size,), 0, train.shape[0] - length + 1)
    return jax.vmap(lambda s: jax.lax.dynamic_slice(train, (s,), (length,)))(starts)


def step_windows(config: LMConfig, data_key: jax.Array, step, train: jax.Array) -> jax.Array:
    """The windows ``[batch_size, seq_len + 1]`` that step ``step`` of a lane with data key
    ``data_key`` trains on: ``sample_windows`` at ``fold_in(data_key, step)``."""
    key = jax.random.fold_in(data_key, step)
    return sample_windows(key, train, config.batch_size, config.seq_len + 1)


def seed_keys(seed: int) -> tuple[jax.Array, jax.Array]:
    """A seed's initialisation and data keys (disjoint by ``fold_in``)."""
    root = jax.random.key(seed)
    return jax.random.fold_in(root, 0), jax.random.fold_in(root, 1)


# ------------------------------------------------------------------------------- qk-clip


def clip_layers(params: dict, heads: jax.Array, tau: float, n_heads: int) -> dict:
    """``params`` with each layer's W_Q, W_K after QK-Clip at ``tau`` on that layer's
    largest logits per head ``heads[i]`` (``attnlab.lm.qk_clip``)."""
    params = dict(params)
    for i in range(heads.shape[0]):
        attn = dict(params[f"h_{i}"]["attn"])
        attn["W_Q"], attn["W_K"] = qk_clip(attn["W_Q"], attn["W_K"], heads[i], tau=tau,
                                           n_heads=n_heads)  # fmt: skip
        params[f"h_{i}"] = {**params[f"h_{i}"], "attn": attn}
    return params


# ------------------------------------------------------------------------------- step


class LaneState(NamedTuple):
    """A lane's parameters, optimiser state and data key (raw ``key_data``, so that lanes
    stack and shard as plain arrays)."""

    params: dict
    opt_state: optax.OptState
    data_key: jax.Array


def _optimizer(config: LMConfig, lr) -> optax.GradientTransformation:
    """The optimizer seam (``attnlab.training.optimizers``): ``config.optimizer`` at rate
    ``lr`` under the configuration's ``Recipe``, Muon's side at ``side_lr`` if given."""
    recipe = Recipe(config.steps, config.warmup, config.weight_decay, config.clip,
                    config.schedule, config.decay)  # fmt: skip
    side = {} if config.side_lr is None else {"side_lr": config.side_lr}
    return make_optimizer(config.optimizer, lr, recipe, **side)


def clip_quantity(model: CausalLM, config: LMConfig, params, windows, constants) -> jax.Array:
    """The clip's S per layer and head ``[n_layers, H]`` (``qk_clip_on``) of ``params`` on
    ``windows``: one forward pass, no gradient."""
    _, sown = model.apply({"params": params}, windows[:, :-1], constants,
                          mutable=["intermediates"])  # fmt: skip
    return head_logits(sown, model.n_layers)[config.qk_clip_on]


def train_step(model: CausalLM, config: LMConfig, state: LaneState, step, train, lr, constants):
    """One step of one lane; its metrics (``config.metrics``) taken before the update. With
    ``qk_clip_tau``, QK-Clip after the update, on the largest logits per head of this
    step's forward pass (no second forward). With ``probe_every``, at every such step the
    clip's S is also read after the update and after the clip on the same batch (two more
    forward passes that change nothing; ``lax.cond``, so the other steps pay nothing)."""
    windows = step_windows(config, jax.random.wrap_key_data(state.data_key), step, train)
    clip = config.qk_clip_tau is not None
    grad_fn = jax.value_and_grad(loss_fn, argnums=1, has_aux=True)
    (_, (ce, stats, heads)), grads = grad_fn(model, state.params, windows, constants,
                                             config.z_loss_weight, clip)  # fmt: skip
    optimizer = _optimizer(config, lr)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {"loss": ce, **stats._asdict()}
    if clip:
        s = heads[config.qk_clip_on]
        updated = params
        params = clip_layers(params, s, config.qk_clip_tau, config.n_heads)
        metrics["max_signed_logit"] = jnp.max(heads["signed"], axis=-1)
        metrics["clip_fraction"] = jnp.mean(clip_factors(s, config.qk_clip_tau) < 1, -1)
        metrics["head_signed_logit"], metrics["head_abs_logit"] = heads["signed"], heads["abs"]
    if config.probe_every:

        def probe(_):
            return tuple(clip_quantity(model, config, p, windows, constants)
                         for p in (updated, params))  # fmt: skip

        nan = jnp.full_like(s, jnp.nan)
        probed = step % config.probe_every == 0
        after_update, after_clip = jax.lax.cond(probed, probe, lambda _: (nan, nan), None)
        metrics["probe_before"] = jnp.where(probed, s, jnp.nan)
        metrics["probe_after_update"], metrics["probe_after_clip"] = after_update, after_clip
    return LaneState(params, opt_state, state.data_key), metrics


def lane_chunk(model: CausalLM, config: LMConfig):
    """``(state, steps, train, lr, constants) -> (state, metrics)`` of one lane:
    ``train_step`` over the chunk's ``steps`` (``lax.scan``)."""

    def chunk(state, steps, train, lr, constants):
        def body(s, step):
            return train_step(model, config, s, step, train, lr, constants)

        return jax.lax.scan(body, state, steps)

    return chunk


@cache
def chunk_program(model: CausalLM, config: LMConfig):
    """``lane_chunk`` for every lane (state, lr and constants with a leading lane axis;
    ``train`` the training bytes every lane reads): vmapped over the lanes, or for a single
    lane the unbatched chunk, its lane axis dropped and restored (a one-lane vmap is the
    same arithmetic, which XLA's CPU backend runs slower; docs/performance.md)."""
    chunk = lane_chunk(model, config)
    lanes = jax.vmap(chunk, in_axes=(0, None, None, 0, 0))

    def run(state, steps, train, lr, constants):
        if lr.shape[0] > 1:
            return lanes(state, steps, train, lr, constants)
        state, constants = jax.tree.map(lambda x: x[0], (state, constants))
        return jax.tree.map(lambda x: x[None], chunk(state, steps, train, lr[0], constants))

    return jax.jit(run)


@cache
def init_program(model: CausalLM, config: LMConfig):
    """``(init keys, data keys) -> LaneState``, vmapped over lanes."""
    dummy = np.zeros((1, config.seq_len), np.int32)  # shapes only: nothing compiled

    def init(key, data_key):
        params = model.init(key, dummy)["params"]
        opt_state = _optimizer(config, 1.0).init(params)
        return LaneState(params, opt_state, jax.random.key_data(data_key))

    return jax.jit(jax.vmap(init))


@cache
def _eval_program(model: CausalLM):
    return jax.jit(jax.vmap(lambda p, w, c: held_out_loss(model, p, w, c), in_axes=(0, None, 0)))


# ------------------------------------------------------------------------------- lanes


@dataclass
class SweepResult:
    """Every lane of one mechanism at one width: ``lrs`` and ``seeds`` ``[lanes]``,
    per-step metrics ``[lanes, steps]`` (``loss``) or ``[lanes, steps, n_layers]``, the
    held-out loss per window at step 0 and at the end ``[lanes, eval_windows]``, the output
    logits' variance at step 0 ``[lanes]`` (``held_out_loss``), the first non-finite step
    (-1: none) and the final parameters (stacked over lanes)."""

    mechanism: str
    config: LMConfig
    lrs: np.ndarray
    seeds: np.ndarray
    metrics: dict[str, np.ndarray]
    initial_loss: np.ndarray
    final_loss: np.ndarray
    initial_logit_var: np.ndarray
    diverged_step: np.ndarray
    params: dict


def lm_programs(config: LMConfig, mechanism: Mechanism) -> Programs:
    """The language model's programs for the lanes engine (``attnlab.training.lanes``):
    ``init_program``, ``chunk_program`` and the held-out loss (``held_out_loss``: per window,
    and the output logits' variance)."""
    model = config.model(mechanism)
    program = program_lm(model)
    return Programs(init_program(model, config), chunk_program(program, config),
                    _eval_program(program), config.metrics)  # fmt: skip


def train_lanes(
    config: LMConfig,
    mechanism: Mechanism,
    lrs: list[float],
    seeds: list[int],
    split: Split,
    on_chunk: Callable[[int], None] | None = None,
    on_params: Callable[[int, Any], None] | None = None,
) -> SweepResult:
    """Train ``mechanism`` at every (rate, seed) of ``lrs x seeds`` as lanes of one
    compiled program (``attnlab.training.lanes.run_lanes``: lanes rate-major, padded to a
    multiple of the device count and sharded over the devices). ``on_chunk(steps x
    lanes)`` after each chunk; ``on_params(step, params)`` with the lanes' parameters
    (stacked, padded lanes included) at step 0 and after each chunk, ``step`` the steps
    taken (a run's ledger: ``attnlab.lm.trajectory``)."""
    lanes = run_lanes(lm_programs(config, mechanism), lrs, seeds, seed_keys,
                      mechanism.constant_values(config.d_head), split.train, split.held_out,
                      config.steps, config.chunk_steps, on_chunk, on_params)  # fmt: skip
    return SweepResult(mechanism.name, config, lanes.lrs, lanes.seeds, lanes.metrics,
                       lanes.initial_loss, lanes.final_loss, lanes.initial_extra,
                       lanes.diverged_step, lanes.params)  # fmt: skip

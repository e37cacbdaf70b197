"""The mechanism card's computation: the suite's battery run on any mechanism.

Every section runs the card's mechanisms (the one carded and its baselines) on the same
draws, seeds and data, so their rows compare like for like:

- *statics* (``statics_frame``): queries and keys with iid N(0, 1) entries, drawn exactly
  as experiments 02 and 03 draw them (``direct_logits``' keys per trial), passed through
  the mechanism at its initial scalars; per row the max weight, the entropy, the total mass
  ``sum_j p_j``, the Frobenius norm of the Jacobian ``dp/dz`` of the weights with respect
  to the logits, and the logits' std; means and standard errors over trials, against d_k
  at ``n_keys`` keys and against n at d_k ``n_dk``. For weights that need not sum to one
  the entropy is that of the normalised row ``p / sum p`` and the Jacobian is of the
  weights themselves, by forward-mode autodiff (the closed form ``diag(p) - p p^T`` is
  softmax's, used for ``softmax_weights`` only), up to ``JACOBIAN_MAX_N`` keys (its cost is
  ``n^2`` per row; beyond, the column is left empty).
- *precision* (``attnlab.studies.card.headroom``): float16 q and k of std 1 to 64, the
  mechanism's float16 headroom; *masks* (``mask_frame``, as experiment 07): a row with every
  key masked, finite output and gradients? masked keys weighted 0?
- *training* (``training_frames``): experiment 04's task and defaults, every mechanism
  from the same initialisations on the same batches (the one training engine); a seed that
  goes non-finite is recorded (``diverged_step``, ``nonfinite``), not raised. The trained
  models give *ownership* and static *drift* (``attnlab.studies.card.trained``).
- *sweep* (``attnlab.studies.card.sweep``): learning rates and widths at 10's narrowed
  reading, every rate a lane of one program.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.curves import trailing_mean
from attnlab.core.estimates import mean_and_sem
from attnlab.core.hooks import softmax_weights
from attnlab.core.mechanism import Mechanism
from attnlab.core.progress import Progress
from attnlab.core.references import MechanismRef
from attnlab.core.sampling import map_trials, trial_keys
from attnlab.core.softmax_stats import entropy, jacobian_frobenius_norm, max_weight
from attnlab.harness.workers import Piece, run_pieces
from attnlab.recall.config import RecallConfig
from attnlab.recall.step import initial_state
from attnlab.recall.tables import summary_frame as recall_summary_frame
from attnlab.recall.trainer import Run, group_runs, train_runs
from attnlab.studies.card.headroom import SIGMAS
from attnlab.studies.card.precision import precision_frame
from attnlab.studies.card.store import (
    CardPlan,
    CardResult,
    card_results,
    in_order,
    merge_cards,
    reused_cards,
)
from attnlab.studies.card.sweep import SWEEP_BASE, SweepConfig, sweep_table, width_rows
from attnlab.studies.card.trained import DRIFT_READINGS, trained_frames
from attnlab.studies.card.verdicts import Card, verdicts_frame

#: Keys up to which a non-softmax mechanism's Jacobian is computed (``n^2`` per row).
JACOBIAN_MAX_N = 1024
#: Steps between the points of the training curves the card keeps.
CURVE_EVERY = 10
#: The statistics of ``statics_frame``, in its column order.
STATISTICS = ("max_weight", "entropy", "mass", "jacobian_fro", "logit_std")


@dataclass(frozen=True)
class CardConfig:
    """What a card measures. Defaults: the settings of experiments 02/03 (2000 trials at
    256 keys), 06 (keys 16 to 4096 at d_k 64), 04 (training) and the sweep
    (``SweepConfig``); float16 headroom at d_k 64 and 1024. ``quick``: a ``--quick`` card
    (``QUICK``), said so in its first line. ``training``'s and the sweep's ``mechanisms``
    are placeholders: the card trains the mechanisms it is given."""

    statics_dks: tuple[int, ...] = (4, 16, 64, 256, 1024)
    statics_ns: tuple[int, ...] = (16, 64, 256, 1024, 4096)
    n_keys: int = 256
    n_dk: int = 64
    trials: int = 2000
    precision_dks: tuple[int, ...] = (64, 1024)
    precision_sigmas: tuple[float, ...] = SIGMAS
    precision_trials: int = 100
    seed: int = 0
    training: RecallConfig = field(default_factory=lambda: RecallConfig(mechanisms=("scaled",)))
    sweep: SweepConfig = field(default_factory=SweepConfig)
    quick: bool = False

    def __post_init__(self) -> None:
        if self.n_keys not in self.statics_ns or self.n_dk not in self.statics_dks:
            raise ValueError("CardConfig: n_keys must be in statics_ns, n_dk in statics_dks")

    def settings(self) -> dict:
        """Everything that decides a card's numbers but the mechanisms, and the readings of
        its drift table (a card without one the verdicts read is not reused): two cards
        with equal settings have equal rows for a mechanism they share."""
        out = dataclasses.asdict(self)
        out["training"].pop("mechanisms")
        out["sweep"]["base"].pop("mechanisms")
        out["drift_readings"] = list(DRIFT_READINGS)
        return out


#: ``--quick``: the same sections at sizes that run in about a minute; too short for most
#: widths and rates to learn, so the verdicts that need them are undetermined.
QUICK = CardConfig(
    statics_dks=(4, 16, 64),
    statics_ns=(16, 64, 256),
    n_keys=64,
    n_dk=64,
    trials=200,
    precision_dks=(64,),
    precision_trials=20,
    training=RecallConfig(steps=300, seeds=2, eval_size=256, mechanisms=("scaled",)),
    sweep=SweepConfig(
        base=dataclasses.replace(SWEEP_BASE, steps=200, seeds=2, eval_size=256),
        dks=(16, 64),
        lr_dks=(64,),
    ),
    quick=True,
)


# ----------------------------------------------------------------------------- statics


def row_statistics(mechanism: Mechanism, q: jax.Array, k: jax.Array) -> jax.Array:
    """``STATISTICS`` of one row: query ``q [d]``, keys ``k [n, d]``, initial scalars."""
    d_k, n = q.shape[-1], k.shape[0]
    theta = mechanism.initial_theta(d_k)
    qa, ka = mechanism.prepare(q[None], k)
    z = mechanism.scores(qa, ka, theta)[0]

    def weights(logits: jax.Array) -> jax.Array:
        return mechanism.normalise(logits[None], None, theta)[0]

    p = weights(z)
    mass = jnp.sum(p)
    normalised = p / jnp.where(mass > 0, mass, 1.0)
    if mechanism.weights is softmax_weights and mechanism.sink is None:
        jac = jacobian_frobenius_norm(p)
    elif n <= JACOBIAN_MAX_N:
        jac = jnp.linalg.norm(jax.jacfwd(weights)(z))
    else:
        jac = jnp.float32(jnp.nan)
    return jnp.stack([max_weight(p), entropy(normalised), mass, jac, jnp.std(z)])


def _cell_statistics(
    mechanisms: Sequence[Mechanism], d_k: int, n: int, trials: int, seed: int, on_chunk
) -> np.ndarray:
    """``[mechanisms, trials, statistics]`` on 02/03's draws at (d_k, n)."""

    def one(key: jax.Array) -> jax.Array:
        kq, kk = jax.random.split(key)  # as attnlab.core.sampling.direct_logits
        q = jax.random.normal(kq, (d_k,))
        k = jax.random.normal(kk, (n, d_k))
        return jnp.stack([row_statistics(m, q, k) for m in mechanisms])

    jacobians = sum(m.weights is not softmax_weights for m in mechanisms)
    elements = n * d_k + len(mechanisms) * n + (jacobians * n * n if n <= JACOBIAN_MAX_N else 0)
    keys = trial_keys(jax.random.key(seed), d_k, trials)
    return np.moveaxis(map_trials(one, keys, elements, on_chunk), 0, 1)


def statics_cells(config: CardConfig) -> list[tuple[str, int, int]]:
    """``(sweep, d_k, n)`` of every row group: the d_k sweep, then the n sweep."""
    return [("d_k", d, config.n_keys) for d in config.statics_dks] + [
        ("n", config.n_dk, n) for n in config.statics_ns
    ]


def statics_frame(
    config: CardConfig, references: Sequence[MechanismRef], on_progress: Progress = None
) -> pd.DataFrame:
    """One row per (mechanism, sweep, d_k, n): ``<statistic>_mean`` and ``_sem`` for every
    statistic of ``STATISTICS`` (module docstring). A (d_k, n) cell on both sweeps is
    computed once."""
    mechanisms = [r.mechanism for r in references]
    cells = {}
    for _, d_k, n in statics_cells(config):
        if (d_k, n) not in cells:
            cells[d_k, n] = _cell_statistics(
                mechanisms, d_k, n, config.trials, config.seed, on_progress
            )
    rows = []
    for sweep, d_k, n in statics_cells(config):
        for m, mechanism in enumerate(mechanisms):
            row = {"mechanism": mechanism.name, "sweep": sweep, "d_k": d_k, "n_keys": n}
            row["trials"] = config.trials
            for s, name in enumerate(STATISTICS):
                values = cells[d_k, n][m, :, s]
                mean, sem = mean_and_sem(values) if np.isfinite(values).all() else (np.nan,) * 2
                row[f"{name}_mean"], row[f"{name}_sem"] = float(mean), float(sem)
            rows.append(row)
    return pd.DataFrame(rows)


def statics_trials(config: CardConfig) -> int:
    """Progress units of ``statics_frame``: trials over the distinct cells."""
    return config.trials * len({(d, n) for _, d, n in statics_cells(config)})


# ----------------------------------------------------------------------------- masks


#: The mask of ``mask_frame``: 4 queries over 8 keys; row 0 has no key, row 1 three.
MASK = np.array([[False] * 8, [True] * 3 + [False] * 5, [True] * 8, [True] * 8])


def mask_frame(mechanisms: Sequence[Mechanism], d_k: int = 16, seed: int = 0) -> pd.DataFrame:
    """One row per mechanism: its weights and attention output ``p v`` for 4 queries over
    8 keys under ``MASK`` (iid N(0, 1) q, k, v at width ``d_k``), and the gradient of
    ``sum (p v)^2 + sum p^2`` with respect to q, k, v and the mechanism's scalars.
    ``finite_output``, ``finite_gradients``; ``masked_weight_max``, the largest weight on
    a masked key; ``dead_row_max``, the largest ``|p v|`` of the row with no key."""
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(kq, (4, d_k))
    k = jax.random.normal(kk, (8, d_k))
    v = jax.random.normal(kv, (8, d_k))
    mask = jnp.asarray(MASK)
    rows = []
    for mechanism in mechanisms:
        theta = {n: jnp.float32(x) for n, x in mechanism.initial_theta(d_k).items()}

        def objective(q, k, v, theta, mechanism=mechanism):
            p = mechanism(q, k, mask, theta)
            out = p @ v
            return jnp.sum(out**2) + jnp.sum(p**2), (p, out)

        # one compiled program per mechanism, as training runs it
        gradient = jax.jit(jax.grad(objective, argnums=(0, 1, 2, 3), has_aux=True))
        grads, (p, out) = gradient(q, k, v, theta)
        leaves = [np.asarray(g) for g in jax.tree.leaves(grads)]
        p, out = np.asarray(p), np.asarray(out)
        rows.append(
            {
                "mechanism": mechanism.name,
                "d_k": d_k,
                "finite_output": bool(np.isfinite(p).all() and np.isfinite(out).all()),
                "finite_gradients": bool(all(np.isfinite(g).all() for g in leaves)),
                "masked_weight_max": float(np.abs(p[~MASK]).max()),
                "dead_row_max": float(np.abs(out[0]).max()),
            }
        )
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- training


def program_groups(
    config: RecallConfig, references: Sequence[MechanismRef]
) -> list[list[MechanismRef]]:
    """``references`` grouped as the engine trains them under ``config``: mechanisms whose
    training shares a compiled program (``group_runs``) in one group, groups in order of
    first member."""
    runs = [Run(config, r.mechanism) for r in references]
    return [[references[i] for i in group] for group in group_runs(runs)]


def train_group(
    config: CardConfig, references: Sequence[MechanismRef], on_progress: Progress = None
):
    """Experiment 04 for ``references``, one program's lanes (``program_groups``): each
    mechanism's ``TrainResult`` and the trained models' ownership and drift tables
    (``trained_frames``)."""
    training = config.training
    mechanisms = [r.mechanism for r in references]
    runs = [Run(training, m) for m in mechanisms]
    results = train_runs(runs, on_chunk=on_progress, on_diverge="record")
    initial = [initial_state(training, m).params for m in mechanisms]
    ownership, drift = trained_frames(training, mechanisms, initial, results)
    return results, ownership, drift


def training_frames(
    config: CardConfig, references: Sequence[MechanismRef], trained: Sequence[tuple]
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Experiment 04 for every mechanism, identical initialisations and batches, from the
    groups ``trained`` (``train_group`` of each of ``program_groups``, in that order): the
    per-seed summary (04's columns, ``variant`` named ``mechanism``, with ``diverged_step``
    and ``nonfinite``: the first step whose loss is not finite, and what), the smoothed
    loss every ``CURVE_EVERY`` steps (``step, smoothed_loss_median, _min, _max`` over
    seeds), and the trained models' ownership and drift, rows in the order of
    ``references``."""
    training = config.training
    names = [r.name for r in references]
    by_name = {result.mechanism: result for results, _, _ in trained for result in results}
    results = [by_name[name] for name in names]
    summary = recall_summary_frame(results, training, divergence=True)
    summary = summary.rename(columns={"variant": "mechanism"})
    frames = []
    for result in results:
        smoothed = trailing_mean(result.metrics["loss"], training.smoothing)[:, ::CURVE_EVERY]
        frames.append(
            pd.DataFrame(
                {
                    "mechanism": result.mechanism,
                    "step": np.arange(training.steps)[::CURVE_EVERY],
                    "smoothed_loss_median": np.median(smoothed, axis=0),
                    "smoothed_loss_min": smoothed.min(axis=0),
                    "smoothed_loss_max": smoothed.max(axis=0),
                }
            )
        )
    ownership = in_order(pd.concat([t[1] for t in trained], ignore_index=True), names)
    drift = in_order(pd.concat([t[2] for t in trained], ignore_index=True), names)
    return summary, pd.concat(frames, ignore_index=True), ownership, drift


# ----------------------------------------------------------------------------- cards


def _precision(
    config: CardConfig, references: Sequence[MechanismRef], on_progress: Progress = None
) -> pd.DataFrame:
    return precision_frame(
        [r.mechanism for r in references],
        config.precision_dks,
        config.n_keys,
        config.precision_trials,
        config.seed,
        config.precision_sigmas,
    )


def _masks(
    config: CardConfig, references: Sequence[MechanismRef], on_progress: Progress = None
) -> pd.DataFrame:
    return mask_frame([r.mechanism for r in references], seed=config.seed)


#: Relative cost of each kind of piece per unit of its work (orders the pieces of
#: ``card_tables`` across workers, costliest first; the results do not depend on it): a
#: statics trial; a run-step of 04's training (5 seeds at d_model 256); a run-step of the
#: sweep (3 seeds at d_model 32) per 64 of width; a mechanism's precision and masks.
UNIT_COST = {"statics": 1.0, "training": 15.0, "sweep": 2.0, "precision": 3000.0, "masks": 500.0}


def card_pieces(config: CardConfig, references: Sequence[MechanismRef]) -> list[Piece]:
    """The card's independent pieces: statics, precision and masks of every mechanism; the
    training of each group of mechanisms sharing a program (``train_group``); each width of
    the sweep for each such group (``width_rows``)."""
    trials, n = statics_trials(config), len(references)
    pieces = [
        Piece(statics_frame, (config, references), trials, trials * UNIT_COST["statics"]),
        Piece(_precision, (config, references), 0, n * UNIT_COST["precision"]),
        Piece(_masks, (config, references), 0, n * UNIT_COST["masks"]),
    ]
    for group in program_groups(config.training, references):
        units = len(group) * config.training.steps
        pieces.append(Piece(train_group, (config, group), units, units * UNIT_COST["training"]))
    for d_k in config.sweep.dks:
        for group in program_groups(config.sweep.at(d_k), references):
            units = config.sweep.steps_at(d_k, len(group))
            cost = units * UNIT_COST["sweep"] * max(1.0, d_k / 64)
            pieces.append(Piece(width_rows, (config.sweep, group, d_k), units, cost))
    return pieces


def card_tables(
    config: CardConfig,
    references: Sequence[MechanismRef],
    on_progress: Progress = None,
    jobs: int = 1,
) -> Card:
    """Every section of the card for ``references`` (``Card``'s tables, in its order), its
    pieces (``card_pieces``) run by ``jobs`` worker processes (``run_pieces``: the tables do
    not depend on ``jobs``). A mechanism without a reference (not ``portable``) makes
    them run here: a worker receives each as its reference, resolved on arrival."""
    if not all(r.portable for r in references):
        jobs = 1
    pieces = card_pieces(config, references)
    results = run_pieces(pieces, jobs, on_progress)

    def of(fn: Callable) -> list:
        return [r for piece, r in zip(pieces, results, strict=True) if piece.fn is fn]

    (statics,), (precision,), (masks,) = of(statics_frame), of(_precision), of(_masks)
    training, curves, ownership, drift = training_frames(config, references, of(train_group))
    sweep = sweep_table([row for rows in of(width_rows) for row in rows], references)
    return Card(statics, precision, masks, training, curves, ownership, drift, sweep)


def total_work(config: CardConfig, references: Sequence[MechanismRef]) -> int:
    """Progress units of ``card_tables``: statics trials plus training and sweep run-steps."""
    if not references:
        return 0
    return sum(piece.units for piece in card_pieces(config, references))


def run_cards(
    config: CardConfig, plan: CardPlan, on_progress: Progress = None, jobs: int = 1
) -> list[CardResult]:
    """The cards of ``plan.targets``, each with its baselines' rows and its verdicts
    (computed by ``jobs`` workers: ``card_tables``)."""
    cards = reused_cards(plan, Card)
    cards.append(card_tables(config, plan.computed, on_progress, jobs))
    return card_results(plan, merge_cards(cards), verdicts_frame)

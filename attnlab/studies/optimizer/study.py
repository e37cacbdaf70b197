"""Study optimizer, declared: its outputs, their columns and the rules ``make verify``
compares them by, its figure, its thresholds (declared before any run) and its place in
the report."""

from __future__ import annotations

import math

from attnlab.harness.declaration import (
    EXACT,
    KEY,
    SEED_RANGE,
    UNCHECKED,
    Output,
    Study,
    seed_range,
)

SCRIPT = "15_optimizer_drift.py"
RUNS_CSV = "15_optimizer_runs.csv"
CURVES_CSV = "15_optimizer_curves.csv.xz"
LEDGER_CSV = "15_optimizer_ledger.csv"

#: The arms compared by default: AdamW; Muon with Moonlight's one rate for both sides
#: (``muon``); Muon with its AdamW side (embeddings, head, gains) pinned at ``SIDE_LR``
#: (``muon_pinned``). An arm is any optimizer of ``attnlab.training.optimizers``' registry by
#: its name, or ``NAME_pinned`` for one with a side rate (``side_lr``) pinned at ``--side-lr``.
ARMS = ("adamw", "muon", "muon_pinned")
#: The suffix of an arm whose optimizer's side rate is pinned (``arm_optimizer``).
PINNED = "_pinned"
#: The arm every other is compared against (Kimi K2's (a): Muon against AdamW).
BASELINE = "adamw"
#: How the report names an arm's optimizer (any other: its registry name).
OPTIMIZER_NAMES = {"adam": "Adam", "adamw": "AdamW", "muon": "Muon", "lion": "Lion"}


def arm_optimizer(arm: str) -> str:
    """The registry name of ``arm``'s optimizer: ``arm`` less ``PINNED``."""
    return arm.removesuffix(PINNED)


def optimizer_name(arm: str) -> str:
    """How the report names ``arm``'s optimizer (``OPTIMIZER_NAMES``, else its registry
    name)."""
    name = arm_optimizer(arm)
    return OPTIMIZER_NAMES.get(name, name)


#: ``muon_pinned``'s AdamW-side rate: AdamW's best rate at this width in 14's sweep and in
#: 15's previous one (declared before this run; the report checks it against this sweep's).
SIDE_LR = 1e-2
#: The weight decay, coupled to each side's rate (``attnlab.training.schedules``): Moonlight's and
#: Kimi K2's 0.1, on matrices only (LayerNorm gains not decayed, as 14 and nanoGPT).
DECAY = "coupled"
WEIGHT_DECAY = 0.1
#: The mechanisms swept under each arm, and those swept with QK-Clip besides.
MECHANISMS = ("scaled", "qk_norm")
CLIPPED = ("scaled",)
#: QK-Clip's threshold in the sweep: Kimi K2's.
TAU = 100.0
#: The tau sweep (part ``taus``), at each arm's best rate and ``HOT`` times it: K2's 100 and
#: below, to thresholds that bind at the best rate (its largest logits over 5000 steps in
#: the previous run: 34 to 77).
TAUS = (10.0, 20.0, 30.0, 50.0, 100.0)
HOT = 3.0
#: The long run's threshold: the largest of ``TAUS`` below every best-rate long run's
#: largest logit in the previous run, so that the clip binds while training well (K2's
#: regime); the report says whether it fired.
LONG_TAU = 20.0
#: The rates: 14's half-decade grid from 3e-3 (below each optimizer's best, to where the
#: logits of both blow up).
LRS = (3e-3, 1e-2, 3e-2, 1e-1, 3e-1)
#: The width: 14's smallest (head width 16, 2 heads): the long run fits the time bar.
D_MODEL = 32
#: The long run: 6x 14's 500 steps, at each arm's best rate and ``HOT`` times it; the
#: ledger at this many points along it (step 0 included, then every ``steps /
#: LEDGER_POINTS``), on this many held-out windows; QK-Clip's probe (S before the update,
#: after it and after the clip, on the same batch) every ``PROBE_EVERY`` steps.
LONG_STEPS = 3000
LEDGER_POINTS = 20
LEDGER_WINDOWS = 4
PROBE_EVERY = 10
#: The long run's seeds: ``make verify`` compares the median against their range.
LONG_SEEDS = 3
#: The long run's schedules: 14's cosine, and Kimi K2's warmup-stable-decay (with the clip),
#: on whose plateau (d) is read.
SCHEDULES = ("cosine", "wsd")
#: The long run's checkpoints (each lane's model, as GPT-2 checkpoints in 14's layout, for
#: experiment 13): at these fractions of its steps, each snapped to the nearest ledger
#: point (the earlier of two as near).
CHECKPOINT_FRACTIONS = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0)
#: A run's logits "blow up" when its largest logit passes this (14's GROWN, 10x K2's tau).
BLOWN = 1e3
#: (b): in K2's regime (at most ``HOT`` times the best rate, a tau that binds), after the
#: clip first fires, every step's S (before that step's clip) stays within ONE_UPDATE tau
#: on every seed and within MEDIAN_UPDATE tau in the median over seeds.
ONE_UPDATE = 2.0
MEDIAN_UPDATE = 1.2
#: (c): the clipped run's held-out loss is "within the noise" of the unclipped one's when
#: they differ by at most the larger of this and the unclipped seeds' spread (nats/byte).
LOSS_MARGIN = 0.02
#: (e): qk_norm's largest logit under Muon stays below this (14's BOUNDED).
BOUNDED = 1e2
#: Rows of the curves: every this many steps.
RECORD_EVERY = 10

#: One sweep run with the defaults: 14's 500 steps, 2 layers, at ``D_MODEL`` 2 heads of
#: width 16 (``tests/test_optimizer_compute.py`` checks them against the configuration),
#: and so its head-steps.
SWEEP_STEPS, SWEEP_LAYERS, SWEEP_HEADS = 500, 2, D_MODEL // 16
SWEEP_HEAD_STEPS = SWEEP_STEPS * SWEEP_LAYERS * SWEEP_HEADS


def rare_width(head_steps: int) -> float:
    """``make verify``'s least width for a fraction of ``head_steps`` clipped: the clip fires
    rarely near its threshold, where rounding decides a borderline step (run with the lanes
    in turn, AdamW at 0.03 clipped 1 of the last quarter's 500 head-steps against none on
    both committed seeds). None in ``n`` is consistent with a rate up to ``ln(1e3) / n``
    (Poisson at 1e-3, ``make verify``'s false-failure rate per column)."""
    return math.log(1e3) / head_steps


def checkpoint_name(arm: str, clipped: bool, schedule: str, lr: float, step: int) -> str:
    """The folder of the long run's checkpoint of ``scaled`` under ``arm``, with QK-Clip or
    not, on ``schedule``, at rate ``lr`` after ``step`` steps:
    ``15_muon_pinned_clipped_wsd_lr0.03_step01500``."""
    return (f"15_{arm}_{'clipped' if clipped else 'scaled'}_{schedule}_lr{lr:g}"
            f"_step{step:05d}")  # fmt: skip


RUN_KEYS = {"part": KEY, "optimizer": KEY, "side": KEY, "side_lr": KEY, "schedule": KEY,
            "mechanism": KEY, "qk_clip_on": KEY, "qk_clip_tau": KEY, "lr": KEY,
            "seed": KEY}  # fmt: skip

RUNS = Output(
    SCRIPT,
    {
        **RUN_KEYS,
        "steps": EXACT,
        "d_model": EXACT,
        "initial_val_loss": SEED_RANGE,
        "final_val_loss": SEED_RANGE,
        "final_val_loss_se": UNCHECKED,
        "max_attn_logit": SEED_RANGE,
        "max_attn_logit_layer0": SEED_RANGE,
        "max_attn_logit_layer1": SEED_RANGE,
        "max_signed_logit": SEED_RANGE,
        "first_clip_step": UNCHECKED,
        "max_signed_after_first_clip": SEED_RANGE,
        "max_abs_after_first_clip": SEED_RANGE,
        "steps_over_bound_after_first_clip": SEED_RANGE,
        "over_bound_clipped_before": SEED_RANGE,
        "over_bound_negative_before": SEED_RANGE,
        "over_bound_from_below": SEED_RANGE,
        "clip_fraction": seed_range(atol=rare_width(SWEEP_HEAD_STEPS)),
        "clip_fraction_first_quarter": seed_range(atol=rare_width(SWEEP_HEAD_STEPS // 4)),
        "clip_fraction_last_quarter": seed_range(atol=rare_width(SWEEP_HEAD_STEPS // 4)),
        "clip_fraction_plateau_first": seed_range(atol=rare_width(SWEEP_HEAD_STEPS // 4)),
        "clip_fraction_plateau_last": seed_range(atol=rare_width(SWEEP_HEAD_STEPS // 4)),
        "probes": EXACT,
        "update_growth_median": SEED_RANGE,
        "update_growth_p90": SEED_RANGE,
        "update_growth_max": SEED_RANGE,
        "after_clip_max": SEED_RANGE,
        "final_ln1_gain_rms": SEED_RANGE,
        "final_qk_spectral_norm": SEED_RANGE,
        "diverged_step": EXACT,
    },
    spread_floor=1.0,
)

CURVES = Output(
    SCRIPT,
    {
        **RUN_KEYS,
        "layer": KEY,
        "step": KEY,
        "train_loss": SEED_RANGE,
        "max_attn_logit": SEED_RANGE,
        "max_signed_logit": SEED_RANGE,
        # a row per layer every RECORD_EVERY steps, over that layer's heads
        "clip_fraction": seed_range(
            atol=rare_width(SWEEP_HEAD_STEPS // (SWEEP_LAYERS * RECORD_EVERY))
        ),
    },
    curve_step="step",
    spread_floor=1.0,
)

LEDGER = Output(
    SCRIPT,
    {
        **RUN_KEYS,
        "step": KEY,
        "layer": KEY,
        "head": KEY,
        "max_logit": SEED_RANGE,
        "max_abs_logit": SEED_RANGE,
        "logit_std": SEED_RANGE,
        "entropy": SEED_RANGE,
        "spectral_norm": SEED_RANGE,
        "clip_factor": SEED_RANGE,
        "elasticity": SEED_RANGE,
        "owner": UNCHECKED,
        "q_moved": SEED_RANGE,
        "k_moved": SEED_RANGE,
        "gain_rms": SEED_RANGE,
    },
    # The ledger is a curve of each head along each seed's long run, and a run far above
    # the best rate is chaotic (``LONG_SEEDS``): a change of rounding alone moves a head's
    # value at one step by more than any band holds (a matmul blocked differently: Muon
    # clipped at 0.3, a head's step-750 entropy 0.004 -> 0.22). So, as 14's and 15's
    # per-step curves are, each head is compared by its mean over the ledger's steps, the
    # median of the seeds' against their range.
    curve_step="step",
    spread_floor=1.0,
)

STUDY = Study(
    "optimizer",
    13,
    {RUNS_CSV: RUNS, CURVES_CSV: CURVES, LEDGER_CSV: LEDGER},
    figures=("fig14_optimizer",),
)

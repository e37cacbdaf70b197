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

#: The optimizers compared (``attnlab.lm.optimizers``).
OPTIMIZERS = ("adamw", "muon")
#: The mechanisms swept under each optimizer, and those swept with QK-Clip besides.
MECHANISMS = ("scaled", "qk_norm")
CLIPPED = ("scaled",)
#: QK-Clip's threshold: Kimi K2's.
TAU = 100.0
#: The rates: 14's half-decade grid from 3e-3 (below each optimizer's best, to where the
#: logits of both blow up).
LRS = (3e-3, 1e-2, 3e-2, 1e-1, 3e-1)
#: The width: 14's smallest (head width 16, 2 heads): the long run fits the time bar.
D_MODEL = 32
#: The long run: 10x 14's 500 steps, the ledger at this many points along it (step 0
#: included, then every ``steps / LEDGER_POINTS``), on this many held-out windows.
LONG_STEPS = 5000
LEDGER_POINTS = 20
LEDGER_WINDOWS = 4
#: The long run's seeds. Its runs far above the best rate are chaotic: a change of
#: rounding alone moves one seed's largest logit by orders of magnitude (15 --quick on one
#: XLA thread instead of two: AdamW at 0.1, 1095 -> 1555; the dense layers' matmul blocked
#: otherwise: Muon clipped at 0.3, 1.7e5 -> 8.1e3), and two seeds did not bracket such a
#: move, so ``make verify`` compares the median of four against their range.
LONG_SEEDS = 4
#: The long run's checkpoints (each lane's model, as GPT-2 checkpoints in 14's layout, for
#: experiment 13): at these fractions of its steps, each snapped to the nearest ledger
#: point (the earlier of two as near), so at steps 0, 250, 500, 1000, 2500 and 5000 with the
#: defaults: step 0, then about log-spaced, doubling but for the one step of 2.5x.
CHECKPOINT_FRACTIONS = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0)
#: A run's logits "blow up" when its largest logit passes this (14's GROWN, 10 tau); the
#: long run trains the clipped model at the lowest swept rate where the unclipped one's do.
BLOWN = 1e3
#: (b): after the clip first fires, every step's largest logit (before that step's clip)
#: stays within this factor of tau (one update's growth), and the unclipped run at the same
#: rate reaches at least ORDERS times the clipped run's largest.
ONE_UPDATE = 2.0
ORDERS = 10.0
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


def checkpoint_name(optimizer: str, clipped: bool, lr: float, step: int) -> str:
    """The folder of the long run's checkpoint of ``scaled`` under ``optimizer``, with
    QK-Clip or not, at rate ``lr`` after ``step`` steps: ``15_muon_clipped_lr0.1_step02500``."""
    return f"15_{optimizer}_{'clipped' if clipped else 'scaled'}_lr{lr:g}_step{step:05d}"


RUN_KEYS = {"part": KEY, "optimizer": KEY, "mechanism": KEY, "qk_clip_tau": KEY, "lr": KEY,
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
        "steps_over_bound_after_first_clip": SEED_RANGE,
        "clip_fraction": seed_range(atol=rare_width(SWEEP_HEAD_STEPS)),
        "clip_fraction_first_quarter": seed_range(atol=rare_width(SWEEP_HEAD_STEPS // 4)),
        "clip_fraction_last_quarter": seed_range(atol=rare_width(SWEEP_HEAD_STEPS // 4)),
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

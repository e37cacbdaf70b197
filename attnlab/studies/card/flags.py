"""Flags of experiment 11, the mechanism card: what is carded, against what, on which
task of the registry (``attnlab.training.tasks.TASKS``), the optimizer and clip a task may
take, and the run's control."""

from __future__ import annotations

import argparse

from attnlab.core.references import resolved_mechanism, resolved_mechanisms
from attnlab.harness import cli
from attnlab.lm.flags import add_optimizer_flag, add_qk_clip_flag
from attnlab.studies.card.api import DEFAULT_TASK
from attnlab.training.tasks import TASKS


def add_card_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag of experiment 11; ``--mechanism`` and ``--task`` are what a run is about
    (its subject), not how it runs."""
    add = parser.add_argument
    # fmt: off
    add("--mechanism", nargs="+", type=resolved_mechanism, required=True, metavar="SPEC",
        help="the mechanisms to card: a built-in, MODULE:NAME or path/to/file.py:NAME")
    add("--against", type=resolved_mechanisms, default=None, metavar="NAMES",
        help="comma-separated baselines (default: scaled,unscaled; scaled on another task)")
    add("--task", choices=TASKS, default=DEFAULT_TASK,
        help="recall: experiment 04's task and the statics; lm: experiment 14's causal LM "
        "(a task of your own: TASKS.register it, then attnlab.card(..., task=NAME) from "
        "Python; attnlab/training/tasks.py)")
    add_optimizer_flag(parser, "adamw", "--task lm: adamw (14's), or muon on the hidden "
                       "matrices and adamw on the rest, or any of attnlab/training/optimizers.py")
    add_qk_clip_flag(parser, None, "--task lm: QK-Clip after every step at TAU (Kimi K2: 100; "
                     "default: none); where it still fires late in training, the owner "
                     "verdict names the clip")
    # fmt: on
    add("--quick", action="store_true", help="every section at smaller sizes")
    cli.add_seed_flag(parser)
    cli.add_jobs_flag(parser, "the card's pieces (sections, training groups, widths)")
    cli.add_out_dir_flag(parser)
    parser.declare_flags(subject=frozenset({"mechanism", "task"}))  # what, not how

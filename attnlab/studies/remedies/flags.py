"""Flags of experiment 05, kept beside its configurations: the recall flags every training
script shares, the mechanisms, the fold and the sensitivity grid, and what they give."""

from __future__ import annotations

import argparse
import dataclasses
from typing import NamedTuple

from attnlab.harness import cli
from attnlab.harness.memory import Need, check_needs, count
from attnlab.recall.config import RecallConfig
from attnlab.recall.flags import add_mechanisms_flag, add_recall_flags, recall_config, recall_needs
from attnlab.studies.remedies.compute import (
    FOLD_STEP,
    REMEDIES_DEFAULT,
    SENSITIVITY_BATCH_SIZES,
    SENSITIVITY_EMBED_STDS,
    SENSITIVITY_SEEDS,
)


def add_remedies_flags(parser: cli.FlagParser) -> None:
    """Every flag of experiment 05 but ``--out-dir``, with its defaults."""
    add_recall_flags(parser, REMEDIES_DEFAULT)
    add_mechanisms_flag(parser, "--mechanisms", REMEDIES_DEFAULT.mechanisms, "mechanisms to train")
    cli.add_int_flag(parser, "--fold-step", FOLD_STEP, "step at which the scaled model is folded")
    cli.add_int_flag(
        parser, "--sensitivity-batch-sizes", SENSITIVITY_BATCH_SIZES, "batch sizes of the grid"
    )
    parser.add_argument(
        "--sensitivity-embed-stds",
        type=cli.positive_float,
        nargs="+",
        default=list(SENSITIVITY_EMBED_STDS),
        help="embedding init stds",
    )
    cli.add_int_flag(parser, "--sensitivity-seeds", SENSITIVITY_SEEDS, "seeds per grid cell")


class RemediesRun(NamedTuple):
    """What the flags ask of experiment 05: the remedies' configuration, the fold step,
    the sensitivity grid's configuration and cells, and the steps trained in all."""

    config: RecallConfig
    fold_step: int
    sensitivity: RecallConfig
    batch_sizes: tuple[int, ...]
    embed_stds: tuple[float, ...]

    @property
    def total_steps(self) -> int:
        """Steps trained: each mechanism, the fold (head plus two continuations), the grid."""
        grid = len(self.batch_sizes) * len(self.embed_stds)
        steps = self.config.steps
        return steps * (len(self.config.mechanisms) + 2 * grid) + 2 * steps - self.fold_step


def remedies_run(args: argparse.Namespace) -> RemediesRun:
    """The flags' run; a UsageError naming the flag on an inconsistent value."""
    if args.fold_step >= args.steps:
        raise cli.UsageError(f"--fold-step: {args.fold_step} is not below --steps {args.steps}")
    config = recall_config(args, mechanisms=tuple(args.mechanisms))
    cli.check_seeds(args.seed, args.sensitivity_seeds, "--sensitivity-seeds")
    sensitivity = dataclasses.replace(config, seeds=args.sensitivity_seeds)
    job = RemediesRun(config, args.fold_step, sensitivity, tuple(args.sensitivity_batch_sizes),
                      tuple(args.sensitivity_embed_stds))  # fmt: skip
    check_needs(remedies_needs(job))
    return job


def remedies_needs(job: RemediesRun) -> list[Need]:
    """Experiment 05's largest allocations (``attnlab.harness.memory``), its parts' added
    up (every part is computed before anything is written): ``recall_needs`` of the
    remedies (every mechanism on every seed; the fold trains two of them) and of the
    sensitivity grid at its largest batch size (both variants at every embedding std on
    every grid seed train together; the records of every cell are kept)."""
    config, grid = job.config, job.sensitivity
    stds = count("--sensitivity-embed-stds", job.embed_stds, SENSITIVITY_EMBED_STDS)
    grid_default = dataclasses.replace(
        REMEDIES_DEFAULT, seeds=SENSITIVITY_SEEDS, batch_size=max(SENSITIVITY_BATCH_SIZES)
    )
    lanes = 2 * len(job.embed_stds) * grid.seeds
    return recall_needs(
        config,
        REMEDIES_DEFAULT,
        lane_sizes=(count("--mechanisms", config.mechanisms, REMEDIES_DEFAULT.mechanisms),),
    ) + recall_needs(
        dataclasses.replace(grid, batch_size=max(job.batch_sizes)),
        grid_default,
        lanes=lanes,
        all_lanes=lanes * len(job.batch_sizes),
        lane_sizes=(stds,),
        flags={"batch_size": "--sensitivity-batch-sizes", "seeds": "--sensitivity-seeds"},
    )

"""Flags of the recall experiments (04, 05), kept beside their configuration."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from attnlab.harness import cli
from attnlab.harness.io import write_result
from attnlab.studies.recall.summary import curves_frame, summary_frame
from attnlab.studies.recall.train import RecallConfig, TrainResult


def add_recall_flags(parser: argparse.ArgumentParser, default: RecallConfig | None = None) -> None:
    """Flags for every field of ``RecallConfig`` a user may want to change; the defaults are
    those of ``default`` (the article's configuration if None)."""
    default = RecallConfig() if default is None else default
    add = parser.add_argument
    add("--dk", type=cli.positive_int, default=default.d_k, help="head width d_k")
    add(
        "--d-model",
        type=cli.positive_int,
        default=default.d_model,
        help="embedding width of one token",
    )
    add(
        "--pairs",
        type=cli.positive_int,
        default=default.pairs,
        help="key-value pairs per sequence (<= --key-tokens)",
    )
    add(
        "--key-tokens",
        type=cli.int_at_least(2),
        default=default.n_key_tokens,
        help="size of the key vocabulary",
    )
    add(
        "--value-tokens",
        type=cli.int_at_least(2),
        default=default.n_value_tokens,
        help="size of the value vocabulary",
    )
    add("--steps", type=cli.positive_int, default=default.steps, help="training steps")
    add(
        "--batch-size", type=cli.positive_int, default=default.batch_size, help="sequences per step"
    )
    add("--lr", type=cli.positive_float, default=default.lr, help="Adam learning rate")
    add("--seeds", type=cli.positive_int, default=default.seeds, help="how many seeds")
    cli.add_seed_flag(parser, default.seed, help="the first seed")
    add(
        "--eval-size",
        type=cli.positive_int,
        default=default.eval_size,
        help="held-out sequences per seed",
    )
    add(
        "--smoothing",
        type=cli.positive_int,
        default=default.smoothing,
        help="trailing window (steps) of the smoothed loss",
    )
    add(
        "--embed-init-std",
        type=cli.positive_float,
        default=default.embed_init_std,
        help="std of the embedding entries at initialisation",
    )
    add(
        "--chunk-steps",
        type=cli.positive_int,
        default=default.chunk_steps,
        help="steps per compiled chunk (progress and divergence checks between chunks)",
    )


def recall_config(args: argparse.Namespace, **overrides: Any) -> RecallConfig:
    """The configuration the flags describe; raises UsageError on inconsistent values."""
    if args.pairs > args.key_tokens:
        raise cli.UsageError(
            f"--pairs: {args.pairs} pairs need at least as many key tokens "
            f"(--key-tokens is {args.key_tokens})"
        )
    cli.check_seeds(args.seed, args.seeds, "--seeds")
    return RecallConfig(
        d_k=args.dk,
        d_model=args.d_model,
        pairs=args.pairs,
        n_key_tokens=args.key_tokens,
        n_value_tokens=args.value_tokens,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        seeds=args.seeds,
        seed=args.seed,
        eval_size=args.eval_size,
        smoothing=args.smoothing,
        embed_init_std=args.embed_init_std,
        chunk_steps=args.chunk_steps,
        **overrides,
    )


def write_recall_outputs(
    results: Mapping[str, TrainResult] | Iterable[TrainResult],
    config: RecallConfig,
    out_dir: Path,
    stem: str,
    flags: Mapping[str, Any],
    wall: float,
) -> None:
    """Write ``<stem>_curves.csv`` and ``<stem>_summary.csv`` with their sidecars;
    ``wall`` is the run's wall time in seconds."""
    runs = list(results.values()) if isinstance(results, Mapping) else list(results)
    write_result(curves_frame(runs, config), out_dir / f"{stem}_curves.csv", flags, wall)
    write_result(summary_frame(runs, config), out_dir / f"{stem}_summary.csv", flags, wall)

"""Flags of experiment 13, kept beside its configuration: the checkpoints, the text and
the row lengths read, and the ``RealModelConfig`` they give."""

from __future__ import annotations

import argparse
from pathlib import Path

from attnlab.core.references import mechanism_reference
from attnlab.harness import cli
from attnlab.studies.real_model.compute import RealModelConfig
from attnlab.studies.real_model.study import CAUSAL_ARGUMENTS

DEFAULT = RealModelConfig()


def add_real_model_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag of experiment 13 but ``--out-dir``, with its defaults; 13 on 14's
    checkpoints is a committed run too, so its arguments write to results/."""
    parser.add_argument(
        "--checkpoint",
        type=Path,
        nargs="+",
        default=None,
        help="a BERT-family checkpoint directory (default: the packaged all-MiniLM-L6-v2), "
        "or one or more GPT-2-family ones",
    )
    parser.add_argument(
        "--mechanisms",
        nargs="+",
        type=mechanism_reference,
        default=[],
        metavar="SPEC",
        help="your own mechanisms that --checkpoint's GPT-2 checkpoints name (attnlab.mechanism"
        ", as experiment 14 saves a model of yours), as MODULE:NAME or path/to/file.py:NAME, "
        "read by name; the built-ins need none (a built-in's name here reads a model made from "
        "a namesake of it as the built-in)",
    )
    parser.add_argument(
        "--text",
        type=Path,
        default=None,
        help="a UTF-8 text file to read (default: the standard library's pydoc_data prose)",
    )
    cli.add_int_flag(parser, "--lengths", DEFAULT.lengths, "row lengths in tokens", 3)
    cli.add_int_flag(parser, "--tokens", DEFAULT.tokens, "text tokens read, from the start", 1)
    cli.add_int_flag(
        parser,
        "--counterfactual-length",
        DEFAULT.counterfactual_length,
        "row length of the counterfactuals and the float16 check (one of --lengths)",
        3,
    )
    cli.add_seed_flag(parser)
    parser.committed_arguments = (CAUSAL_ARGUMENTS.split(),)


def real_model_config(args: argparse.Namespace) -> RealModelConfig:
    """The configuration the flags name; ``cli.UsageError`` if they contradict each other."""
    config = RealModelConfig(
        lengths=tuple(sorted(set(args.lengths))),
        tokens=args.tokens,
        counterfactual_length=args.counterfactual_length,
        seed=args.seed,
    )
    if config.counterfactual_length not in config.lengths:
        raise cli.UsageError("--counterfactual-length: must be one of --lengths")
    if config.tokens < max(config.lengths) - 2:
        raise cli.UsageError(f"--tokens: {config.tokens} do not fill one row of each --lengths")
    return config

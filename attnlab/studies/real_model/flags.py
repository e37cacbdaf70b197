"""Flags of experiment 13, kept beside its configuration: the checkpoints, the text and
the row lengths read, read once into a ``RealModelRequest``, and the ``RealModelConfig``
it gives."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

from attnlab.core.references import mechanism_reference
from attnlab.harness import cli
from attnlab.studies.real_model.compute import RealModelConfig
from attnlab.studies.real_model.study import CAUSAL_ARGUMENTS, CAUSAL_TABLES, GEMMA_ARGUMENTS

DEFAULT = RealModelConfig()


def add_real_model_flags(parser: cli.FlagParser) -> None:
    """Every flag of experiment 13 but ``--out-dir``, with its defaults; 13 on 14's
    checkpoints is a committed run too, so its arguments write to results/."""
    parser.add_argument(
        "--checkpoint",
        type=Path,
        nargs="+",
        default=None,
        help="a BERT-family checkpoint directory (default: the packaged all-MiniLM-L6-v2), "
        "or one or more decoders' (GPT-2 or Llama family: a directory, or a GGUF file)",
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
    cli.add_int_flag(parser, "--lengths", None, "row lengths in tokens (default: "
                     f"{' '.join(map(str, DEFAULT.lengths))}, or fitted_lengths' for a "
                     "checkpoint of a shorter context)", 3, many=True)  # fmt: skip
    cli.add_int_flag(parser, "--tokens", DEFAULT.tokens, "text tokens read, from the start", 1)
    cli.add_int_flag(
        parser,
        "--counterfactual-length",
        None,
        "row length of the counterfactuals and the float16 check, one of --lengths (default: "
        f"{DEFAULT.counterfactual_length} where it is one, else the longest)",
        3,
    )
    cli.add_seed_flag(parser)
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="CONFIG_JSON",
        help="print the static temperature ledger of a Llama-family config.json (no weights:"
        " divisor, rope attention factor squared, q/k norm, soft-cap, per layer type) and "
        "write nothing",
    )
    parser.add_argument(
        "--tables",
        type=tables_name,
        default=CAUSAL_TABLES,
        metavar="NAME",
        help="the causal tables' name: 13_real_model_NAME_{heads,counterfactuals,layers,ledger}"
        f".csv (default: {CAUSAL_TABLES}; lowercase letters, digits and _)",
    )
    parser.declare_flags(committed=(CAUSAL_ARGUMENTS.split(), GEMMA_ARGUMENTS.split()))


def _is_tables_name(text: str) -> bool:
    return re.fullmatch(r"[a-z0-9_]{1,40}", text) is not None


def tables_name(text: str) -> str:
    """``--tables``: a name of lowercase letters, digits and ``_`` (part of file names; its
    ``is_valid(text)`` says whether ``text`` is one)."""
    if not _is_tables_name(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a name of 1 to 40 lowercase letters, digits and _"
        )
    return text


tables_name.is_valid = _is_tables_name  # type: ignore[attr-defined]


def fitted_lengths(context: int | None) -> tuple[int, ...]:
    """The row lengths read when ``--lengths`` is not given: ``DEFAULT.lengths`` where they
    fit the shortest ``context`` of the checkpoints (None: not known yet), else a quarter,
    a half and the whole of it, ``(C // 4, C // 2, C)`` (14's models: 16, 32, 64), each at
    least 3."""
    if context is None or max(DEFAULT.lengths) <= context:
        return DEFAULT.lengths
    return tuple(sorted({max(3, context // 4), max(3, context // 2), max(3, context)}))


@dataclass(frozen=True)
class RealModelRequest:
    """What experiment 13's flags ask for (``real_model_request``), each as given.

    Attributes:
      checkpoint: ``--checkpoint``'s directories or GGUF files (None: the packaged model).
      mechanisms: ``--mechanisms``' references, the user's mechanisms its checkpoints name.
      text: ``--text`` (None: the default prose).
      lengths: ``--lengths`` (None: fitted to the checkpoints, ``fitted_lengths``).
      tokens: ``--tokens``.
      counterfactual_length: ``--counterfactual-length`` (None: chosen from the lengths).
      seed: ``--seed``.
      config: ``--config``, a config.json whose static ledger is printed (None: a run).
      tables: ``--tables``, the causal tables' name.
    """

    checkpoint: tuple[Path, ...] | None
    mechanisms: tuple[str, ...]
    text: Path | None
    lengths: tuple[int, ...] | None
    tokens: int
    counterfactual_length: int | None
    seed: int
    config: Path | None
    tables: str


def real_model_request(args: argparse.Namespace) -> RealModelRequest:
    """The flags of experiment 13 as a ``RealModelRequest``."""
    return RealModelRequest(
        checkpoint=None if args.checkpoint is None else tuple(args.checkpoint),
        mechanisms=tuple(args.mechanisms),
        text=args.text,
        lengths=None if args.lengths is None else tuple(args.lengths),
        tokens=args.tokens,
        counterfactual_length=args.counterfactual_length,
        seed=args.seed,
        config=args.config,
        tables=args.tables,
    )


def real_model_config(request: RealModelRequest, context: int | None = None) -> RealModelConfig:
    """The configuration ``request`` names, a length not given fitted to the checkpoints'
    shortest ``context`` (``fitted_lengths``; the counterfactual length the default where
    it is one of the lengths, else the longest); ``cli.UsageError`` if flags contradict
    each other."""
    given = request.lengths
    lengths = tuple(sorted(set(given))) if given else fitted_lengths(context)
    counterfactual = request.counterfactual_length
    if counterfactual is None:
        default = DEFAULT.counterfactual_length
        counterfactual = default if default in lengths else max(lengths)
    config = RealModelConfig(
        lengths=lengths,
        tokens=request.tokens,
        counterfactual_length=counterfactual,
        seed=request.seed,
    )
    if config.counterfactual_length not in config.lengths:
        raise cli.UsageError("--counterfactual-length: must be one of --lengths")
    known = given or context is not None  # else the checkpoints fit them later
    if known and config.tokens < max(config.lengths) - 2:
        raise cli.UsageError(f"--tokens: {config.tokens} do not fill one row of each --lengths")
    return config


def resolved(config: RealModelConfig) -> dict:
    """What a sidecar records of the flags a run's checkpoints may fit: the values that
    ran, not None."""
    return {"lengths": list(config.lengths), "counterfactual_length": config.counterfactual_length}

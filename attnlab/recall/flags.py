"""Flags of the recall experiments (04, 05, 10, and the fits), kept beside their configuration.

``--reading NAME`` (a member of ``attnlab.fits.readings.FAMILY``, or ``natural``)
sets the slot, init, bias, d_model and batch size at once. Those five flags may still be
given beside it only with the reading's own value: a flag typed on the command line with a
different value is a UsageError naming both flags. (Typed flags are recorded in
``args.given_recall_flags``, which the sidecars keep as provenance.)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from attnlab.core.references import recall_mechanism_reference
from attnlab.core.temperature import BUILTINS
from attnlab.fits.readings import FAMILY, Reading, get_reading
from attnlab.harness import cli
from attnlab.training.config import RecallConfig
from attnlab.training.model import INITS, SLOTS

#: The flags a reading sets, and the RecallConfig fields they set.
READING_FLAGS = {
    "--slot": "slot",
    "--init": "init",
    "--bias": "bias",
    "--d-model": "d_model",
    "--batch-size": "batch_size",
}


def _record(namespace: argparse.Namespace, option_string: str | None) -> None:
    given = set(getattr(namespace, "given_recall_flags", ()))
    namespace.given_recall_flags = sorted(given | {option_string})


class _Store(argparse.Action):
    """Store the value and record the flag as typed (for ``--reading``'s conflicts)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        _record(namespace, option_string)


class _StoreBool(argparse.BooleanOptionalAction):
    """``--x/--no-x``, recorded as typed."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _record(namespace, option_string)


def reading_name(text: str) -> str:
    """An argparse type: a reading of ``readings.FAMILY`` (or ``natural``), kept by name."""
    try:
        get_reading(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


reading_name.names = frozenset({r.name for r in FAMILY} | {"natural"})  # type: ignore[attr-defined]


def substring_of(family: Sequence[Reading]) -> Callable[[str], str]:
    """An argparse type: a substring of at least one name of ``family``'s readings (its
    ``is_valid(text)`` says whether ``text`` is one)."""

    def is_valid(text: str) -> bool:
        return any(text in r.name for r in family)

    def family_substring(text: str) -> str:
        if not is_valid(text):
            raise argparse.ArgumentTypeError(f"no reading's name contains {text!r}")
        return text

    family_substring.is_valid = is_valid  # type: ignore[attr-defined]
    return family_substring


#: ``substring_of`` the first family (experiment 09's first pass).
family_substring = substring_of(FAMILY)


def add_mechanisms_flag(
    parser: argparse.ArgumentParser, flag: str, default: Iterable[str], help: str
) -> None:
    """``flag``: one or more mechanism references the recall task can run
    (``recall_mechanism_reference``)."""
    parser.add_argument(
        flag,
        nargs="+",
        type=recall_mechanism_reference,
        default=list(default),
        metavar="MECHANISM",
        help=f"{help}; a built-in ({', '.join(BUILTINS)}), MODULE:NAME or path/to/file.py:NAME",
    )


#: The recall flags the article states (d_k 256; 16 pairs over 32 key and 32 value tokens;
#: Adam at 3e-4; 2000 held-out sequences), and those it leaves open.
ARTICLE_FLAGS = frozenset({"dk", "pairs", "key_tokens", "value_tokens", "lr", "eval_size"})
UNSTATED_FLAGS = frozenset(
    {"d_model", "batch_size", "steps", "seeds", "smoothing", "embed_init_std", "slot", "init"}
    | {"bias", "reading"}
)


def add_recall_flags(
    parser: argparse.ArgumentParser, default: RecallConfig | None = None, head_width: bool = True
) -> None:
    """Flags for every field of ``RecallConfig`` a user may want to change; the defaults are
    those of ``default`` (the article's configuration if None). ``head_width=False`` leaves
    out ``--dk`` (for a script that sweeps widths; ``recall_config`` then takes ``d_k``)."""
    default = RecallConfig() if default is None else default
    add = parser.add_argument

    def add_reading_flag(flag: str, **kwargs: Any) -> None:
        """A flag ``--reading`` also sets (``READING_FLAGS``), recorded as typed."""
        action = _StoreBool if flag == "--bias" else _Store
        add(flag, default=getattr(default, READING_FLAGS[flag]), action=action, **kwargs)

    if head_width:
        cli.add_int_flag(parser, "--dk", default.d_k, "head width d_k")
    add_reading_flag(
        "--d-model",
        type=cli.positive_int,
        help="embedding width of one token (unused by --slot onehot)",
    )
    cli.add_int_flag(
        parser, "--pairs", default.pairs, "key-value pairs per sequence (<= --key-tokens)"
    )
    cli.add_int_flag(parser, "--key-tokens", default.n_key_tokens, "size of the key vocabulary", 2)
    cli.add_int_flag(
        parser, "--value-tokens", default.n_value_tokens, "size of the value vocabulary", 2
    )
    cli.add_int_flag(parser, "--steps", default.steps, "training steps")
    add_reading_flag("--batch-size", type=cli.positive_int, help="sequences per step")
    add("--lr", type=cli.positive_float, default=default.lr, help="Adam learning rate")
    cli.add_int_flag(parser, "--seeds", default.seeds, "how many seeds")
    cli.add_seed_flag(parser, default.seed, help="the first seed")
    cli.add_int_flag(parser, "--eval-size", default.eval_size, "held-out sequences per seed")
    cli.add_int_flag(
        parser, "--smoothing", default.smoothing, "trailing window (steps) of the smoothed loss"
    )
    add(
        "--embed-init-std",
        type=cli.positive_float,
        default=default.embed_init_std,
        help="std of the embedding entries at initialisation",
    )
    cli.add_int_flag(
        parser,
        "--chunk-steps",
        default.chunk_steps,
        "steps per compiled chunk (progress and divergence checks between chunks)",
    )
    add_reading_flag(
        "--slot",
        choices=SLOTS,
        help="how a key-value pair becomes a slot (laws: attnlab/training/model.py)",
    )
    add_reading_flag(
        "--init", choices=INITS, help="initialisation convention (laws: attnlab/training/model.py)"
    )
    add_reading_flag("--bias", help="biases on the Q, K, V projections and the readout")
    add(
        "--reading",
        type=reading_name,
        default=None,
        metavar="NAME",
        help="a declared reading (attnlab/fits/readings.py) or 'natural': sets "
        "--slot, --init, --bias, --d-model and --batch-size",
    )
    parser.set_defaults(given_recall_flags=[])
    parser.flag_groups = {  # the help's groups (cli.group_flags)
        **getattr(parser, "flag_groups", {}),
        "the article's settings (004, A Training Demo)": ARTICLE_FLAGS,
        "the set-up the article leaves unstated": UNSTATED_FLAGS,
    }


def recall_config(args: argparse.Namespace, **overrides: Any) -> RecallConfig:
    """The configuration the flags describe; raises UsageError on inconsistent values."""
    if args.pairs > args.key_tokens:
        raise cli.UsageError(
            f"--pairs: {args.pairs} pairs need at least as many key tokens "
            f"(--key-tokens is {args.key_tokens})"
        )
    cli.check_seeds(args.seed, args.seeds, "--seeds")
    chosen = {field: getattr(args, field) for field in READING_FLAGS.values()}
    if args.reading is not None:
        reading = get_reading(args.reading)
        given = set(args.given_recall_flags)
        for flag, field in READING_FLAGS.items():
            typed = given & ({flag, "--no-bias"} if flag == "--bias" else {flag})
            value = getattr(reading, field)
            if field == "d_model" and value is None:
                continue  # a onehot reading has no d_model: --d-model stays as given
            if typed and chosen[field] != value:
                raise cli.UsageError(
                    f"{min(typed)}: {chosen[field]!r} conflicts with --reading {args.reading} "
                    f"(which sets {field} = {value!r}); give one or the other"
                )
            chosen[field] = value
    if chosen["init"] != "natural" and args.embed_init_std != 1.0:
        raise cli.UsageError(
            f"--embed-init-std: applies to --init natural only (init is {chosen['init']})"
        )
    overrides.setdefault("d_k", args.dk)
    return RecallConfig(
        d_model=chosen["d_model"],
        pairs=args.pairs,
        n_key_tokens=args.key_tokens,
        n_value_tokens=args.value_tokens,
        steps=args.steps,
        batch_size=chosen["batch_size"],
        lr=args.lr,
        seeds=args.seeds,
        seed=args.seed,
        eval_size=args.eval_size,
        smoothing=args.smoothing,
        embed_init_std=args.embed_init_std,
        chunk_steps=args.chunk_steps,
        slot=chosen["slot"],
        init=chosen["init"],
        bias=chosen["bias"],
        **overrides,
    )

"""Flags of experiment 14, kept beside its configurations: what is swept (mechanisms,
widths, rates, steps, positions, text) and the ``ProxyConfig`` they give."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
from pathlib import Path

import numpy as np

from attnlab.core.mechanism import MechanismError
from attnlab.core.references import load_mechanism, mechanism_reference
from attnlab.core.text import TextSource, byte_tokens, read_text
from attnlab.harness import cli
from attnlab.models.causal_lm import POSITIONS
from attnlab.studies.lm_proxy.compute import ProxyConfig

DEFAULT = ProxyConfig()
#: ``--quick``: a one-minute look (one width, three rates, fewer steps).
QUICK = dataclasses.replace(
    DEFAULT,
    lm=dataclasses.replace(DEFAULT.lm, steps=200, warmup=20),
    widths=(32,),
    one_width=(),
    lrs=(1e-3, 1e-2, 1e-1),
)


def add_proxy_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag of experiment 14 but ``--out-dir``, with its defaults."""
    parser.add_argument(
        "--mechanisms",
        nargs="+",
        type=mechanism_reference,
        default=list(DEFAULT.swept),
        metavar="SPEC",
        help="mechanisms swept at every width",
    )
    parser.add_argument(
        "--one-width-mechanisms",
        nargs="*",
        type=mechanism_reference,
        default=list(DEFAULT.one_width),
        metavar="SPEC",
        help="mechanisms swept at --one-width only",
    )
    cli.add_int_flag(parser, "--widths", list(DEFAULT.widths), "d_model values (head width 16)", 2)
    cli.add_int_flag(
        parser, "--one-width", DEFAULT.one_width_d_model, "d_model of the one-width mechanisms", 2
    )
    cli.add_rates_flag(parser, DEFAULT.lrs, "peak learning rates")
    cli.add_int_flag(parser, "--steps", DEFAULT.lm.steps, "training steps", 2)
    cli.add_int_flag(parser, "--seeds", DEFAULT.seeds, "seeds per rate")
    parser.add_argument(
        "--positions",
        choices=POSITIONS,
        default="learned",
        help="learned absolute positions (GPT-2), rotary (Wortsman et al.) or none (NoPE)",
    )
    parser.add_argument(
        "--text",
        type=Path,
        default=None,
        help="a UTF-8 text file to train on (default: pydoc_data's prose)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a one-minute look: d_model 32, rates 1e-3, 1e-2, 1e-1, 200 steps",
    )
    cli.add_seed_flag(parser)
    cli.add_jobs_flag(parser, "the sweep's pieces (one per mechanism and width)")


def proxy_config(args: argparse.Namespace) -> ProxyConfig:
    """The flags as a ``ProxyConfig`` (``--quick`` replaces the defaults it names); a bad
    value is a ``cli.UsageError`` naming its flag."""
    base = QUICK if args.quick else DEFAULT
    steps = base.lm.steps if args.steps == DEFAULT.lm.steps else args.steps
    try:
        lm = dataclasses.replace(
            base.lm, steps=steps, warmup=min(base.lm.warmup, steps // 10), positions=args.positions
        )
    except ValueError as err:
        raise cli.UsageError(f"--steps: {err}") from None
    pick = {  # a flag left at its default keeps --quick's value
        "swept": (args.mechanisms, list(DEFAULT.swept), base.swept),
        "one_width": (args.one_width_mechanisms, list(DEFAULT.one_width), base.one_width),
        "widths": (args.widths, list(DEFAULT.widths), base.widths),
        "lrs": (args.lrs, list(DEFAULT.lrs), base.lrs),
    }
    chosen = {k: tuple(v if v != default else kept) for k, (v, default, kept) in pick.items()}
    for d in (*chosen["widths"], args.one_width):
        if d % lm.d_head:
            raise cli.UsageError(f"--widths: {d} is not a multiple of the head width {lm.d_head}")
    for flag, references, widths in (("--mechanisms", chosen["swept"], chosen["widths"]),
                                     ("--one-width-mechanisms", chosen["one_width"],
                                      (args.one_width,))):  # fmt: skip
        for reference, d in itertools.product(references, widths):
            try:  # per-head vectors must have one value per head at every width
                load_mechanism(reference).head_values(lm.d_head, d // lm.d_head)
            except MechanismError as err:
                raise cli.UsageError(f"{flag}: {err}") from None
    check_names(chosen["swept"], chosen["one_width"])
    cli.check_seeds(args.seed, args.seeds, "--seeds")
    return dataclasses.replace(
        base, lm=lm, one_width_d_model=args.one_width, seeds=args.seeds, seed=args.seed, **chosen
    )


def check_names(swept: tuple[str, ...], one_width: tuple[str, ...]) -> None:
    """A ``cli.UsageError`` where two mechanisms of a run share a name (the same one twice,
    or a researcher's namesake beside the built-in, as the card and 13 refuse): 14's rows
    and saved models (``14_lm_<name>_d<width>``) are told apart by name, so one would
    replace the other."""
    seen: dict[str, str] = {}
    for flag, references in (("--mechanisms", swept), ("--one-width-mechanisms", one_width)):
        for reference in references:
            name = load_mechanism(reference).name
            if name in seen:
                builtin = reference == name or seen[name] == name
                advice = "rename yours" if builtin else "give each a name of its own"
                raise cli.UsageError(
                    f"{flag}: {reference!r} and {seen[name]!r} are both named {name!r}, and "
                    f"14 tells rows and saved models apart by name: {advice}"
                    if reference != seen[name]
                    else f"{flag}: {reference!r} is given twice"
                )
            seen[name] = reference


def text_tokens(path: Path | None, config: ProxyConfig) -> tuple[TextSource, np.ndarray]:
    """``--text`` read (``None``: the default prose) and its bytes as tokens; a file that
    cannot be read, or too short for one held-out window, is a ``cli.UsageError``."""
    try:
        source = read_text(path)
    except (OSError, UnicodeDecodeError) as err:
        raise cli.UsageError(f"--text: cannot read {path} ({err})") from None
    tokens = byte_tokens(source.text)
    if len(tokens) * config.lm.held_out < config.lm.seq_len + 1:
        raise cli.UsageError(f"--text: {len(tokens)} bytes are too few for a held-out window")
    return source, tokens

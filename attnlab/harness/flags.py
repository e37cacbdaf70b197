"""Flags of the experiment scripts: argparse types that refuse bad values in one line, the
parser every script starts from (its help grouped, its "Time:" line read from the committed
sidecars), and the adders of the flags many scripts share."""

from __future__ import annotations

import argparse
import json
import os
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from attnlab.harness.errors import UsageError
from attnlab.harness.outputs import RESULTS_DIR, a_path, add_out_dir_flag, add_quiet_flag

#: ``jax.random.key`` takes a 32-bit seed: 2**32 draws what 0 draws, and past 2**63 it fails.
MAX_SEED = 2**32 - 1


def one_line(text: str) -> str:
    """``text`` with line breaks and other unprintable characters escaped (a flag's value
    may hold any of them)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are a single line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)}\n")


def _parse_int(text: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def int_in_range(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer ``>= minimum`` and, if given, ``<= maximum`` (both kept
    as attributes of the returned function)."""

    def parse(text: str) -> int:
        value = _parse_int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is not >= {minimum}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{value} is not <= {maximum}")
        return value

    parse.__name__ = f"integer >= {minimum}" + ("" if maximum is None else f" and <= {maximum}")
    parse.minimum, parse.maximum = minimum, maximum  # type: ignore[attr-defined]
    return parse


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer ``>= minimum``."""
    return int_in_range(minimum)


positive_int = int_at_least(1)
seed_int = int_in_range(0, MAX_SEED)


def positive_float(text: str) -> float:
    """An argparse type: a finite float ``> 0``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"{value} is not a finite number > 0")
    return value


def new_parser(description: str, timed_by: Sequence[str] = ()) -> OneLineParser:
    """A parser with the script's docstring as description and defaults shown in --help;
    ``timed_by`` (result CSVs, one per part of the run) adds how long the committed
    results took, read from their sidecars in ``results/`` (``committed_run_time``)."""
    timing = committed_run_time(timed_by) if timed_by else None
    return OneLineParser(
        description=description.rstrip() + (f"\n\n{timing}" if timing else ""),
        formatter_class=HelpFormatter,
    )


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description as written (its examples keep their lines); each flag's default
    after its help, unless it is None or False or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def committed_run_time(csv_names: Sequence[str]) -> str | None:
    """ "Time: the committed results took N s ..." from the sidecars of ``csv_names`` in
    ``results/`` (their wall times summed: one CSV per part of the run); None if any is
    missing."""
    seconds, devices = 0.0, set()
    from attnlab.harness.io import sidecar_path  # reads pandas: only when --help is built

    paths = [sidecar_path(RESULTS_DIR / name) for name in csv_names]
    try:
        for path in paths:
            sidecar = json.loads(path.read_text(encoding="utf-8"))
            seconds += float(sidecar["wall_time_s"])
            devices.add(f"{sidecar['jax_backend']} x{sidecar['device_count']}")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    took = f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
    text = (
        f"Time: the committed results took {took} to compute on {', '.join(sorted(devices))} "
        f"of a 2-core machine ({', '.join(str(p) for p in paths)})."
    )
    return textwrap.fill(text, width=88)


def declare_flags(
    parser: argparse.ArgumentParser,
    *,
    groups: dict[str, frozenset[str]] | None = None,
    subject: frozenset[str] | None = None,
    committed: tuple[list[str], ...] | None = None,
) -> None:
    """What a script says about its flags beyond argparse, kept on the parser for
    ``group_flags`` and ``outputs.made_with_defaults``: help ``groups`` (title -> dests,
    added after any declared before), the ``subject`` flags (what a run is about, not how
    it runs: the card's ``--mechanism``) and the ``committed`` argument lists of other
    committed runs of the script (13 on 14's checkpoints)."""
    if groups is not None:
        parser.flag_groups = {**getattr(parser, "flag_groups", {}), **groups}
    if subject is not None:
        parser.subject_flags = subject
    if committed is not None:
        parser.committed_arguments = committed


#: Where the flags recorded as typed go (``TYPED_FLAGS``'s actions): the sidecars keep them.
TYPED_FLAGS = "given_recall_flags"


def _record_typed(namespace: argparse.Namespace, option_string: str | None) -> None:
    given = set(getattr(namespace, TYPED_FLAGS, ()))
    setattr(namespace, TYPED_FLAGS, sorted(given | {option_string}))


class StoreTyped(argparse.Action):
    """Store the value and record the flag as typed on the command line (a flag whose
    default another flag sets, as ``--reading`` sets ``--slot``, checks what was typed)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        _record_typed(namespace, option_string)


class StoreTypedBool(argparse.BooleanOptionalAction):
    """``--x/--no-x``, recorded as typed (``StoreTyped``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _record_typed(namespace, option_string)


#: The help groups every script shares, after its own ``flag_groups``: (title, dests).
RUN_CONTROL_FLAGS = frozenset({"seed", "chunk_steps", "quick", "stage", "jobs"})
OUTPUT_GROUP_FLAGS = frozenset({"out", "out_dir", "quiet", "results_dir", "figures_dir"})


def group_flags(parser: argparse.ArgumentParser) -> None:
    """Sort ``parser``'s flags into help groups: the parser's ``flag_groups`` (title ->
    dests, e.g. the article's settings and the set-up it leaves unstated) first, then
    what the script measures (every other flag), run control and outputs."""
    own = dict(getattr(parser, "flag_groups", {}))
    titled = [*own.items(), ("run control", RUN_CONTROL_FLAGS), ("outputs", OUTPUT_GROUP_FLAGS)]
    groups = {title: parser.add_argument_group(title) for title in own}
    rest = parser.add_argument_group("what is measured")
    groups |= {title: parser.add_argument_group(title) for title, _ in titled[len(own) :]}
    for action in list(parser._actions):
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        title = next((t for t, dests in titled if action.dest in dests), None)
        target = groups[title] if title else rest
        for group in parser._action_groups:
            if action in group._group_actions:
                group._group_actions.remove(action)
        target._group_actions.append(action)
    parser._action_groups = [
        g for g in parser._action_groups if g._group_actions or g.title == "options"
    ]


def add_int_flag(
    parser: argparse.ArgumentParser,
    flag: str,
    default: int | Sequence[int] | None,
    help: str,
    minimum: int = 1,
    many: bool | None = None,
) -> None:
    """An integer flag ``>= minimum``; a sequence default (or ``many``) makes it take one or
    more. A None default (a value other flags decide when it is not given) is kept."""
    many = not isinstance(default, int | None) if many is None else many
    parser.add_argument(
        flag,
        type=int_at_least(minimum),
        nargs="+" if many else None,
        default=list(default) if many and default is not None else default,
        help=help,
    )


def add_jobs_flag(parser: argparse.ArgumentParser, pieces: str) -> None:
    """``--jobs``: worker processes computing ``pieces`` (``attnlab.harness.workers``);
    default one per core this process may use (``os.cpu_count()`` where the platform has
    no ``sched_getaffinity``, macOS)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    add_int_flag(
        parser,
        "--jobs",
        cores or 1,
        f"worker processes computing {pieces}; the results do not depend on it "
        "(default: this machine's cores)",
    )


def add_dk_flag(
    parser: argparse.ArgumentParser, default: Sequence[int], help: str = "head widths d_k"
) -> None:
    """``--dk``: one or more head widths, each a positive integer."""
    add_int_flag(parser, "--dk", default, help)


def add_rates_flag(
    parser: argparse.ArgumentParser, default: Sequence[float], help: str = "learning rates"
) -> None:
    """``--lrs``: one or more learning rates, each a finite float ``> 0``."""
    parser.add_argument(
        "--lrs", nargs="+", type=positive_float, default=list(default), metavar="LR", help=help
    )


def add_seed_flag(
    parser: argparse.ArgumentParser, default: int = 0, help: str = "root PRNG seed"
) -> None:
    """``--seed``: an integer in ``[0, MAX_SEED]``."""
    parser.add_argument("--seed", type=seed_int, default=default, help=help)


def check_seeds(first: int, count: int, flag: str) -> None:
    """Fail with a UsageError naming ``flag`` unless seeds ``first .. first + count - 1`` are
    all valid seeds (``<= MAX_SEED``)."""
    last = first + count - 1
    if last > MAX_SEED:
        raise UsageError(f"{flag}: seeds {first}..{last} run past the largest seed {MAX_SEED}")


def add_common_flags(parser: argparse.ArgumentParser, default_out: Path) -> None:
    """``--seed``, ``--out`` and ``--quiet``, for the bench."""
    add_seed_flag(parser)
    parser.add_argument("--out", type=a_path, default=default_out, help="output CSV path")
    add_quiet_flag(parser)


def add_table_flags(parser: argparse.ArgumentParser, csv_name: str) -> None:
    """``--seed``, ``--out-dir``, ``--out`` and ``--quiet`` of a single-CSV experiment:
    its CSV is ``--out`` if given (a ``.csv`` path), else ``<out-dir>/csv_name``."""
    add_seed_flag(parser)
    add_out_dir_flag(parser)
    parser.add_argument(
        "--out",
        type=a_path,
        default=None,
        metavar="FILE.csv",
        help=f"output CSV path (instead of <out-dir>/{csv_name})",
    )

"""Flags of the experiment scripts: argparse types that refuse bad values in one line, the
parser every script starts from (its help grouped, its "Time:" line read from the committed
sidecars), and the adders of the flags many scripts share."""

from __future__ import annotations

import argparse
import json
import os
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

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


def new_parser(description: str, timed_by: Sequence[str] = ()) -> FlagParser:
    """A parser with the script's docstring as description and defaults shown in --help;
    ``timed_by`` (result CSVs, one per part of the run) adds how long the committed
    results took, read from their sidecars in ``results/`` (``committed_run_time``)."""
    timing = committed_run_time(timed_by) if timed_by else None
    return FlagParser(
        description=description.rstrip() + (f"\n\n{timing}" if timing else ""),
        formatter_class=HelpFormatter,
    )


#: The help group of every flag that no other group names.
MEASURED = "what is measured"
#: The help groups every script shares, after its own declared groups and ``MEASURED``:
#: title -> dests.
SHARED_GROUPS = {
    "run control": frozenset({"seed", "chunk_steps", "quick", "stage", "jobs"}),
    "outputs": frozenset({"out", "out_dir", "quiet", "results_dir", "figures_dir"}),
}


def help_group(dest: str, declared: Mapping[str, frozenset[str]]) -> str:
    """The title of the help group of the flag ``dest``: the first of the ``declared``
    groups (title -> dests), then of ``SHARED_GROUPS``, that names it; else ``MEASURED``."""
    titled = {**declared, **SHARED_GROUPS}
    return next((title for title, dests in titled.items() if dest in dests), MEASURED)


def flag_dest(names: Sequence[str], dest: str | None, prefix_chars: str = "-") -> str:
    """The ``dest`` argparse gives the flag ``names`` (its documented rule): ``dest`` if
    given, else the first long option string (else the first), its leading prefix
    characters stripped and ``-`` made ``_``."""
    if dest is not None:
        return dest
    long = [n for n in names if len(n) > 1 and n[1] in prefix_chars]
    return (long or list(names))[0].lstrip(prefix_chars).replace("-", "_")


class FlagParser(OneLineParser):
    """The parser every script starts from (``new_parser``): argparse's, with what a script
    says about its flags beyond argparse kept in fields of its own.

    * ``arguments``: every argument added (positionals and flags, not ``--help``), the
      actions ``add_argument`` returned, in order.
    * Help groups: each flag goes into its group as it is added (``help_group``): the
      groups ``declare_flags`` names (before the first flag), "what is measured", run
      control, outputs. ``--help`` and positionals stay where argparse puts them.
    * ``subject_flags``: what a run is about, not how it runs (the card's ``--mechanism``);
      ``committed_arguments``: the argument lists of other committed runs of the script
      (13 on 14's checkpoints). ``outputs.made_with_defaults`` reads both.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._arguments: list[argparse.Action] = []
        self._declared_groups: dict[str, frozenset[str]] = {}
        self._help_groups: dict[str, Any] = {}  # argparse's groups, made at the first flag
        self._subject: frozenset[str] = frozenset()
        self._committed: tuple[list[str], ...] = ()

    @property
    def arguments(self) -> tuple[argparse.Action, ...]:
        """Every argument added but ``--help``, in order."""
        return tuple(self._arguments)

    @property
    def subject_flags(self) -> frozenset[str]:
        """The dests of the flags that say what a run is about (declared ``subject``)."""
        return self._subject

    @property
    def committed_arguments(self) -> tuple[list[str], ...]:
        """The argument lists of the script's other committed runs (declared ``committed``)."""
        return self._committed

    def declare_flags(
        self,
        *,
        groups: Mapping[str, frozenset[str]] | None = None,
        subject: frozenset[str] | None = None,
        committed: tuple[list[str], ...] | None = None,
    ) -> None:
        """Declare help ``groups`` (title -> dests, after any declared before; only before
        the first flag is added, as a flag goes into its group when it is added), the
        ``subject`` flags and the ``committed`` argument lists (see the class)."""
        if groups is not None:
            if self._help_groups:
                raise ValueError("help groups are declared before the first flag is added")
            self._declared_groups = {**self._declared_groups, **groups}
        if subject is not None:
            self._subject = subject
        if committed is not None:
            self._committed = committed

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        """argparse's ``add_argument``, the argument recorded in ``arguments`` and a flag
        added to its help group (``help_group``)."""
        if kwargs.get("action") == "help":  # argparse's own --help, from its constructor
            return super().add_argument(*names, **kwargs)
        if names and names[0].startswith(tuple(self.prefix_chars)):
            dest = flag_dest(names, kwargs.get("dest"), self.prefix_chars)
            group = self._help_group(help_group(dest, self._declared_groups))
            action = group.add_argument(*names, **kwargs)
        else:
            action = super().add_argument(*names, **kwargs)
        self._arguments.append(action)
        return action

    def _help_group(self, title: str) -> Any:
        """The argparse group titled ``title``; at the first flag, every group is made, in
        the order --help shows them."""
        if not self._help_groups:
            titles = [*self._declared_groups, MEASURED, *SHARED_GROUPS]
            self._help_groups = {t: self.add_argument_group(t) for t in titles}
        return self._help_groups[title]


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
    parser: argparse.ArgumentParser,
    default: Sequence[float] | None,
    help: str = "learning rates",
) -> None:
    """``--lrs``: one or more learning rates, each a finite float ``> 0`` (``default`` None:
    the configuration's, which ``--quick`` may change)."""
    default = None if default is None else list(default)
    parser.add_argument(
        "--lrs", nargs="+", type=positive_float, default=default, metavar="LR", help=help
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

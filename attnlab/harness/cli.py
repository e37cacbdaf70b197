"""Shared command-line conventions of the experiment scripts.

Every script in ``experiments/`` is ``main = cli.entry_point(build_parser, run)``: flags are
parsed and validated *before* any computation, and bad input ends the process with one line
on stderr that names the flag, exit status 2, no traceback and no file written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from tqdm.auto import tqdm

from attnlab.harness.errors import DataError, RunError, UsageError

__all__ = ["DataError", "RunError", "UsageError", "FIGURES_DIR", "RESULTS_DIR"]

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Where the scripts write by default, relative to the repository root they run from.
RESULTS_DIR = Path("results")
FIGURES_DIR = Path("figures")
#: Where a run with other than the committed defaults writes unless told otherwise (git
#: ignores it): ``results/runs/<script>-<time>/``.
RUNS_DIR = RESULTS_DIR / "runs"
#: Flags that say where outputs go, which of them to make (09's ``--stage``) or how a run
#: reports, not what it computes: a run that differs from the defaults only in these still
#: makes canonical results.
OUTPUT_FLAGS = frozenset({"out", "out_dir", "quiet", "stage"})
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


def unit_interval(text: str) -> float:
    """An argparse type: a float in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not in [0, 1)")
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
    from attnlab.harness.io import sidecar_path

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
    default: int | Sequence[int],
    help: str,
    minimum: int = 1,
) -> None:
    """An integer flag ``>= minimum``; a sequence default makes it take one or more."""
    many = not isinstance(default, int)
    parser.add_argument(
        flag,
        type=int_at_least(minimum),
        nargs="+" if many else None,
        default=list(default) if many else default,
        help=help,
    )


def add_dk_flag(
    parser: argparse.ArgumentParser, default: Sequence[int], help: str = "head widths d_k"
) -> None:
    """``--dk``: one or more head widths, each a positive integer."""
    add_int_flag(parser, "--dk", default, help)


OUT_DIR_HELP = (
    "directory for the CSVs and sidecars (default: results/ with the committed defaults; with "
    "any other flags a run folder of its own, results/runs/<script>-<time>/, which git ignores)"
)


def add_out_dir_flag(parser: argparse.ArgumentParser) -> None:
    """``--out-dir`` and ``--quiet``; the default ``--out-dir`` is ``resolve_out_dir``'s."""
    parser.add_argument("--out-dir", type=Path, default=None, help=OUT_DIR_HELP)
    add_quiet_flag(parser)


def made_with_defaults(parser: argparse.ArgumentParser, args: argparse.Namespace) -> bool:
    """Whether every flag of ``args`` but the ``OUTPUT_FLAGS`` and the parser's
    ``subject_flags`` (what a run is about, not how it runs: the card's ``--mechanism``) has
    its default value."""
    skip = OUTPUT_FLAGS | getattr(parser, "subject_flags", frozenset())
    return all(
        getattr(args, action.dest) == _parsed_default(action)
        for action in parser._actions
        if action.dest not in skip and hasattr(args, action.dest)
    )


def _parsed_default(action: argparse.Action) -> Any:
    """The value argparse gives a flag left out: a string default goes through its type."""
    if isinstance(action.default, str) and callable(action.type):
        return action.type(action.default)
    return action.default


def resolve_out_dir(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Set ``args.made_with_defaults`` and, where ``--out-dir`` was not given, the output
    folder: ``results/`` for the committed defaults, a new run folder otherwise (so that
    no experiment replaces a canonical result by accident)."""
    args.made_with_defaults = made_with_defaults(parser, args)
    args.out_dir_given = getattr(args, "out_dir", None) is not None
    if getattr(args, "out_dir", False) is None:
        if args.made_with_defaults:
            args.out_dir = RESULTS_DIR
        else:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            args.out_dir = RUNS_DIR / f"{Path(parser.prog).stem}-{stamp}"
            args.run_folder = True


def add_results_dir_flag(parser: argparse.ArgumentParser) -> None:
    """``--results-dir``: where the result CSVs are read from."""
    parser.add_argument(
        "--results-dir", type=Path, default=RESULTS_DIR, help="directory holding the result CSVs"
    )


def add_common_flags(parser: argparse.ArgumentParser, default_out: Path) -> None:
    """``--seed``, ``--out`` and ``--quiet``, for the bench."""
    add_seed_flag(parser)
    parser.add_argument("--out", type=Path, default=default_out, help="output CSV path")
    add_quiet_flag(parser)


def add_table_flags(parser: argparse.ArgumentParser, csv_name: str) -> None:
    """``--seed``, ``--out-dir``, ``--out`` and ``--quiet`` of a single-CSV experiment:
    its CSV is ``--out`` if given (a ``.csv`` path), else ``<out-dir>/csv_name``."""
    add_seed_flag(parser)
    add_out_dir_flag(parser)
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="FILE.csv",
        help=f"output CSV path (instead of <out-dir>/{csv_name})",
    )


def table_path(args: argparse.Namespace, csv_name: str) -> Path:
    """The checked output CSV of ``add_table_flags``; a run folder is created here."""
    if args.out is not None:
        if args.out_dir_given:  # unused, but a bad value is still an error
            check_dir_writable(args.out_dir, "--out-dir")
        return check_writable(args.out, "--out", suffix=".csv")
    return prepare_out_dir(args) / csv_name


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


def add_quiet_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", action="store_true", help="no progress bar on stderr")


def check_writable(path: Path, flag: str, suffix: str | None = None) -> Path:
    """Fail with a UsageError naming ``flag`` unless a file can be created at ``path`` (and,
    with ``suffix``, its name ends in it: a CSV's sidecar is its path with ``.json``)."""
    parent = path.parent if str(path.parent) else Path(".")
    if suffix is not None and path.suffix != suffix:
        raise UsageError(f"{flag}: {path} must end in {suffix}")
    if path.exists() and path.is_dir():
        raise UsageError(f"{flag}: {path} is a directory")
    if not parent.is_dir():
        raise UsageError(f"{flag}: directory {parent} does not exist")
    check_dir_writable(parent, flag)
    return path


def check_dir_exists(path: Path, flag: str) -> Path:
    """Fail with a UsageError naming ``flag`` unless ``path`` is an existing directory."""
    if not path.is_dir():
        raise UsageError(f"{flag}: {path} is not an existing directory")
    return path


def check_dir_writable(path: Path, flag: str, create: bool = False) -> Path:
    """Fail with a UsageError naming ``flag`` unless ``path`` is a writable directory
    (``create``: made first, with its parents): a file is created in it and removed, so a
    location that says it is writable but is not (``/proc``) fails before any work."""
    if create:
        path.mkdir(parents=True, exist_ok=True)
    check_dir_exists(path, flag)
    try:
        handle, probe = tempfile.mkstemp(dir=path, prefix=".probe-")
        os.close(handle)
        os.unlink(probe)
    except OSError as err:
        raise UsageError(f"{flag}: cannot write in {path} ({err.strerror})") from None
    return path


def prepare_out_dir(args: argparse.Namespace) -> Path:
    """``args.out_dir``, checked writable (a run folder is created here)."""
    return check_dir_writable(args.out_dir, "--out-dir", create=getattr(args, "run_folder", False))


#: The files the running script has written (``staged_outputs`` appends; ``entry_point``
#: resets it per run and prints it at the end).
WRITTEN: list[Path] = []


@contextlib.contextmanager
def staged_outputs(directory: Path) -> Iterator[Path]:
    """All outputs or none: yield a new hidden directory inside ``directory`` to write into;
    when the block ends normally its files are moved into ``directory`` (files in
    subdirectories of the stage to the same subdirectories, made where missing), and when
    it raises (Ctrl-C, a bad CSV, a failed run) they are deleted, so no run leaves part of
    its outputs. If moving fails (a full disk, a file in the way), the files already moved
    go back and the stage is kept: a RunError says where the computed outputs are."""
    directory = Path(directory)
    stage = Path(tempfile.mkdtemp(dir=directory, prefix=".staging-"))
    keep = False
    try:
        yield stage
        moved: list[tuple[Path, Path]] = []
        made: list[Path] = []
        try:
            for path in sorted(p for p in stage.rglob("*") if not p.is_dir()):
                target = directory / path.relative_to(stage)
                for parent in reversed(target.relative_to(directory).parents[:-1]):
                    if not (directory / parent).is_dir():
                        (directory / parent).mkdir()
                        made.append(directory / parent)
                os.replace(path, target)
                moved.append((path, target))
            WRITTEN.extend(target for _, target in moved)
        except BaseException as err:
            for path, target in reversed(moved):
                with contextlib.suppress(OSError):
                    os.replace(target, path)
            for folder in reversed(made):
                with contextlib.suppress(OSError):
                    folder.rmdir()
            if isinstance(err, OSError):
                keep = True
                raise RunError(
                    f"could not move the outputs into {directory} ({err.strerror or err}); "
                    f"all of them are kept in {stage}"
                ) from None
            raise
    finally:
        if not keep:
            shutil.rmtree(stage, ignore_errors=True)


def progress(total: int, desc: str, quiet: bool, unit: str = "it") -> tqdm:
    """A tqdm bar on stderr; silent with ``--quiet`` or when stderr is not a terminal."""
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        disable=quiet or not sys.stderr.isatty(),
        leave=False,
        dynamic_ncols=True,
    )


def configure_jax() -> None:
    """Persist compiled XLA programs under ``.cache/jax`` (ignored by git), and lower
    random-bit generation unrolled on CPU (``attnlab.core.prng``: same bits, faster steps).

    The static experiments compile one program per head width; with the cache a second
    script or a rerun loads them instead of compiling again. Results depend on neither.
    """
    import jax

    from attnlab.core.prng import unroll_threefry_on_cpu

    unroll_threefry_on_cpu()

    cache_dir = os.environ.get("ATTNLAB_JAX_CACHE", str(REPO_ROOT / ".cache" / "jax"))
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def entry_point(
    build_parser: Callable[[], argparse.ArgumentParser],
    run: Callable[[argparse.Namespace], None],
    headline: Callable[[str, Any], str | None] | None = None,
) -> Callable[[list[str] | None], int]:
    """Wrap a script: parse, run, and turn a UsageError into one line and exit status 2.
    On success, one line per file written (``announce_written``; ``headline(csv_name,
    frame)`` gives a CSV's headline number, ``attnlab.studies.headline``)."""

    def main(argv: list[str] | None = None) -> int:
        WRITTEN.clear()
        if threading.current_thread() is threading.main_thread():
            # experiments/_interrupt.py exits on Ctrl-C while a script imports; from here
            # on it is a KeyboardInterrupt, handled below.
            signal.signal(signal.SIGINT, signal.default_int_handler)
        parser = build_parser()
        group_flags(parser)
        args = parser.parse_args(argv)
        resolve_out_dir(parser, args)
        try:
            configure_jax()
            run(args)
        except (UsageError, DataError) as err:
            print(f"{parser.prog}: error: {one_line(str(err))}", file=sys.stderr)
            if getattr(args, "run_folder", False):
                with contextlib.suppress(OSError):
                    args.out_dir.rmdir()  # nothing written: not even an empty run folder
            return 2
        except RunError as err:
            print(f"{parser.prog}: failed: {one_line(str(err))}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            # Outputs are renamed into place only when complete, so nothing partial is left.
            print(f"{parser.prog}: interrupted; nothing written", file=sys.stderr)
            return 130
        if not getattr(args, "quiet", False):
            announce_written(getattr(args, "run_folder", False) and args.out_dir, headline)
        return 0

    return main


def announce_written(
    run_folder: Path | None, headline: Callable[[str, Any], str | None] | None = None
) -> None:
    """One line per file the run wrote (a CSV with its row count and, where ``headline``
    gives one, its headline number; sidecars left out), and where a run folder was chosen,
    that it was."""
    from attnlab.harness.io import is_csv, open_csv_text, sidecar_path

    sidecars = {sidecar_path(p) for p in WRITTEN if is_csv(p)}
    for path in WRITTEN:
        if path in sidecars:
            continue
        rows = ""
        if is_csv(path) and headline is not None:
            import pandas as pd

            frame = pd.read_csv(path)
            text = headline(path.name, frame)
            rows = f" ({len(frame)} rows)" + (f": {text}" if text else "")
        elif is_csv(path):
            with open_csv_text(path) as handle:
                rows = f" ({sum(1 for _ in handle) - 1} rows)"
        print(f"wrote {path}{rows}")
    if run_folder:
        print(
            f"(flags other than the committed defaults: written to the run folder {run_folder}/;"
            " results/ is unchanged)"
        )


#: A script's plan: from its flags, the progress total and the computation of its table.
Plan = Callable[[argparse.Namespace], tuple[int, Callable[[Callable[[int], None]], object]]]


def table_script(
    description: str,
    csv_name: str,
    desc: str,
    add_flags: Callable[[argparse.ArgumentParser], None],
    plan: Plan,
) -> tuple[Callable[[], argparse.ArgumentParser], Callable[[argparse.Namespace], None]]:
    """``(build_parser, run)`` of a script that writes one table, ``<out-dir>/<csv_name>``:
    its own flags, then ``add_table_flags``; ``plan(args)`` gives the progress total and
    the computation, run under ``run_table``."""

    def build_parser() -> argparse.ArgumentParser:
        parser = new_parser(description, (csv_name,))
        add_flags(parser)
        add_table_flags(parser, csv_name)
        return parser

    def run(args: argparse.Namespace) -> None:
        out = table_path(args, csv_name)
        total, compute = plan(args)
        run_table(args, out, desc, total, compute)

    return build_parser, run


def run_table(
    args: argparse.Namespace,
    out: Path,
    desc: str,
    total: int,
    compute: Callable[[Callable[[int], None]], object],
) -> None:
    """Run ``compute(progress_callback)`` under a progress bar of ``total`` units and write
    the DataFrame it returns to ``out`` with its provenance sidecar."""
    import time

    from attnlab.harness.io import write_result

    start = time.perf_counter()
    with progress(total, desc, args.quiet) as bar:
        frame = compute(bar.update)
    with staged_outputs(out.parent) as stage:
        write_result(frame, stage / out.name, vars(args), time.perf_counter() - start)

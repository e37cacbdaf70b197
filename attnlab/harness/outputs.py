"""Where a script's outputs go, and how they get there: the output-folder rule (the committed
defaults write ``results/``, any other flags a run folder of their own), the checks of
output paths, and staged writes (all of a run's outputs or none)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attnlab.harness.errors import RunError, UsageError

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Where the scripts write by default, relative to the repository root they run from.
RESULTS_DIR = Path("results")
FIGURES_DIR = Path("figures")
#: Where a run with other than the committed defaults writes unless told otherwise (git
#: ignores it): ``results/runs/<script>-<time>/``.
RUNS_DIR = RESULTS_DIR / "runs"
#: Flags that say where outputs go, which of them to make (09's ``--stage``), how a run
#: reports or how many processes compute it (the card's ``--jobs``), not what it computes:
#: a run that differs from the defaults only in these still makes canonical results.
OUTPUT_FLAGS = frozenset({"out", "out_dir", "quiet", "stage", "jobs"})


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
    its default value, or the value one of the parser's ``committed_arguments`` gives it
    (argument lists of other committed runs of the script: 13 on 14's checkpoints)."""
    skip = OUTPUT_FLAGS | getattr(parser, "subject_flags", frozenset())
    actions = [a for a in parser._actions if a.dest not in skip and hasattr(args, a.dest)]
    references = [{a.dest: _parsed_default(a) for a in actions}]
    for argv in getattr(parser, "committed_arguments", ()):
        committed = parser.parse_args(argv)
        references.append({a.dest: getattr(committed, a.dest) for a in actions})
    return any(all(getattr(args, d) == v for d, v in ref.items()) for ref in references)


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


def table_path(args: argparse.Namespace, csv_name: str) -> Path:
    """The checked output CSV of ``add_table_flags``; a run folder is created here."""
    if args.out is not None:
        if args.out_dir_given:  # unused, but a bad value is still an error
            check_dir_writable(args.out_dir, "--out-dir")
        return check_writable(args.out, "--out", suffix=".csv")
    return prepare_out_dir(args) / csv_name


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


@contextlib.contextmanager
def staged_outputs(directory: Path, record: list[Path] | None = None) -> Iterator[Path]:
    """All outputs or none: yield a new hidden directory inside ``directory`` to write into;
    when the block ends normally its files are moved into ``directory`` (files in
    subdirectories of the stage to the same subdirectories, made where missing) and their
    final paths appended to ``record`` (a script passes its run's ``args.written``, which
    ``cli.entry_point`` announces), and when it raises (Ctrl-C, a bad CSV, a failed run)
    they are deleted, so no run leaves part of its outputs. If moving fails (a full disk, a
    file in the way), the files already moved go back and the stage is kept: a RunError
    says where the computed outputs are."""
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
            if record is not None:
                record.extend(target for _, target in moved)
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

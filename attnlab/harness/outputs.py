"""Where a script's outputs go, and how they get there: the output-folder rule (the committed
defaults write ``results/``, any other flags a run folder of their own), the checks of
output paths, and staged writes (all of a run's outputs or none)."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.harness import signals
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


def a_path(text: str) -> Path:
    """A path flag's type: ``Path(text)``, refusing an empty one (``Path("")`` is the
    current folder, which nobody means by leaving the value out)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name a file or folder")
    return Path(text)


def add_out_dir_flag(parser: argparse.ArgumentParser) -> None:
    """``--out-dir`` and ``--quiet``; the default ``--out-dir`` is ``run_context``'s."""
    parser.add_argument("--out-dir", type=a_path, default=None, help=OUT_DIR_HELP)
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


@dataclass(frozen=True)
class RunContext:
    """One run of a script, made once from its parsed flags (``run_context``) and passed
    where the run needs it: where its outputs go, whether its flags are the committed
    defaults, the record of what it wrote and the notes it leaves after the file list.

    ``flags`` are the parsed flags with ``--out-dir`` resolved: what each sidecar records
    (``sidecar_flags``). ``written`` and ``notes`` are the run's own lists (a run started
    inside another, as ``make verify`` does, announces only its own files)."""

    flags: dict[str, Any]
    out_dir: Path | None
    made_with_defaults: bool
    out_dir_given: bool
    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def run_folder(self) -> bool:
        """Whether ``out_dir`` is a run folder of its own: not given, and flags other than
        the committed defaults."""
        return self.out_dir is not None and not self.out_dir_given and not self.made_with_defaults

    @property
    def quiet(self) -> bool:
        """``--quiet`` (False for a script without it)."""
        return bool(self.flags.get("quiet", False))

    def add_note(self, text: str | None) -> None:
        """Say ``text`` after the list of written files (even with ``--quiet``); None:
        nothing to say."""
        if text:
            self.notes.append(text)

    @property
    def sidecar_flags(self) -> dict[str, Any]:
        """The flags as the sidecars record them (``io.provenance``), with whether they are
        the committed defaults."""
        return {**self.flags, "made_with_defaults": self.made_with_defaults}


def run_context(parser: argparse.ArgumentParser, args: argparse.Namespace) -> RunContext:
    """The run's context. Where ``--out-dir`` was not given the output folder is
    ``results/`` for the committed defaults and a new run folder otherwise (so that no
    experiment replaces a canonical result by accident); a script without ``--out-dir``
    has none."""
    defaults = made_with_defaults(parser, args)
    given = getattr(args, "out_dir", None)
    out_dir = given
    if given is None and hasattr(args, "out_dir"):
        if defaults:
            out_dir = RESULTS_DIR
        else:
            out_dir = RUNS_DIR / f"{Path(parser.prog).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    flags = vars(args) | ({"out_dir": out_dir} if hasattr(args, "out_dir") else {})
    return RunContext(flags, out_dir, made_with_defaults=defaults, out_dir_given=given is not None)


def add_results_dir_flag(parser: argparse.ArgumentParser) -> None:
    """``--results-dir``: where the result CSVs are read from."""
    parser.add_argument(
        "--results-dir", type=a_path, default=RESULTS_DIR, help="directory holding the result CSVs"
    )


def table_path(args: argparse.Namespace, context: RunContext, csv_name: str) -> Path:
    """The checked output CSV of ``add_table_flags``; a run folder is created here."""
    if args.out is not None:
        if context.out_dir_given:  # unused, but a bad value is still an error
            check_dir_writable(context.out_dir, "--out-dir")
        return check_writable(args.out, "--out", suffix=".csv")
    return prepare_out_dir(context) / csv_name


def add_quiet_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar on stderr and no 'wrote FILE' lines (where the outputs went, if "
        "not results/, is still said)",
    )


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


def prepare_out_dir(context: RunContext) -> Path:
    """The run's output folder, checked writable (a run folder is created here)."""
    return check_dir_writable(context.out_dir, "--out-dir", create=context.run_folder)


#: A stage's name in its output folder: ``.staging-<pid>-<random>`` (the pid tells a stage
#: of a live run from one a killed run left behind).
STAGE_PREFIX = ".staging-"
#: Inside a stage: the run's new files, the old files they replace while the move lasts,
#: and the move's plan (``_Move``), written before the first file moves.
NEW, OLD, PLAN = "new", "old", "move.json"


def _at_move_step(step: str) -> None:
    """Called at each step of a final move (``"before"``, ``"moved <path>"``, ``"after"``);
    does nothing. Fault-injection tests replace it to fail or signal at that instant."""


@dataclass(frozen=True)
class _Move:
    """The final move of a stage into ``directory``: ``files`` (paths relative to it, in
    order) and the folders ``made`` for them, recorded in the stage before anything moves
    so that the move can be undone from what is on disk alone (``undo``), in this process
    or, after a kill, in the next run into the folder (``recover_stages``)."""

    stage: Path
    directory: Path
    files: tuple[Path, ...]
    made: tuple[Path, ...]

    @classmethod
    def plan(cls, stage: Path, directory: Path) -> _Move:
        new = stage / NEW
        files = tuple(sorted(p.relative_to(new) for p in new.rglob("*") if not p.is_dir()))
        parents = {parent for f in files for parent in f.parents[:-1]}
        made = sorted(
            (p for p in parents if not (directory / p).is_dir()), key=lambda p: len(p.parts)
        )
        return cls(stage, directory, files, tuple(made))

    @classmethod
    def read(cls, stage: Path, directory: Path) -> _Move:
        plan = json.loads((stage / PLAN).read_text(encoding="utf-8"))
        return cls(stage, directory, *(tuple(map(Path, plan[k])) for k in ("files", "made")))

    def record(self) -> None:
        plan = {"files": [str(f) for f in self.files], "made": [str(f) for f in self.made]}
        (self.stage / PLAN).write_text(json.dumps(plan), encoding="utf-8")

    def check(self) -> None:
        """OSError (before anything moves) where a target is a folder or lies outside."""
        for f in self.files:
            target = self.directory / f
            if target.is_dir() and not target.is_symlink():
                raise IsADirectoryError(21, "a folder is in the way", str(target))
            within(self.directory, f, "an output")

    def run(self) -> None:
        """Each old file aside into the stage, then the new one into its place."""
        new, old = self.stage / NEW, self.stage / OLD
        for folder in self.made:
            (self.directory / folder).mkdir()
        for f in self.files:
            target = self.directory / f
            if target.exists() or target.is_symlink():
                (old / f).parent.mkdir(parents=True, exist_ok=True)
                os.replace(target, old / f)
            os.replace(new / f, target)
            _at_move_step(f"moved {f}")

    def undo(self) -> None:
        """Every file back as it was before ``run``: a new file already in place (it is no
        longer in the stage) goes back to the stage, the old one it replaced back to its
        place; the folders made for the move are removed."""
        new, old = self.stage / NEW, self.stage / OLD
        for f in reversed(self.files):
            target = self.directory / f
            if not (new / f).exists() and (target.exists() or target.is_symlink()):
                (new / f).parent.mkdir(parents=True, exist_ok=True)
                os.replace(target, new / f)
            if (old / f).exists() or (old / f).is_symlink():
                os.replace(old / f, target)
        for folder in reversed(self.made):
            with contextlib.suppress(OSError):
                (self.directory / folder).rmdir()


def within(directory: Path, relative: Path | str, what: str) -> Path:
    """``directory / relative``, checked to lie inside ``directory`` once both are resolved
    (no ``..``, absolute part or symlink leads out); else a UsageError naming ``what``."""
    path = Path(directory) / relative
    base = Path(directory).resolve()
    if Path(relative).is_absolute() or not path.resolve().is_relative_to(base):
        raise UsageError(f"{what} {str(relative)!r} would be written outside {directory}")
    return path


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on ``directory`` (``flock`` on the folder itself: nothing is left
    in it), so that two runs' final moves into one folder never interleave."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover_stages(directory: Path) -> None:
    """Undo the final move of every stage in ``directory`` whose run was killed mid-move
    (SIGKILL, a power cut: its plan is there and its process is gone), and remove it: the
    folder holds the old outputs again, as if that run had never started. A stage of a
    killed run that had not begun its move has no plan, and is only removed."""
    for stage in Path(directory).glob(f"{STAGE_PREFIX}*"):
        pid = stage.name.removeprefix(STAGE_PREFIX).partition("-")[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        if (stage / PLAN).is_file():
            with _locked(directory):
                _Move.read(stage, directory).undo()
        shutil.rmtree(stage, ignore_errors=True)


def _undo(move: _Move) -> None:
    """Undo ``move`` and drop its plan. If the undo itself fails, a RunError says where the
    old and the new files are, and the plan stays: a stage with a plan is kept
    (``staged_outputs``), and the next run into the folder finishes the undo."""
    try:
        move.undo()
    except OSError as err:
        raise RunError(
            f"could not put the previous outputs back into {move.directory} ({err.strerror}); "
            f"they are in {move.stage / OLD}, the new ones in {move.stage / NEW}"
        ) from None
    (move.stage / PLAN).unlink(missing_ok=True)


@contextlib.contextmanager
def staged_outputs(directory: Path, record: list[Path] | None = None) -> Iterator[Path]:
    """All outputs or none: yield a new folder inside a hidden stage in ``directory`` to
    write into; when the block ends normally its files are moved into ``directory`` (files
    in subfolders to the same subfolders, made where missing) and their final paths
    appended to ``record`` (a script passes its run's ``context.written``, which
    ``cli.entry_point`` announces). When the block raises (Ctrl-C, a bad CSV, a failed
    run) the stage is deleted and ``directory`` is untouched.

    The final move holds the folder's lock (two runs never interleave), keeps each old
    file in the stage until every new one is in place, and holds signals back
    (``signals.deferred``): if a move fails (a full disk, a folder in the way) or a signal
    arrives during it, every file goes back as it was and the signal is delivered after,
    so ``directory`` holds either every old file or every new one, and the stage is
    removed (a failed move is a RunError saying so); a move cut by a kill the process
    cannot catch is undone by the next run into the folder (``recover_stages``)."""
    directory = Path(directory)
    recover_stages(directory)
    stage = Path(tempfile.mkdtemp(dir=directory, prefix=f"{STAGE_PREFIX}{os.getpid()}-"))
    try:
        (stage / NEW).mkdir()
        yield stage / NEW
        with signals.deferred() as pending, _locked(directory):
            move = _Move.plan(stage, directory)
            try:
                move.check()
                move.record()
                _at_move_step("before")
                move.run()
                _at_move_step("after")
            except BaseException as err:
                _undo(move)
                if not isinstance(err, OSError):
                    raise
                raise RunError(
                    f"could not move the outputs into {directory} ({err.strerror or err}"
                    f"{': ' + str(err.filename) if err.filename else ''}); nothing written, "
                    "the previous outputs are unchanged"
                ) from None
            if pending:
                _undo(move)
            else:
                (stage / PLAN).unlink()  # the move is complete: nothing to undo after a kill
                if record is not None:
                    record.extend(directory / f for f in move.files)
        if pending:
            signals.redeliver(pending)
            raise signals.Interrupted(pending[0])
    finally:
        if not (stage / PLAN).is_file():  # a plan is left only by an undo that failed
            shutil.rmtree(stage, ignore_errors=True)

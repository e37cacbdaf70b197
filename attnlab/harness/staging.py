"""Staged writes: all of a run's outputs or none. A run writes into a hidden stage in its
output folder and the stage's files are moved into place at the end, undone as a whole if
anything interrupts the move (``staged_outputs``); a move cut by a kill is undone by the
next run into the folder (``recover_stages``), and readers refuse a folder left mid-move
(``check_settled``) until then or until ``python -m attnlab.harness.staging FOLDER`` undoes
it. A stage's plan is followed only once every path it names is checked to stay inside
its folder (``within``)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from attnlab.harness import signals
from attnlab.harness.errors import DataError, RunError, UsageError

#: A stage's name in its output folder: ``.staging-<pid>-<random>`` (the pid is for a
#: person reading the folder; whether the run is alive is its lock, ``_hold``).
STAGE_PREFIX = ".staging-"
#: Where a stage whose plan cannot be trusted is set aside, untouched and never followed.
SET_ASIDE_PREFIX = ".set-aside-"
#: Inside a stage: the run's new files, the old files they replace while the move lasts,
#: and the move's plan (``_Move``), written before the first file moves.
NEW, OLD, PLAN = "new", "old", "move.json"
#: The command that finishes (undoes) the move a killed run left in a folder.
REPAIR_COMMAND = "python -m attnlab.harness.staging"


def _at_move_step(step: str) -> None:
    """Called at each step of a final move (``"before"``, ``"moved <path>"``, ``"after"``);
    does nothing. Fault-injection tests replace it to fail or signal at that instant."""


class PlanError(ValueError):
    """A stage's plan that cannot be followed: unreadable, or naming a path that is not a
    plain relative path inside its folder and its stage."""


#: A file's identity: ``st_dev, st_ino, st_size, st_mtime_ns`` (a rename keeps all four; a
#: file made later that reuses the inode number differs in its time).
IDENTITY_FIELDS = ("st_dev", "st_ino", "st_size", "st_mtime_ns")


def _identity(path: Path) -> tuple[int, ...]:
    """The file's identity (``IDENTITY_FIELDS``), of the link itself where it is one."""
    stat = path.lstat()
    return tuple(getattr(stat, name) for name in IDENTITY_FIELDS)


def _plain_relative(text: object, what: str) -> Path:
    """``text`` as a relative path with no ``..``, ``.`` or empty part; else PlanError."""
    if not isinstance(text, str) or not text:
        raise PlanError(f"{what} is not a path")
    path = Path(text)
    if path.is_absolute() or any(p in ("..", ".") for p in text.split("/")) or "\\" in text:
        raise PlanError(f"{what} {text!r} is not a plain relative path")
    return path


@dataclass(frozen=True)
class _Move:
    """The final move of a stage into ``directory``: ``files`` (paths relative to it, in
    order), each new file's identity ``ids`` (``_identity``) and the folders ``made`` for
    them, recorded in the stage before anything moves so that the move can be undone from
    what is on disk alone (``undo``), in this process or, after a kill, in the next run
    into the folder (``recover_stages``). The undo takes back only a file whose identity
    is the one the move placed, so a plan read late never touches newer outputs."""

    stage: Path
    directory: Path
    files: tuple[Path, ...]
    ids: tuple[tuple[int, ...], ...]
    made: tuple[Path, ...]

    @classmethod
    def plan(cls, stage: Path, directory: Path) -> _Move:
        new = stage / NEW
        files = tuple(sorted(p.relative_to(new) for p in new.rglob("*") if not p.is_dir()))
        ids = tuple(_identity(new / f) for f in files)
        parents = {parent for f in files for parent in f.parents[:-1]}
        made = sorted(
            (p for p in parents if not (directory / p).is_dir()), key=lambda p: len(p.parts)
        )
        return cls(stage, directory, files, ids, tuple(made))

    @classmethod
    def read(cls, stage: Path, directory: Path) -> _Move:
        """The plan on disk, checked before any of it is followed (PlanError): a JSON
        object of ``files``, ``ids`` and ``made``, every path plain, relative and, once
        links are resolved, inside ``directory`` and inside the stage."""
        try:
            plan = json.loads((stage / PLAN).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise PlanError(f"its plan cannot be read ({err})") from None
        if not isinstance(plan, dict) or not all(
            isinstance(plan.get(k), list) for k in ("files", "ids", "made")
        ):
            raise PlanError("its plan is not {files, ids, made} lists")
        files = tuple(_plain_relative(f, "a file") for f in plan["files"])
        made = tuple(_plain_relative(f, "a folder") for f in plan["made"])
        ids = plan["ids"]
        if len(ids) != len(files) or not all(
            isinstance(i, list)
            and len(i) == len(IDENTITY_FIELDS)
            and all(type(n) is int for n in i)
            for i in ids
        ):
            raise PlanError("its plan's identities do not match its files")
        for path in (*files, *made):
            _inside(directory, path)
        for path in files:  # the stage's own folders too: its new/ or old/ may be a link
            _inside(stage, NEW / path)
            _inside(stage, OLD / path)
        return cls(stage, directory, files, tuple(map(tuple, ids)), made)

    def record(self) -> None:
        """The plan, written whole or not at all (a temporary file renamed over it)."""
        plan = {
            "files": [str(f) for f in self.files],
            "ids": [list(i) for i in self.ids],
            "made": [str(f) for f in self.made],
        }
        temporary = self.stage / f"{PLAN}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(plan, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.stage / PLAN)

    def check(self) -> None:
        """Before anything moves: every target can take its file (``check_target``)."""
        for f in self.files:
            check_target(self.directory, f, "an output")

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
        """Every file back as it was before ``run``: a new file already in place (the one
        with its recorded identity) goes back to the stage, the old one it replaced back to
        its place where that place is empty or held the new file; a place that holds any
        other file (a later run's) is left as it is. The folders made for the move are
        removed where empty."""
        new, old = self.stage / NEW, self.stage / OLD
        for f, ident in zip(reversed(self.files), reversed(self.ids), strict=True):
            target = self.directory / f
            placed = target.exists() or target.is_symlink()
            if placed and not (new / f).exists() and _identity(target) == ident:
                (new / f).parent.mkdir(parents=True, exist_ok=True)
                os.replace(target, new / f)
                placed = False
            if not placed and ((old / f).exists() or (old / f).is_symlink()):
                os.replace(old / f, target)
        for folder in reversed(self.made):
            with contextlib.suppress(OSError):
                (self.directory / folder).rmdir()


def _inside(directory: Path, relative: Path) -> None:
    """PlanError unless ``directory / relative`` stays inside ``directory`` once resolved."""
    try:
        within(directory, relative, "a path")
    except UsageError:
        raise PlanError(f"{str(relative)!r} leads outside {directory}") from None


def check_target(directory: Path, relative: Path | str, what: str) -> Path:
    """``directory / relative``, where a move can put a file: inside ``directory``
    (``within``, a UsageError naming ``what``), not a folder (IsADirectoryError), and none
    of its folders a file (NotADirectoryError). The final move checks its files so before
    the first moves; a script may check the paths it will write before it computes."""
    target = within(directory, relative, what)
    if target.is_dir() and not target.is_symlink():
        raise IsADirectoryError(21, "a folder is in the way", str(target))
    for parent in list(Path(relative).parents)[:-1]:
        folder = Path(directory) / parent
        if (folder.exists() or folder.is_symlink()) and not folder.is_dir():
            raise NotADirectoryError(20, "a file is in the way of a folder", str(folder))
    return target


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


def _hold(stage: Path) -> int | None:
    """A descriptor holding ``stage``'s lock (``flock``, exclusive, not waiting), or None
    where another process holds it: a stage's run holds its lock from the stage's creation
    to its removal, and the system releases it when that process ends, however it ends, so
    a free lock means the run is gone whatever its pid now names."""
    try:
        fd = os.open(stage, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:  # removed meanwhile by its run, or not a folder: nothing to hold
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stages(directory: Path) -> list[Path]:
    """The stages in ``directory``: real folders named ``STAGE_PREFIX...`` (a link is none)."""
    return [
        p for p in Path(directory).glob(f"{STAGE_PREFIX}*") if p.is_dir() and not p.is_symlink()
    ]


def _set_aside(stage: Path, why: str) -> None:
    """Rename ``stage`` out of the stages' way, untouched, and say so in one line."""
    aside = stage.with_name(SET_ASIDE_PREFIX + stage.name.removeprefix(STAGE_PREFIX))
    os.replace(stage, aside)
    print(
        f"attnlab: set aside {aside}, a stage whose plan was not followed: {why}; no file of "
        f"{stage.parent} was touched",
        file=sys.stderr,
    )


def recover_stages(directory: Path) -> list[Path]:
    """Undo the final move of every stage in ``directory`` whose run was killed mid-move
    (SIGKILL, a power cut: its plan is there and no process holds its lock), and remove
    it: the folder holds the old outputs again, as if that run had never started. A stage
    of a killed run that had not begun its move has no plan, and is removed once its pid
    is gone. A plan that cannot be read, or names a path outside the folder or the stage,
    is never followed: its stage is set aside (``SET_ASIDE_PREFIX``) with one line on
    stderr. Returns the stages whose moves were undone."""
    undone = []
    for stage in _stages(directory):
        if not (stage / PLAN).is_file():
            pid = stage.name.removeprefix(STAGE_PREFIX).partition("-")[0]
            if pid.isdigit() and not _pid_alive(int(pid)):
                shutil.rmtree(stage, ignore_errors=True)
            continue
        held = _hold(stage)
        if held is None:  # its run is alive, or another run is recovering it
            continue
        try:
            with _locked(directory):
                if not (stage / PLAN).is_file():  # recovered meanwhile by another run
                    shutil.rmtree(stage, ignore_errors=True)
                    continue
                try:
                    move = _Move.read(stage, directory)
                except PlanError as err:
                    _set_aside(stage, str(err))
                    continue
                move.undo()
                (stage / PLAN).unlink()
                undone.append(stage)
            shutil.rmtree(stage, ignore_errors=True)
        finally:
            os.close(held)
    return undone


def unfinished_moves(path: Path) -> list[Path]:
    """The stages of killed runs whose moves are unfinished (a plan, its lock free), in
    ``path``'s folder (``path`` itself if a folder) and every folder above it: there the
    files are part old, part new until the next run or ``REPAIR_COMMAND`` undoes them."""
    path = Path(path).absolute()
    folders = [path] if path.is_dir() else []
    found = []
    for folder in [*folders, *path.parents]:
        with contextlib.suppress(OSError):  # a folder that cannot be listed holds none
            for stage in _stages(folder):
                held = _hold(stage) if (stage / PLAN).is_file() else None
                if held is not None:
                    os.close(held)
                    found.append(stage)
    return found


def check_settled(path: Path, flag: str) -> Path:
    """``path``, or a DataError naming ``flag`` where a killed run left an unfinished move
    in its folder or one above (``unfinished_moves``), with the command that undoes it: a
    reader never reads old and new outputs mixed."""
    found = unfinished_moves(path)
    if found:
        folder = found[0].parent
        raise DataError(
            f"{flag}: {folder} holds an unfinished move of a killed run ({found[0].name}), "
            f"its files part old, part new; run `{REPAIR_COMMAND} {folder}` to put the old "
            "ones back"
        )
    return path


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
    cannot catch is undone by the next run into the folder (``recover_stages``), which
    knows the run is gone because the stage's lock, held from here on, is free."""
    directory = Path(directory)
    recover_stages(directory)
    stage = Path(tempfile.mkdtemp(dir=directory, prefix=f"{STAGE_PREFIX}{os.getpid()}-"))
    held = _hold(stage)
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
        if held is not None:
            os.close(held)


def main(argv: list[str] | None = None) -> int:
    """``python -m attnlab.harness.staging FOLDER...``: undo the unfinished move a killed
    run left in each folder (``recover_stages``); exit 2 on a folder that is not one."""
    folders = sys.argv[1:] if argv is None else argv
    if not folders or any(not Path(f).is_dir() for f in folders):
        print(f"usage: {REPAIR_COMMAND} FOLDER... (each an existing folder)", file=sys.stderr)
        return 2
    for folder in folders:
        for stage in recover_stages(Path(folder)):
            print(f"undid the unfinished move of {stage.name} in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

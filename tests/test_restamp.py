"""attnlab.harness.restamp: once, on a fresh clone only, the unmodified tracked files' times
in dependency order and none in the future; a fresh clone of this repository, whose checkout
order is git's, has nothing for `make all` to run; and the Makefile's venv stamp records the
lock it installed (attnlab.harness.lockstamp)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnlab.harness import restamp

REPO_ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["results", "results/13_*", "figures", "results/REPORT.md"]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git")
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make")
#: A commit time well in the past (2023-11-14), so that restamp's times are HEAD's own.
PAST = 1_700_000_000
DAY = 86_400


def git(folder: Path, *args: str, when: int | None = None) -> str:
    """``git ARGS`` in ``folder``, committing at ``when`` (seconds since the epoch) if given."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"@{when} +0000"
    done = subprocess.run(["git", *args], cwd=folder, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def write_files(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")


def committed_repo(folder: Path, files: dict[str, str], when: int) -> Path:
    """A new repository in ``folder`` holding ``files``, committed at ``when``."""
    folder.mkdir(parents=True, exist_ok=True)
    git(folder, "init", "-q")
    write_files(folder, files)
    git(folder, "add", ".")
    git(folder, "commit", "-qm", "x", when=when)
    return folder


def mtime(path: Path) -> float:
    return path.stat().st_mtime


@pytest.mark.parametrize(
    ("path", "layer"),
    [("attnlab/x.py", 0), ("results/a.csv", 1), ("results/cards/s/v.csv", 1),
     ("results/13_causal.csv", 2), ("figures/f.png", 3), ("results/REPORT.md", 4)],
)  # fmt: skip
def test_a_file_takes_the_last_layer_that_matches_it(path, layer):
    assert restamp.layer_of(path, LAYERS) == layer


@needs_git
def test_times_follow_the_layers_and_a_modified_file_keeps_its_own(tmp_path, monkeypatch):
    files = ["code.py", "edited.py", "results/a.csv", "results/13_b.csv", "figures/f.png",
             "results/REPORT.md"]  # fmt: skip
    committed_repo(tmp_path, {name: name for name in files}, when=PAST)
    (tmp_path / "edited.py").write_text("changed", encoding="utf-8")
    edited = (tmp_path / "edited.py").stat().st_mtime
    monkeypatch.chdir(tmp_path)
    assert restamp.main(LAYERS) == 0
    times = [(tmp_path / name).stat().st_mtime for name in files]
    head = int(git(tmp_path, "log", "-1", "--format=%ct"))
    assert times == [head, edited, head + 1, head + 2, head + 3, head + 4]
    os.utime(tmp_path / "results/a.csv", (0, 0))
    assert restamp.main(LAYERS) == 0  # once per clone: the marker is there
    assert (tmp_path / "results/a.csv").stat().st_mtime == 0


@needs_git
@pytest.mark.skipif(shutil.which("make") is None, reason="make")
def test_a_fresh_clone_has_nothing_for_make_all_to_run(tmp_path):
    """A clone of HEAD, with this checkout's venv standing in for the one make would build:
    `make -n all` runs no study, draws no figure and writes no report (it may rebuild the
    venv, which is older than the clone's lock here, never in a real new clone)."""
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(REPO_ROOT), str(clone))
    venv = Path(sys.prefix)
    if not (venv / ".installed").is_file():
        pytest.skip("not run from the Makefile's venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}  # not a sub-make
    command = ["make", "--no-print-directory", "-n", "all", f"VENV={venv}"]
    done = subprocess.run(command, cwd=clone, env=env, capture_output=True, text=True, check=True)
    assert "restamp (once per clone)" in done.stderr
    commands = [line for line in done.stdout.splitlines() if str(venv) not in line]
    assert commands in ([], ["make: Nothing to be done for 'all'."]), done.stdout
    assert git(clone, "status", "--porcelain") == ""


# ---------------------------------------------------------------- a fresh clone only


def a_tree(folder: Path, when: int) -> Path:
    """A repository of code, two layers of results and a report, committed at ``when``."""
    files = {"code.py": "1", "results/a.csv": "a", "results/13_b.csv": "b",
             "results/REPORT.md": "r"}  # fmt: skip
    return committed_repo(folder, files, when)


@needs_git
def test_no_time_set_is_in_the_future_and_an_edit_stays_newer(tmp_path, monkeypatch):
    """A HEAD committed a day ahead of the clock: every time set is at most now, and older
    than a file edited just before (its results stay stale)."""
    tree = a_tree(tmp_path, when=int(time.time()) + DAY)
    (tree / "code.py").write_text("2", encoding="utf-8")
    monkeypatch.chdir(tree)
    assert restamp.main(LAYERS) == 0
    now = time.time()
    for name in ("results/a.csv", "results/13_b.csv", "results/REPORT.md"):
        assert mtime(tree / name) <= now
        assert mtime(tree / name) < mtime(tree / "code.py")


@needs_git
def test_a_restamped_tree_is_not_restamped_again_after_its_cache_is_removed(tmp_path, monkeypatch):
    """Restamped once, then code edited and committed without rerunning it, then `make
    clean` (which removes .cache): the code keeps its newer time, the result its older one."""
    tree = a_tree(tmp_path, when=PAST)
    monkeypatch.chdir(tree)
    assert restamp.main(LAYERS) == 0
    assert mtime(tree / "results/a.csv") == PAST + 1
    (tree / "code.py").write_text("2", encoding="utf-8")
    git(tree, "commit", "-qam", "code", when=PAST + 100)
    os.utime(tree / "code.py", (PAST + 200, PAST + 200))
    shutil.rmtree(tree / ".cache", ignore_errors=True)
    assert restamp.main(LAYERS) == 0
    assert mtime(tree / "code.py") == PAST + 200
    assert mtime(tree / "results/a.csv") == PAST + 1


@pytest.mark.parametrize(
    ("message", "old", "new", "work"),
    [("clone: from /x", "0", "a", False), ("branch: Created from refs/in/main", "0", "a", False),
     ("checkout: moving from main to main", "a", "a", False),
     ("checkout: moving from main to v1", "a", "b", False), ("", "0", "a", False),
     ("reset: moving to HEAD", "a", "a", False), ("commit: code", "a", "b", True),
     ("reset: moving to HEAD~1", "b", "a", True), ("pull: Fast-forward", "a", "b", True),
     ("merge b: Merge made by the 'ort' strategy.", "a", "b", True)],
)  # fmt: skip
def test_a_head_moved_other_than_by_a_checkout_is_work(message, old, new, work):
    """HEAD's reflog: a clone, a new branch, a checkout or a new work tree (an unnamed
    entry, then reset to HEAD itself) are a fresh checkout's; a commit, reset, pull or
    merge are work in the tree."""
    line = f"{old * 40} {new * 40} t <t@t> {PAST} +0000\t{message}"
    reflog = "\n".join([f"{'0' * 40} {old * 40} t <t@t> {PAST} +0000\tclone: from /x", line])
    assert (restamp.worked_in(reflog) is not None) == work


@needs_git
def test_a_clone_that_has_been_worked_in_keeps_its_times(tmp_path, monkeypatch):
    """No marker in git's folder (a tree that predates it, its .cache removed): a clone
    with a commit of its own is left as it is, and so is one that the old marker in .cache
    says was restamped; either way the decision is recorded in git's folder."""
    origin = a_tree(tmp_path / "origin", when=PAST)
    for name, work in (("committed", True), ("legacy", False)):
        clone = tmp_path / name
        git(tmp_path, "clone", "-q", str(origin), str(clone))
        if work:
            (clone / "code.py").write_text("2", encoding="utf-8")
            git(clone, "commit", "-qam", "code", when=PAST + 100)
        else:
            (clone / ".cache").mkdir()
            (clone / ".cache/restamped").write_text("old\n", encoding="utf-8")
        for i, path in enumerate(("code.py", "results/a.csv", "results/REPORT.md")):
            os.utime(clone / path, (PAST + 500 - i, PAST + 500 - i))
        monkeypatch.chdir(clone)
        assert restamp.main(LAYERS) == 0
        assert mtime(clone / "code.py") == PAST + 500
        assert mtime(clone / "results/REPORT.md") == PAST + 498
        assert "not a fresh clone" in (clone / ".git" / restamp.MARKER_NAME).read_text()


# ---------------------------------------------------------------- the Makefile itself
# This checkout's Makefile over a small project: a script, its result and the report.

STUDIES_MK = """CSVS := results/a.csv
FIGURES :=
results/a.csv: experiments/a.py | $(STAMP)
\t$(PY) experiments/a.py
"""
PROJECT = {"attnlab/studies/studies.mk": STUDIES_MK, "experiments/a.py": "1\n",
           "experiments/make_report.py": "", "results/a.csv": "a\n",
           "results/REPORT.md": "r\n", "README.md": "", ".gitignore": ".cache/\n",
           "pyproject.toml": "",
           "requirements.lock": "tinypkg==1.0 --hash=sha256:" + "0" * 64 + "\n"}  # fmt: skip


def project(folder: Path, when: int) -> Path:
    """The small project, committed at ``when``, with this checkout's Makefile."""
    folder.mkdir(parents=True)
    shutil.copy(REPO_ROOT / "Makefile", folder / "Makefile")
    return committed_repo(folder, PROJECT, when)


def run_make(folder: Path, *args: str, python: Path | str = sys.executable):
    """make in ``folder``, not as a sub-make, with this checkout's attnlab modules under
    ``python``, and no repository above ``folder``'s parent."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    env |= {"PYTHONPATH": str(REPO_ROOT), "GIT_CEILING_DIRECTORIES": str(folder.parent)}
    command = ["make", "--no-print-directory", f"PYTHON={python}", *args]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)


def fresh_clone(tmp_path: Path, when: int) -> tuple[Path, Path]:
    """A fresh clone of the small project committed at ``when``, its results checked out
    older than its code (git's order can do that), and the venv stamp the clone will use
    (absent: its first `make -n all` would build it)."""
    origin = project(tmp_path / "origin", when)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    checkout = time.time()
    for i, name in enumerate(sorted(PROJECT)):
        t = checkout - (100 if name.startswith("results/") else 50) + i / 10
        os.utime(clone / name, (t, t))
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    return clone, venv / ".installed"


def dry_run_all(clone: Path, stamp: Path) -> list[str]:
    done = run_make(clone, "-n", "all", f"VENV={stamp.parent}")
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def venv_built(stamp: Path) -> None:
    """What building the venv leaves: its stamp, newer than everything restamp set."""
    stamp.write_text("built\n", encoding="utf-8")


@needs_git
@needs_make
def test_make_clean_after_a_code_commit_does_not_trust_the_results(tmp_path):
    """A fresh clone's `make all` runs nothing; code then edited and committed without
    rerunning it, and .cache removed (as `make clean` does): `make all` reruns it."""
    clone, stamp = fresh_clone(tmp_path, when=PAST)
    first = dry_run_all(clone, stamp)
    assert not [line for line in first if "experiments/" in line], first
    venv_built(stamp)
    assert dry_run_all(clone, stamp) == ["make: Nothing to be done for 'all'."]
    assert git(clone, "status", "--porcelain") == ""
    (clone / "experiments/a.py").write_text("2\n", encoding="utf-8")
    git(clone, "commit", "-qam", "code", when=PAST + 100)
    shutil.rmtree(clone / ".cache", ignore_errors=True)
    lines = dry_run_all(clone, stamp)
    assert f"{stamp.parent}/bin/python experiments/a.py" in lines, lines
    assert f"{stamp.parent}/bin/python experiments/make_report.py" in lines, lines


@needs_git
@needs_make
def test_make_with_a_head_committed_a_day_ahead(tmp_path):
    """HEAD's commit time a day in the future: the built venv stays built (the lock is not
    newer than its stamp), and an edited script reruns."""
    clone, stamp = fresh_clone(tmp_path, when=int(time.time()) + DAY)
    first = dry_run_all(clone, stamp)
    assert not [line for line in first if "experiments/" in line], first
    venv_built(stamp)
    assert dry_run_all(clone, stamp) == ["make: Nothing to be done for 'all'."]
    (clone / "experiments/a.py").write_text("2\n", encoding="utf-8")
    lines = dry_run_all(clone, stamp)
    assert not [line for line in lines if "venv" in line.split()], lines
    assert f"{stamp.parent}/bin/python experiments/a.py" in lines, lines


# ---------------------------------------------------------------- the venv and its lock

#: $(PYTHON) for the venv rule: ``-m venv`` makes a venv whose bin/python is this script,
#: whose ``-m pip install --require-hashes -r LOCK`` does what pip does: a requirement
#: installed at its version is skipped unchecked, any other is checked against the lock's
#: hashes (its archive is WHEELS/NAME==VERSION); everything else runs the real interpreter.
FAKE_PYTHON = """#!{python}
import hashlib, os, shutil, sys
from pathlib import Path

args = sys.argv[1:]
with open({log!r}, "a") as log:
    print(*args, file=log)
if args[:2] == ["-m", "venv"]:
    venv = Path(args[-1])
    if "--clear" in args:
        shutil.rmtree(venv, ignore_errors=True)
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / "site").mkdir(exist_ok=True)
    shutil.copy(__file__, venv / "bin" / "python")
elif args[:2] == ["-m", "pip"]:
    site = Path(__file__).resolve().parent.parent / "site"
    if "-r" in args:
        for line in Path(args[args.index("-r") + 1]).read_text().splitlines():
            name, *options = line.split()
            if (site / name).exists():
                continue
            hashes = [o.removeprefix("--hash=sha256:") for o in options]
            if hashlib.sha256(Path({wheels!r}, name).read_bytes()).hexdigest() not in hashes:
                sys.exit("ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE")
            (site / name).touch()
else:
    os.execv(sys.executable, [sys.executable, *args])
"""


@needs_make
def test_a_lock_not_the_one_installed_rebuilds_the_venv(tmp_path):
    """A venv installed from the lock; the lock touched (content unchanged): reinstalled in
    place; the lock's hash corrupted: the venv is rebuilt from scratch, where the hash check
    fails, and is not stamped (pip skips a package installed already, checking nothing)."""
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(REPO_ROOT / "Makefile", folder / "Makefile")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "tinypkg==1.0").write_bytes(b"a wheel")
    good = hashlib.sha256(b"a wheel").hexdigest()
    lock = f"tinypkg==1.0 --hash=sha256:{good}\n"
    write_files(folder, {**PROJECT, "requirements.lock": lock})
    log = tmp_path / "calls.log"
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON.format(python=sys.executable, log=str(log), wheels=str(wheels)))
    fake.chmod(0o755)
    venv = tmp_path / "venv"
    stamp = venv / ".installed"

    def make_venv(lock_text: str):
        (folder / "requirements.lock").write_text(lock_text, encoding="utf-8")
        if stamp.exists():  # the lock edited after the venv was built
            os.utime(stamp, (PAST, PAST))
        os.utime(folder / "pyproject.toml", (PAST - 10, PAST - 10))
        os.utime(folder / "requirements.lock", (PAST + 10, PAST + 10))
        log.write_text("", encoding="utf-8")
        return run_make(folder, "venv", f"VENV={venv}", python=fake)

    done = make_venv(lock)
    assert done.returncode == 0, done.stderr
    assert stamp.is_file() and (venv / "site/tinypkg==1.0").is_file()
    done = make_venv(lock)
    assert done.returncode == 0, done.stderr
    assert "-m venv" in log.read_text() and "--clear" not in log.read_text()
    assert stamp.is_file()
    done = make_venv(lock.replace(good, hashlib.sha256(b"corrupt").hexdigest()))
    assert done.returncode != 0
    assert "DO NOT MATCH THE HASHES" in done.stderr
    assert not stamp.exists()

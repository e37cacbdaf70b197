"""attnlab.harness.restamp: once per clone, the unmodified tracked files' times in
dependency order; and a fresh clone of this repository, whose checkout order is git's,
has nothing for `make all` to run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.harness import restamp

REPO_ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["results", "results/13_*", "figures", "results/REPORT.md"]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git")


def git(folder: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    done = subprocess.run(["git", *args], cwd=folder, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


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
    git(tmp_path, "init", "-q")
    for name in files:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(name, encoding="utf-8")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "x")
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

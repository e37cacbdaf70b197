"""``experiments/verify.py`` end to end, as a user runs it (a subprocess, one static CSV):
its exit status is its verdict, 0 agree, 1 differ (the CSV named), 2 bad input, and the
tally is the last line of what it prints. Agreement regenerates the cheapest quick CSV (07's
overflow table: its script's runs in-process, then their temporary files deleted, is what
once crashed verify after it agreed); the moved number compares the committed CSVs
themselves (``--results-dir``), so only the verdict, not a regeneration, is under test."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "results"
NAME = "02_saturation_sweep.csv"
#: The quick CSV regenerated at the least cost (one small program per table).
REGENERATED = "07_failure_modes_overflow.csv"


def _verify(*flags: str | Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "experiments/verify.py", "--quiet", *map(str, flags)]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)


def _most_precise_moved(reference: Path, factor: float) -> str:
    """Copy the committed 02 (and its sidecar) to ``reference`` with the mean of smallest
    relative SE moved by ``factor``; returns the column moved."""
    frame = pd.read_csv(RESULTS / NAME)
    relative = {
        column: (frame[f"{column}_sem"] / frame[f"{column}_mean"].abs()).min()
        for column in ("max_weight", "entropy")
    }
    column = min(relative, key=relative.get)
    row = (frame[f"{column}_sem"] / frame[f"{column}_mean"].abs()).idxmin()
    # 10 % of the mean is many SE: the rule allows 4 sqrt(2) combined SE, and the combined
    # SE of the committed CSV and its moved copy is sqrt(2) SE, so 8 SE; this row's SE is
    # the smallest share of its mean.
    assert factor * abs(frame.at[row, f"{column}_mean"]) > 20 * frame.at[row, f"{column}_sem"]
    frame.at[row, f"{column}_mean"] *= 1 + factor
    reference.mkdir()
    frame.to_csv(reference / NAME, index=False)
    shutil.copy(RESULTS / NAME.replace(".csv", ".json"), reference)
    return column


def test_agreement_exits_0_with_the_tally_last():
    done = _verify("--quick", "--csv", REGENERATED)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("1 of 1 CSVs agree with results"), done.stdout
    assert any(line.startswith(REGENERATED) and " agrees " in line for line in lines)


def test_a_moved_committed_number_exits_1_naming_the_csv(tmp_path):
    reference = tmp_path / "reference"
    _most_precise_moved(reference, 0.10)
    done = _verify("--csv", NAME, "--results-dir", RESULTS, "--reference-dir", reference)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout.splitlines()[-1].startswith("0 of 1 CSVs agree"), done.stdout
    (line,) = done.stderr.splitlines()
    assert NAME in line and "differ" in line


def test_an_unknown_csv_exits_2_with_one_line():
    done = _verify("--csv", "99_nothing.csv")
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "--csv" in line and "99_nothing.csv" in line

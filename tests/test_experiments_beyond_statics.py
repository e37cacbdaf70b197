"""Experiments 06-08 end to end, in-process at tiny settings: CSVs, sidecars, determinism,
bad flags, and the figures and report section drawn from the outputs.

The settings match the module tests (``test_condensation``, ``test_failure_modes``,
``test_companion``), so the compiled programs are shared through the persistent cache.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnlab.harness.study_report import study_report
from attnlab.harness.tables import Tables
from attnlab.studies import FIGURES, STUDIES, made_by
from attnlab.studies.companion.compute import COLUMNS as COMPANION_COLUMNS
from attnlab.studies.condensation.study import COLUMNS as CONDENSATION_COLUMNS
from attnlab.studies.failure_modes.study import (
    CORRELATION_COLUMNS,
    MASK_COLUMNS,
    OVERFLOW_COLUMNS,
    PART_CSVS,
)

#: One float32 rounding, 2^-23: twice the unit roundoff (n EPS bounds n roundings).
EPS = float(np.finfo(np.float32).eps)
#: XLA's float32 exp is accurate to a few ulp; we allow 4 eps.
ULPS = 4
#: CSVs hold 8 significant digits: a value is off by at most 5e-8 relative.
DIGITS = 5e-8
TINY_06 = ["--dk", "1", "4", "16", "--n-keys", "4", "16", "--trials", "64", "--quiet"]
TINY_07 = ["--rows", "8", "--dk", "4", "16", "--samples", "2000", "--quiet"]
TINY_08 = ["--trials", "50", "--fold-setups", "2", "--quiet"]
CSV_COLUMNS = {
    "06_condensation.csv": CONDENSATION_COLUMNS,
    PART_CSVS["overflow"]: OVERFLOW_COLUMNS,
    PART_CSVS["masks"]: MASK_COLUMNS,
    PART_CSVS["correlation"]: CORRELATION_COLUMNS,
    "08_companion_claims.csv": COMPANION_COLUMNS,
}


def run_all(load_script, run_main, out_dir: Path, seed: int = 0) -> None:
    """The three scripts at tiny settings, every output into ``out_dir``."""
    seed_flag = ["--seed", str(seed)]
    runs = (
        ("06_condensation", [*TINY_06, *seed_flag, "--out", out_dir / "06_condensation.csv"]),
        ("07_failure_modes", [*TINY_07, *seed_flag, "--out-dir", out_dir]),
        (
            "08_companion_claims",
            [*TINY_08, *seed_flag, "--out", out_dir / "08_companion_claims.csv"],
        ),
    )
    for name, argv in runs:
        assert run_main(load_script(name), argv) == 0, name


@pytest.fixture(scope="module")
def outputs(load_script, run_main, tmp_path_factory) -> Path:
    out_dir = tmp_path_factory.mktemp("beyond")
    run_all(load_script, run_main, out_dir)
    return out_dir


def test_outputs_schema_and_sidecars(outputs):
    names = sorted(p.name for p in outputs.iterdir())
    assert names == sorted(
        [*CSV_COLUMNS, *(Path(c).with_suffix(".json").name for c in CSV_COLUMNS)]
    )
    for csv, columns in CSV_COLUMNS.items():
        assert made_by(csv).startswith("python experiments/0")
        frame = pd.read_csv(outputs / csv)
        assert list(frame.columns) == list(columns), csv
        side = json.loads((outputs / csv).with_suffix(".json").read_text())
        assert side["seed"] == 0 and side["flags"]["quiet"] is True and side["wall_time_s"] > 0


def test_06_grid(outputs):
    """The CSV's grid as written (its rows in order, and the same table's numbers against
    its float32 draws: test_condensation_compute, at these settings)."""
    frame = pd.read_csv(outputs / "06_condensation.csv")
    assert (frame.trials == 64).all()
    # Means of max weights in [1/n, 1] up to float32 (exp(0) / sum rounds in exp and the
    # division and, from below, the n-term sum) and the CSV's 8 digits.
    lo = (1 - (frame.n_keys + ULPS + 2) * EPS) / frame.n_keys * (1 - DIGITS)
    hi = (1 + (ULPS + 2) * EPS) * (1 + DIGITS)
    for column in ("max_weight_unscaled_mean", "max_weight_scaled_mean"):
        assert (frame[column] >= lo).all() and (frame[column] <= hi).all()
    assert np.isfinite(frame.to_numpy(float)).all()


def test_07_parts(outputs):
    overflow = pd.read_csv(outputs / PART_CSVS["overflow"])
    assert (overflow.rows == 8).all()
    first = overflow[(overflow.method == "float16") & (overflow.nonfinite_fraction > 0)]
    assert first.max_logit.min() == 11.125  # exact: a grid point, written in full
    corr = pd.read_csv(outputs / PART_CSVS["correlation"])
    assert sorted(corr.d_k.unique()) == [4, 16] and (corr.samples == 2000).all()


def test_08_claims(outputs):
    frame = pd.read_csv(outputs / "08_companion_claims.csv")
    assert frame.quantity.is_unique
    assert {"standardized_top_gap", "absolute_top_gap", "over_flattening_factor"} <= set(
        frame.quantity
    )


def test_byte_identical_reruns_and_seeded(outputs, load_script, run_main, tmp_path):
    again, other = tmp_path / "again", tmp_path / "other"
    again.mkdir()
    other.mkdir()
    run_all(load_script, run_main, again)
    for csv in CSV_COLUMNS:
        assert (again / csv).read_bytes() == (outputs / csv).read_bytes(), csv
    run_main(load_script("06_condensation"), [*TINY_06, "--seed", "1", "--out", other / "06.csv"])
    assert (other / "06.csv").read_bytes() != (outputs / "06_condensation.csv").read_bytes()


def test_figures_and_report_section(outputs, tmp_path):
    tables = Tables(outputs, made_by)
    beyond = [s for s in STUDIES if s.name in ("condensation", "failure_modes", "companion")]
    for name, study in FIGURES.items():
        if study in beyond:
            paths = study.figure(name)(tables, tmp_path)
            assert [p.name for p in paths] == [f"{name}.png", f"{name}.pdf"]
            assert all(p.stat().st_size > 10_000 for p in paths)
    text = "\n\n".join(study_report(study).section(tables) for study in beyond)
    for heading in ("experiment 06", "experiment 07", "experiment 08"):
        assert heading in text
    assert "| 16 | 5.55 |" in text  # the threshold row of n = 16
    assert "reproduced" in text and "**miss**" in text


#: (script, bad flags, the flag the message must name)
BAD_FLAGS = [
    ("06_condensation", ["--n-keys", "1"], "--n-keys"),
    ("06_condensation", ["--dk", "0"], "--dk"),
    ("06_condensation", ["--out", "missing/06.csv"], "--out"),
    ("07_failure_modes", ["--samples", "1"], "--samples"),
    ("07_failure_modes", ["--out-dir", "missing"], "--out-dir"),
    ("08_companion_claims", ["--trials", "0"], "--trials"),
]


@pytest.mark.parametrize(
    ("name", "argv", "flag"), BAD_FLAGS, ids=[f"{n[:2]}:{f}" for n, _, f in BAD_FLAGS]
)
def test_bad_flag_exits_2_with_one_line(
    load_script, run_main, in_tmp_path, capsys, name, argv, flag
):
    tiny = {"06_condensation": TINY_06, "07_failure_modes": TINY_07, "08_companion_claims": TINY_08}
    code = run_main(load_script(name), [*tiny[name], *argv])
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and flag in captured.err, captured.err
    assert "Traceback" not in captured.err
    assert list(in_tmp_path.iterdir()) == []

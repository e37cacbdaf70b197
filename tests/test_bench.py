"""experiments/bench.py at its --quick setting: the CSV schema, the row names, the outputs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from attnlab.studies.bench.compute import recall_step_flops
from attnlab.studies.bench.config import COLUMNS, ROW_NAMES
from attnlab.studies.bench.report import markdown_table
from attnlab.studies.bench.timing import loglog_slope
from attnlab.studies.recall.train import RecallConfig


@pytest.fixture(scope="module")
def quick_run(load_script, run_main, tmp_path_factory):
    """Run the bench once at --quick; returns (exit status, CSV path)."""
    out = tmp_path_factory.mktemp("bench") / "bench.csv"
    module = load_script("bench")
    code = run_main(module, ["--quick", "--repeats", "1", "--quiet", "--out", out])
    return code, out


@pytest.mark.slow
def test_quick_bench_writes_the_schema(quick_run):
    code, out = quick_run
    assert code == 0
    frame = pd.read_csv(out)
    assert list(frame.columns) == list(COLUMNS)
    assert list(frame["name"]) == list(ROW_NAMES)
    assert (frame["ours_seconds"] > 0).all()
    compared = frame["baseline_seconds"].notna()
    assert (frame.loc[compared, "baseline_seconds"] > 0).all()
    # The three values are printed with 8 significant digits (FLOAT_FORMAT): each is off
    # by at most 5e-8 relative.
    np.testing.assert_allclose(
        frame.loc[compared, "speedup"],
        frame.loc[compared, "baseline_seconds"] / frame.loc[compared, "ours_seconds"],
        rtol=3 * 5e-8,
    )
    growth = frame["name"].str.startswith("growth_")
    assert frame.loc[growth, "slope"].notna().all()
    assert frame.loc[~growth, "slope"].isna().all()
    assert frame.loc[growth, "baseline_seconds"].isna().all()
    with_peak = {"statics_direct_vs_numpy", "train_scan_vs_python_loop"}
    assert set(frame.loc[frame["peak_fraction"].notna(), "name"]) == with_peak
    assert frame["detail"].str.len().gt(0).all()


@pytest.mark.slow
def test_quick_bench_writes_sidecar_and_markdown(quick_run):
    code, out = quick_run
    assert code == 0
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["flags"]["quick"] is True
    table = out.with_suffix(".md").read_text()
    assert table.startswith("| benchmark |")
    for name in ROW_NAMES:
        assert f"| `{name}` |" in table


@pytest.mark.parametrize(
    "argv",
    [["--repeats", "0"], ["--repeats", "x"], ["--statics-dk", "0"], ["--out", "no/such/dir/b.csv"]],
)
def test_bad_flags_exit_2_and_write_nothing(load_script, run_main, in_tmp_path, argv):
    assert run_main(load_script("bench"), [*argv, "--quick", "--quiet"]) == 2
    assert not any(in_tmp_path.rglob("*.csv"))


def test_loglog_slope_recovers_a_power_law():
    sizes = np.array([64, 256, 1024, 4096])
    # float64 least squares on an exact power law: logs and a 4-point fit round by a few
    # eps64 each, times the fit's condition (< 100): < 1e-12.
    assert loglog_slope(sizes, 3e-6 * sizes**1.5) == pytest.approx(1.5, rel=1e-12)


def test_recall_step_flops_counts_the_default_model():
    # Forward at the defaults: 2*256*256*(3*32 + 2*32) + 4*64*16*256 + 2*64*256*32.
    forward = 2 * 256 * 256 * 160 + 4 * 64 * 16 * 256 + 2 * 64 * 256 * 32
    assert recall_step_flops(RecallConfig()) == 3 * forward


def test_markdown_table_leaves_missing_values_empty():
    frame = pd.DataFrame(
        [
            {"name": "a", "ours_seconds": 1.0, "baseline_seconds": 2.0, "speedup": 2.0},
            {"name": "growth_x", "ours_seconds": 0.5, "slope": 1.0, "detail": "d"},
        ]
    ).reindex(columns=list(COLUMNS))
    lines = markdown_table(frame).splitlines()
    assert lines[2] == "| `a` | 1 | 2 | 2.00x |  |  |"
    assert lines[3] == "| `growth_x` | 0.5 |  |  |  | 1.00 |"

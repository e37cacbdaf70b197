"""End-to-end tests of experiments/04_associative_recall.py, run in-process at tiny sizes."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support import TINY_RECALL as TINY

from attnlab.core.curves import trailing_mean
from attnlab.studies.widths.report import _slowdown_cell

SCRIPT = "04_associative_recall"
# The CSVs' columns, spelled out here as the contract (the package derives its lists from
# attnlab/recall/columns.py).
CURVE_COLUMNS = [
    "variant", "seed", "step", "loss", "smoothed_loss", "accuracy",
    "grad_norm_wq", "grad_norm_wk", "grad_norm_wv", "attn_entropy", "attn_max_weight",
]  # fmt: skip
SUMMARY_COLUMNS = [
    "variant", "seed", "grad_wq_step0", "grad_wk_step0", "step_loss_below_1",
    "step_loss_below_0p1", "final_loss", "final_attn_entropy", "eval_accuracy",
    "plateau_start", "plateau_end", "plateau_level",
]  # fmt: skip
STEMS = ("04_recall_curves", "04_recall_summary")
#: One float32 rounding, 2^-23: twice the unit roundoff (n EPS bounds n roundings).
EPS = float(np.finfo(np.float32).eps)
EPS64 = float(np.finfo(np.float64).eps)
#: XLA's float32 exp and log are accurate to a few ulp; we allow 4 eps each.
ULPS = 4
#: CSVs hold 8 significant digits: a value is off by at most 5e-8 relative.
DIGITS = 5e-8
BATCH, PAIRS = 8, 16  # TINY's batch size and the default number of pairs


@pytest.fixture(scope="module")
def two_runs(run_twice):
    """The script run twice into two fresh directories; returns the directories."""
    return run_twice(SCRIPT, TINY)


def read(out: Path, stem: str) -> pd.DataFrame:
    return pd.read_csv(out / f"{stem}.csv")


def test_outputs_and_sidecars_exist(two_runs):
    out = two_runs[0]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{s}.csv" for s in STEMS] + [f"{s}.json" for s in STEMS]
    )
    for stem in STEMS:
        sidecar = json.loads((out / f"{stem}.json").read_text())
        assert sidecar["flags"]["steps"] == 30
        assert sidecar["flags"]["dk"] == 16
        assert sidecar["flags"]["out_dir"] == str(out)
        assert sidecar["seed"] == 0
        assert sidecar["wall_time_s"] >= 0
        assert "jax" in sidecar["versions"]


def test_curves_schema_and_rows(two_runs):
    curves = read(two_runs[0], STEMS[0])
    assert list(curves.columns) == CURVE_COLUMNS
    assert len(curves) == 2 * 2 * 30
    assert curves.groupby(["variant", "seed"]).size().to_dict() == {
        (v, s): 30 for v in ("scaled", "unscaled") for s in (0, 1)
    }
    assert list(curves["variant"].unique()) == ["scaled", "unscaled"]
    for _, group in curves.groupby(["variant", "seed"]):
        assert group["step"].tolist() == list(range(30))
        # The smoothed loss is the trailing mean (window 25) of the written loss: both
        # written to 8 digits (5e-8 relative each; the losses are positive, so their mean
        # is off by at most as much), and float64 sums of <= 30 terms.
        np.testing.assert_allclose(
            group["smoothed_loss"],
            trailing_mean(group["loss"].to_numpy(), 25),
            rtol=2 * DIGITS + 60 * EPS64,
        )
    numeric = curves[CURVE_COLUMNS[3:]]
    assert np.isfinite(numeric.to_numpy()).all()
    # ln 16 and 1 up to float32: the weights' normaliser (2 pairs EPS, times ln n - 1 in the
    # entropy), the entropy's log, products and sum (relative), exp and the division for a
    # weight of 1, the batch mean, and the CSV's 8 digits.
    ln_n = math.log(PAIRS)
    top = ln_n * (1 + (PAIRS + ULPS + 1 + BATCH) * EPS) + 2 * PAIRS * EPS * (ln_n - 1)
    assert (curves["attn_entropy"] <= top * (1 + DIGITS)).all()
    assert (curves["attn_max_weight"] <= (1 + (ULPS + 2 + BATCH) * EPS) * (1 + DIGITS)).all()


def test_summary_schema_and_consistency(two_runs):
    curves = read(two_runs[0], STEMS[0])
    summary = read(two_runs[0], STEMS[1])
    assert list(summary.columns) == SUMMARY_COLUMNS
    assert len(summary) == 4
    assert list(zip(summary["variant"], summary["seed"], strict=True)) == [
        ("scaled", 0),
        ("scaled", 1),
        ("unscaled", 0),
        ("unscaled", 1),
    ]
    for row in summary.itertuples():
        run = curves[(curves["variant"] == row.variant) & (curves["seed"] == row.seed)]
        first, last = run.iloc[0], run.iloc[-1]
        # Exact: the same values, written with the same format.
        assert row.grad_wq_step0 == first["grad_norm_wq"]
        assert row.grad_wk_step0 == first["grad_norm_wk"]
        assert row.final_loss == last["smoothed_loss"]
        assert row.final_attn_entropy == last["attn_entropy"]
        assert 0 <= row.eval_accuracy <= 1
        # Exact: k / 64 has at most 6 decimals, which 8 significant digits write in full.
        assert row.eval_accuracy * 64 == round(row.eval_accuracy * 64)
    # 30 steps from ~ln 32: no milestone reached and no plateau; these are left empty.
    for column in ("step_loss_below_1", "step_loss_below_0p1", "plateau_start", "plateau_end"):
        assert summary[column].isna().all(), column
    assert summary["plateau_level"].isna().all()


def test_variants_share_init_but_not_logits(two_runs):
    """Identical init and data: different losses at step 0 (the scale differs) but the same
    number of rows, seeds and steps; unscaled attention is sharper from the start."""
    curves = read(two_runs[0], STEMS[0])
    step0 = curves[curves["step"] == 0].set_index(["variant", "seed"])
    for seed in (0, 1):
        scaled, unscaled = step0.loc[("scaled", seed)], step0.loc[("unscaled", seed)]
        assert scaled["loss"] != unscaled["loss"]
        assert unscaled["attn_entropy"] < scaled["attn_entropy"]
        assert unscaled["attn_max_weight"] > scaled["attn_max_weight"]


def test_csvs_byte_identical_across_runs(two_runs):
    a, b = two_runs
    for stem in STEMS:
        assert (a / f"{stem}.csv").read_bytes() == (b / f"{stem}.csv").read_bytes(), stem


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--steps", "0"], "--steps"),
        (["--lr", "-1"], "--lr"),
        (["--lr", "abc"], "--lr"),
        (["--lr", "inf"], "--lr"),
        (["--seeds", "0"], "--seeds"),
        (["--dk", "1.5"], "--dk"),
        (["--pairs", "40"], "--pairs"),
        (["--pairs", "20", "--key-tokens", "16"], "--pairs"),
        (["--out-dir", "/nonexistent"], "--out-dir"),
    ],
)
def test_bad_flags_exit_2_with_one_line(flags, names, tmp_path, load_script, run_main, capsys):
    module = load_script(SCRIPT)
    argv = ["--quiet", "--out-dir", tmp_path, *flags]
    assert run_main(module, argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert names in lines[0]
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_divergence_exits_1_with_one_line(tmp_path, load_script, run_main, capsys):
    module = load_script(SCRIPT)
    argv = [*TINY, "--lr", "1e30", "--out-dir", tmp_path]
    assert run_main(module, argv) == 1
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "mechanism scaled" in lines[0]
    assert "seed 0" in lines[0]
    assert "at step 1" in lines[0]
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


#: A task small enough to learn in 200 steps: 2 pairs over 4 key and 4 value tokens
#: (chance loss ln 4 = 1.39), a high learning rate, one seed per variant.
LEARNABLE = [
    "--pairs", "2", "--key-tokens", "4", "--value-tokens", "4", "--dk", "8", "--d-model",
    "8", "--batch-size", "32", "--lr", "0.03", "--steps", "200", "--seeds", "1",
    "--smoothing", "5", "--eval-size", "64", "--chunk-steps", "50", "--quiet",
]  # fmt: skip


def test_milestones_match_the_curves_when_reached(load_script, run_main, tmp_path):
    """A run that reaches the milestones: each summary step is the first step at which the
    trailing mean of the written losses, recomputed here with numpy, is below the
    threshold (trailing means of 5 written values: off by 5e-8 relative at most, so a
    milestone could only move if the smoothed loss sat within 1e-7 of the threshold)."""
    assert run_main(load_script(SCRIPT), [*LEARNABLE, "--out-dir", tmp_path]) == 0
    curves, summary = read(tmp_path, "04_recall_curves"), read(tmp_path, "04_recall_summary")
    for row in summary.itertuples():
        loss = curves[(curves.variant == row.variant) & (curves.seed == row.seed)]
        loss = loss.sort_values("step")["loss"].to_numpy(np.float64)
        smoothed = np.array([loss[max(0, t - 4) : t + 1].mean() for t in range(len(loss))])
        for column, threshold in (("step_loss_below_1", 1.0), ("step_loss_below_0p1", 0.1)):
            below = np.flatnonzero(smoothed < threshold)
            assert len(below), (row.variant, column)  # the milestone is reached
            assert np.all(np.abs(smoothed - threshold) > 1e-7 * threshold)
            assert getattr(row, column) == below[0], (row.variant, column)
        assert row.eval_accuracy == 1.0


@pytest.mark.parametrize(
    ("reached_scaled", "reached_unscaled", "cell"),
    [
        (1.0, 1.0, "2.11"),
        (1.0, 0.0, "≥ 2.11"),
        (0.0, 0.0, "— (neither reaches 1.0)"),  # two censored run lengths: no ratio
        (0.4, 1.0, "— (scaled never reaches 1.0)"),
    ],
)
def test_widths_table_slowdown_is_undefined_where_scaled_is_censored(
    reached_scaled, reached_unscaled, cell
):
    """10's table prints a slow-down as Figure 8(a) draws it (a point only where scaled
    reaches loss 1.0 on at least half its seeds)."""
    assert _slowdown_cell(2.11, reached_scaled, reached_unscaled) == cell

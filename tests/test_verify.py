"""`make verify`: the rule table covers every result, each rule holds just inside its
boundary and fails just outside, and hand-edited copies of committed CSVs are caught.
Nothing is regenerated: every comparison reads CSVs through --results-dir."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from damage import CSV_DAMAGES, assert_one_line_naming, copy_damaged, duplicated_row, listing

from attnlab import verify
from attnlab.harness.declaration import KEY, Output, seed_range
from attnlab.harness.errors import DataError, RunError
from attnlab.harness.io import is_csv
from attnlab.studies import STUDIES, made_by
from attnlab.verify import SE_LIMIT, SPECS, CsvSpec, compare

RESULTS = Path(__file__).resolve().parents[1] / "results"


def agrees(spec: CsvSpec, ours: pd.DataFrame, ref: pd.DataFrame) -> bool:
    return all(f.score <= 1 for f in compare(spec, ours, ref))


# --- the rule table ----------------------------------------------------------------------


def test_every_result_csv_but_bench_has_a_spec():
    elsewhere = {csv for study in STUDIES for csv in study.made_elsewhere}  # not verified
    assert {p.name for p in RESULTS.iterdir() if is_csv(p)} - {"bench.csv"} - elsewhere == set(
        SPECS
    )
    registered = {
        csv for study in STUDIES if not study.timing and study.verified for csv in study.csvs
    }
    assert registered == set(SPECS)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_each_column_has_exactly_one_rule(name):
    columns = SPECS[name].columns()
    assert len(columns) == len(set(columns)), name
    assert sorted(columns) == sorted(pd.read_csv(RESULTS / name, nrows=1).columns), name


def test_specs_name_the_scripts_that_make_the_csvs():
    by_script: dict[tuple[str, str], set[tuple]] = {}
    for name, spec in SPECS.items():
        script, arguments = verify.script_of(name), verify.arguments_of(name)
        command = " ".join(filter(None, [f"python experiments/{script}.py", arguments]))
        assert made_by(name) == command
        assert (verify.EXPERIMENTS_DIR / f"{script}.py").is_file()
        assert spec.out_flag in ("--out", "--out-dir")
        by_script.setdefault((script, arguments), set()).add((spec.out_flag, spec.quick_flags))
    # One run per script and arguments makes all its CSVs, so their flags must agree.
    assert all(len(flags) == 1 for flags in by_script.values()), by_script
    assert set(verify.selected(quick=True)) == {
        n for n in SPECS if n[:2] in ("01", "02", "03", "07")
    }


def test_regenerate_runs_each_script_once_with_its_output_flags(tmp_path):
    calls: list[tuple[str, list[str]]] = []
    verify.regenerate(
        verify.selected(True), tmp_path, True, True, lambda s, a: calls.append((s, a)) or 0
    )
    assert [s for s, _ in calls] == [
        "01_logit_variance", "02_saturation_sweep", "03_jacobian_norm", "07_failure_modes"
    ]  # fmt: skip
    assert calls[1][1] == ["--trials", "500", "--out", str(tmp_path / "02_saturation_sweep.csv"),
                           "--quiet"]  # fmt: skip
    assert calls[3][1][-3:] == ["--out-dir", str(tmp_path), "--quiet"]
    with pytest.raises(RunError, match="04_associative_recall.py.*status 2"):
        verify.regenerate(["04_recall_summary.csv"], tmp_path, False, True, lambda s, a: 2)


def test_regenerate_runs_a_script_once_per_study_arguments(tmp_path):
    """13 makes the encoder's CSVs with no flags and the causal ones with its study's
    --checkpoint flags: two runs, each with its own."""
    calls: list[tuple[str, list[str]]] = []
    names = ["13_real_model_heads.csv", "13_real_model_layers.csv",
             "13_real_model_causal_heads.csv", "13_real_model_causal_layers.csv"]  # fmt: skip
    verify.regenerate(names, tmp_path, False, True, lambda s, a: calls.append((s, a)) or 0)
    assert [s for s, _ in calls] == ["13_real_model", "13_real_model"]
    assert calls[0][1] == ["--out-dir", str(tmp_path), "--quiet"]
    assert calls[1][1][:2] == ["--checkpoint", "results/checkpoints/14_lm_scaled_d64"]


# --- each rule on both sides of its boundary ---------------------------------------------

SE_SPEC = CsvSpec("--out", ("k",), se=(("m", "s"),))


@pytest.mark.parametrize(("distance", "ok"), [(0.99, True), (1.01, False)])
def test_se_rule_boundary(distance, ok):
    ref = pd.DataFrame({"k": [1, 2], "m": [5.0, 5.0], "s": [0.3, 0.4]})
    ours = pd.DataFrame({"k": [1, 2], "m": [5.0, 5.0], "s": [0.6, 0.3]})
    ours.loc[1, "m"] += distance * SE_LIMIT * 0.5  # combined SE sqrt(0.3^2 + 0.4^2) = 0.5
    assert agrees(SE_SPEC, ours, ref) is ok


def test_se_rule_zero_se_is_exact_and_nan_matches_nan():
    ref = pd.DataFrame({"k": [1, 2], "m": [0.0, np.nan], "s": [0.0, np.nan]})
    assert agrees(SE_SPEC, ref.copy(), ref)
    ours = ref.copy()
    ours.loc[0, "m"] = 1e-12
    assert not agrees(SE_SPEC, ours, ref)


EXACT_SPEC = CsvSpec("--out", ("k",), exact=("v", "flag", "s"))


def test_exact_rule():
    ref = pd.DataFrame(
        {"k": ["a", "b"], "v": [16.0, np.nan], "flag": [True, False], "s": ["x", "y"]}
    )
    assert agrees(EXACT_SPEC, ref.copy(), ref)
    for column, value in (("v", np.nextafter(16.0, 17.0)), ("flag", True), ("s", "z")):
        ours = ref.copy()
        ours.loc[1 if column != "v" else 0, column] = value
        [finding] = [f for f in compare(EXACT_SPEC, ours, ref) if f.score > 1]
        assert finding.column == column


@pytest.mark.parametrize(("value", "ok"), [(1.0 + 0.0199, True), (1.0 + 0.0201, False)])
def test_close_rule_boundary(value, ok):
    spec = CsvSpec("--out", ("k",), close=(("v", 0.01, 0.01),))  # tolerance 0.02 at 1
    ref = pd.DataFrame({"k": [1, 2], "v": [1.0, math.inf]})
    assert agrees(spec, pd.DataFrame({"k": [1, 2], "v": [value, math.inf]}), ref) is ok


def frames(committed: list[float], ours: list[float]) -> tuple[pd.DataFrame, pd.DataFrame]:
    def frame(values: list[float]) -> pd.DataFrame:
        n = len(values)
        return pd.DataFrame({"variant": ["u"] * n + ["s"] * n, "seed": list(range(n)) * 2,
                             "step": values + [50.0] * n})  # fmt: skip

    return frame(ours), frame(committed)


@pytest.mark.parametrize(
    ("committed", "ours", "ok"),
    [
        ([10, 20, 15], [29.9, 29.9, 0], True),  # seeds 10..20, spread 10: [0, 30]
        ([10, 20, 15], [30.1, 30.1, 0], False),
        ([10, 20, 15], [-0.1, -0.1, 30], False),
        ([10, 20, 15], [0.1, 0.1, 99], True),
        ([7, 7, 7], [7, 7, 8], True),  # no spread: the median must equal
        ([7, 7, 7], [8, 8, 7], False),
        ([np.nan] * 3, [np.nan, np.nan, 5], True),  # "never" on every seed
        ([np.nan] * 3, [5, 5, np.nan], False),
        ([10, np.nan, 20], [1e6, 1e6, 1e6], True),  # "never" on some seeds: anything
    ],
)
def test_seed_range_rule_boundary(committed, ours, ok):
    """One group's widened range (a column of one group is judged by it alone)."""
    score, _ = verify.seed_range(np.array(committed, float), np.array(ours, float))
    assert (score <= 1) is ok
    single = CsvSpec("--out-dir", ("seed",), seed_range=("step",))
    ref, ours_frame = (pd.DataFrame({"seed": range(3), "step": v}) for v in (committed, ours))
    assert agrees(single, ours_frame, ref) is ok


def test_chance_outside_matches_an_independent_simulation():
    """p(3, 3) of the null simulation against 200,000 fresh draws: each estimate's SE is
    sqrt(p (1 - p) / N), and they agree within 4 combined SEs."""
    rng = np.random.default_rng(12345)
    n = 200_000
    c, r = rng.standard_normal((n, 3)), np.median(rng.standard_normal((n, 3)), axis=1)
    low, high = c.min(axis=1), c.max(axis=1)
    fresh = np.mean((r < 2 * low - high) | (r > 2 * high - low))
    p = verify.chance_outside(3, 3)
    se = math.hypot(math.sqrt(p * (1 - p) / verify.NULL_DRAWS), math.sqrt(fresh * (1 - fresh) / n))
    assert abs(p - fresh) <= 4 * se
    assert verify.chance_outside(10, 10) < verify.chance_outside(5, 5) < p


def test_allowed_outside_is_the_binomial_quantile():
    # Binomial(56, 0.085): P(X <= 12) >= 0.999 > P(X <= 11), computed term by term.
    cdf = [sum(math.comb(56, j) * 0.085**j * 0.915 ** (56 - j) for j in range(k + 1))
           for k in (11, 12)]  # fmt: skip
    assert cdf[0] < 1 - verify.ALPHA <= cdf[1]
    assert verify.allowed_outside(56, 0.085) == 12
    assert verify.allowed_outside(1, 0.5) == 0 and verify.allowed_outside(3, 0.0) == 0


def _groups(n_groups: int, shift: dict[int, float]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``n_groups`` groups whose committed seeds are 10, 15, 20 (spread 10, widened range
    [0, 30]); ours equal, but the seeds of each group ``g`` of ``shift`` all moved
    ``shift[g]`` spreads beyond 30."""
    ref = pd.DataFrame({"g": np.repeat(np.arange(n_groups), 3),
                        "seed": np.tile([0, 1, 2], n_groups),
                        "step": np.tile([10.0, 15.0, 20.0], n_groups)})  # fmt: skip
    ours = ref.copy()
    for g, spreads in shift.items():
        ours.loc[ours["g"] == g, "step"] = 30.0 + 10 * spreads
    return ours, ref


GROUPS_SPEC = CsvSpec("--out-dir", ("g", "seed"), seed_range=("step",))


@pytest.mark.parametrize(
    ("shift", "ok"),
    [
        ({}, True),
        ({0: 0.5}, True),  # one of 56 groups half a spread out: chance (p 8.5% a group)
        ({g: 0.5 for g in range(12)}, True),  # 12 allowed
        ({g: 0.5 for g in range(13)}, False),  # a systematic shift
        ({0: 200.0}, False),  # one group gross: beyond K(3, 3, 1e-3 / 56), about 100
    ],
)
def test_counted_rule_over_many_groups_of_three_seeds(shift, ok):
    assert agrees(GROUPS_SPEC, *_groups(56, shift)) is ok


@pytest.mark.parametrize(("value", "ok"), [(199.0, True), (201.0, False), (1.0, True)])
def test_seed_range_floor_for_one_seed(value, ok):
    spec = CsvSpec("--out-dir", ("variant", "seed"), seed_range=("step",), spread_floor=1.0)
    assert agrees(spec, *frames([100.0], [value])) is ok


@pytest.mark.parametrize(("value", "ok"), [(399.0, True), (401.0, False), (199.0, True)])
def test_a_column_floor_replaces_the_outputs(value, ok):
    output = Output("x.py", {"variant": KEY, "seed": KEY, "step": seed_range(3.0)},
                    spread_floor=1.0)  # fmt: skip
    assert agrees(output.spec(), *frames([100.0], [value])) is ok


@pytest.mark.parametrize(
    ("atol", "value", "ok"),
    [
        (1e-4, -6.4e-9, True),  # 0 in exact arithmetic, rounded otherwise
        (0.0, -6.4e-9, False),  # the floor alone: a band of [0, 2e-11] around 1e-11
        (1e-4, 9e-5, True),
        (1e-4, 2e-4, False),
        (1e-4, 0.5, False),  # a cap taking over
    ],
)
def test_an_absolute_width_around_a_value_that_is_zero(atol, value, ok):
    output = Output("x.py", {"variant": KEY, "seed": KEY, "step": seed_range(atol=atol)},
                    spread_floor=1.0)  # fmt: skip
    assert agrees(output.spec(), *frames([1e-11], [value])) is ok


@pytest.mark.parametrize(
    ("column", "row", "factor", "ok"),
    [
        ("max_attn_logit_layer1", {"mechanism": "scaled", "d_model": 64, "lr": 0.3}, 3.9, True),
        ("max_attn_logit_layer1", {"mechanism": "scaled", "d_model": 64, "lr": 0.3}, 4.1, False),
        ("final_val_loss", {"mechanism": "qk_norm", "d_model": 32, "lr": 0.01}, 1.9, True),
        ("final_val_loss", {"mechanism": "qk_norm", "d_model": 32, "lr": 0.01}, 2.1, False),
    ],
)
def test_14s_floors_on_the_committed_sweep(column, row, factor, ok):
    """The largest logit's floor 3 (five seeds' spread) and the loss's 1, both sides."""
    ref = pd.read_csv(RESULTS / "14_lm_sweep.csv")
    ours = ref.copy()
    at = np.logical_and.reduce([np.isclose(ours[k], v) if k == "lr" else ours[k] == v
                                for k, v in row.items()])  # fmt: skip
    assert at.sum() == 1
    ours.loc[at, column] *= factor
    assert agrees(SPECS["14_lm_sweep.csv"], ours, ref) is ok


@pytest.mark.parametrize(("value", "ok"), [(0.002, True), (0.013, True), (0.015, False)])
def test_a_clip_seen_once_where_none_was_committed(value, ok):
    """A clipped sweep run of 15 that clipped none of its 500 last-quarter head-steps on
    both seeds, against a rerun that clipped some (one head-step is 0.002): agreed up to
    the width ln(1e3) / 500 = 0.0138 (``study.rare_width``), not beyond. The committed
    table's first clipped sweep rate, its last-quarter fractions set to 0 (none seen)."""
    ref = pd.read_csv(RESULTS / "15_optimizer_runs.csv")
    clipped = ref[(ref.part == "sweep") & (ref.qk_clip_tau > 0)]
    first = clipped.iloc[0]
    at = ((ref.part == "sweep") & (ref.optimizer == first.optimizer) & (ref.side == first.side)
          & (ref.qk_clip_tau > 0) & np.isclose(ref.lr, first.lr))  # fmt: skip
    assert at.sum() == 2
    ref.loc[at, "clip_fraction_last_quarter"] = 0.0
    ours = ref.copy()
    ours.loc[at, "clip_fraction_last_quarter"] = value
    assert agrees(SPECS["15_optimizer_runs.csv"], ours, ref) is ok


NAN = math.nan


@pytest.mark.parametrize(
    ("committed", "ours", "ok"),
    [
        ([NAN, NAN, NAN], [337.0, 248.0, NAN], True),  # found on 2 of 3 against none: agree
        ([1110.0], [NAN], True),  # "never" against one seed's step: not compared
        ([300.0, 400.0, NAN], [350.0, NAN, NAN], True),  # finite values inside their range
        ([300.0, 400.0, NAN], [900.0, NAN, NAN], False),  # finite values still compared
    ],
)
def test_chaotic_columns_leave_never_out(committed, ours, ok):
    spec = CsvSpec("--out-dir", ("variant", "seed"), seed_range=("step",), chaotic=("step",))
    assert agrees(spec, *frames(committed, ours)) is ok


def test_curves_are_compared_by_their_mean_over_steps():
    spec = CsvSpec("--out-dir", ("variant", "seed", "step"), seed_range=("loss",),
                   curve_step="step")  # fmt: skip
    ref = pd.DataFrame({"variant": "v", "seed": [0, 0, 1, 1], "step": [0, 1, 0, 1],
                        "loss": [1.0, 3.0, 2.0, 4.0]})  # fmt: skip  # seed means 2, 3: [1, 4]
    ours = ref.copy()
    ours["loss"] = [7.0, 0.9, 7.0, 0.9]  # seed means 3.95: inside, though no step agrees
    assert agrees(spec, ours, ref)
    ours["loss"] = [7.0, 1.1, 7.0, 1.1]  # 4.05
    [finding] = compare(spec, ours, ref)
    assert finding.column == "loss (mean over steps)" and finding.score > 1


def test_rows_must_match_on_the_keys():
    ref = pd.DataFrame({"k": [1, 2], "m": [5.0, 5.0], "s": [0.3, 0.4]})
    assert agrees(SE_SPEC, ref.iloc[::-1], ref)  # order does not matter
    for ours in (ref.iloc[:1], ref.assign(k=[1, 3]), pd.concat([ref, ref.iloc[:1]])):
        [finding] = compare(SE_SPEC, ours, ref)
        assert finding.column == "rows" and finding.score == math.inf


# --- committed CSVs, as a user would hand them over --------------------------------------


def test_committed_results_agree_with_themselves(load_script, run_main, capsys):
    assert (
        run_main(load_script("verify"), ["--results-dir", RESULTS, "--reference-dir", RESULTS]) == 0
    )
    *lines, tally = capsys.readouterr().out.splitlines()
    assert len(lines) == len(SPECS) and all(" agrees " in line for line in lines)
    assert tally.startswith(f"{len(SPECS)} of {len(SPECS)} CSVs agree")


def _move_by_se(f: pd.DataFrame) -> pd.DataFrame:
    f.loc[3, "entropy_mean"] += 10 * math.hypot(f.loc[3, "entropy_sem"], f.loc[3, "entropy_sem"])
    return f


def _set(column: str, value: object, rows: slice | int = 1):
    def edit(f: pd.DataFrame) -> pd.DataFrame:
        if isinstance(value, str):
            f[column] = f[column].astype(object)
        f.loc[rows, column] = value
        return f

    return edit


EDITS = {
    "mean moved by 10 SE": ("02_saturation_sweep.csv", "entropy_mean", _move_by_se),
    "verdict flipped": ("07_failure_modes_masks.csv", "output_nan", _set("output_nan", True, 0)),
    "identity broken": ("05_fold_check.csv", "grad_wq_ratio_at_fold",
                        _set("grad_wq_ratio_at_fold", 15)),
    "milestone far out": ("04_recall_summary.csv", "step_loss_below_0p1",
                          _set("step_loss_below_0p1", 5000, slice(5, 9))),
    "curve moved": ("05_fold_curves.csv", "loss_folded (mean over steps)",
                    _set("loss_folded", 1.0, slice(None))),
    "row dropped": ("01_logit_variance.csv", "rows", lambda f: f.drop(index=4)),
    "text in a number": ("06_condensation.csv", "file", _set("gap_mean", "oops", 2)),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(EDITS))
def test_a_hand_edited_csv_differs(case, tmp_path):
    name, column, edit = EDITS[case]
    frame = edit(pd.read_csv(RESULTS / name))
    frame.to_csv(tmp_path / name, index=False)
    verdict = verify.verify_csv(name, tmp_path, RESULTS)
    assert not verdict.agrees
    assert f"{name} " in verdict.line() and f"differs worst {column}:" in verdict.line()


def test_quick_exits_1_naming_the_csv_and_column(load_script, run_main, tmp_path, capsys):
    for name in verify.selected(quick=True):
        shutil.copy(RESULTS / name, tmp_path / name)
    frame = pd.read_csv(RESULTS / "03_jacobian_norm.csv")
    frame.loc[5, "jacobian_fro_mean"] += 10 * frame.loc[5, "jacobian_fro_sem"]
    frame.to_csv(tmp_path / "03_jacobian_norm.csv", index=False)
    assert run_main(load_script("verify"), ["--quick", "--results-dir", tmp_path]) == 1
    out, err = capsys.readouterr()
    [line] = [line for line in out.splitlines() if "differs" in line]
    assert line.startswith("03_jacobian_norm.csv") and "jacobian_fro_mean: 7.07 SE" in line
    *verdicts, tally = out.splitlines()
    assert len(verdicts) == 6 and tally.startswith("5 of 6 CSVs agree")
    assert "03_jacobian_norm.csv differ" in err


def test_a_missing_result_differs_and_names_the_command(tmp_path):
    line = verify.verify_csv("06_condensation.csv", tmp_path, RESULTS).line()
    assert "differs" in line and "experiments/06_condensation.py" in line


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--results-dir", "/nonexistent"], "--results-dir: /nonexistent is not an existing"),
        (["--csv", "02_saturation_sweep.csv", "--reference-dir", "/nonexistent"],
         "--reference-dir: /nonexistent is not an existing directory"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)  # fmt: skip
def test_bad_flags_exit_2(argv, says, load_script, run_main, capsys):
    """One line naming the flag and what is wrong with it, nothing on stdout, exit 2 (as a
    user's process: tests/test_experiments_verify.py)."""
    assert run_main(load_script("verify"), argv) == 2
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and "error" in err and says in err, err
    assert out == ""


def test_a_reference_without_the_csv_exits_2(load_script, run_main, tmp_path, capsys):
    argv = ["--quick", "--results-dir", RESULTS, "--reference-dir", tmp_path]
    assert run_main(load_script("verify"), argv) == 2
    assert "01_logit_variance.csv is missing" in capsys.readouterr().err


# --- a malformed CSV on either side: one line, exit 2, never "agrees" (issue 55) ---------

VERIFIED = "01_logit_variance.csv"
VERIFY_DAMAGES = {**CSV_DAMAGES, "a row twice": duplicated_row}


@pytest.mark.parametrize("side", ["reference", "result"])
@pytest.mark.parametrize("case", sorted(VERIFY_DAMAGES))
def test_a_malformed_csv_exits_2_naming_it(case, side, load_script, run_main, tmp_path, capsys):
    """The committed 01 against itself, one side damaged: cut short, emptied, a column
    lacking or a row twice (which once "agreed" in the reference) is one line naming that
    file and its command, exit 2, nothing on stdout, and neither folder changed."""
    folders = {name: tmp_path / name for name in ("reference", "result")}
    for name, folder in folders.items():
        folder.mkdir()
        copy_damaged(RESULTS / VERIFIED, folder, VERIFY_DAMAGES[case] if name == side else None)
    before = listing(tmp_path)
    argv = ["--csv", VERIFIED, "--quiet", "--results-dir", folders["result"],
            "--reference-dir", folders["reference"]]  # fmt: skip
    assert run_main(load_script("verify"), argv) == 2
    captured = capsys.readouterr()
    assert_one_line_naming(captured.err, folders[side] / VERIFIED, made_by(VERIFIED))
    assert captured.out == ""
    assert listing(tmp_path) == before


def test_a_row_twice_in_the_reference_is_never_agreement(tmp_path):
    shutil.copy(RESULTS / VERIFIED, tmp_path)
    (tmp_path / VERIFIED).write_bytes(duplicated_row((RESULTS / VERIFIED).read_bytes()))
    with pytest.raises(DataError, match="line 13 repeats the keys of an earlier row, d_k=1\\)"):
        verify.verify_csv(VERIFIED, RESULTS, tmp_path)


# --- the check as make verify reports it ---------------------------------------------------


def test_verdicts_of_a_results_folder_then_the_tally_and_the_error(tmp_path):
    """``verdicts_of`` reads the CSVs of a folder given (nothing regenerated); the tally
    counts those that agree, and ``check_agreement`` names those that differ."""
    names = ["01_logit_variance.csv", "06_condensation.csv"]
    shutil.copy(RESULTS / names[0], tmp_path / names[0])  # 06's missing: it differs
    verdicts = verify.verdicts_of(names, tmp_path, RESULTS, quick=False, quiet=True)
    assert [(v.name, v.agrees) for v in verdicts] == [(names[0], True), (names[1], False)]
    assert verify.tally(verdicts, RESULTS, 2.4) == f"1 of 2 CSVs agree with {RESULTS} (2 s)"
    with pytest.raises(RunError, match=f"^06_condensation.csv differ from {RESULTS}$"):
        verify.check_agreement(verdicts, RESULTS)
    verify.check_agreement(verdicts[:1], RESULTS)  # all agree: nothing raised


def test_verdicts_of_no_folder_regenerates_into_a_temporary_one(monkeypatch):
    calls = []
    monkeypatch.setattr(verify, "regenerate", lambda *a: calls.append(a))
    monkeypatch.setattr(verify, "verify_csv", lambda name, results, ref: results.is_dir())
    assert verify.verdicts_of(["a.csv"], None, RESULTS, quick=True, quiet=False) == [True]
    [(names, into, quick, quiet)] = calls
    assert (names, quick, quiet) == (["a.csv"], True, False) and not into.exists()

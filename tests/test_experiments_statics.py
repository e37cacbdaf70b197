"""Experiments 01-03 end to end, in-process at tiny settings, plus one real subprocess."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from events import EVENT_DEADLINE_S

REPO_ROOT = Path(__file__).resolve().parents[1]

SCRIPTS = ("01_logit_variance", "02_saturation_sweep", "03_jacobian_norm")
SWEEPS = ("02_saturation_sweep", "03_jacobian_norm")
N_KEYS = 16
TRIALS = 50
SAMPLES = 2000
HP_SAMPLES = 20_000
DKS = (1, 16)

#: Flags small enough that a run takes a second or two (compilation included).
TINY = {
    "01_logit_variance": [
        *("--dk", *map(str, DKS), "--samples", str(SAMPLES), "--hp-samples", str(HP_SAMPLES))
    ],
    **{
        name: ["--dk", *map(str, DKS), "--trials", str(TRIALS), "--n-keys", str(N_KEYS)]
        for name in SWEEPS
    },
}

COLUMNS = {
    "01_logit_variance": [
        "d_k",
        "samples",
        "std_measured",
        "std_se",
        "std_predicted",
        "rel_error",
        "rel_error_se",
        "std_scaled",
        "std_scaled_se",
        "hp_samples",
        "std_hp",
        "std_hp_se",
        "rel_error_hp",
        "rel_error_hp_se",
    ],
    "02_saturation_sweep": [
        "variant",
        "d_k",
        "n_keys",
        "trials",
        "sampler",
        "max_weight_mean",
        "max_weight_sem",
        "entropy_mean",
        "entropy_sem",
    ],
    "03_jacobian_norm": [
        "variant",
        "d_k",
        "n_keys",
        "trials",
        "sampler",
        "jacobian_fro_mean",
        "jacobian_fro_sem",
    ],
}

SIDECAR_KEYS = ("flags", "seed", "versions", "jax_backend", "device_count", "git_commit")
#: One float32 rounding, 2^-23: twice the unit roundoff (n EPS bounds n roundings).
EPS = float(np.finfo(np.float32).eps)
#: XLA's float32 exp and log are accurate to a few ulp; we allow 4 eps each.
ULPS = 4
#: CSVs hold 8 significant digits: a value is off by at most 5e-8 relative.
DIGITS = 5e-8


@pytest.fixture(scope="module")
def tiny_runs(load_script, run_main, tmp_path_factory) -> dict[str, Path]:
    """Each script run once at ``TINY`` settings, seed 0; its CSV path by script name."""
    out_dir = tmp_path_factory.mktemp("statics")
    paths = {}
    for name in SCRIPTS:
        out = out_dir / f"{name}.csv"
        code = run_main(load_script(name), [*TINY[name], "--seed", "0", "--quiet", "--out", out])
        assert code == 0, name
        paths[name] = out
    return paths


# --- outputs --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SCRIPTS)
def test_csv_schema(tiny_runs, name):
    frame = pd.read_csv(tiny_runs[name])
    assert list(frame.columns) == COLUMNS[name]
    numeric = frame.drop(columns=["variant", "sampler"], errors="ignore")
    assert numeric.notna().all().all()
    assert np.isfinite(numeric.to_numpy(np.float64)).all()
    if name == "01_logit_variance":
        assert frame["d_k"].tolist() == list(DKS)
        assert (frame["samples"] == SAMPLES).all()
    else:
        assert frame["variant"].tolist() == ["scaled"] * len(DKS) + ["unscaled"] * len(DKS)
        assert frame["d_k"].tolist() == list(DKS) * 2
        assert (frame["n_keys"] == N_KEYS).all() and (frame["trials"] == TRIALS).all()
        assert (frame["sampler"] == "direct").all()
        assert (frame.filter(like="_sem") > 0).all().all()


@pytest.mark.parametrize("name", SCRIPTS)
def test_sidecar_next_to_csv(tiny_runs, name):
    csv = tiny_runs[name]
    assert sorted(p.name for p in csv.parent.glob(f"{name}.*")) == [f"{name}.csv", f"{name}.json"]
    side = json.loads(csv.with_suffix(".json").read_text())
    for key in (*SIDECAR_KEYS, "wall_time_s"):
        assert key in side, key
    assert side["seed"] == 0
    assert side["wall_time_s"] > 0
    flags = side["flags"]
    assert flags["dk"] == list(DKS)
    assert flags["out"] == str(csv)
    assert flags["quiet"] is True and flags["seed"] == 0
    if name == "01_logit_variance":
        assert flags["samples"] == SAMPLES
    else:
        assert (flags["trials"], flags["n_keys"], flags["sampler"]) == (TRIALS, N_KEYS, "direct")


def test_01_logit_std_grows_as_sqrt_d_k(tiny_runs):
    """The CSV's columns as written (each std within its SEs of sqrt(d_k), and 1 scaled, in
    the computation's own table: test_statics_compute)."""
    frame = pd.read_csv(tiny_runs["01_logit_variance"])
    d_k = frame["d_k"].to_numpy(np.float64)
    np.testing.assert_allclose(frame["std_predicted"], np.sqrt(d_k), rtol=DIGITS)  # 8 digits
    # The exact-law column's SE is smaller than the direct one's by sqrt(HP_SAMPLES /
    # SAMPLES) up to kurtosis.
    assert (frame["hp_samples"] == HP_SAMPLES).all()
    assert (frame["rel_error_hp_se"] < frame["rel_error_se"]).all()
    # Each written value is off by <= DIGITS relative: rel_error r by DIGITS |r|, and
    # measured / predicted - 1 recomputed from two of them by 2 DIGITS (1 + r).
    r = frame["rel_error"].abs()
    recomputed = frame["std_measured"] / frame["std_predicted"] - 1
    assert ((frame["rel_error"] - recomputed).abs() <= DIGITS * (r + 2 * (1 + r))).all()
    # Three written values: 3 DIGITS.
    np.testing.assert_allclose(
        frame["rel_error_se"], frame["std_se"] / frame["std_predicted"], rtol=3 * DIGITS
    )
    # Product of two normals: se(s) = s sqrt((kurtosis - 1) / 4N) with kurtosis 3 + 6/d_k,
    # so at d_k = 1 (kurtosis 9) twice the Gaussian s / sqrt(2N), where the Gaussian formula
    # would give exactly 1. The estimate sqrt((k - 1) / 2) of the sample kurtosis k has SE
    # sd(k) / 8, sd(k)^2 = (mu8 - mu4^2 - 4 mu4 (mu6 - mu4) + 4 mu4^2 (mu4 - 1)) / N by the
    # delta method with the product's moments mu4 = 9, mu6 = 225, mu8 = 11025: within 4 SE
    # of 2, which excludes 1.
    se_ratio = frame["std_se"] / (frame["std_measured"] / math.sqrt(2 * SAMPLES))
    var_k = (11025 - 81 - 4 * 9 * (225 - 9) + 4 * 81 * (9 - 1)) / SAMPLES
    se_of_ratio = math.sqrt(var_k) / 8
    assert 2 - 4 * se_of_ratio > 1
    assert abs(se_ratio.iloc[0] - 2) < 4 * se_of_ratio


def test_02_means_are_within_their_ranges(tiny_runs):
    """The CSV's means as written (unscaled saturating and the two variants equal at d_k 1,
    in the computation's own tables: test_statics_compute's test_variants_see_the_same_rows)."""
    frame = pd.read_csv(tiny_runs["02_saturation_sweep"])
    # [1/n, 1] and [0, ln n] up to float32 (exp, the division and the n-term sum; for the
    # entropy the weights' normaliser, 2 n EPS times ln n - 1, and its own log, products and
    # sum) and the CSV's 8 digits.
    n, ln_n = N_KEYS, math.log(N_KEYS)
    lo, hi = (1 - (n + ULPS + 2) * EPS) / n * (1 - DIGITS), (1 + (ULPS + 2) * EPS) * (1 + DIGITS)
    assert frame["max_weight_mean"].between(lo, hi).all()
    top = (ln_n * (1 + (n + ULPS + 1) * EPS) + 2 * n * EPS * (ln_n - 1)) * (1 + DIGITS)
    assert frame["entropy_mean"].between(-(ULPS + 3) * EPS, top).all()


def test_03_means_are_bounded(tiny_runs):
    """As 02's (equal at d_k 1: test_statics_compute)."""
    frame = pd.read_csv(tiny_runs["03_jacobian_norm"])
    assert frame["jacobian_fro_mean"].between(0, 1).all()  # at most 1/2, far from 1


# --- determinism and the sampler flag ---------------------------------------------------------


def test_sweep_is_deterministic_and_seeded(load_script, run_main, tmp_path, capsys):
    script = load_script("02_saturation_sweep")
    # d_k = 16: the program of the tiny run, already compiled (persistent cache).
    flags = ["--dk", "16", "--trials", str(TRIALS), "--n-keys", str(N_KEYS), "--quiet"]
    for out, seed in (("a.csv", 0), ("b.csv", 0), ("c.csv", 1)):
        assert run_main(script, [*flags, "--seed", str(seed), "--out", tmp_path / out]) == 0
    assert capsys.readouterr().out == ""
    a, b, c = ((tmp_path / f).read_bytes() for f in ("a.csv", "b.csv", "c.csv"))
    assert a == b
    assert a != c
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.csv",
        "a.json",
        "b.csv",
        "b.json",
        "c.csv",
        "c.json",
    ]


def test_exact_sampler(load_script, run_main, tmp_path, tiny_runs):
    out = tmp_path / "exact.csv"
    flags = ["--dk", "16", "--trials", str(TRIALS), "--n-keys", str(N_KEYS), "--seed", "0"]
    code = run_main(
        load_script("02_saturation_sweep"), [*flags, "--sampler", "exact", "--quiet", "--out", out]
    )
    assert code == 0
    exact = pd.read_csv(out)
    assert list(exact.columns) == COLUMNS["02_saturation_sweep"]
    assert (exact["sampler"] == "exact").all()
    assert json.loads(out.with_suffix(".json").read_text())["flags"]["sampler"] == "exact"
    # Other draws, same law: within Monte-Carlo error of the direct sampler's run.
    direct = pd.read_csv(tiny_runs["02_saturation_sweep"])
    direct = direct[direct["d_k"] == 16].reset_index(drop=True)
    for stat in ("max_weight", "entropy"):
        diff = abs(exact[f"{stat}_mean"] - direct[f"{stat}_mean"])
        assert (diff > 0).all()
        # 5 SE of the difference of two independent runs.
        assert (diff <= 5 * np.hypot(exact[f"{stat}_sem"], direct[f"{stat}_sem"])).all()


# --- bad input ------------------------------------------------------------------------------

#: (scripts, bad flags, the flag the message must name)
BAD_FLAGS = [
    (SCRIPTS, ["--dk", "0"], "--dk"),
    (SCRIPTS, ["--dk", "-3"], "--dk"),
    (SCRIPTS, ["--dk", "abc"], "--dk"),
    (SCRIPTS, ["--dk", "2.5"], "--dk"),
    (SCRIPTS, ["--dk", "4", "0"], "--dk"),
    (SCRIPTS, ["--seed", "x"], "--seed"),
    (SCRIPTS, ["--seed", "-1"], "--seed"),
    (("01_logit_variance",), ["--samples", "0"], "--samples"),
    (SWEEPS, ["--n-keys", "1"], "--n-keys"),
    (SWEEPS, ["--trials", "0"], "--trials"),
    (SWEEPS, ["--sampler", "bogus"], "--sampler"),
]
BAD_CASES = [
    pytest.param(name, argv, flag, id=f"{name[:2]}:{' '.join(argv)}")
    for names, argv, flag in BAD_FLAGS
    for name in names
]


def _assert_one_line_error(capsys, flag: str) -> None:
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "error" in err and flag in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(("name", "argv", "flag"), BAD_CASES)
def test_bad_flag(load_script, run_main, in_tmp_path, capsys, name, argv, flag):
    # Valid tiny flags first, the bad one last (argparse keeps the last value): should the
    # bad value get through, the run would be quick and leave out.csv behind.
    out = in_tmp_path / "out.csv"
    code = run_main(load_script(name), [*TINY[name], "--quiet", "--out", out, *argv])
    assert code == 2
    _assert_one_line_error(capsys, flag)
    assert list(in_tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", SCRIPTS)
@pytest.mark.parametrize("where", ["missing_dir", "existing_dir", "not_csv"])
def test_bad_out(load_script, run_main, in_tmp_path, capsys, name, where):
    (in_tmp_path / "existing").mkdir()
    out_flags = {
        "missing_dir": ["--out", in_tmp_path / "missing" / "out.csv"],
        "existing_dir": ["--out", in_tmp_path / "existing"],
        "not_csv": ["--out", in_tmp_path / "out.json"],  # its sidecar would overwrite it
    }[where]
    code = run_main(load_script(name), [*TINY[name], "--quiet", *out_flags])
    assert code == 2
    _assert_one_line_error(capsys, "--out")
    assert [p.name for p in in_tmp_path.iterdir()] == ["existing"]
    assert list((in_tmp_path / "existing").iterdir()) == []


def test_script_as_subprocess(tmp_path):
    script = "experiments/02_saturation_sweep.py"
    shown = subprocess.run(
        [sys.executable, script, "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=EVENT_DEADLINE_S,
    )
    assert shown.returncode == 0, shown.stderr
    for flag in ("--sampler", "--dk", "--n-keys", "--trials", "--seed", "--out", "--quiet"):
        assert flag in shown.stdout, flag

    out = tmp_path / "out.csv"
    bad = subprocess.run(
        [sys.executable, script, "--dk", "4", "--n-keys", "16", "--quiet"]
        + ["--out", str(out), "--trials", "0"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=EVENT_DEADLINE_S,
    )
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and bad.stderr.endswith("\n"), bad.stderr
    assert "--trials" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert list(tmp_path.iterdir()) == []

"""Sharding over devices changes no result: 02, 04 and 14 on one device and on two.

Each script runs twice as a subprocess on the CPU backend, once plainly and once with
``XLA_FLAGS=--xla_force_host_platform_device_count=2``, which makes the host look like two
devices; ``attnlab.core.parallel`` then shards the trials (02) and the seeds (04) over both.
Three seeds on two devices exercise the padding of the seed axis; 14's three lanes (rates)
the padding of its lane axis. Results may differ only
by float32 rounding (XLA compiles a different per-device shape).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest
from numpy_reference import row_statistic_bounds

from attnlab.core.sampling import trial_keys

REPO_ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS_DIR = REPO_ROOT / "experiments"
TWO_DEVICES = "--xla_force_host_platform_device_count=2"
#: One float32 rounding, 2^-23: twice the unit roundoff (n EPS bounds n roundings).
EPS = float(np.finfo(np.float32).eps)
#: CSVs hold 8 significant digits: a value is off by at most 5e-8 relative.
DIGITS = 5e-8

#: script, its flags at a tiny setting, and the CSVs it writes into the output directory.
RUNS = {
    "02": (
        "02_saturation_sweep.py",
        ["--dk", "4", "16", "--trials", "64", "--n-keys", "16", "--out", "{dir}/02.csv"],
        ["02.csv"],
    ),
    "04": (
        "04_associative_recall.py",
        [
            *("--steps", "40", "--seeds", "3", "--batch-size", "8", "--dk", "16"),
            *("--d-model", "16", "--eval-size", "50", "--chunk-steps", "20"),
            *("--out-dir", "{dir}"),
        ],
        ["04_recall_curves.csv", "04_recall_summary.csv"],
    ),
    "14": (
        "14_lm_proxy.py",
        [
            *("--mechanisms", "scaled", "--one-width-mechanisms", "--sink-mechanisms"),
            *("--widths", "32"),
            *("--lrs", "1e-3", "2e-3", "3e-3", "--steps", "6", "--jobs", "1"),
            *("--out-dir", "{dir}"),
        ],
        ["14_lm_sweep.csv", "14_lm_curves.csv", "14_lm_ownership.csv"],
    ),
}


def _env(devices: int) -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    flags = env.pop("XLA_FLAGS", "").replace(TWO_DEVICES, "").strip()
    if devices == 2:
        flags = f"{flags} {TWO_DEVICES}".strip()
    if flags:
        env["XLA_FLAGS"] = flags
    return env


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[tuple[str, int], Path]:
    """Run every script on one and on two devices, all four at once; their output dirs."""
    dirs, procs = {}, {}
    for name, (script, flags, _) in RUNS.items():
        for devices in (1, 2):
            out = tmp_path_factory.mktemp(f"{name}_{devices}dev")
            argv = [sys.executable, str(EXPERIMENTS_DIR / script), "--quiet"]
            argv += [f.format(dir=out) for f in flags]
            dirs[name, devices] = out
            procs[name, devices] = subprocess.Popen(
                argv,
                cwd=REPO_ROOT,
                env=_env(devices),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
    for key, proc in procs.items():
        log, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{key} failed:\n{log}"
    return dirs


# --- the tolerances ------------------------------------------------------------------------
# 02: the same draws per trial, evaluated by programs of another per-device shape: per
# trial, two float32 evaluations of the row statistics, each within ``_trial_bounds``.
SWEEP = {"dks": (4, 16), "n_keys": 16, "trials": 64, "seed": 0}


def _trial_bounds(d_k: int, scale: float) -> dict[str, np.ndarray]:
    """Per trial of the 02 sweep, bounds on one float32 evaluation of its max weight and
    entropy: numpy_reference's ``row_statistic_bounds`` (the derivation is there) on the
    float64 logits of the sweep's own draws."""
    n = SWEEP["n_keys"]

    def draw(k):
        kq, kk = jax.random.split(k)
        return jax.random.normal(kq, (d_k,)), jax.random.normal(kk, (n, d_k))

    keys = trial_keys(jax.random.key(SWEEP["seed"]), d_k, SWEEP["trials"])
    with jax.threefry_partitionable(False):
        q, k = (np.asarray(x, np.float64) for x in jax.jit(jax.vmap(draw))(keys))
    z = np.einsum("tnd,td->tn", k, q)
    z_abs = np.einsum("tnd,td->tn", np.abs(k), np.abs(q))
    max_weight, entropy, _ = row_statistic_bounds(z, z_abs, scale, d_k)
    return {"max_weight": max_weight, "entropy": entropy}


def _sweep_bounds(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per row of 02.csv and column, the bound on |1 device - 2 devices|: a mean moves by
    the mean of the per-trial differences (two evaluations: twice the bound), a SEM by at
    most their root mean square over sqrt(trials - 1) (the std is 1-Lipschitz in the
    l2 norm over sqrt(trials - 1)); then each written value by DIGITS."""
    trials = SWEEP["trials"]
    out = {}
    for stat in ("max_weight", "entropy"):
        mean_b, sem_b = [], []
        for row in frame.itertuples():
            scale = 1 / np.sqrt(row.d_k) if row.variant == "scaled" else 1.0
            b = 2 * _trial_bounds(row.d_k, scale)[stat]
            mean_b.append(b.mean())
            sem_b.append(np.sqrt(np.sum(b**2) / (trials * (trials - 1))))
        for suffix, b in (("mean", mean_b), ("sem", sem_b)):
            column = f"{stat}_{suffix}"
            out[column] = np.asarray(b) + 2 * DIGITS * frame[column].abs().to_numpy()
    return out


# 04: two programs (3 seeds on one device, 2 per device on two) round differently. From
# the same state one step's metrics differ by at most twice one evaluation's rounding:
# STEP_CHAIN roundings along the longest chain (forward d_model, d_k, pairs, pairs, d_k,
# n_value_tokens and batch-term sums, the same backward, and |grad W_K|'s 2 d_model d_k
# squares, half of them after the root), each relative to the magnitudes summed. Training
# carries the difference along: 40 Adam steps of lr 3e-4 from the same init move the
# parameters by ~1e-2 in all, far too little to amplify it, so we allow it to add up over
# the steps. Accuracies count argmaxes, which a rounding can flip only where two value
# logits tie within it: one such sequence per batch (and held-out set) is allowed.
STEPS, D, PAIRS, VALUES, BATCH, EVAL = 40, 16, 16, 32, 8, 50
STEP_CHAIN = 2 * (D + 2 * D + 2 * PAIRS + VALUES + BATCH) + D * D
STEP_RTOL = 2 * STEP_CHAIN * EPS + 2 * DIGITS
RUN_RTOL = STEPS * 2 * STEP_CHAIN * EPS + 2 * DIGITS
RECALL_TOLERANCES = {  # column: (rtol, atol); other numeric columns must be equal
    "loss": (RUN_RTOL, 0.0),
    "smoothed_loss": (RUN_RTOL, 0.0),
    "grad_norm_wq": (RUN_RTOL, 0.0),
    "grad_norm_wk": (RUN_RTOL, 0.0),
    "grad_norm_wv": (RUN_RTOL, 0.0),
    "attn_entropy": (RUN_RTOL, 0.0),
    "attn_max_weight": (RUN_RTOL, 0.0),
    "accuracy": (0.0, 1 / BATCH),
    "grad_wq_step0": (STEP_RTOL, 0.0),
    "grad_wk_step0": (STEP_RTOL, 0.0),
    "final_loss": (RUN_RTOL, 0.0),
    "final_attn_entropy": (RUN_RTOL, 0.0),
    "eval_accuracy": (0.0, 1 / EVAL),
}


# 14: the same, for the causal LM (d_model 32, 2 layers, 2 heads of 16, 64 positions, 256
# bytes): one step's longest chain of roundings runs through both layers' d_model,
# 4 d_model, d_model, T and d_head sums forward and back, and the head's d_model and 256
# ones; six steps at rates <= 3e-3 cannot amplify it, so it adds up (one more for step 0).
LM_STEPS, LM_D, LM_T, LM_HEAD = 6, 32, 64, 16
LM_CHAIN = 2 * (2 * (LM_D + 4 * LM_D + LM_D + LM_T + LM_HEAD) + LM_D + 256)
LM_RTOL = (LM_STEPS + 1) * 2 * LM_CHAIN * EPS + 2 * DIGITS
#: Logits and norms near zero: an absolute floor of one float32 rounding of an O(1) value.
LM_ATOL = LM_CHAIN * EPS
LM_EXACT = {"d_model", "n_layers", "n_heads", "lr", "seed", "layer", "step", "head",
            "diverged_step"}  # fmt: skip


def _max_differences(a: pd.DataFrame, b: pd.DataFrame) -> tuple[float, float]:
    """Largest absolute and relative difference of the numeric columns."""
    x = a.select_dtypes("number").to_numpy(np.float64)
    y = b.select_dtypes("number").to_numpy(np.float64)
    both = np.isfinite(x) & np.isfinite(y)
    diff = np.abs(x - y)[both]
    scale = np.maximum(np.abs(x), np.abs(y))[both]
    rel = np.divide(diff, scale, out=np.zeros_like(diff), where=scale > 0)
    return float(diff.max(initial=0.0)), float(rel.max(initial=0.0))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RUNS))
def test_two_devices_give_the_one_device_results(outputs, name):
    _, _, csvs = RUNS[name]
    one, two = outputs[name, 1], outputs[name, 2]
    for csv in csvs:
        sidecar_one = json.loads((one / csv).with_suffix(".json").read_text())
        sidecar_two = json.loads((two / csv).with_suffix(".json").read_text())
        assert sidecar_one["device_count"] == 1
        assert sidecar_two["device_count"] == 2
        a, b = pd.read_csv(one / csv), pd.read_csv(two / csv)
        assert list(a.columns) == list(b.columns) and a.shape == b.shape
        text = a.select_dtypes(exclude="number").columns
        pd.testing.assert_frame_equal(a[text], b[text])
        numbers = a.select_dtypes("number").columns
        np.testing.assert_array_equal(a[numbers].isna(), b[numbers].isna())
        abs_diff, rel_diff = _max_differences(a, b)
        print(f"{csv}: max |1 device - 2 devices| = {abs_diff:.3g} (relative {rel_diff:.3g})")
        sweep_bounds = _sweep_bounds(a) if name == "02" else {}
        for column in numbers:
            x, y = a[column].to_numpy(np.float64), b[column].to_numpy(np.float64)
            both = ~np.isnan(x)
            message = f"{csv}: {column} differs between one and two devices"
            if column in sweep_bounds:
                assert (np.abs(x - y)[both] <= sweep_bounds[column][both]).all(), message
            elif name == "04" and column in RECALL_TOLERANCES:
                rtol, atol = RECALL_TOLERANCES[column]
                np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=message)
            elif name == "14" and column not in LM_EXACT:
                np.testing.assert_allclose(x, y, rtol=LM_RTOL, atol=LM_ATOL, err_msg=message)
            else:  # counts, seeds, steps; milestones and plateaus (none reached: NaN)
                np.testing.assert_array_equal(x, y, err_msg=message)

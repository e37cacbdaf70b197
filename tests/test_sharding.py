"""Sharding over devices changes no result: 02 and 04 on one device and on two.

Each script runs twice as a subprocess on the CPU backend, once plainly and once with
``XLA_FLAGS=--xla_force_host_platform_device_count=2``, which makes the host look like two
devices; ``attnlab.core.parallel`` then shards the trials (02) and the seeds (04) over both.
Three seeds on two devices exercise the padding of the seed axis. Results may differ only
by float32 rounding (XLA compiles a different per-device shape).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS_DIR = REPO_ROOT / "experiments"
TWO_DEVICES = "--xla_force_host_platform_device_count=2"

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
        np.testing.assert_allclose(
            a[numbers].to_numpy(np.float64),
            b[numbers].to_numpy(np.float64),
            rtol=1e-5,
            atol=1e-6,
            err_msg=f"{csv} differs between one and two devices",
        )

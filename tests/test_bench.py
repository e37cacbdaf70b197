"""experiments/bench.py at its --quick setting: the CSV schema, the row names, the outputs."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import attnlab.studies.bench.compute as compute
from attnlab.core.temperature import MECHANISMS
from attnlab.harness.errors import RunError
from attnlab.studies.article_fit.compute import SCORE_COLUMNS, SCORES_CSV
from attnlab.studies.bench.baselines import autodiff_gathers, one_hot_rows
from attnlab.studies.bench.compute import (
    REPRODUCE_COMMAND,
    fitted_reading_of,
    recall_step_flops,
    time_reproduce,
)
from attnlab.studies.bench.config import COLUMNS, OPTIONAL_ROW_NAMES, QUICK, ROW_NAMES
from attnlab.studies.bench.kernels import MATMUL, OTHER, kernel_profile, kernel_table
from attnlab.studies.bench.report import markdown_table
from attnlab.studies.bench.step import (
    KERNEL_CATEGORIES,
    PARTS,
    fitted_step_row,
    kernel_rows,
    max_loss_difference,
    measure_step,
    profile_rows,
    projection_shape,
    step_rows,
)
from attnlab.studies.bench.timing import interleaved_median_seconds, loglog_slope
from attnlab.studies.recall import model as recall_model
from attnlab.studies.recall.task import sample_batch
from attnlab.studies.recall.train import RecallConfig, init_params, loss_and_aux, make_model


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
    with_peak = {
        "statics_direct_vs_numpy",
        "train_scan_vs_python_loop",
        "train_step_peak_fraction",
        "train_step_matmul_bound",
    }
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
    assert "**Profile of one recall step.**" in table
    assert "`make bench`" in table


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
    # The gathers' one-hot gradients: the query's (64 tokens of 32) and four of 64 * 16.
    gathers = 2 * 256 * (64 * 32 + 4 * 64 * 16 * 32)
    assert recall_step_flops(RecallConfig()) == 3 * forward + gathers


def test_markdown_table_leaves_missing_values_empty():
    frame = pd.DataFrame(
        [
            {"name": "a", "ours_seconds": 1.0, "baseline_seconds": 2.0, "speedup": 2.0},
            {"name": "growth_x", "ours_seconds": 0.5, "slope": 1.0, "detail": "d"},
        ]
    ).reindex(columns=list(COLUMNS))
    text = markdown_table(frame)
    assert "Profile" not in text
    lines = text.splitlines()
    assert lines[2] == "| `a` | 1 | 2 | 2.00x |  |  |"
    assert lines[3] == "| `growth_x` | 0.5 |  |  |  | 1.00 |"


# --- the recall step: current against reference, its profile -----------------------------

#: QUICK with a chunk of 8 steps, so the losses compared span several Adam updates.
STEP_CONFIG = replace(QUICK, recall=replace(QUICK.recall, steps=16, chunk_steps=8))


@pytest.fixture(scope="module")
def step_times():
    return measure_step(STEP_CONFIG)


@pytest.mark.slow
def test_reference_step_agrees_with_the_current_step(step_times):
    recall = STEP_CONFIG.recall
    losses, reference = step_times.losses, step_times.reference_losses
    assert losses.shape == reference.shape == (recall.chunk_steps,)
    # The two steps differ only in where the batches are drawn (per chunk or inside each
    # step: the same bits, tests/test_recall_train.py) and in how each gather's table
    # gradient is summed: the same
    # exact products one_hot[i, v] * g[i, d] (0 or g) over the n = B (pairs + 1) tokens
    # of a batch, perhaps in another order; both forwards are exact (a table row plus exact
    # zeros). Two summation orders of n terms differ by at most about n eps relative to
    # the sum of their magnitudes, and Adam's update lr m / (sqrt(v) + eps) does not scale
    # with the gradient, so we budget each step n eps |loss| and let it accumulate over the
    # chunk: a budget rather than a proof (we measured 0, bitwise identical, on the 2-core
    # CPU machine; the bench row reports what it measures).
    n = recall.batch_size * (recall.pairs + 1)
    eps = np.finfo(np.float32).eps
    bound = recall.chunk_steps * n * eps * float(np.max(np.abs(losses)))
    assert max_loss_difference(step_times) <= bound
    assert np.isfinite(losses).all()


@pytest.mark.slow
def test_step_rows_and_profile_rows(step_times):
    assert set(step_times.seconds) == set(PARTS)
    assert all(s > 0 for s in step_times.seconds.values())
    peak = 1e12
    ref, peak_row, bound_row = step_rows(STEP_CONFIG, step_times, peak)
    chunk = STEP_CONFIG.recall.chunk_steps
    assert ref["name"] == "train_step_vs_reference"
    assert ref["ours_seconds"] == step_times.seconds["full"]
    assert ref["baseline_seconds"] == step_times.seconds["reference_full"]
    assert ref["speedup"] == ref["baseline_seconds"] / ref["ours_seconds"]
    assert "loss" in ref["detail"]
    assert peak_row["name"] == "train_step_peak_fraction"
    step = step_times.seconds["full"] / chunk
    assert peak_row["ours_seconds"] == step
    # peak_fraction = FLOPs per step / seconds per step / peak FLOP/s, a fraction like
    # train_scan_vs_python_loop's (the table prints 100x it as "% of peak").
    assert peak_row["peak_fraction"] == recall_step_flops(STEP_CONFIG.recall) / step / peak
    # The bound: the step's FLOPs at the measured speed of one projection-shaped product.
    rows, d_model, d_k = projection_shape(STEP_CONFIG.recall)
    speed = 2 * rows * d_model * d_k / step_times.matmul_seconds
    assert bound_row["name"] == "train_step_matmul_bound"
    assert bound_row["ours_seconds"] == recall_step_flops(STEP_CONFIG.recall) / speed
    assert bound_row["peak_fraction"] == speed / peak
    rows = profile_rows(STEP_CONFIG, step_times)
    names = [r["name"] for r in rows]
    assert names == [n for n in ROW_NAMES if n.startswith("profile_step_")]
    for part in PARTS:
        row = rows[names.index(f"profile_step_{part}")]
        assert row["ours_seconds"] == step_times.seconds[part] / chunk
    train_chunk = rows[names.index("profile_step_train_chunk")]
    assert train_chunk["ours_seconds"] == step_times.train_chunk_seconds / chunk
    assert all(r["detail"] for r in rows)
    rows = kernel_rows(STEP_CONFIG, step_times)
    assert [r["name"] for r in rows] == [n for n in ROW_NAMES if n.startswith("profile_kernels_")]
    kernels = step_times.kernels
    for row, category in zip(rows, KERNEL_CATEGORIES, strict=False):
        assert row["ours_seconds"] == kernels.seconds[category] >= 0
    # The step computes dots and runs Adam every step: both categories launch kernels.
    assert kernels.launches["matmul"] >= 1 and kernels.launches["adam"] >= 1
    # The dots counted from the compiled HLO against the formula: the formula counts the
    # query's logits and their gradient as dots, 2 x 2 B pairs d_k FLOPs, which XLA may
    # compute as a multiply and a reduction instead (a query of one row); nothing else.
    recall = STEP_CONFIG.recall
    slack = 4 * recall.batch_size * recall.pairs * recall.d_k
    estimate = recall_step_flops(recall)
    assert estimate - slack <= kernels.matmul_flops <= estimate
    assert rows[-1]["ours_seconds"] == kernels.wall_seconds > 0


def _loss_jaxpr(recall: RecallConfig) -> str:
    mechanism = MECHANISMS["scaled"]
    model, params = make_model(recall, mechanism), init_params(recall, mechanism, 0)
    batch = sample_batch(jax.random.key(1), 2, recall.task)
    return str(jax.make_jaxpr(jax.grad(lambda p: loss_and_aux(model, p, batch)[0]))(params))


def test_autodiff_gathers_swaps_the_gather_while_tracing_and_restores_it():
    current = recall_model._rows
    assert "custom_vjp_call" in _loss_jaxpr(QUICK.recall)
    with autodiff_gathers():
        assert recall_model._rows is one_hot_rows
        assert "custom_vjp_call" not in _loss_jaxpr(QUICK.recall)
    assert recall_model._rows is current
    with pytest.raises(KeyError), autodiff_gathers():
        raise KeyError("restored even so")
    assert recall_model._rows is current


# --- make_reproduce_seconds: the mechanism, on trivial commands ---------------------------

#: Fails unless ATTNLAB_JAX_CACHE names an existing empty directory; prints it.
CHECK_CACHE = (
    "import os, sys; d = os.environ['ATTNLAB_JAX_CACHE']; print(d); "
    "sys.exit(0 if os.path.isdir(d) and not os.listdir(d) else 3)"
)


def test_time_reproduce_runs_the_command_with_an_empty_cache(tmp_path, monkeypatch):
    seen = []
    real_run = compute.subprocess.run

    def run(*args, **kwargs):
        done = real_run(*args, **kwargs)
        seen.append((kwargs["cwd"], done.stdout.strip()))
        return done

    monkeypatch.setattr(compute.subprocess, "run", run)
    row = time_reproduce([sys.executable, "-c", CHECK_CACHE], cwd=tmp_path)
    assert row["name"] == "make_reproduce_seconds" == OPTIONAL_ROW_NAMES[-1]
    assert row["ours_seconds"] > 0
    assert "ATTNLAB_JAX_CACHE" in row["detail"] and f"{os.cpu_count()} CPUs" in row["detail"]
    ((cwd, cache),) = seen
    assert cwd == tmp_path
    assert not Path(cache).exists()  # removed afterwards
    assert os.environ.get("ATTNLAB_JAX_CACHE") != cache


def test_time_reproduce_raises_on_failure(tmp_path):
    with pytest.raises(RunError, match="status 4.*boom"):
        time_reproduce([sys.executable, "-c", "print('boom'); raise SystemExit(4)"], cwd=tmp_path)


def test_make_reproduce_row_only_when_asked(monkeypatch):
    for group in ("bench_statics", "bench_attention", "bench_training", "bench_recall_step"):
        monkeypatch.setattr(compute, group, lambda *_: [])
    monkeypatch.setattr(compute, "bench_growth", lambda *_: [])
    monkeypatch.setattr(compute, "measure_peak", lambda *_: (1.0, 1.0))
    ticks = []
    frame = compute.run_bench(QUICK, ticks.append)
    assert list(frame["name"]) == ["peak_matmul_f32"]
    assert len(ticks) == compute.groups(False)
    ticks.clear()
    frame = compute.run_bench(QUICK, ticks.append, [sys.executable, "-c", "pass"])
    assert list(frame["name"]) == ["peak_matmul_f32", "make_reproduce_seconds"]
    assert len(ticks) == compute.groups(True)


def test_reproduce_flag_reaches_run_bench(load_script, run_main, tmp_path, monkeypatch):
    module = load_script("bench")
    calls = []

    def fake(config, on_group, reproduce_command=None, fitted_reading=None):
        calls.append((reproduce_command, fitted_reading))
        return pd.DataFrame([{"name": "x", "ours_seconds": 1.0}]).reindex(columns=list(COLUMNS))

    monkeypatch.setattr(module, "run_bench", fake)
    out = tmp_path / "b.csv"
    assert run_main(module, ["--quick", "--quiet", "--out", out]) == 0
    assert run_main(module, ["--quick", "--quiet", "--reproduce", "--out", out]) == 0
    # Without --quick the bench asks for the step at 09's fitted reading, where 09 has run.
    monkeypatch.setattr(module.cli, "RESULTS_DIR", tmp_path)
    assert run_main(module, ["--quiet", "--out", out]) == 0
    row = {"reading": "r", "pass": "2b", "rank": 1, "within_noise": True}
    pd.DataFrame([row]).reindex(columns=SCORE_COLUMNS).to_csv(tmp_path / SCORES_CSV, index=False)
    assert run_main(module, ["--quiet", "--out", out]) == 0
    assert calls == [(None, None), (REPRODUCE_COMMAND, None), (None, None), (None, "r")]


def test_markdown_profile_paragraph():
    rows = [{"name": f"profile_step_{p}", "ours_seconds": 1e-3, "detail": "d"} for p in PARTS]
    rows += [
        {"name": f"profile_kernels_{c}", "ours_seconds": 2e-3, "detail": "d"}
        for c in (*KERNEL_CATEGORIES, "wall")
    ]
    frame = pd.DataFrame(rows).reindex(columns=list(COLUMNS))
    text = markdown_table(frame)
    assert "**Profile of one recall step.**" in text and "forward and backward 1 ms" in text
    assert "matmuls 2 ms" in text and "Adam 2 ms" in text and "the traced step takes 2 ms" in text
    assert "`make bench`" in text and "`python experiments/bench.py`" in text


def test_interleaved_timing_runs_round_robin():
    # One warm-up call each, then every round calls each function once, in order.
    calls: list[str] = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    seconds = interleaved_median_seconds(fns, 3)
    assert calls == ["a", "b"] + ["a", "b"] * 3
    assert set(seconds) == {"a", "b"} and all(s >= 0 for s in seconds.values())


# --- the kernel profile -------------------------------------------------------------------


def _scoped_program():
    """A loop whose body has a dot under scope ``b`` and elementwise work under ``a``."""

    def f(x: jax.Array, w: jax.Array) -> jax.Array:
        def body(_, x):
            with jax.named_scope("a"):
                x = jnp.tanh(x) * 1.5 + 0.25
            with jax.named_scope("b"):
                return x @ w

        return jax.lax.fori_loop(0, 4, body, x)

    x, w = jnp.ones((64, 64)), jnp.eye(64) * 0.5
    return jax.jit(f).lower(x, w).compile(), (x, w)


def test_kernel_table_charges_dots_to_matmul_and_the_rest_to_scopes():
    compiled, _ = _scoped_program()
    text = compiled.as_text()
    table = kernel_table(text, ("a", "b"))
    categories = {k.category for k in table.values()}
    assert categories <= {MATMUL, "a", "b", OTHER} and {MATMUL, "a"} <= categories
    # The one product per iteration, [64, 64] @ [64, 64]: 2 x 64^3 FLOPs, counted exactly
    # (integers), in whichever kernel holds it; nothing else computes a dot.
    assert sum(k.flops for k in table.values()) == 2 * 64**3
    assert all(k.flops == 0 for k in table.values() if k.category != MATMUL)
    # The loop is control flow around its body's kernels, never a kernel itself.
    loops = [line.split(" = ")[0].strip().lstrip("%") for line in text.splitlines()
             if " while(" in line]  # fmt: skip
    assert loops and not set(loops) & set(table)


def test_kernel_profile_times_every_category_per_unit():
    compiled, args = _scoped_program()
    profile = kernel_profile(compiled, lambda: compiled(*args), ("a", "b"), units=4, calls=2)
    assert list(profile.seconds) == list(profile.launches) == [MATMUL, "a", "b", OTHER]
    assert all(s >= 0 for s in profile.seconds.values())
    # 4 iterations per call, one unit each: at least one dot kernel per iteration.
    assert profile.launches[MATMUL] >= 1 and profile.seconds[MATMUL] > 0
    assert profile.matmul_flops == 2 * 64**3 * profile.launches[MATMUL]
    assert profile.wall_seconds > 0


# --- the step at experiment 09's fitted reading ------------------------------------------


def test_fitted_reading_of_reads_09s_best_or_none(tmp_path):
    assert fitted_reading_of(tmp_path / "missing.csv") is None
    rows = [
        {
            "reading": name,
            "pass": stage,
            "rank": rank,
            "within_noise": True,
            "best_run_length": 1000,
        }
        for name, stage, rank in (("a", "2a", 1), ("b", "2b", 2), ("c", "2b", 1))
    ]
    path = tmp_path / "scores.csv"
    pd.DataFrame(rows).reindex(columns=SCORE_COLUMNS).to_csv(path, index=False)
    assert fitted_reading_of(path) == "c"  # rank 1 of the last pass


@pytest.mark.slow
def test_fitted_step_row_times_the_reading():
    reading = "concat-natural-nobias-d16-b128"
    row = fitted_step_row(STEP_CONFIG, reading)
    assert row["name"] == "profile_fitted_step" == OPTIONAL_ROW_NAMES[0]
    assert row["ours_seconds"] > 0 and reading in row["detail"] and "batch 128" in row["detail"]

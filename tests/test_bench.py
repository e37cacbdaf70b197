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
import attnlab.studies.bench.reproduce as reproduce
from attnlab.core.temperature import MECHANISMS
from attnlab.harness.errors import RunError
from attnlab.lm.train import LMConfig
from attnlab.recall import model as recall_model
from attnlab.recall.config import RecallConfig, make_model
from attnlab.recall.step import init_params, loss_and_aux
from attnlab.recall.task import sample_batch
from attnlab.studies.bench.config import (
    COLUMNS,
    OPTIONAL_ROW_NAMES,
    QUICK,
    REPRODUCE_COMMAND,
    ROW_NAMES,
)
from attnlab.studies.bench.lm_step import bench_lm_optimizers, bench_lm_step, lm_step_flops
from attnlab.studies.bench.peer import PeerLM, peer_programs
from attnlab.studies.bench.recall_step import (
    PARTS,
    bench_recall_step,
    recall_step_flops,
    step_programs,
)
from attnlab.studies.bench.reference import autodiff_gathers, one_hot_rows
from attnlab.studies.bench.report import bench_markdown
from attnlab.studies.bench.reproduce import script_seconds, time_reproduce
from attnlab.studies.bench.timing import interleaved_median_seconds


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
    with_peak = {"statics_direct_vs_numpy", "train_step_peak_fraction", "lm_step_peak_fraction"}
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


def test_recall_step_flops_counts_the_default_model():
    # Forward at the defaults: 2*256*256*(3*32 + 2*32) + 4*64*16*256 + 2*64*256*32; the
    # gathers' gradients are scatter-adds, not counted.
    forward = 2 * 256 * 256 * 160 + 4 * 64 * 16 * 256 + 2 * 64 * 256 * 32
    assert recall_step_flops(RecallConfig()) == 3 * forward


def test_bench_markdown_leaves_missing_values_empty():
    frame = pd.DataFrame(
        [
            {"name": "a", "ours_seconds": 1.0, "baseline_seconds": 2.0, "speedup": 2.0},
            {"name": "peak_x", "ours_seconds": 0.5, "peak_fraction": 0.25, "detail": "d"},
        ]
    ).reindex(columns=list(COLUMNS))
    text = bench_markdown(frame)
    assert "Profile" not in text
    lines = text.splitlines()
    assert lines[2] == "| `a` | 1 | 2 | 2.00x |  |"
    assert lines[3] == "| `peak_x` | 0.5 |  |  | 25 |"


# --- the recall step: current against reference, its profile -----------------------------

#: QUICK with a chunk of 8 steps, so the losses compared span several Adam updates.
STEP_CONFIG = replace(QUICK, recall=replace(QUICK.recall, steps=8, chunk_steps=8))


@pytest.mark.slow
def test_reference_step_agrees_with_the_current_step():
    recall = STEP_CONFIG.recall
    calls, losses = step_programs(recall)
    assert set(calls) == {*PARTS, "reference"}
    assert losses["full"].shape == losses["reference"].shape == (recall.chunk_steps,)
    # The two steps differ in where the batches are drawn (per chunk or inside each step:
    # the same bits, tests/test_recall_trainer.py) and in how each gather's table gradient is
    # summed (a scatter-add or a one-hot product: the same n = B (pairs + 1) terms per
    # table row, perhaps in another order). Two summation orders of n terms differ by at
    # most about n eps relative to the sum of their magnitudes, and Adam's update does not
    # scale with the gradient, so we budget each step n eps |loss| and let it accumulate
    # over the chunk: a budget rather than a proof.
    n = recall.batch_size * (recall.pairs + 1)
    eps = np.finfo(np.float32).eps
    bound = recall.chunk_steps * n * eps * float(np.max(np.abs(losses["full"])))
    assert float(np.max(np.abs(losses["full"] - losses["reference"]))) <= bound
    assert np.isfinite(losses["full"]).all()


@pytest.mark.slow
def test_step_rows_and_profile_rows():
    peak = 1e12
    rows = {r["name"]: r for r in bench_recall_step(STEP_CONFIG, peak)}
    chunk = STEP_CONFIG.recall.chunk_steps
    step_names = [n for n in ROW_NAMES if n.startswith(("train_step_", "profile_step_"))]
    assert sorted(rows) == sorted(step_names)
    ref, peak_row = rows["train_step_vs_reference"], rows["train_step_peak_fraction"]
    assert ref["speedup"] == ref["baseline_seconds"] / ref["ours_seconds"] > 0
    assert "losses" in ref["detail"]
    step = ref["ours_seconds"] / chunk
    assert peak_row["ours_seconds"] == step == rows["profile_step_full"]["ours_seconds"]
    # peak_fraction = FLOPs per step / seconds per step / peak FLOP/s.
    assert peak_row["peak_fraction"] == recall_step_flops(STEP_CONFIG.recall) / step / peak
    assert all(r["ours_seconds"] > 0 and r["detail"] for r in rows.values())


def _loss_jaxpr(recall: RecallConfig) -> str:
    """The jaxpr of the loss's gradient, traced on the shapes of the parameters and of a
    batch (``jax.eval_shape``: tracing needs no values, so nothing is compiled)."""
    mechanism = MECHANISMS["scaled"]
    model = make_model(recall, mechanism)
    params = jax.eval_shape(lambda: init_params(recall, mechanism, 0))
    batch = jax.eval_shape(lambda: sample_batch(jax.random.key(1), 2, recall.task))
    loss = jax.grad(lambda p, b: loss_and_aux(model, p, b)[0])
    return str(jax.make_jaxpr(loss)(params, batch))


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
    real_run = reproduce.subprocess.run

    def run(*args, **kwargs):
        done = real_run(*args, **kwargs)
        seen.append((kwargs["cwd"], done.stdout.strip()))
        return done

    monkeypatch.setattr(reproduce.subprocess, "run", run)
    row = time_reproduce([sys.executable, "-c", CHECK_CACHE], cwd=tmp_path)
    assert row["name"] == "make_reproduce_seconds" == OPTIONAL_ROW_NAMES[-1]
    assert row["ours_seconds"] > 0
    assert "ATTNLAB_JAX_CACHE" in row["detail"] and f"{os.cpu_count()} CPUs" in row["detail"]
    ((cwd, cache),) = seen
    assert cwd == tmp_path
    assert not Path(cache).exists()  # removed afterwards
    assert os.environ.get("ATTNLAB_JAX_CACHE") != cache


#: Writes two compiled programs' entries (and a file that is not one) into the cache.
WRITE_PROGRAMS = (
    "import os, pathlib; d = pathlib.Path(os.environ['ATTNLAB_JAX_CACHE']); "
    "[(d / n).write_text('') for n in ('jit_a-1-cache', 'jit_b-2-cache', 'jit_a-1-atime')]"
)


def test_time_reproduce_counts_programs_and_each_experiments_seconds(tmp_path):
    results = tmp_path / "results"
    sidecars = {"04_a.json": 3.0, "04_b.json": 3.0, "14_x.json": 5.0, "14_y.json": 2.0,
                "cards/scaled/drift.json": 7.0, "cards/comparison.json": 7.0,
                "runs/04-t/04_a.json": 100.0, "checkpoints/15_m/config.json": None}  # fmt: skip
    for name, seconds in sidecars.items():
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        (results / name).write_text(json.dumps({"wall_time_s": seconds}))
    assert script_seconds(results) == {"04": 3.0, "11": 7.0, "14": 7.0}
    row = time_reproduce([sys.executable, "-c", WRITE_PROGRAMS], cwd=tmp_path)
    assert "2 XLA programs compiled" in row["detail"]
    assert "(its sidecars): 04 3, 11 7, 14 7;" in row["detail"]


def test_time_reproduce_raises_on_failure(tmp_path):
    with pytest.raises(RunError, match="status 4.*boom"):
        time_reproduce([sys.executable, "-c", "print('boom'); raise SystemExit(4)"], cwd=tmp_path)


def test_make_reproduce_row_only_when_asked(monkeypatch):
    groups = ("bench_statics", "bench_attention", "bench_recall_step", "bench_lm_step",
              "bench_lm_optimizers")  # fmt: skip
    for group in groups:
        monkeypatch.setattr(compute, group, lambda *_: [])
    monkeypatch.setattr(compute, "measure_peak", lambda *_: (1.0, 1.0))
    ticks = []
    frame = compute.run_bench(QUICK, ticks.append)
    assert list(frame["name"]) == ["peak_matmul_f32"]
    assert len(ticks) == compute.GROUPS
    ticks.clear()
    frame = compute.run_bench(QUICK, ticks.append, [sys.executable, "-c", "pass"])
    assert list(frame["name"]) == ["peak_matmul_f32", "make_reproduce_seconds"]
    assert len(ticks) == compute.GROUPS + 1


def test_reproduce_and_gemma_flags_reach_run_bench(load_script, run_main, tmp_path, monkeypatch):
    from attnlab.harness.cli import REPO_ROOT
    from attnlab.studies.real_model.study import GEMMA_ARGUMENTS, GEMMA_GGUF

    module = load_script("bench")
    calls = []

    def fake(config, on_group, reproduce_command=None, gemma=None):
        calls.append((reproduce_command, gemma))
        return pd.DataFrame([{"name": "x", "ours_seconds": 1.0}]).reindex(columns=list(COLUMNS))

    monkeypatch.setattr(module, "run_bench", fake)
    out = tmp_path / "b.csv"
    assert run_main(module, ["--quick", "--quiet", "--out", out]) == 0
    assert run_main(module, ["--quick", "--quiet", "--reproduce", "--out", out]) == 0
    assert run_main(module, ["--quick", "--quiet", "--gemma", "--out", out]) == 0
    gemma = (REPO_ROOT / GEMMA_GGUF, GEMMA_ARGUMENTS)
    assert calls == [(None, None), (REPRODUCE_COMMAND, None), (None, gemma)]


def test_time_gemma_refuses_a_missing_file_in_one_line(tmp_path):
    """``bench.py --gemma`` before ``make gemma``: a RunError naming the file and the target."""
    from attnlab.harness.errors import RunError
    from attnlab.studies.bench.gemma import time_gemma
    from attnlab.studies.real_model.study import GEMMA_ARGUMENTS

    with pytest.raises(RunError, match="missing: run `make gemma` first"):
        time_gemma(tmp_path / "gemma.gguf", GEMMA_ARGUMENTS)


def test_markdown_profile_paragraph():
    rows = [{"name": f"profile_step_{p}", "ours_seconds": 1e-3, "detail": "d"} for p in PARTS]
    rows.append({"name": "train_step_vs_reference", "ours_seconds": 1.0, "speedup": 2.5})
    frame = pd.DataFrame(rows).reindex(columns=list(COLUMNS))
    text = bench_markdown(frame)
    assert "**Profile of one recall step.**" in text and "forward_backward 1 ms" in text
    assert "2.50x the step before the speed-ups" in text and "`make bench`" in text


def test_interleaved_timing_runs_round_robin():
    # One warm-up call each, then every round calls each function once, in order.
    calls: list[str] = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    seconds = interleaved_median_seconds(fns, 3)
    assert calls == ["a", "b"] + ["a", "b"] * 3
    assert set(seconds) == {"a", "b"} and all(s >= 0 for s in seconds.values())


@pytest.mark.slow  # three LM programs compiled at QUICK's sizes (30 s of CPU cold)
def test_lm_step_rows():
    """The LM rows at QUICK's tiny sizes: the speed-up is the ratio of the two timings,
    peak_fraction is FLOPs / seconds / peak, and the ledger's row is the step with and
    without the ledger."""
    peak = 1e12
    rows = {r["name"]: r for r in bench_lm_step(QUICK, peak)}
    assert sorted(rows) == ["lm_ledger_overhead", "lm_step_peak_fraction", "lm_step_vs_peer"]
    peer, peak_row = rows["lm_step_vs_peer"], rows["lm_step_peak_fraction"]
    assert peer["speedup"] == peer["baseline_seconds"] / peer["ours_seconds"] > 0
    step = peer["ours_seconds"] / QUICK.lm.steps
    assert peak_row["ours_seconds"] == step
    assert peak_row["peak_fraction"] == lm_step_flops(QUICK.lm) / step / peak
    assert "tokens/s" in peak_row["detail"] and "first-step losses" in peer["detail"]
    ledger = rows["lm_ledger_overhead"]
    assert ledger["baseline_seconds"] == step < ledger["ours_seconds"]
    assert 0 < ledger["speedup"] < 1 and "% per step" in ledger["detail"]


#: Two layers, so that the parameters' mapping below is checked past the first block.
PEER_LM = LMConfig(d_model=16, d_head=8, n_layers=2, seq_len=8, batch_size=2, steps=2, warmup=0)


def _as_peer(params: dict, lm: LMConfig) -> dict:
    """Our CausalLM's parameters in PeerLM's layout (flax names layers by class and call
    order: per block 2 LayerNorms and 6 DenseGenerals, W_Q, W_K, W_V, W_O, W_1, W_2)."""
    heads, d_head, layers = lm.n_heads, lm.d_head, lm.n_layers
    out = {"Embed_0": {"embedding": params["wte"]}, "wpe": params["wpe"],
           f"LayerNorm_{2 * layers}": params["ln_f"],
           f"DenseGeneral_{6 * layers}": {"kernel": params["lm_head"]}}  # fmt: skip
    for i in range(layers):
        block, attn = params[f"h_{i}"], params[f"h_{i}"]["attn"]
        out[f"LayerNorm_{2 * i}"], out[f"LayerNorm_{2 * i + 1}"] = block["ln_1"], block["ln_2"]
        kernels = [attn[w].reshape(-1, heads, d_head) for w in ("W_Q", "W_K", "W_V")]
        kernels += [attn["W_O"].reshape(heads, d_head, -1), block["W_1"], block["W_2"]]
        out |= {f"DenseGeneral_{6 * i + j}": {"kernel": w} for j, w in enumerate(kernels)}
    return out


def test_peer_is_our_model():
    """With our parameters copied in, the peer computes our logits: same shapes, layout,
    LayerNorm, GELU, scale and causal mask."""
    tokens = jax.random.randint(jax.random.key(1), (2, PEER_LM.seq_len), 0, 256)
    ours = PEER_LM.model(MECHANISMS["scaled"])
    params = ours.init(jax.random.key(0), tokens)["params"]
    peer = PeerLM(PEER_LM)
    copied = _as_peer(params, PEER_LM)
    shapes = jax.eval_shape(lambda: peer.init(jax.random.key(0), tokens)["params"])
    assert jax.tree.map(jnp.shape, copied) == jax.tree.map(lambda x: x.shape, shapes)
    np.testing.assert_allclose(peer.apply({"params": copied}, tokens),
                               ours.apply({"params": params}, tokens)[0], atol=1e-5)  # fmt: skip


def test_peer_starts_at_ln_256():
    """The peer's first loss from its own initialisation: ln 256 + (the output logits'
    variance) / 2, about 0.003 above ln 256 at this width; we allow 0.1 for the batch's 16
    tokens."""
    init, chunk = peer_programs(PEER_LM, 1e-3)
    batches = jax.random.randint(jax.random.key(1), (2, 2, PEER_LM.seq_len + 1), 0, 256)
    _, losses = chunk(init(jax.random.key(0)), batches)
    assert losses.shape == (2,) and abs(float(losses[0]) - np.log(256)) < 0.1


def test_lm_step_flops_counts_the_matmuls():
    """One layer, d 16, T 8, batch 2: 2 (12 d^2 + 256 d) + 4 T d per token, times 3 B T."""
    lm = LMConfig(d_model=16, d_head=8, n_layers=1, seq_len=8, batch_size=2, steps=2, warmup=0)
    assert lm_step_flops(lm) == 3 * 2 * 8 * (2 * (12 * 256 + 256 * 16) + 4 * 8 * 16)


@pytest.mark.slow  # four tiny LM chunks compiled (Muon, AdamW, with and without the clip)
def test_lm_optimizer_rows():
    """Muon's step and the clip's against AdamW's plain step: each row's speed-up is the
    ratio of its two timings."""
    rows = {r["name"]: r for r in bench_lm_optimizers(QUICK)}
    assert sorted(rows) == ["lm_muon_step_vs_adamw", "lm_qk_clip_step_vs_none"]
    for row in rows.values():
        assert row["speedup"] == row["baseline_seconds"] / row["ours_seconds"] > 0
    assert "Muon" in rows["lm_muon_step_vs_adamw"]["detail"]

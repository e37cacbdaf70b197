"""attnlab.studies.optimizer.compute: the long run's checkpoints, at the declared steps
(``CHECKPOINT_FRACTIONS`` snapped to ledger points), each the model's parameters at its step
(a GPT-2 reader's logits are the LM's own), recorded as made, and read by experiment 13."""

from __future__ import annotations

import json
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from support import LM_LOGIT_RTOL as LOGIT_RTOL

from attnlab.core.references import resolve
from attnlab.core.text import TextSource, byte_tokens, stdlib_prose
from attnlab.lm.export import CHECKPOINTS_DIR, write_saved
from attnlab.lm.train import LMConfig, split_text, train_lanes
from attnlab.lm.trajectory import Trajectory
from attnlab.models.files import CONFIG
from attnlab.models.registry import family_of, read_checkpoint
from attnlab.studies.optimizer.compute import Cell, OptimizerConfig, long_cell
from attnlab.studies.optimizer.study import (
    LEDGER_WINDOWS,
    SWEEP_HEADS,
    SWEEP_LAYERS,
    SWEEP_STEPS,
    checkpoint_name,
)

#: A long run of 20 steps (a ledger point per step) of a narrow model (two layers: the runs
#: table's), short windows.
TINY = OptimizerConfig(
    lm=LMConfig(d_model=16, d_head=8, seq_len=16, batch_size=2, steps=20, warmup=2,
                eval_windows=4),
    long_steps=20,
    long_seeds=2,
)  # fmt: skip
#: Its checkpoints: 0, 5%, 10%, 20%, 50% and 100% of 20 steps.
STEPS = (0, 1, 2, 4, 10, 20)
LRS = (1e-2, 1e-1)


@pytest.mark.parametrize(
    ("long_steps", "steps"),
    [(3000, (0, 150, 300, 600, 1500, 3000)),  # the defaults
     (200, (0, 10, 20, 40, 100, 200)),  # --quick
     (20, STEPS),
     # points every 2 and at 45: 2.25 -> 2, 4.5 -> 4, 9 -> 8 (8 and 10 as near: the
     # earlier), 22.5 -> 22, 45
     (45, (0, 2, 4, 8, 22, 45))],
)  # fmt: skip
def test_checkpoint_steps_are_the_fractions_snapped_to_ledger_points(long_steps, steps):
    assert replace(TINY, long_steps=long_steps).checkpoint_steps() == steps


@pytest.fixture(scope="module")
def text():
    return TextSource.of(stdlib_prose()[:20_000], "the first 20,000 characters of 14's prose")


@pytest.fixture(scope="module")
def written(text, tmp_path_factory):
    """The tiny long run of adamw's ``scaled`` at ``LRS``, its checkpoints written as 15
    writes them; its ledger table, the output folder, and the run again with its
    parameters kept at the checkpoint steps (the same seed and compiled programs: the same
    numbers), by step and lane."""
    scaled = resolve("scaled")
    *_, ledger, saved = long_cell(TINY, Cell("adamw", scaled), LRS, text,
                                  lambda _: None)  # fmt: skip
    out = tmp_path_factory.mktemp("out")
    write_saved(out, saved)
    lm = TINY.long_config()  # adamw, no clip: the cell above
    split = split_text(byte_tokens(text.text), lm)
    model = lm.model(scaled.mechanism)
    windows = split.held_out[:LEDGER_WINDOWS, :-1]
    constants = scaled.mechanism.constant_values(lm.d_head)
    seeds = list(TINY.long_seed_values)
    trajectory = Trajectory(model, len(LRS) * len(seeds), windows, constants, keep=STEPS)
    train_lanes(lm, scaled.mechanism, list(LRS), seeds, split, None, trajectory)
    return ledger, out, trajectory.kept


def test_the_long_run_writes_each_lanes_checkpoints_at_the_declared_steps(written, text):
    ledger, out, _ = written
    names = {checkpoint_name("adamw", False, "cosine", lr, step) for lr in LRS
             for step in STEPS}  # fmt: skip
    assert {p.name for p in (out / CHECKPOINTS_DIR).iterdir()} == names
    # the ledger has every seed of the long run (make verify's spread); the checkpoints,
    # one per rate and step, are the first seed's
    assert TINY.long_seeds == 2 and set(ledger.seed) == set(TINY.long_seed_values)
    for folder in (out / CHECKPOINTS_DIR).iterdir():
        assert json.loads((folder / CONFIG).read_text())["attnlab"]["made_by"]["seed"] == TINY.seed
    assert set(STEPS) <= set(ledger.step)  # each at a ledger point
    name = checkpoint_name("adamw", False, "cosine", 0.1, 4)
    assert name == "15_adamw_scaled_cosine_lr0.1_step00004"
    config = json.loads((out / CHECKPOINTS_DIR / name / CONFIG).read_text())
    made_by = config["attnlab"]["made_by"]
    assert config["model_type"] == "gpt2" and config["attnlab"]["mechanism"] == "scaled"
    assert made_by["script"] == "experiments/15_optimizer_drift.py"
    assert (made_by["arm"], made_by["optimizer"], made_by["mechanism"], made_by["qk_clip_tau"],
            made_by["schedule"]) == ("adamw", "adamw", "scaled", None, "cosine")  # fmt: skip
    assert (made_by["lr"], made_by["seed"], made_by["step"]) == (0.1, 0, 4)
    assert (made_by["text_source"], made_by["text_sha256"]) == (text.source, text.sha256)
    assert made_by["lm_config"]["steps"] == 20


def test_each_checkpoint_computes_the_lms_logits_at_its_step(written):
    """A GPT-2 reader of each checkpoint (``attnlab.models``) gives CausalLM's logits at
    the parameters of its lane and step on random windows, within ``LOGIT_RTOL``
    (tests/test_lm_export.py: float32 against float32, 15 matmul roundings of width at
    most 128; here 64) of their largest."""
    _, out, kept = written
    model = TINY.long_config().model(resolve("scaled").mechanism)
    windows = np.random.default_rng(0).integers(0, 256, (4, 16), np.int32)
    ours_of = jax.jit(model.apply)
    for folder in sorted((out / CHECKPOINTS_DIR).iterdir()):
        made_by = json.loads((folder / CONFIG).read_text())["attnlab"]["made_by"]
        lane = LRS.index(made_by["lr"]) * TINY.seeds + made_by["seed"] - TINY.seed  # rate-major
        params = kept[made_by["step"]][lane]
        checkpoint = read_checkpoint(folder)
        tensors = {k: jnp.asarray(v) for k, v in checkpoint.tensors.items()}
        forward = family_of(checkpoint).forward
        theirs, _ = jax.jit(forward, static_argnums=1)(tensors, checkpoint.config, windows)
        ours, _ = ours_of({"params": params}, windows)
        theirs, ours = np.asarray(theirs), np.asarray(ours)
        bound = LOGIT_RTOL * float(np.max(np.abs(ours)))
        assert np.max(np.abs(theirs - ours)) <= bound, folder.name


@pytest.mark.slow  # 13 end to end on one checkpoint, after the tiny run (about 25 s of CPU cold)
def test_13_reads_a_checkpoint_of_the_run(written, load_script, run_main, tmp_path, capsys):
    _, out, _ = written
    checkpoint = out / CHECKPOINTS_DIR / checkpoint_name("adamw", False, "cosine", 0.1, 20)
    prose = tmp_path / "text.txt"
    prose.write_text(stdlib_prose()[:2000], encoding="utf-8")
    results = tmp_path / "13"
    results.mkdir()
    argv = ["--checkpoint", checkpoint, "--text", prose, "--lengths", "16", "--tokens", "96",
            "--counterfactual-length", "16", "--out-dir", results]  # fmt: skip
    assert run_main(load_script("13_real_model"), argv) == 0
    assert "wrote" in capsys.readouterr().out
    heads = pd.read_csv(results / "13_real_model_causal_heads.csv")
    assert set(heads.checkpoint) == {checkpoint.name} and set(heads.mechanism) == {"scaled"}
    assert len(heads) == 2 * 2 * 2  # models (trained, initial) x layers x heads
    assert heads.owner.notna().all()


def test_the_declared_head_steps_are_the_sweeps():
    """``make verify``'s width for clip fractions counts a default sweep run's head-steps."""
    lm = OptimizerConfig().lm
    assert (lm.steps, lm.n_layers, lm.n_heads) == (SWEEP_STEPS, SWEEP_LAYERS, SWEEP_HEADS)

"""attnlab.studies.real_model.causal and experiments/13_real_model.py on GPT-2 checkpoints:
the causal row statistics against their definitions, a tiny random 2-layer GPT-2 end to
end (the real_model study's causal columns), and broken checkpoints: one line naming the
file, exit 2, nothing written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest
from test_experiments_lm_proxy import USER_FILE
from test_models_files import write_tiny_checkpoint
from test_models_gpt2 import _break, write_tiny_gpt2

from attnlab.core.references import load_mechanism
from attnlab.models.files import sha256
from attnlab.studies.real_model.causal import causal_row_statistics
from attnlab.studies.real_model.study import CAUSAL_ARGUMENTS, STUDY

SCRIPT = "13_real_model"
TINY_FLAGS = ["--lengths", "16", "--tokens", "96", "--counterfactual-length", "16"]


def researchers_checkpoint(directory: Path, seed: int = 1) -> tuple[Path, str]:
    """A tiny GPT-2 checkpoint of a researcher's mechanism (14's tests' ``USER_FILE``: cosine
    logits times 4, whose temperature is its own), written beside it and recorded as
    experiment 14 records it; the checkpoint and the file's reference."""
    directory.mkdir()
    (directory / "my_attention.py").write_text(USER_FILE, encoding="utf-8")
    reference = f"{directory / 'my_attention.py'}:cosine"
    ours = {"mechanism": "cosine", "made_by": {"mechanism": reference}}
    mine = {"cosine": load_mechanism(reference)}
    return write_tiny_gpt2(directory / "cosine_gpt2", seed, mine, attnlab=ours), reference


def test_causal_row_statistics_by_hand():
    z = np.asarray([[0.0, 9.0, 9.0], [1.0, 3.0, 9.0], [0.0, 1.0, 2.0]], np.float32)
    mask = np.tril(np.ones((3, 3), bool))
    p = np.where(mask, np.exp(z), 0.0)
    p = (p / p.sum(-1, keepdims=True)).astype(np.float32)
    # one compiled program, rather than one for each of its operations
    stats = jax.tree.map(np.asarray, jax.jit(causal_row_statistics)(z, p, mask))
    # row 1 has keys {1, 3}: std 1, weights e^1, e^3
    w = np.exp([1.0, 3.0]) / np.exp([1.0, 3.0]).sum()
    np.testing.assert_allclose(stats["logit_std"], [0.0, 1.0, np.std([0.0, 1.0, 2.0])], rtol=1e-6)
    np.testing.assert_allclose(stats["max_weight"][1], w.max(), rtol=1e-6)
    np.testing.assert_allclose(
        stats["entropy_ratio"][1], -(w * np.log(w)).sum() / math.log(2), rtol=1e-6
    )
    assert float(stats["saturated"][0]) == 1.0  # one key: weight 1


@pytest.fixture
def tiny(tmp_path):
    """A tiny GPT-2 checkpoint and a text of 300 bytes."""
    checkpoint = write_tiny_gpt2(tmp_path / "ckpt")
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 8)
    return checkpoint, text


@pytest.mark.slow  # 13 end to end on a tiny GPT-2 (18 s of CPU cold); test_real_model_experiment
# runs the script on a tiny checkpoint in the fast suite
def test_tiny_gpt2_end_to_end(load_script, run_main, tiny, tmp_path, capsys):
    """GPT-2's scaled attention beside a researcher's mechanism, named with --mechanisms:
    the owner comes out both ways in one run."""
    checkpoint, text = tiny
    other, reference = researchers_checkpoint(tmp_path / "other")
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", checkpoint, other, "--mechanisms", reference, "--text", text,
            *TINY_FLAGS, "--out-dir", out]  # fmt: skip
    assert run_main(load_script(SCRIPT), argv) == 0
    assert "wrote" in capsys.readouterr().out
    for name, output in STUDY.outputs.items():
        if output.arguments != CAUSAL_ARGUMENTS:
            continue  # the encoder's tables
        frame = pd.read_csv(out / name)
        assert list(frame.columns) == output.column_names, name
        assert list(frame.checkpoint.unique()) == ["ckpt", "cosine_gpt2"]
        meta = json.loads((out / name).with_suffix(".json").read_text())
        assert meta["flags"]["model_safetensors_sha256"][0] == sha256(
            checkpoint / "model.safetensors"
        )
    heads = pd.read_csv(out / "13_real_model_causal_heads.csv")
    assert len(heads) == 2 * 2 * 2 * 2  # checkpoints x models x layers x heads
    gpt2, mine = heads[heads.checkpoint == "ckpt"], heads[heads.checkpoint == "cosine_gpt2"]
    assert (gpt2.owner == "weights").all()  # GPT-2's bilinear logits: elasticity 2
    assert set(mine.mechanism) == {"cosine"} and (mine.owner == "mechanism").all()  # 0
    assert set(heads.rows) == {6 * 15}  # 96 bytes in rows of 16; rows with n_i >= 2
    drift = pd.read_csv(out / "13_real_model_causal_counterfactuals.csv")
    first = drift.iloc[0]
    assert first.next_token_loss_change == 0.0 and first.top1_agreement == 1.0


def test_a_researchers_checkpoint_without_its_file_is_one_line(
    load_script, run_main, tiny, tmp_path, capsys
):
    _, text = tiny
    checkpoint, reference = researchers_checkpoint(tmp_path / "mine")
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", checkpoint, "--text", text, *TINY_FLAGS, "--out-dir", out]
    assert run_main(load_script(SCRIPT), argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--mechanisms path/to/your_file.py:" in err
    assert f"--mechanisms {reference}" not in err  # never offered as a command to run
    assert not any(out.iterdir())


def test_two_checkpoints_of_one_folder_name_are_refused(
    load_script, run_main, tiny, tmp_path, capsys
):
    checkpoint, text = tiny  # the tables name a checkpoint by its folder: rows would mix
    namesake = write_tiny_gpt2(tmp_path / "elsewhere" / "ckpt", seed=1)
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", checkpoint, namesake, "--text", text, *TINY_FLAGS, "--out-dir", out]
    assert run_main(load_script(SCRIPT), argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--checkpoint" in err and "'ckpt'" in err
    assert not any(out.iterdir())


def test_bert_among_several_checkpoints_is_refused(load_script, run_main, tiny, tmp_path, capsys):
    checkpoint, text = tiny
    bert = write_tiny_checkpoint(tmp_path / "bert")
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", checkpoint, bert, "--text", text, *TINY_FLAGS, "--out-dir", out]
    assert run_main(load_script(SCRIPT), argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--checkpoint" in err
    assert not any(out.iterdir())


@pytest.mark.parametrize(
    "how",
    ["missing tensor", "wrong shape", "unknown model_type", "nan weight", "a billion layers"],
)
def test_broken_gpt2_one_line_exit_2_nothing_written(
    load_script, run_main, tiny, tmp_path, capsys, how
):
    checkpoint, text = tiny
    name = _break(checkpoint, how)
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", checkpoint, "--text", text, *TINY_FLAGS, "--out-dir", out]
    assert run_main(load_script(SCRIPT), argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--checkpoint" in err and name in err
    assert not any(out.iterdir())


def test_lengths_past_the_position_table_are_refused(load_script, run_main, tiny, tmp_path, capsys):
    checkpoint, text = tiny
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", checkpoint, "--text", text, "--lengths", "32", "--tokens", "96",
            "--counterfactual-length", "32", "--out-dir", out]  # fmt: skip
    assert run_main(load_script(SCRIPT), argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--lengths" in err
    assert not any(out.iterdir())

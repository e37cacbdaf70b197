"""experiments/13_real_model.py end to end on a tiny BERT-layout checkpoint written here,
and its one-line exits on broken checkpoints and bad flags."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from events import fifo_with_a_writer
from support import BROKEN_BERT, TINY_WORDS, break_bert, write_tiny_bert

from attnlab.models.files import sha256
from attnlab.studies.real_model.study import STUDY

SCRIPT = "13_real_model"
TINY_FLAGS = ["--lengths", "16", "--tokens", "60", "--counterfactual-length", "16"]


@pytest.fixture
def tiny(tmp_path):
    """A tiny checkpoint and a text of 200 of its words."""
    checkpoint = write_tiny_bert(tmp_path / "ckpt")
    text = tmp_path / "text.txt"
    text.write_text(" ".join(TINY_WORDS[i * 7 % len(TINY_WORDS)] for i in range(200)))
    return checkpoint, text


def test_tiny_checkpoint_end_to_end(load_script, run_main, tiny, tmp_path, capsys):
    checkpoint, text = tiny
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", checkpoint, "--text", text, *TINY_FLAGS, "--out-dir", out]
    assert run_main(load_script(SCRIPT), argv) == 0
    assert "wrote" in capsys.readouterr().out
    for name, output in STUDY.outputs.items():
        if output.arguments:
            continue  # 13 on GPT-2 checkpoints: test_real_model_causal
        frame = pd.read_csv(out / name)
        assert list(frame.columns) == output.column_names, name
        meta = json.loads((out / name).with_suffix(".json").read_text())
        assert meta["flags"]["weights_sha256"] == sha256(checkpoint / "model.safetensors")
        assert meta["flags"]["text_source"] == str(text)
    heads = pd.read_csv(out / "13_real_model_heads.csv")
    assert len(heads) == 2 * 2 * 2  # models x layers x heads
    assert (heads.owner == "weights").all()  # bilinear logits: elasticity 2
    drift = pd.read_csv(out / "13_real_model_counterfactuals.csv")
    assert drift.cosine_mean.iloc[0] == pytest.approx(1.0, abs=1e-6)  # alpha = 1: the model


@pytest.mark.parametrize("how", BROKEN_BERT)
def test_broken_checkpoint_one_line_exit_2_nothing_written(
    load_script, run_main, tiny, tmp_path, capsys, how
):
    """Each broken checkpoint of ``support.break_bert`` (NaN or integer weights, a billion
    layers, a loop of links, a bad max_seq_length, ...): exit 2, one line, nothing written."""
    checkpoint, text = tiny
    name = break_bert(checkpoint, how)
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", checkpoint, "--text", text, *TINY_FLAGS, "--out-dir", out]
    assert run_main(load_script(SCRIPT), argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--checkpoint" in err and name in err
    assert "Traceback" not in err
    assert not any(out.iterdir())


def test_a_checkpoint_folder_that_is_a_loop_of_links_is_one_line(
    load_script, run_main, tiny, tmp_path, capsys
):
    _, text = tiny
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", loop, "--text", text, *TINY_FLAGS, "--out-dir", out]
    assert run_main(load_script(SCRIPT), argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--checkpoint: " in err and str(loop) in err
    assert not any(out.iterdir())


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--text", "/nonexistent/text.txt"], "--text"),
        (["--tokens", "100000"], "--tokens"),
        (["--counterfactual-length", "32"], "--counterfactual-length"),
        (["--lengths", "16", "128"], "--lengths"),
    ],
)
def test_bad_flags_one_line_exit_2(load_script, run_main, tiny, tmp_path, capsys, argv, flag):
    checkpoint, text = tiny
    out = tmp_path / "out"
    out.mkdir()
    base = ["--checkpoint", checkpoint, "--text", text, *TINY_FLAGS, "--out-dir", out]
    assert run_main(load_script(SCRIPT), [*base, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err
    assert not any(out.iterdir())


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_text_that_is_no_regular_file_is_one_line(load_script, run_main, tiny, tmp_path, capsys):
    """``--text`` a FIFO waited for a writer (and ``/dev/zero`` read until memory filled):
    refused naming --text and what the path is, before the checkpoint is read."""
    checkpoint, _ = tiny
    out = tmp_path / "out"
    out.mkdir()
    fifo = tmp_path / "fifo"
    argv = ["--checkpoint", checkpoint, "--text", fifo, *TINY_FLAGS, "--out-dir", out]
    with fifo_with_a_writer(fifo):
        assert run_main(load_script(SCRIPT), argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--text: " in err and "is a FIFO" in err
    assert not any(out.iterdir())

"""experiments/15_optimizer_drift.py end to end at tiny sizes: --help, bad input (one line,
exit 2, nothing written), the tables' columns as declared, and byte-identical CSVs when run
twice with the same flags."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from events import fifo_with_a_writer

from attnlab.studies.optimizer.study import (
    CURVES,
    CURVES_CSV,
    LEDGER,
    LEDGER_CSV,
    RUNS,
    RUNS_CSV,
    checkpoint_name,
)

CSVS = {RUNS_CSV: RUNS, CURVES_CSV: CURVES, LEDGER_CSV: LEDGER}
#: Both optimizers (Muon with its AdamW side pinned), scaled with and without the clip, two
#: rates (10x apart), 4 steps, a tau sweep of one tau (signed and on |z|), a long run of 20
#: on one seed (its ledger at every step; cosine, and WSD with the clip), at a tau low
#: enough for the clip to fire.
TINY = ["--optimizers", "adamw", "muon_pinned", "--mechanisms", "scaled", "--lrs", "1e-2", "1e-1",
        "--steps", "4", "--seeds", "1", "--taus", "0.5", "--long-tau", "0.5", "--long-steps",
        "20", "--long-seeds", "1", "--qk-clip", "0.5", "--text", "{text}", "--long-text",
        "{text}", "--quiet"]  # fmt: skip


@pytest.fixture(scope="module")
def script(load_script):
    return load_script("15_optimizer_drift")


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    """A small text of the suite's default prose, read fast (the long run's default, the
    standard library, is 4.7 MB)."""
    from attnlab.core.text import stdlib_prose

    path = tmp_path_factory.mktemp("text") / "prose.txt"
    path.write_text(stdlib_prose()[:40_000], encoding="utf-8")
    return path


def _flags(text, *more):
    return [f.format(text=text) for f in TINY] + list(more)


def test_help_exits_0(script, run_main, capsys):
    assert run_main(script, ["--help"]) == 0
    out = capsys.readouterr().out
    assert "--qk-clip" in out and "--long-steps" in out and "--optimizers" in out
    assert "--side-lr" in out and "--qk-clip-on" in out and "--taus" in out


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--width", "40"], "--width"),
        (["--optimizers", "sgd"], "--optimizers: invalid choice"),
        (["--optimizers", "muon", "muon"], "--optimizers: given twice"),
        (["--side-lr", "0"], "--side-lr"),
        (["--qk-clip-on", "both"], "--qk-clip-on"),
        (["--taus", "10", "10"], "--taus"),
        (["--taus", "0"], "--taus"),
        (["--long-tau", "-1"], "--long-tau"),
        (["--mechanisms", "no_such_mechanism"], "--mechanisms"),
        (["--clipped", "no_such_mechanism"], "--clipped"),
        (["--clipped", "qk_norm"], "--clipped: qk_norm normalises q and k"),  # no handle
        (["--qk-clip", "0"], "--qk-clip"),
        (["--lrs", "-1"], "--lrs"),
        (["--lrs", "1e-2", "1e-2"], "--lrs"),
        (["--steps", "1"], "--steps"),
        (["--long-steps", "5"], "--long-steps"),
        (["--seeds", "0"], "--seeds"),
        (["--long-seeds", "0"], "--long-seeds"),
        (["--long-seeds", str(10**12)], "--long-seeds"),
        (["--text", "/nonexistent/text.txt"], "--text"),
        (["--long-text", "/nonexistent/text.txt"], "--long-text"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    script, run_main, tmp_path, capsys, flags, named
):
    out = tmp_path / "out"
    out.mkdir()
    assert run_main(script, [*flags, "--quiet", "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and "Traceback" not in err
    assert not any(out.iterdir())


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
@pytest.mark.parametrize("flag", ["--text", "--long-text"])
def test_a_text_that_is_no_regular_file_is_one_line(script, run_main, text, tmp_path, capsys, flag):
    """A FIFO waited for a writer (and ``/dev/zero`` read until memory filled): refused
    naming the flag and what the path is."""
    out = tmp_path / "out"
    out.mkdir()
    fifo = tmp_path / "fifo"
    flags = [*_flags(text), flag, str(fifo), "--out-dir", str(out)]
    with fifo_with_a_writer(fifo):
        assert run_main(script, flags) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{flag}: " in err and "is a FIFO" in err
    assert not any(out.iterdir())


@pytest.fixture(scope="module")
def tiny_runs(script, run_main, text, tmp_path_factory):
    """The tiny run twice, each into a folder of its own."""
    folders = []
    for name in ("a", "b"):
        out = tmp_path_factory.mktemp(name)
        assert run_main(script, [*_flags(text), "--jobs", "1", "--out-dir", str(out)]) == 0
        folders.append(out)
    return folders


@pytest.mark.slow  # two tiny runs: 14 programs compiled each (about 100 s of CPU cold)
def test_a_tiny_runs_tables_have_the_declared_columns(tiny_runs, text):
    out = tiny_runs[0]
    for name, output in CSVS.items():
        frame = pd.read_csv(out / name)
        assert list(frame.columns) == output.column_names, name
    runs = pd.read_csv(out / RUNS_CSV)
    assert set(runs.part) == {"sweep", "taus", "long"}
    assert set(runs.optimizer) == {"adamw", "muon"}
    assert set(runs.side) == {"shared", "pinned"} and set(runs.schedule) == {"cosine", "wsd"}
    pinned = runs[runs.side == "pinned"]
    assert (pinned.optimizer == "muon").all() and pinned.side_lr.eq(1e-2).all()
    shared = runs[runs.side == "shared"]
    assert (shared.side_lr == shared.lr).all()
    assert set(runs.qk_clip_on) == {"none", "signed", "abs"}
    assert runs[runs.part == "long"].steps.eq(20).all()
    probed = runs[(runs.part == "long") & runs.qk_clip_tau.notna()]
    assert (probed.probes > 0).all()  # the clip's probe every PROBE_EVERY steps
    clipped = runs[runs.qk_clip_tau.notna()]
    assert (clipped.first_clip_step >= 0).any()  # tau 0.5 is low enough to fire
    assert runs[runs.qk_clip_tau.isna()].first_clip_step.eq(-1).all()
    ledger = pd.read_csv(out / LEDGER_CSV)
    assert ledger[ledger.step == 0].q_moved.eq(0).all()
    assert set(ledger.step) == set(range(0, 21))  # a point per step of a 20-step run
    sidecar = json.loads((out / RUNS_CSV.replace(".csv", ".json")).read_text())
    assert len(sidecar["flags"]["long_text_sha256"]) == 64
    long = runs[runs.part == "long"]  # each lane's model at 0, 5, 10, 20, 50, 100% of 20 steps
    arm = long.optimizer.where(long.side == "shared", long.optimizer + "_pinned")
    names = {checkpoint_name(a, pd.notna(r.qk_clip_tau), r.schedule, r.lr, step)
             for a, r in zip(arm, long.itertuples(), strict=True)
             for step in (0, 1, 2, 4, 10, 20)}  # fmt: skip
    assert {p.name for p in (out / "checkpoints").iterdir()} == names


@pytest.mark.slow  # a tiny run of two arms: about 100 s of CPU cold
def test_quick_with_adamw_and_lion_runs_through_to_the_report(
    script, run_main, text, tmp_path, tmp_path_factory
):
    """``15 --quick --optimizers adamw lion`` (at tiny sizes: a flag given beside --quick
    wins) trains optax's Lion beside AdamW, and the report's section and figure read its
    tables: Lion is compared against AdamW in (a), (e) reads qk_norm under Lion (absent
    here, so it says so), no Muon arm is named."""
    from attnlab.harness.tables import Tables
    from attnlab.studies.optimizer.figure import fig14_optimizer
    from attnlab.studies.optimizer.report import section

    out = tmp_path / "out"
    out.mkdir()
    tiny = ["--steps", "4", "--long-steps", "20", "--taus", "0.5", "--long-tau", "0.5",
            "--text", str(text), "--long-text", str(text), "--quiet"]  # fmt: skip
    flags = ["--quick", "--optimizers", "adamw", "lion", *tiny, "--out-dir", str(out)]
    assert run_main(script, flags) == 0
    runs = pd.read_csv(out / RUNS_CSV)
    assert set(runs.optimizer) == {"adamw", "lion"} and set(runs.side) == {"shared"}
    text_ = section(Tables(out, lambda name: "15"))
    assert "under Lion than under AdamW" in text_ and "Arms: AdamW; Lion." in text_
    assert "qk_norm was not trained under Lion" in text_
    assert "Muon with" not in text_ and "muon_pinned" not in text_
    figures = fig14_optimizer(Tables(out, lambda name: "15"), tmp_path_factory.mktemp("fig"))
    assert {p.suffix for p in figures} == {".png", ".pdf"}


@pytest.mark.slow  # shares tiny_runs
def test_the_same_flags_give_byte_identical_csvs(tiny_runs):
    a, b = tiny_runs
    for name in CSVS:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.parametrize(
    ("flags", "named"),
    [(["--width", "16000000"], "--width"), (["--steps", str(10**12)], "--steps"),
     (["--long-steps", str(10**12)], "--long-steps")],
)  # fmt: skip
def test_an_absurd_size_is_refused_in_one_line(script, run_main, tmp_path, capsys, flags, named):
    out = tmp_path / "out"
    out.mkdir()
    assert run_main(script, [*flags, "--quiet", "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and "needs about" in err
    assert not any(out.iterdir())


def _no_training(*args, **kwargs):
    raise AssertionError("training started: the bad input was not refused before the work")


@pytest.mark.parametrize("tau", ["1e-300", "1e-40", "1e39"])
def test_a_tau_float32_cannot_hold_is_refused_before_training(
    script, run_main, text, tmp_path, capsys, monkeypatch, tau
):
    """``--qk-clip 1e-300`` is 0 in float32, where the clip computes (1e-40 subnormal, 1e39
    infinite): one line naming --qk-clip, exit 2, nothing written, before any training
    (the tables would record the value given and the clip use another)."""
    monkeypatch.setattr(script, "run_study", _no_training)
    out = tmp_path / "out"
    out.mkdir()
    assert run_main(script, [*_flags(text), "--qk-clip", tau, "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--qk-clip" in err and "float32" in err
    assert not any(out.iterdir())


@pytest.mark.parametrize("layout", ["checkpoints a link outside", "a folder where a CSV goes"])
def test_an_output_folder_the_outputs_cannot_go_into_is_refused_before_training(
    script, run_main, text, tmp_path, capsys, monkeypatch, layout
):
    """Every path the run writes is checked before it trains (the final move refused it
    after, all work lost): ``checkpoints/`` a link leading outside --out-dir, or a folder
    named as a CSV, is one line naming --out-dir, exit 2, nothing written anywhere."""
    monkeypatch.setattr(script, "run_study", _no_training)
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir(), elsewhere.mkdir()
    if layout == "checkpoints a link outside":
        (out / "checkpoints").symlink_to(elsewhere, target_is_directory=True)
    else:
        (out / RUNS_CSV).mkdir()
    before = sorted(p.name for p in out.iterdir())
    assert run_main(script, [*_flags(text), "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out-dir" in err and "Traceback" not in err
    assert ("checkpoints" if "link" in layout else RUNS_CSV) in err
    assert sorted(p.name for p in out.iterdir()) == before and not any(elsewhere.iterdir())

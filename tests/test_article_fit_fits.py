"""The fits of experiment 09 (``attnlab.studies.article_fit.fits``), the second's members,
its cuts, its prediction and the script ``12_second_fit.py`` at tiny settings."""

import json

import numpy as np
import pandas as pd
import pytest

from attnlab.recall.config import RecallConfig
from attnlab.recall.readings import (
    FAMILY_2,
    SMOOTHINGS,
    get_reading,
    pair_name,
    reading_config,
)
from attnlab.recall.tables import summary_frame
from attnlab.recall.trainer import Run, train_runs
from attnlab.studies.article_fit.compute import finalist_readings, predict, predicted_readings
from attnlab.studies.article_fit.fits import get_pair, pass_a_readings
from attnlab.studies.article_fit.study import ARTICLE_SCALED, QUALITY, SECOND_CSVS

SCRIPT = "12_second_fit"
CSVS = tuple(SECOND_CSVS)
FILTER = "sum-pytorch-nobias-d24-b"
TINY = [
    "--family-filter", FILTER, "--seeds", "2", "--pass-a-seeds", "1", "--fit-seeds", "2",
    "--milestone-steps", "20",
    "--finalists", "1", "--run-lengths", "30", "40", "--predict-seeds", "2", "--quiet",
]  # fmt: skip


def test_every_member_round_trips_by_name():
    for reading, smoothing in FAMILY_2[:: len(FAMILY_2) // 50]:
        assert get_pair(pair_name(reading, smoothing)) == (reading, smoothing)
    with pytest.raises(ValueError, match="smoothing"):
        get_pair("concat-natural-nobias-d24-b96/mean7")


def test_pass_a_keeps_the_bar_nearest_first():
    target = ARTICLE_SCALED["grad_norm_wq"]
    frame = pd.DataFrame({
        "name": ["in_high", "in_low", "exact", "outside_bar", "not_kept"],
        "grad_norm_wq_scaled": [target * (1 + QUALITY), target * 0.9, target, target * 1.3,
                                target],
        "kept": [True, True, True, True, False],
    })  # fmt: skip
    assert pass_a_readings(frame) == ["exact", "in_low", "in_high"]


def test_finalists_are_distinct_readings_best_first():
    ranked = pd.DataFrame({
        "reading": ["a/ema0.9", "a/mean25", "b/mean10", "a/ema0.99", "c/mean50"],
        "rank": [1, 2, 3, 4, 5],
    })  # fmt: skip
    reading_of = {m: m.rpartition("/")[0] for m in ranked.reading}
    assert finalist_readings(ranked, reading_of, 2) == ["a", "b"]
    assert finalist_readings(ranked, reading_of, 5) == ["a", "b", "c"]


@pytest.mark.slow  # two trainings of a reading: about 20 s of CPU, the fast tests' budget
def test_prediction_trained_once_equals_separate_runs():
    # One training per reading, summarised at each member's run length, equals a run of
    # that length alone (same initialisation and data: the same computation, chunked the
    # same way, so equal to float32 rounding of one program against another; the loss's
    # smoothing is applied after training).
    name = "sum-pytorch-nobias-d24-b16"
    members = [(f"{name}/ema0.9", 20), (f"{name}/mean10", 30)]
    _, summary = predict(members, seeds=2, seed=0, resolve=get_pair)
    assert summary.reading.unique().tolist() == [m for m, _ in members]
    config = reading_config(get_reading(name), RecallConfig(seeds=2, seed=0, steps=30))
    alone = train_runs([Run(config, m.mechanism) for m in config.mechanisms])
    mean10 = summary_frame(alone, config, SMOOTHINGS[0])
    mine = summary[summary.reading == members[1][0]].drop(columns="reading")
    numeric = ["grad_wq_step0", "final_loss", "final_attn_entropy", "eval_accuracy"]
    np.testing.assert_allclose(mine[numeric].to_numpy(float), mean10[numeric].to_numpy(float),
                               rtol=1e-5)  # fmt: skip


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, load_script, run_main):
    out = tmp_path_factory.mktemp("fit2")
    assert run_main(load_script(SCRIPT), [*TINY, "--out-dir", out]) == 0
    return out


@pytest.mark.slow  # the script end to end: over 40 s of CPU (the fast tests' budget is 20 s)
def test_tiny_run_writes_all_four_csvs_with_sidecars(tiny_run):
    for name in CSVS:
        assert len(pd.read_csv(tiny_run / name)), name
    screen = pd.read_csv(tiny_run / SECOND_CSVS.screen)
    assert len(screen) == 9 and screen.name.str.contains(FILTER).all()
    scores = pd.read_csv(tiny_run / SECOND_CSVS.scores)
    trained = len(pass_a_readings(screen))
    assert (scores["pass"] == "2a").sum() == trained * len(SMOOTHINGS)
    assert (scores["pass"] == "2b").sum() == len(SMOOTHINGS)
    assert (scores.reading.str.rpartition("/")[2] == scores.smoothing).all()
    summary = pd.read_csv(tiny_run / SECOND_CSVS.summary)
    predicted = predicted_readings(scores)
    assert set(summary.reading) == {m for m, _ in predicted}
    assert set(summary.variant) == {"scaled", "unscaled"} and summary.seed.nunique() == 2
    flags = json.loads((tiny_run / SECOND_CSVS.summary).with_suffix(".json").read_text())["flags"]
    assert flags["readings"] == dict(predicted)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--fit-seeds", "0"], "--fit-seeds"),
        (["--family-filter", "no-such-reading"], "--family-filter"),
        (["--stage", "fit"], SECOND_CSVS.screen),
        (["--stage", "predict"], SECOND_CSVS.scores),
    ],
)
def test_bad_flags_exit_2_with_one_line_and_write_nothing(
    argv, flag, tmp_path, load_script, run_main, capsys
):
    status = run_main(load_script(SCRIPT), [*argv, "--out-dir", tmp_path, "--quiet"])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and flag in err, err
    assert list(tmp_path.iterdir()) == []

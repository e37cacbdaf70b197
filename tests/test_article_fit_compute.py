"""Experiment 09 (article fit): the stage-2 score and the script at tiny settings."""

import json
import lzma
import math

import jax
import numpy as np
import pandas as pd
import pytest

from attnlab.harness.io import compact, sidecar_path
from attnlab.recall.readings import Smoothing
from attnlab.studies.article_fit.compute import (
    median_numbers,
    predicted_readings,
    rank,
    replicate_scores,
    score,
    score_noise,
    score_row,
    seed_numbers,
)
from attnlab.studies.article_fit.study import ARTICLE_SCALED, FIRST_CSVS, NOISE_SE

#: No smoothing: a trailing mean over one step is the raw loss.
RAW = Smoothing("mean1", window=1)

SCRIPT = "09_article_fit"
CSVS = tuple(FIRST_CSVS)
TINY = [
    "--family-filter", "separate-natural-nobias-d16-b", "--seeds", "2", "--fit-seeds", "2",
    "--milestone-steps", "20", "--finalists", "1", "--run-lengths", "30", "40",
    "--predict-seeds", "2", "--candidates", "2", "--quiet",
]  # fmt: skip


def _numbers(factor: float, final_factor: float | None = None, horizon: int = 3000) -> dict:
    """The article's scaled numbers, each times ``factor`` (the final loss by its own)."""
    out = {k: v * factor for k, v in ARTICLE_SCALED.items() if k != "final_loss"}
    out.update(horizon=horizon, censored_1=0, censored_0p1=0)
    if final_factor is not None:
        out["final_loss_1000"] = ARTICLE_SCALED["final_loss"] * final_factor
        out["final_loss_3000"] = ARTICLE_SCALED["final_loss"] * final_factor * 4
    return out


def test_score_is_rms_log_ratio():
    assert score({"a": math.log(2), "b": -math.log(2)}) == pytest.approx(math.log(2))
    assert score({"a": 0.3, "b": math.nan}) == pytest.approx(0.3)
    assert score({"a": math.nan}) != score({"a": math.nan})  # nan


def test_score_ranks_synthetic_candidates():
    # Candidates off by known factors: the ranking is by closeness in log space, either way.
    factors = {"exact": 1.0, "ten_percent_low": 0.9, "ten_percent_high": 1.1,
               "double": 2.0, "half": 0.5, "quadruple": 4.0}  # fmt: skip
    rows = [score_row(n, "2a", _numbers(f), 3, ()) for n, f in factors.items()]
    ranked = rank(pd.DataFrame(rows))
    assert ranked.reading.tolist()[0] == "exact"
    assert set(ranked.reading[1:3]) == {"ten_percent_low", "ten_percent_high"}
    assert set(ranked.reading[3:5]) == {"double", "half"}  # log 2 either side: a tie
    assert ranked.reading.iloc[-1] == "quadruple"
    assert ranked["rank"].tolist() == [1, 2, 3, 4, 5, 6]
    exact = ranked[ranked.reading == "double"].iloc[0]
    assert exact.score == pytest.approx(math.log(2))


def test_final_term_takes_the_best_run_length_and_counts():
    # Same first three terms; the final loss separates them. "good" matches at L = 1000.
    good = score_row("good", "2b", _numbers(1.0, 1.0), 3, (1000, 3000))
    bad = score_row("bad", "2b", _numbers(1.0, 8.0), 3, (1000, 3000))
    assert good["best_run_length"] == 1000 and good["score"] == pytest.approx(0.0)
    assert bad["best_run_length"] == 1000  # 8x beats 32x
    assert bad["score"] == pytest.approx(math.sqrt(math.log(8) ** 2 / 4))
    both = rank(pd.DataFrame([bad, good])).assign(within_noise=[True, False])
    assert predicted_readings(both)[0] == ("good", 1000)


def test_censored_milestones_count_at_the_horizon():
    # Loss stays at 2 for two seeds (never crosses 1.0); a third seed crosses early.
    loss = np.full((3, 50), 2.0, np.float32)
    loss[2, 5:] = 0.01
    grads = np.full((3, 50), 0.1085, np.float32)
    metrics = {"loss": loss, "grad_norm_wq": grads}
    numbers = scaled_numbers(metrics, smoothing=RAW, run_lengths=(40, 100))
    assert numbers["step_loss_below_1"] == 50 and numbers["censored_1"] == 2
    assert numbers["final_loss_40"] == pytest.approx(2.0) and "final_loss_100" not in numbers
    # An explicit horizon (an early-stopped run's intended length) is the censored value.
    assert scaled_numbers(metrics, RAW, (), horizon=700)["step_loss_below_1"] == 700


def scaled_numbers(metrics, smoothing, run_lengths, horizon=None) -> dict:
    """The scaled run's numbers, as the fit computes them: per seed, then the median."""
    horizon = metrics["loss"].shape[1] if horizon is None else horizon
    return median_numbers(seed_numbers(metrics, smoothing, run_lengths, horizon), horizon)


def _metrics(factor: float, spread: float, seeds: int = 5, steps: int = 1200) -> dict:
    """Loss curves crossing 1.0 near step 224 x factor and 0.1 near 436 x factor (log-linear
    decay), seed ``i`` slower by ``spread * i``; step-0 norms 0.1085 x factor."""
    loss, grads = np.zeros((seeds, steps)), np.zeros((seeds, steps))
    for i in range(seeds):
        f = factor * (1 + spread * (i - (seeds - 1) / 2))
        rate = math.log(10) / ((436 - 224) * f)  # one decade between the milestones
        loss[i] = np.exp(-rate * (np.arange(steps) - 224 * f))
        grads[i, 0] = 0.1085 * f
    return {"loss": loss, "grad_norm_wq": grads}


def test_identity_resample_gives_the_score():
    # The bootstrap recomputes the score; with every replicate the seeds themselves it is it.
    metrics = _metrics(1.3, 0.05)
    per_seed = seed_numbers(metrics, RAW, (1000,))
    row = score_row("r", "2b", scaled_numbers(metrics, RAW, (1000,)), 5, (1000,))
    replicates = replicate_scores(per_seed, np.tile(np.arange(5), (3, 1)), (1000,))
    # Same float64 operations on the same values: equal to float64 rounding (eps 2.2e-16
    # times the few operations of a log and a root).
    np.testing.assert_allclose(replicates, row["score"], rtol=1e-12)


@pytest.mark.parametrize(("factor", "within"), [(1.02, True), (1.6, False)])
def test_score_noise_separates_a_near_reading_from_a_far_one(factor, within):
    # The best matches the article; a reading 2% off on every term is inside the noise of
    # seeds spread by 10% each, one 60% off is far outside it (its gap is many SE).
    names = {"best": _metrics(1.0, 0.1), "other": _metrics(factor, 0.1)}
    per_seed = {n: seed_numbers(m, RAW, ()) for n, m in names.items()}
    rows = [score_row(n, "2a", scaled_numbers(m, RAW, ()), 5, ()) for n, m in names.items()]
    frame = score_noise(rank(pd.DataFrame(rows)), per_seed, (), jax.random.key(0), 500)
    best, other = (frame[frame.reading == n].iloc[0] for n in ("best", "other"))
    assert best.within_noise and best.gap_se == 0.0 and best.score_se > 0
    assert bool(other.within_noise) is within
    assert bool(other.score - best.score <= NOISE_SE * other.gap_se) is within


def test_predicted_readings_are_the_last_pass_within_noise_best_first():
    scores = pd.DataFrame({
        "reading": ["a", "b", "c", "b", "a", "c"], "pass": ["2a"] * 3 + ["2b"] * 3,
        "rank": [1, 2, 3, 1, 2, 3], "best_run_length": [None] * 3 + [1500, 1000, 3000],
        "within_noise": [True, True, True, True, True, False],
    })  # fmt: skip
    assert predicted_readings(scores) == [("b", 1500), ("a", 1000)]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, load_script, run_main):
    out = tmp_path_factory.mktemp("fit")
    assert run_main(load_script(SCRIPT), [*TINY, "--out-dir", out]) == 0
    return out


@pytest.mark.slow  # the script end to end: over 30 s of CPU (the fast tests' budget is 20 s)
def test_tiny_run_writes_all_four_csvs_with_sidecars(tiny_run):
    for name in CSVS:
        frame = pd.read_csv(tiny_run / name)
        assert len(frame), name
        sidecar = json.loads(sidecar_path(tiny_run / name).read_text())
        assert sidecar["flags"]["family_filter"] == "separate-natural-nobias-d16-b"
    screen = pd.read_csv(tiny_run / FIRST_CSVS.screen)
    assert len(screen) == 5 and screen.name.str.contains("separate-natural-nobias-d16-b").all()
    scores = pd.read_csv(tiny_run / FIRST_CSVS.scores)
    assert set(scores["pass"]) == {"2a", "2b"} and (scores["pass"] == "2b").sum() == 1
    assert {"score_se", "gap_se", "within_noise"} <= set(scores.columns)
    summary = pd.read_csv(tiny_run / FIRST_CSVS.summary)
    assert set(summary.variant) == {"scaled", "unscaled"} and summary.seed.nunique() == 2
    predicted = predicted_readings(scores)
    assert summary.columns[0] == "reading" and set(summary.reading) == {r for r, _ in predicted}
    curves = pd.read_csv(tiny_run / FIRST_CSVS.curves)
    # The committed curves were compacted by the writer's own function from the plain CSV:
    # the file a run writes is that function of the CSV text.
    written = (tiny_run / FIRST_CSVS.curves).read_bytes()
    raw = lzma.decompress(written)
    assert FIRST_CSVS.curves.endswith(".csv.xz") and compact(raw) == written
    assert raw.decode().startswith("reading,variant,seed,step,")
    for reading, length in predicted:
        assert curves[curves.reading == reading].step.max() + 1 == length
    flags = json.loads((tiny_run / FIRST_CSVS.summary).with_suffix(".json").read_text())["flags"]
    assert flags["readings"] == dict(predicted) and flags["reading"] == predicted[0][0]


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--fit-seeds", "0"], "--fit-seeds"),
        (["--stage", "sideways"], "--stage"),
        (["--run-lengths", "ten"], "--run-lengths"),
        (["--family-filter", "no-such-reading"], "--family-filter"),
        (["--stage", "fit"], "09_fit_screen.csv"),
        (["--stage", "predict"], "09_fit_scores.csv"),
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

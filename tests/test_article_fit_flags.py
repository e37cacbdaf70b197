"""attnlab.studies.article_fit.flags: the fits' flags read once into the settings the
stages run from (``pipeline.FitSettings``): each fit's own flag, the flag it lacks left
out, run lengths sorted, and seeds past the largest a UsageError naming the flag."""

from __future__ import annotations

import pandas as pd
import pytest

from attnlab.harness import cli
from attnlab.studies.article_fit import pipeline
from attnlab.studies.article_fit.fits import FIRST_FIT, SECOND_FIT
from attnlab.studies.article_fit.flags import build_parser, fit_settings
from attnlab.studies.article_fit.study import ARTICLE_SCALED


def settings(spec, *argv: str) -> pipeline.FitSettings:
    return fit_settings(build_parser("test", spec).parse_args(list(argv)))


def test_each_fit_reads_its_own_flag_and_leaves_out_the_other():
    first = settings(FIRST_FIT, "--candidates", "2")
    assert (first.candidates, first.pass_a_seeds, first.fit_seeds) == (2, None, 3)
    second = settings(SECOND_FIT, "--pass-a-seeds", "2")
    assert (second.candidates, second.pass_a_seeds, second.fit_seeds) == (0, 2, 5)


def test_the_settings_hold_every_stage_flag():
    chosen = settings(FIRST_FIT, "--stage", "fit", "--seed", "3", "--run-lengths", "900", "700",
                      "900", "--family-filter", "gpt", "--predict-seeds", "4")  # fmt: skip
    assert (chosen.stage, chosen.seed, chosen.family_filter) == ("fit", 3, "gpt")
    assert (chosen.run_lengths, chosen.predict_seeds) == ((700, 900), 4)


@pytest.mark.parametrize(
    ("spec", "flag"),
    [(FIRST_FIT, "--seeds"), (FIRST_FIT, "--fit-seeds"), (SECOND_FIT, "--pass-a-seeds"),
     (FIRST_FIT, "--predict-seeds")],
)  # fmt: skip
def test_seeds_past_the_largest_name_their_flag(spec, flag):
    one_each = ["--seeds", "1", "--fit-seeds", "1", "--predict-seeds", "1"]
    one_each += ["--pass-a-seeds", "1"] if spec is SECOND_FIT else []
    assert settings(spec, "--seed", str(cli.MAX_SEED), *one_each).seed == cli.MAX_SEED
    with pytest.raises(cli.UsageError, match=f"^{flag}: "):
        settings(spec, "--seed", str(cli.MAX_SEED), *one_each, flag, "2")


def test_the_candidate_rule_reads_the_settings():
    """The first fit keeps ``--candidates`` of the kept readings, nearest the article's
    step-0 norm first; the second fit's rule (the quality bar) has no such number."""
    norm = ARTICLE_SCALED["grad_norm_wq"]
    screen = pd.DataFrame(
        {"name": ["far", "near", "dropped"], "grad_norm_wq_scaled": [10 * norm, norm, norm],
         "kept": [True, True, False]}
    )  # fmt: skip
    first = pipeline.candidates_of(FIRST_FIT, screen, settings(FIRST_FIT, "--candidates", "1"))
    assert first == ["near"]
    assert pipeline.candidates_of(FIRST_FIT, screen, settings(FIRST_FIT)) == ["near", "far"]
    assert pipeline.candidates_of(SECOND_FIT, screen, settings(SECOND_FIT)) == ["near"]

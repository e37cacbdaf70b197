"""attnlab.studies.card.task_card: the two verdicts of a card on a registered task, each
both ways on hand-made tables, and card.md naming what it read."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from attnlab.studies.card.task_card import TaskCard, stable, task_card_markdown, trains


def card(*rows) -> TaskCard:
    """The training table from ``(lr, initial, initial_se, final, final_se, diverged)``."""
    columns = ["lr", "initial_loss", "initial_loss_se", "final_loss", "final_loss_se",
               "diverged_step"]  # fmt: skip
    frame = pd.DataFrame([dict(zip(columns, r, strict=True)) for r in rows])
    return TaskCard(frame.assign(mechanism="m", max_logit=math.nan))


def test_trains_reads_the_best_rate_against_two_ses_both_ways():
    """Best rate 0.1 (final 1.0): a drop of 0.8 over an SE of hypot(0.1, 0.1) = 0.14 is
    5.7 SE, trained; a drop of 0.2 is 1.4 SE, not; every rate diverged, not."""
    learned = card((1e-2, 1.8, 0.1, 1.5, 0.1, -1), (1e-1, 1.8, 0.1, 1.0, 0.1, -1))
    verdict = trains(learned, "m")
    assert verdict.passed is True and "lr 0.1: 1.800 -> 1.000 (5.7 SE)" in verdict.value
    assert trains(card((1e-1, 1.8, 0.1, 1.6, 0.1, -1)), "m").passed is False
    assert trains(card((1e-1, 1.8, 0.1, math.nan, math.nan, 12)), "m").passed is False


def test_stable_names_each_rate_that_diverged_both_ways():
    assert stable(card((1e-2, 1.8, 0.1, 1.5, 0.1, -1)), "m").passed is True
    verdict = stable(card((1e-2, 1.8, 0.1, 1.5, 0.1, -1), (1.0, 1.8, 0.1, math.nan, 0, 7)), "m")
    assert verdict.passed is False and verdict.value == "lr 1 at step 7"


def test_card_md_lists_the_rows_and_the_verdicts():
    tables = card((1e-1, 1.8, 0.1, 1.0, 0.1, -1))
    verdicts = pd.DataFrame([{"mechanism": "m", **v._asdict()}
                             for v in (trains(tables, "m"), stable(tables, "m"))])  # fmt: skip
    text = task_card_markdown(tables, verdicts, "m", "m", "cmd", {}, quick=True)
    assert text.startswith("# Quick card on a registered task: m")
    assert "| m | 0.1 | 1.800 ± 0.100 | 1.000 ± 0.100 | — |" in text


def test_no_spread_over_the_windows_is_undetermined():
    verdict = trains(card((1e-1, 1.8, 0.0, 1.0, 0.0, -1)), "m")
    assert (
        verdict.passed is None
        and "no spread" in verdict.value
        and "1.800 -> 1.000" in verdict.value
    )


def test_the_settings_record_a_configuration_the_same_way_every_time_or_refuse():
    """A dataclass by its fields, a mechanism reference by its text, numpy numbers as
    numbers; a function (whose text holds its address) is refused."""
    import dataclasses

    import numpy as np

    from attnlab.core.references import resolve
    from attnlab.studies.card.task_card import recorded

    @dataclasses.dataclass(frozen=True)
    class Inner:
        rate: np.float32 = np.float32(0.5)

    @dataclasses.dataclass(frozen=True)
    class Config:
        steps: int = 3
        inner: Inner = Inner()
        mechanisms: tuple = (resolve("scaled"),)

    assert recorded(Config()) == {"steps": 3, "inner": {"rate": 0.5}, "mechanisms": ["scaled"]}
    with pytest.raises(ValueError, match="cannot record the same way twice"):
        recorded({"logits": lambda q, k: q})

"""Experiment 14's attention-sink answers (``attnlab.studies.lm_proxy.sinks``): each of
(f)-(j) on made-up sink tables where it holds and where it does not, and its table."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

from attnlab.studies.lm_proxy.sinks import per_seed, sink_answers, sink_table, uniform_first_weight

HEADS = 4


def sink_frame(first: dict[str, list[float]], loss: dict[str, float] | None = None,
               null: float = 0.0, drifted: bool = True) -> pd.DataFrame:  # fmt: skip
    """A sink table: per mechanism, seed (one per value of ``first[m]``) and head, every
    head's first-position weight the seed's value; the drifted rows' loss ``loss[m]`` (2.0
    at the best rate)."""
    loss = loss or {}
    rows = []
    for mechanism, values in first.items():
        for seed, value in enumerate(values):
            roles = ("best", "drifted") if drifted else ("best",)
            for role, head in itertools.product(roles, range(HEADS)):
                rows.append({
                    "mechanism": mechanism, "d_model": 64, "seed": seed, "weights": role,
                    "layer": 0, "head": head, "lr": 0.01 if role == "best" else 0.1,
                    "final_val_loss": 2.0 if role == "best" else loss.get(mechanism, 3.0),
                    "first_weight": value, "null_weight": null if mechanism == "sink" else 0.0,
                    "sink_head": value > 0.3,
                })  # fmt: skip
    return pd.DataFrame(rows)


def answers(frame: pd.DataFrame) -> dict[str, bool]:
    return {a.label[:3]: a.holds for a in sink_answers(frame)}


def test_the_papers_directions_hold_where_the_table_shows_them():
    frame = sink_frame({"scaled": [0.5, 0.4, 0.1], "gated": [0.1, 0.1, 0.1],
                        "sink": [0.01, 0.02, 0.01], "sigmoid": [0.05, 0.1, 0.2]},
                       loss={"gated": 2.5, "scaled": 3.0}, null=0.6)  # fmt: skip
    assert answers(frame) == dict.fromkeys(("(f)", "(g)", "(h)", "(i)", "(j)"), True)


def test_each_fails_where_the_table_goes_the_other_way():
    """No sink head under scaled ((f) fails, and gated cannot have fewer: (g) fails); the
    learned sink with more first-position weight ((h)); one sigmoid seed with a sink head
    ((i)); gated worse at 10x by more than the seeds' combined SE ((j))."""
    frame = sink_frame({"scaled": [0.1, 0.1, 0.1], "gated": [0.1, 0.1, 0.1],
                        "sink": [0.2, 0.2, 0.2], "sigmoid": [0.05, 0.5, 0.1]},
                       loss={"gated": 3.5, "scaled": 3.0})  # fmt: skip
    assert answers(frame) == dict.fromkeys(("(f)", "(g)", "(h)", "(i)", "(j)"), False)


def test_j_allows_the_combined_standard_error():
    """Gated's drifted loss above scaled's by less than the seeds' combined SE holds."""
    frame = sink_frame({"scaled": [0.5, 0.5], "gated": [0.1, 0.1]})
    frame.loc[(frame.weights == "drifted") & (frame.mechanism == "scaled"), "final_val_loss"] = (
        frame.seed.map({0: 2.9, 1: 3.1})
    )
    frame.loc[(frame.weights == "drifted") & (frame.mechanism == "gated"), "final_val_loss"] = (
        frame.seed.map({0: 3.0, 1: 3.2})
    )
    # scaled 3.0 +- 0.1, gated 3.1 +- 0.1: allowed 3.0 + sqrt(0.02) = 3.141
    assert answers(frame)["(j)"]
    frame.loc[(frame.weights == "drifted") & (frame.mechanism == "gated"), "final_val_loss"] += 0.1
    assert not answers(frame)["(j)"]


@pytest.mark.parametrize("missing", ["gated", "scaled"])
def test_an_answer_whose_mechanism_or_rate_was_not_trained_does_not_hold(missing):
    first = {"scaled": [0.5], "gated": [0.1], "sink": [0.01], "sigmoid": [0.0]}
    del first[missing]
    found = sink_answers(sink_frame(first))
    assert not found[1].holds  # (g) needs both
    assert not sink_answers(sink_frame(first, drifted=False))[4].holds
    assert "not measured" in sink_answers(sink_frame(first, drifted=False))[4].detail


def test_per_seed_shares_and_the_table():
    frame = sink_frame({"scaled": [0.5, 0.1], "sink": [0.0, 0.0]}, null=0.7)
    seeds = per_seed(frame)
    assert list(seeds.share) == [1.0, 0.0, 0.0, 0.0]
    assert list(seeds.null) == [0.0, 0.0, 0.7, 0.7]
    text = sink_table(frame)
    assert "| scaled | 0.01 | 0.500 ± 0.500 | 0.300 ± 0.200 | 0.000 ± 0.000 |" in text
    assert "| sink | 0.01 | 0.000 ± 0.000 | 0.000 ± 0.000 | 0.700 ± 0.000 |" in text


def test_uniform_causal_attention_puts_the_harmonic_mean_on_the_first_position():
    """Row i of a uniform causal map puts 1/i on the first key: the mean is H_T / T."""
    assert uniform_first_weight(1) == 1.0
    assert uniform_first_weight(4) == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4, rel=1e-15)
    assert 0.074 < uniform_first_weight(64) < 0.075

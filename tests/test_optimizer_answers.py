"""Experiment 15's known answers on hand-made runs tables: each rule comes out both ways."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from attnlab.studies.optimizer import answers
from attnlab.studies.optimizer.study import TAU

RATES = (1e-2, 3e-2, 1e-1)


def row(optimizer, lr, logit, loss=2.0, *, mechanism="scaled", tau=math.nan, part="sweep",
        seed=0, **more):  # fmt: skip
    """One run's row: the columns the rules read, the clip's never fired unless given."""
    return {"part": part, "optimizer": optimizer, "mechanism": mechanism, "qk_clip_tau": tau,
            "lr": lr, "seed": seed, "steps": 500, "final_val_loss": loss,
            "max_attn_logit": logit, "first_clip_step": -1,
            "max_signed_after_first_clip": math.nan, "steps_over_bound_after_first_clip": 0,
            "clip_fraction": 0.0,
            "clip_fraction_first_quarter": 0.0, "clip_fraction_last_quarter": 0.0,
            "final_qk_spectral_norm": 1.0, "diverged_step": -1, **more}  # fmt: skip


def table(*rows) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


def logits(adamw, muon, adamw_losses=(2.0, 1.9, 2.5), muon_losses=(2.2, 2.0, 1.9)):
    """Unclipped scaled rows at RATES: AdamW's best 3e-2, Muon's best 1e-1 by default."""
    return [*(row("adamw", r, z, loss)
              for r, z, loss in zip(RATES, adamw, adamw_losses, strict=True)),
            *(row("muon", r, z, loss)
              for r, z, loss in zip(RATES, muon, muon_losses, strict=True))]  # fmt: skip


def test_a_at_nominal_rates_both_ways():
    assert answers.muon_grows_more_nominal(table(*logits((1, 10, 100), (5, 50, 500)))).holds
    assert not answers.muon_grows_more_nominal(table(*logits((5, 50, 500), (1, 10, 100)))).holds


def test_a_at_multiples_of_the_best_rate_both_ways():
    # AdamW's best 3e-2, Muon's 1e-1: at 1x best AdamW 10 vs Muon 100; 1/3x: 1 vs 10
    grows = table(*logits((1, 10, 1000), (1, 10, 100)))
    assert answers.muon_grows_more_multiples(grows).holds
    assert not answers.muon_grows_more_nominal(grows).holds  # the same table, nominal: not
    shrinks = table(*logits((1, 10, 1000), (0.1, 1, 5)))
    assert not answers.muon_grows_more_multiples(shrinks).holds


def clipped_pair(after, free_logit, part="long"):
    """An unclipped run that blew up and its clipped twin that fired at step 10."""
    return [row("muon", 0.1, free_logit, 3.0, part=part),
            row("muon", 0.1, 2 * TAU, 2.5, part=part, tau=TAU, first_clip_step=10,
                max_signed_after_first_clip=after, clip_fraction=0.1)]  # fmt: skip


def test_b_both_ways():
    assert answers.clip_bounds(table(*clipped_pair(1.5 * TAU, 1e5))).holds
    over = answers.clip_bounds(table(*clipped_pair(3 * TAU, 1e5)))  # past 2 tau
    assert not over.holds and "300" in over.detail
    assert not answers.clip_bounds(table(*clipped_pair(1.5 * TAU, 1.2e3))).holds  # < 10x
    never = table(row("muon", 0.1, 50.0, tau=TAU))
    assert not answers.clip_bounds(never).holds


def test_c_both_ways():
    stable = [row("adamw", 1e-2, 80, 2.00), row("adamw", 1e-2, 80, 2.01, seed=1)]
    blown = [row("adamw", 1e-1, 5e3, 3.0), row("adamw", 1e-1, 5e3, 3.1, seed=1)]
    clipped = [row("adamw", 1e-2, 80, 2.005, tau=TAU), row("adamw", 1e-1, 150, 2.6, tau=TAU)]
    assert answers.clip_loss(table(*stable, *blown, *clipped)).holds
    costly = [row("adamw", 1e-2, 80, 2.1, tau=TAU), row("adamw", 1e-1, 150, 2.6, tau=TAU)]
    assert not answers.clip_loss(table(*stable, *blown, *costly)).holds
    no_help = [row("adamw", 1e-2, 80, 2.005, tau=TAU), row("adamw", 1e-1, 150, 3.2, tau=TAU)]
    assert not answers.clip_loss(table(*stable, *blown, *no_help)).holds


@pytest.mark.parametrize(("first", "last", "holds"), [(0.2, 0.01, True), (0.01, 0.2, False)])
def test_d_both_ways(first, last, holds):
    rows = table(row("adamw", 0.1, 150, part="long", tau=TAU, clip_fraction_first_quarter=first,
                     clip_fraction_last_quarter=last))  # fmt: skip
    assert answers.clip_fires_less_late(rows).holds is holds


def test_e_both_ways():
    bounded = table(*(row("muon", r, 8.0, mechanism="qk_norm") for r in RATES))
    assert answers.qk_norm_bounds_muon(bounded).holds
    grown_logits = zip(RATES, (8, 20, 300), strict=True)
    grown = table(*(row("muon", r, z, mechanism="qk_norm") for r, z in grown_logits))
    assert not answers.qk_norm_bounds_muon(grown).holds
    diverged = table(row("muon", 0.3, 8.0, mechanism="qk_norm", diverged_step=40))
    assert not answers.qk_norm_bounds_muon(diverged).holds


def test_the_steps_after_the_first_clip_are_read_from_every_step():
    from attnlab.studies.optimizer.compute import after_first_clip

    signed = np.array(
        [[[50, 60], [120, 10], [90, 250], [150, 80]], [[50, 60], [70, 10], [90, 20], [95, 80]]],
        float,
    )  # [lanes, steps, L]
    fraction = (signed > TAU).astype(float) / 2
    first, after, over = after_first_clip(signed, fraction, 2 * TAU)
    assert first.tolist() == [1, -1] and over.tolist() == [1, 0]
    assert after[0] == 250 and np.isnan(after[1])

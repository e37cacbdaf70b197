"""Experiment 15's known answers on hand-made runs tables: each rule comes out both ways, on
two tables that differ in the one quantity the rule reads."""

from __future__ import annotations

import math

import pandas as pd

from attnlab.studies.optimizer import answers
from attnlab.studies.optimizer.study import HOT, LONG_TAU, SIDE_LR, TAU

NAN = math.nan
#: 14's half-decade grid (``study.LRS``).
LRS = (3e-3, 1e-2, 3e-2, 1e-1, 3e-1)
#: arm: (optimizer, side)
ARMS = {"adamw": ("adamw", "shared"), "muon": ("muon", "shared"),
        "muon_pinned": ("muon", "pinned"), "lion": ("lion", "shared")}  # fmt: skip


def row(arm, lr, logit=10.0, loss=2.0, *, part="sweep", tau=NAN, on="signed",
        schedule="cosine", mechanism="scaled", seed=0, **more) -> dict:  # fmt: skip
    """One run's row with every column of the runs table; the clip's (if any) never fired
    unless ``more`` says so."""
    optimizer, side = ARMS[arm]
    clipped = not math.isnan(tau)
    return {"part": part, "optimizer": optimizer, "side": side,
            "side_lr": SIDE_LR if side == "pinned" else lr, "schedule": schedule,
            "mechanism": mechanism, "qk_clip_on": on if clipped else "none", "qk_clip_tau": tau,
            "lr": lr, "seed": seed, "steps": 500, "final_val_loss": loss,
            "max_attn_logit": logit, "max_signed_logit": logit if clipped else NAN,
            "first_clip_step": -1, "max_signed_after_first_clip": NAN,
            "max_abs_after_first_clip": NAN, "steps_over_bound_after_first_clip": 0,
            "over_bound_clipped_before": 0, "over_bound_negative_before": 0,
            "over_bound_from_below": 0, "clip_fraction": 0.0,
            "clip_fraction_first_quarter": 0.0, "clip_fraction_last_quarter": 0.0,
            "clip_fraction_plateau_first": NAN, "clip_fraction_plateau_last": NAN,
            "probes": 0, "update_growth_median": NAN, "update_growth_p90": NAN,
            "update_growth_max": NAN, "after_clip_max": NAN, "final_ln1_gain_rms": 1.0,
            "final_qk_spectral_norm": 1.0, "diverged_step": -1, **more}  # fmt: skip


def fired(arm, lr, s, *, tau=LONG_TAU, part="taus", on="signed", seed=0, z=None, **more) -> dict:
    """A clipped run whose clip first fired at step 10: after it, S at ``s`` tau (the
    signed S, or |z| where keyed ``on`` abs) and |z| at ``z`` tau (default ``s``)."""
    z = s if z is None else z
    return row(arm, lr, 2 * tau, part=part, tau=tau, on=on, seed=seed, first_clip_step=10,
               max_signed_after_first_clip=s * tau, max_abs_after_first_clip=z * tau,
               clip_fraction=0.05, **more)  # fmt: skip


def swept(arm, best, logits=None, seeds=(0, 1)) -> list[dict]:
    """The unclipped ``scaled`` sweep of ``arm`` at ``LRS`` (or ``logits``' rates), its mean
    held-out loss lowest at ``best``; ``logits``: rate -> one largest logit per seed."""
    logits = logits or {lr: [10.0 * lr / best] * len(seeds) for lr in LRS}
    return [row(arm, lr, z, 2.0 + abs(math.log10(lr / best)) + 0.01 * seed, seed=seed)
            for lr, per_seed in logits.items()
            for seed, z in zip(seeds, per_seed, strict=True)]  # fmt: skip


def table(*rows) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


# --- the arms, the cells and the best rate -------------------------------------------------


def test_arm_of_tells_the_muon_arms_apart_by_their_side():
    runs = table(row("adamw", 1e-2), row("muon", 1e-2), row("muon_pinned", 1e-2))
    assert answers.arm_of(runs).tolist() == ["adamw", "muon", "muon_pinned"]


def test_runs_of_picks_one_part_arm_mechanism_schedule_and_clip():
    runs = table(row("muon", 1e-2), row("muon_pinned", 1e-2), row("adamw", 1e-2),
                 row("muon", 1e-2, mechanism="qk_norm"), row("muon", 1e-2, tau=TAU),
                 row("muon", 1e-2, part="long"), row("muon", 1e-2, part="long", tau=20.0),
                 row("muon", 1e-2, part="long", tau=20.0, schedule="wsd"))  # fmt: skip
    assert answers.runs_of(runs, "sweep", "muon").index.tolist() == [0]
    assert answers.runs_of(runs, "sweep", "muon_pinned").index.tolist() == [1]
    assert answers.runs_of(runs, "sweep", "adamw").index.tolist() == [2]
    assert answers.runs_of(runs, "sweep", "muon", "qk_norm").index.tolist() == [3]
    assert answers.runs_of(runs, "sweep", "muon", clipped=True).index.tolist() == [4]
    assert answers.runs_of(runs, "long", "muon").index.tolist() == [5]
    assert answers.runs_of(runs, "long", "muon", clipped=True).index.tolist() == [6]
    wsd = answers.runs_of(runs, "long", "muon", clipped=True, schedule="wsd")
    assert wsd.index.tolist() == [7]
    assert answers.runs_of(runs, "long", "muon", schedule="wsd").empty  # no unclipped WSD


def test_best_rate_is_the_arms_lowest_mean_loss_over_its_unclipped_scaled_sweep():
    runs = table(
        row("adamw", 1e-2, loss=2.0), row("adamw", 1e-2, loss=2.4, seed=1),  # mean 2.2
        row("adamw", 3e-2, loss=1.9), row("adamw", 3e-2, loss=2.3, seed=1),  # mean 2.1
        row("adamw", 1e-1, loss=NAN), row("adamw", 1e-1, loss=NAN, seed=1),  # blew up: worst
        # lower losses that are not the arm's unclipped scaled sweep: none of them counts
        row("adamw", 1e-1, loss=0.5, tau=TAU), row("adamw", 3e-1, loss=0.5, mechanism="qk_norm"),
        row("adamw", 3e-1, loss=0.5, part="long"), row("muon", 3e-1, loss=0.5),
    )  # fmt: skip
    assert answers.best_rate(runs, "adamw") == 3e-2  # by the mean, not the best seed
    assert answers.best_rate(runs, "muon") == 3e-1
    assert answers.best_rate(runs, "muon_pinned") is None  # not swept


# --- (a) Muon grows the logits more than AdamW ------------------------------------------------


def _nominal(muon_at_3e2: tuple[float, float]) -> pd.DataFrame:
    """AdamW and Muon both best at 1e-2; at 1e-2 Muon's seeds above AdamW's, at 3e-2
    Muon's ``muon_at_3e2`` against AdamW's 22.9 and 23.3."""
    adamw = {1e-2: [10.0, 12.0], 3e-2: [22.9, 23.3]}
    muon = {1e-2: [30.0, 40.0], 3e-2: list(muon_at_3e2)}
    return table(*swept("adamw", 1e-2, adamw), *swept("muon", 1e-2, muon))


def test_a_a_tie_inside_the_seeds_spread_is_not_more():
    # medians 23.4 against 23.1, but Muon's low seed is below AdamW's high one: a tie
    tie = _nominal((23.0, 23.8))
    assert [p[-1] for p in answers.nominal_pairs(tie, "muon")] == ["more", "tie"]
    answer = answers.grows_more(tie, "muon", "nominal")
    assert not answer.holds  # 1 of 2: not a strict majority
    assert "lr 0.03: Muon 23.4 [23, 23.8] vs AdamW 23.1 [22.9, 23.3]: tie" in answer.detail
    assert "seeds' ranges apart" in answer.label
    # the same medians' order with Muon's seeds all above AdamW's: more, and it holds
    apart = _nominal((23.4, 23.5))
    assert [p[-1] for p in answers.nominal_pairs(apart, "muon")] == ["more", "more"]
    assert answers.grows_more(apart, "muon", "nominal").holds


def test_a_less_is_muons_seeds_all_below_and_a_diverged_seed_counts_as_infinite():
    assert answers.nominal_pairs(_nominal((1.0, 2.0)), "muon")[1][-1] == "less"
    assert answers.nominal_pairs(_nominal((NAN, 30.0)), "muon")[1][-1] == "more"  # inf, 30
    assert answers.nominal_pairs(_nominal((NAN, 5.0)), "muon")[1][-1] == "tie"  # inf, 5


def test_a_holds_on_a_strict_majority_of_rates():
    adamw = {lr: [10.0, 11.0] for lr in LRS[:3]}
    two_of_three = {3e-3: [20.0, 21.0], 1e-2: [20.0, 21.0], 3e-2: [10.5, 10.6]}
    runs = table(*swept("adamw", 1e-2, adamw), *swept("muon", 1e-2, two_of_three))
    assert answers.grows_more(runs, "muon", "nominal").holds
    one_of_three = {**two_of_three, 1e-2: [10.5, 10.6]}
    runs = table(*swept("adamw", 1e-2, adamw), *swept("muon", 1e-2, one_of_three))
    assert not answers.grows_more(runs, "muon", "nominal").holds


def _multiples(muon_at_1e1: float, muon_at_3e1: float) -> pd.DataFrame:
    """AdamW best at 1e-2, Muon at 1e-1 (multiples 0.3, 1 and 3 in both grids); Muon's
    logits below AdamW's at every nominal rate, its ``muon_at_1e1`` and ``muon_at_3e1``
    (its 1x and 3x best) against AdamW's 10 and 40."""
    adamw = {3e-3: 5.0, 1e-2: 10.0, 3e-2: 40.0, 1e-1: 200.0, 3e-1: 1000.0}
    muon = {3e-3: 2.0, 1e-2: 3.0, 3e-2: 8.0, 1e-1: muon_at_1e1, 3e-1: muon_at_3e1}
    return table(*swept("adamw", 1e-2, {r: [z, z * 1.05] for r, z in adamw.items()}),
                 *swept("muon", 1e-1, {r: [z, z * 1.05] for r, z in muon.items()}))  # fmt: skip


def test_a_at_multiples_of_each_best_rate_both_ways():
    grows = _multiples(20.0, 60.0)
    pairs = answers.multiple_pairs(grows, "muon")
    assert [(p[0], p[-1]) for p in pairs] == [("0.3x best", "more"), ("1x best", "more"),
                                              ("3x best", "more")]  # fmt: skip
    assert answers.grows_more(grows, "muon", "multiples").holds
    assert not answers.grows_more(grows, "muon", "nominal").holds  # the same table
    assert {p[-1] for p in answers.nominal_pairs(grows, "muon")} == {"less"}
    shrinks = _multiples(9.0, 30.0)  # Muon's 1x and 3x best now below AdamW's
    assert [p[-1] for p in answers.multiple_pairs(shrinks, "muon")] == ["more", "less", "less"]
    assert not answers.grows_more(shrinks, "muon", "multiples").holds


def test_a_judges_each_muon_arm_on_its_own_rows():
    adamw = {1e-2: [10.0, 11.0]}
    runs = table(*swept("adamw", 1e-2, adamw), *swept("muon", 1e-2, {1e-2: [50.0, 60.0]}),
                 *swept("muon_pinned", 1e-2, {1e-2: [1.0, 2.0]}))  # fmt: skip
    assert answers.grows_more(runs, "muon", "nominal").holds
    pinned = answers.grows_more(runs, "muon_pinned", "nominal")
    assert not pinned.holds and "pinned" in pinned.label and pinned.detail.endswith("less")
    alone = table(*swept("adamw", 1e-2, adamw))
    for matched in ("nominal", "multiples"):
        nothing = answers.grows_more(alone, "muon", matched)
        assert not nothing.holds and nothing.detail == "nothing to compare"


# --- (b) the clip bounds S in K2's regime --------------------------------------------------


def _regime(*clipped) -> pd.DataFrame:
    """AdamW's sweep best at 1e-2, Muon's at 1e-1 (K2's regime: up to 3e-2 and 3e-1), and
    ``clipped`` runs."""
    return table(*swept("adamw", 1e-2), *swept("muon", 1e-1), *clipped)


def _held(*, muon_3x=(1.1, 1.1), long=(1.1, 1.1, 1.1)) -> list[dict]:
    """Clipped runs that fired in K2's regime: Muon's tau sweep at 1x and 3x its best on two
    seeds (S ``muon_3x`` tau at 3x), its long WSD run at its best on three (``long``)."""
    return [*(fired("muon", 1e-1, 1.1, seed=s) for s in (0, 1)),
            *(fired("muon", 3e-1, x, seed=s) for s, x in enumerate(muon_3x)),
            *(fired("muon", 1e-1, x, part="long", seed=s, schedule="wsd")
              for s, x in enumerate(long))]  # fmt: skip


def test_b_every_seed_at_1_1_tau_holds_and_one_at_2_5_does_not():
    held = answers.clip_bounds(_regime(*_held()))
    assert held.holds and "3 clipped groups that fired: worst seed 1.1 tau" in held.detail
    over = answers.clip_bounds(_regime(*_held(muon_3x=(1.1, 2.5))))  # at exactly 3x best
    assert not over.holds
    assert "taus muon cosine tau 20 lr 0.3: median 1.8 tau, largest 2.5 tau" in over.detail


def test_b_a_median_above_1_2_tau_fails_with_every_seed_below_2():
    held = answers.clip_bounds(_regime(*_held(long=(1.1, 1.15, 1.9))))
    assert held.holds and "worst seed 1.9 tau, worst median 1.15 tau" in held.detail
    high = answers.clip_bounds(_regime(*_held(long=(1.1, 1.3, 1.9))))
    assert not high.holds
    assert "long muon wsd tau 20 lr 0.1: median 1.3 tau, largest 1.9 tau" in high.detail


def test_b_reads_each_arms_own_best_rate():
    # AdamW at 0.1 is 10x its best: outside K2's regime, however far S went
    outside = answers.clip_bounds(_regime(*_held(), fired("adamw", 1e-1, 10.0)))
    assert outside.holds and "worst seed 1.1 tau" in outside.detail
    # the same at 3e-2, 3x AdamW's best, counts (and 0.1 is Muon's best: counts for Muon)
    assert not answers.clip_bounds(_regime(*_held(), fired("adamw", 3e-2, 10.0))).holds
    assert not answers.clip_bounds(_regime(*_held(), fired("muon", 1e-1, 10.0, seed=2))).holds
    assert HOT == 3.0  # the regime these tables are written for


def test_b_counts_only_signed_runs_of_the_tau_sweep_and_the_long_run_that_fired():
    ignored = [
        fired("muon", 1e-1, 10.0, part="sweep", tau=TAU),  # the sweep's tau 100
        fired("muon", 1e-1, 10.0, z=1.5, on="abs"),  # keyed on |logit|: (f)'s
        row("muon", 1e-1, 500.0, part="taus", tau=20.0, max_signed_after_first_clip=200.0),
    ]  # the last never fired
    assert answers.clip_bounds(_regime(*_held(), *ignored)).holds
    nothing = answers.clip_bounds(_regime(*ignored))
    assert not nothing.holds and nothing.detail == "the clip fired in no run of K2's regime"


def test_far_above_lists_the_sweeps_clipped_runs_above_3x_best_with_their_causes():
    clipped = [
        fired("adamw", 3e-2, 1.5, part="sweep", tau=TAU),  # 3x best: K2's regime, not here
        fired("adamw", 1e-1, 5.0, part="sweep", tau=TAU, z=6.0, over_bound_clipped_before=3,
              over_bound_negative_before=1, over_bound_from_below=0),
        fired("adamw", 1e-1, 3.0, part="sweep", tau=TAU, z=8.0, seed=1,
              over_bound_clipped_before=2, over_bound_negative_before=0,
              over_bound_from_below=4),
    ]  # fmt: skip
    adamw = {**{r: [10.0, 10.0] for r in LRS}, 1e-1: [4e3, 6e3]}
    lines = answers.far_above(table(*swept("adamw", 1e-2, adamw), *clipped))
    assert lines == [
        "adamw lr 0.1 (10x best): S after the first firing up to 5 tau; |z| clipped 700 vs "
        "unclipped 5e+03 (medians); head-steps over 2 tau: 5 clipped the step before, "
        "1 negative logits the step before, 4 from below"
    ]
    assert answers.far_above(table(*swept("adamw", 1e-2), clipped[0])) == []


# --- (c) the clip's cost -------------------------------------------------------------------


def test_c_both_ways():
    stable = [row("adamw", 1e-2, 80, 2.00), row("adamw", 1e-2, 80, 2.01, seed=1)]
    blown = [row("adamw", 1e-1, 5e3, 3.0), row("adamw", 1e-1, 5e3, 3.1, seed=1)]
    clipped = [row("adamw", 1e-2, 80, 2.005, tau=TAU), row("adamw", 1e-1, 150, 2.6, tau=TAU)]
    assert answers.clip_loss(table(*stable, *blown, *clipped)).holds
    costly = [row("adamw", 1e-2, 80, 2.1, tau=TAU), row("adamw", 1e-1, 150, 2.6, tau=TAU)]
    assert not answers.clip_loss(table(*stable, *blown, *costly)).holds
    no_help = [row("adamw", 1e-2, 80, 2.005, tau=TAU), row("adamw", 1e-1, 150, 3.2, tau=TAU)]
    assert not answers.clip_loss(table(*stable, *blown, *no_help)).holds
    assert not answers.clip_loss(table(*stable, *blown)).holds  # no clipped run: nothing shown


def test_c_allows_the_unclipped_seeds_spread_where_it_passes_the_margin():
    spread = [row("muon_pinned", 1e-2, 80, 2.0), row("muon_pinned", 1e-2, 80, 2.1, seed=1)]
    within = answers.clip_loss(table(*spread, row("muon_pinned", 1e-2, 80, 2.13, tau=TAU)))
    assert within.holds  # 0.08 from the mean 2.05, within the seeds' 0.1
    beyond = answers.clip_loss(table(*spread, row("muon_pinned", 1e-2, 80, 2.17, tau=TAU)))
    assert not beyond.holds and "muon_pinned lr 0.01" in beyond.detail
    assert "allowed 0.100" in beyond.detail


# --- (d) the clip fires less late on K2's plateau --------------------------------------------


def _plateau(last: tuple[float, float, float]) -> pd.DataFrame:
    """Muon's clipped long WSD run on three seeds, 20% clipped in the plateau's first quarter
    and ``last`` in its last; a cosine run beside it, which has no plateau."""
    return table(
        *(fired("muon", 1e-1, 1.1, part="long", schedule="wsd", seed=s,
                clip_fraction_plateau_first=0.2, clip_fraction_plateau_last=x)
          for s, x in enumerate(last)),
        fired("muon", 1e-1, 1.1, part="long", clip_fraction_plateau_first=0.0,
              clip_fraction_plateau_last=0.9),
    )  # fmt: skip


def test_d_the_plateaus_median_over_seeds_both_ways():
    less = answers.clip_fires_less_late(_plateau((0.01, 0.05, 0.5)))  # one seed later: median
    assert less.holds
    assert less.detail == ("muon lr 0.1: plateau's first quarter 20.00%, last 5.00% (medians "
                           "over seeds)")  # fmt: skip
    more = answers.clip_fires_less_late(_plateau((0.01, 0.3, 0.5)))
    assert not more.holds and "last 30.00%" in more.detail
    same = answers.clip_fires_less_late(_plateau((0.2, 0.2, 0.2)))
    assert not same.holds  # as often late as early is not less
    none = answers.clip_fires_less_late(_plateau((0.1,) * 3).query("schedule == 'cosine'"))
    assert not none.holds and none.detail == "no long run on K2's schedule"


def test_d_needs_every_arm_and_rate_less_late():
    runs = pd.concat([_plateau((0.01, 0.05, 0.5)), table(
        fired("adamw", 1e-2, 1.1, part="long", schedule="wsd", clip_fraction_plateau_first=0.1,
              clip_fraction_plateau_last=0.2))])  # fmt: skip
    answer = answers.clip_fires_less_late(runs)
    assert not answer.holds and "adamw lr 0.01" in answer.detail


# --- (e) qk_norm bounds Muon's logits ----------------------------------------------------------


def test_e_both_ways():
    bounded = table(*(row(arm, r, 8.0, mechanism="qk_norm") for r in LRS
                      for arm in ("muon", "muon_pinned")))  # fmt: skip
    assert answers.qk_norm_bounds(bounded).holds
    grown = table(
        *(
            row("muon", r, z, mechanism="qk_norm")
            for r, z in zip(LRS[:3], (8, 20, 300), strict=True)
        )
    )
    assert not answers.qk_norm_bounds(grown).holds
    pinned = table(row("muon", 1e-2, 8.0, mechanism="qk_norm"),
                   row("muon_pinned", 1e-2, 300.0, mechanism="qk_norm"))  # fmt: skip
    assert not answers.qk_norm_bounds(pinned).holds  # both Muon arms are read
    diverged = table(row("muon", 0.3, 8.0, mechanism="qk_norm", diverged_step=40))
    assert not answers.qk_norm_bounds(diverged).holds
    adamw = table(row("adamw", 0.3, 300.0, mechanism="qk_norm"))
    assert not answers.qk_norm_bounds(adamw).holds  # not trained under Muon
    # Under another optimizer the rule reads its rows and names it, both ways.
    lion = table(row("adamw", 0.3, 300.0, mechanism="qk_norm"),
                 row("lion", 0.3, 8.0, mechanism="qk_norm"))  # fmt: skip
    held = answers.qk_norm_bounds(lion)
    assert held.holds and "under Lion" in held.label and "over 1 runs" in held.detail
    assert not answers.qk_norm_bounds(table(row("lion", 0.3, 300.0, mechanism="qk_norm"))).holds


# --- (f) the clip on |logit| bounds both signs -----------------------------------------------


def test_f_both_ways():
    signed = fired("muon", 3e-1, 1.1, z=12.0)  # the signed clip's |z|: beside, not judged
    held = answers.abs_clip_bounds(
        table(fired("muon", 1e-1, 1.2, on="abs"), fired("muon", 3e-1, 1.9, on="abs"), signed)
    )
    assert held.holds
    assert held.detail == (
        "largest |z| after the first firing 1.9 tau over 2 runs (the signed clip's runs of the "
        "tau sweep, like for like: up to 12 tau)"
    )
    over = answers.abs_clip_bounds(
        table(fired("muon", 1e-1, 1.2, on="abs"), fired("muon", 3e-1, 2.5, on="abs"), signed)
    )
    assert not over.holds and "2.5 tau over 2 runs" in over.detail
    unfired = row("muon", 3e-1, 500.0, part="taus", tau=20.0, on="abs",
                  max_abs_after_first_clip=NAN)  # fmt: skip
    none = answers.abs_clip_bounds(table(unfired, signed))
    assert not none.holds and none.detail == "no run of the clip on |logit| fired"


def test_the_answers_follow_the_arms_the_table_holds():
    """(a) twice (nominal, multiples) per arm but AdamW, then (b) to (f): nine for the
    committed three arms, seven for AdamW and Lion, Lion named in (a)."""
    three = table(*(row(arm, 1e-2) for arm in ("muon", "adamw", "muon_pinned")))
    assert answers.arms_of(three) == ["adamw", "muon", "muon_pinned"]  # the baseline first
    known = answers.answers(three)
    assert len(known) == 9 and all(isinstance(a, answers.Answer) for a in known)
    assert [a.label[:3] for a in known] == ["(a)"] * 4 + ["(b)", "(c)", "(d)", "(e)", "(f)"]
    two = answers.answers(table(row("adamw", 1e-2), row("lion", 1e-2)))
    assert len(two) == 7 and "under Lion than under AdamW" in two[0].label
    assert "Lion 10 [10, 10] vs AdamW 10 [10, 10]: tie" in two[0].detail

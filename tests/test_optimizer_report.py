"""The optimizer study's report section, rendered from small hand-made tables written with
the tables' columns: the headline summarises the long run over its seeds and tallies (a)
with the seeds apart, the trajectory table takes the median over seeds, layers and heads,
the section says the right things and writes counts and ranges without glitches."""

from __future__ import annotations

import json
import math
import re

import pandas as pd

from attnlab.harness.io import sidecar_path
from attnlab.harness.tables import Tables
from attnlab.studies.optimizer.report import (
    CURVE_COLUMNS,
    LEDGER_COLUMNS,
    RUN_COLUMNS,
    answer,
    saturated_note,
    section,
    trajectory,
)
from attnlab.studies.optimizer.study import CURVES_CSV, LEDGER_CSV, RUNS_CSV

NAN = math.nan
LRS = (1e-2, 3e-2, 1e-1, 3e-1)
#: arm: (optimizer, side, best rate)
ARMS = {"adamw": ("adamw", "shared", 1e-2), "muon": ("muon", "shared", 1e-1),
        "muon_pinned": ("muon", "pinned", 3e-2)}  # fmt: skip


def run(arm, part, lr, seed=0, *, tau=NAN, on="signed", schedule="cosine", mechanism="scaled",
        **more) -> dict:  # fmt: skip
    """One row of the runs table (``RUN_COLUMNS``); the clip never fired unless ``more``
    says so."""
    optimizer, side, _ = ARMS[arm]
    clipped = not math.isnan(tau)
    return {c: 0 for c in RUN_COLUMNS} | {
        "part": part, "optimizer": optimizer, "side": side,
        "side_lr": 1e-2 if side == "pinned" else lr, "schedule": schedule,
        "mechanism": mechanism, "qk_clip_on": on if clipped else "none", "qk_clip_tau": tau,
        "lr": lr, "seed": seed, "steps": 3000 if part == "long" else 500,
        "final_val_loss": 2.0, "max_attn_logit": 10.0, "first_clip_step": -1,
        "max_signed_after_first_clip": NAN, "max_abs_after_first_clip": NAN,
        "clip_fraction_plateau_first": NAN, "clip_fraction_plateau_last": NAN,
        "diverged_step": -1} | more  # fmt: skip


def fired(arm, part, lr, seed, s, *, tau=20.0, **more) -> dict:
    """A clipped run whose clip first fired at step ``5 + seed``, S at ``s`` tau after."""
    return run(arm, part, lr, seed, tau=tau, first_clip_step=5 + seed,
               max_signed_after_first_clip=s * tau, max_abs_after_first_clip=s * tau,
               clip_fraction=0.05, **more)  # fmt: skip


def sweep(arm, logits=None, seeds=(0, 1)) -> list[dict]:
    """``arm``'s unclipped ``scaled`` sweep, best at its ``ARMS`` rate; ``logits``: rate ->
    one largest logit per seed (default 10 at every rate)."""
    best = ARMS[arm][2]
    logits = logits or {lr: [10.0] * len(seeds) for lr in LRS}
    return [run(arm, "sweep", lr, seed, max_attn_logit=z,
                final_val_loss=2.0 + abs(math.log10(lr / best)) + 0.01 * seed)
            for lr, per_seed in logits.items()
            for seed, z in zip(seeds, per_seed, strict=True)]  # fmt: skip


def write(directory, runs, curves=(), ledger=(), flags=None) -> Tables:
    pd.DataFrame(list(runs))[RUN_COLUMNS].to_csv(directory / RUNS_CSV, index=False)
    if curves:
        pd.DataFrame(list(curves))[CURVE_COLUMNS].to_csv(directory / CURVES_CSV, index=False)
    if ledger:
        pd.DataFrame(list(ledger))[LEDGER_COLUMNS].to_csv(directory / LEDGER_CSV, index=False)
    if flags is not None:
        sidecar_path(directory / RUNS_CSV).write_text(json.dumps({"flags": flags}))
    return Tables(directory, lambda name: "make")


def _long(arm, lr, free, after, tau=20.0) -> list[dict]:
    """The long run on the cosine schedule at ``lr``: unclipped with largest logits ``free``
    and clipped with S ``after`` tau after the first firing (NaN: never fired), per seed."""
    rows = [run(arm, "long", lr, seed, max_attn_logit=z) for seed, z in enumerate(free)]
    for seed, s in enumerate(after):
        rows.append(run(arm, "long", lr, seed, tau=tau) if math.isnan(s)
                    else fired(arm, "long", lr, seed, s, tau=tau))  # fmt: skip
    return rows


# --- the headline ----------------------------------------------------------------------------


def test_the_headline_gives_each_arm_the_range_over_its_long_runs(tmp_path):
    runs = [*_long("muon", 0.1, [40.0, 45.0, 50.0], [1.1, 1.2, 1.3]),
            *_long("muon", 0.3, [300.0, 500.0, 2e3], [1.4, 1.6, 1.5]),
            *_long("adamw", 0.01, [30.0], [1.3]),
            run("adamw", "long", 0.01, tau=20.0, schedule="wsd", max_attn_logit=9e9)]  # fmt: skip
    text = answer(write(tmp_path, runs))
    assert text.startswith("Over 3000 steps at each arm's best rate and 3x it (adamw: ")
    assert ("muon: unclipped |z| up to 40-2e+03; QK-Clip 20 fired in 6 of 6 runs, S after its "
            "first firing 1.1-1.6 tau") in text  # fmt: skip
    # one run: "1 run", one value, not "1 runs" or "1.3-1.3"; the WSD run is not read here
    assert ("adamw: unclipped |z| up to 30; QK-Clip 20 fired in 1 of 1 run, S after its first "
            "firing 1.3 tau; muon: ") in text  # fmt: skip
    assert "1 runs" not in text and "9e+09" not in text
    assert "muon_pinned" not in text  # no long run


def test_the_headline_counts_the_runs_the_clip_fired_on(tmp_path):
    runs = _long("adamw", 0.01, [30.0, 31.0], [1.3, NAN])
    assert "fired in 1 of 2 runs, S after its first firing 1.3 tau" in answer(write(tmp_path, runs))


def test_the_headline_survives_a_clip_that_never_fired(tmp_path):
    runs = _long("adamw", 0.01, [30.0, 31.0], [NAN, NAN])
    assert "fired in 0 of 2 runs" in answer(write(tmp_path, runs))


def test_the_headline_tallies_the_rates_where_muons_seeds_are_all_above(tmp_path):
    adamw = {1e-2: [10.0, 11.0], 3e-2: [20.0, 22.0], 1e-1: [40.0, 45.0]}
    muon = {1e-2: [30.0, 35.0], 3e-2: [21.0, 25.0], 1e-1: [200.0, 300.0]}  # tie at 3e-2
    runs = [*sweep("adamw", adamw), *sweep("muon", muon)]
    text = answer(write(tmp_path, runs))
    # nominal: 1e-2 more, 3e-2 a tie (21-25 against 20-22), 1e-1 more; multiples (AdamW's
    # best 1e-2, Muon's 1e-1): only 1x in both grids, more
    assert text == ("The largest logit above AdamW's, seeds apart: muon: 1 of 1 matched "
                    "multiples, 2 of 3 matched nominal rates")  # fmt: skip


# --- the trajectory --------------------------------------------------------------------------


def _ledger_row(arm, seed, step, head, max_logit, *, tau=NAN, schedule="cosine", **more):
    optimizer, side, _ = ARMS[arm]
    return {"optimizer": optimizer, "side": side, "schedule": schedule, "mechanism": "scaled",
            "qk_clip_tau": tau, "lr": 0.1, "seed": seed, "step": step, "layer": 0,
            "head": head, "max_logit": max_logit, "max_abs_logit": abs(max_logit),
            "entropy": 1.0, "spectral_norm": 1.0, "elasticity": 2.0, "owner": "weights",
            "q_moved": 0.5, "gain_rms": 1.0} | more  # fmt: skip


def test_the_trajectory_is_the_median_over_seeds_layers_and_heads():
    rows = [_ledger_row("adamw", seed, step, head, 10.0 * seed + head + step)
            for seed in range(3) for step in (0, 10) for head in range(2)]  # fmt: skip
    table = trajectory(pd.DataFrame(rows))
    assert len(table) == 2 and "seed" not in table  # one run, its two points
    # the median over seeds {0, 10, 20} and heads {0, 1}: (10 + 11) / 2, plus the step
    assert table.max_logit.tolist() == [10.5, 20.5]
    assert table.arm.tolist() == ["adamw", "adamw"]


def test_the_trajectory_keeps_arms_schedules_and_clips_apart_at_the_nearest_points():
    steps = range(0, 1001, 50)  # the fractions 0.05 ... 1 fall on 50, 100, 200, 500, 1000
    rows = [_ledger_row(arm, 0, step, 0, float(step), tau=tau, schedule=schedule,
                        owner="mechanism" if arm == "muon_pinned" else "weights")
            for arm in ARMS for tau, schedule in ((NAN, "cosine"), (20.0, "wsd"))
            for step in steps]  # fmt: skip
    table = trajectory(pd.DataFrame(rows))
    assert len(table) == 3 * 2 * 5
    lanes = table.groupby(["arm", "schedule"], dropna=False)
    assert all(g.step.tolist() == [50, 100, 200, 500, 1000] for _, g in lanes)
    assert set(table[table.arm == "muon_pinned"].owner) == {"mechanism"}
    assert table[table.schedule == "wsd"].qk_clip_tau.eq(20.0).all()


# --- the saturated heads ---------------------------------------------------------------------


def test_the_saturated_heads_note_lists_large_negative_logits_with_their_entropy():
    tau = 20.0
    ledger = pd.DataFrame([
        _ledger_row("muon", 0, 100, 0, 15.0, tau=tau, max_abs_logit=60.0, entropy=0.01),
        _ledger_row("muon", 1, 100, 0, 18.0, tau=tau, max_abs_logit=45.0, entropy=0.03),
        _ledger_row("muon", 0, 100, 1, 25.0, tau=tau, max_abs_logit=60.0),  # S above tau
        _ledger_row("muon", 0, 100, 2, 15.0, tau=tau, max_abs_logit=40.0),  # |z| at 2 tau
        _ledger_row("adamw", 0, 100, 0, 15.0, max_abs_logit=900.0),  # not clipped
    ])  # fmt: skip
    note = saturated_note(ledger)
    assert note.startswith("**Negative logits the clip does not touch**")
    assert "muon lr 0.1: 2 head-points, |z| up to 60, entropy 0.02 [0.01, 0.03] nats" in note
    assert "adamw" not in note and "900" not in note
    none = saturated_note(ledger[ledger.max_abs_logit <= 40])
    assert none.startswith("**Negative logits.** At no ledger point")
    assert "with its signed S at or below tau" in none


def test_the_saturated_heads_note_counts_one_head_point_in_the_singular():
    ledger = pd.DataFrame([_ledger_row("muon", 0, 100, 0, 15.0, tau=20.0, max_abs_logit=60.0,
                                       entropy=0.01)])  # fmt: skip
    assert "muon lr 0.1: 1 head-point, |z| up to 60, entropy 0.01 nats" in saturated_note(ledger)


# --- the section -----------------------------------------------------------------------------

FLAGS = {"lm_config": {"d_model": 32, "n_layers": 2, "d_head": 16, "seq_len": 64,
                       "batch_size": 16, "weight_decay": 0.1, "decay": "coupled"},
         "qk_clip": 100.0, "side_lr": 0.01, "long_tau": 20.0, "steps": 500,
         "text_source": "pydoc_data", "seeds": 2, "long_steps": 3000, "long_seeds": 3,
         "long_text_source": "stdlib", "long_text_sha256": "ab" * 32}  # fmt: skip


def _study() -> tuple[list[dict], list[dict], list[dict]]:
    """Runs, curves and ledger shaped like the full run's, small: each arm's sweep (with
    qk_norm and the clip at 100), its tau sweep and its long run at its best rate."""
    runs, curves, ledger = [], [], []
    for arm, (_, _, best) in ARMS.items():
        growth = 5.0 if arm == "muon" else 1.0
        runs += sweep(arm, {lr: [growth * lr / 1e-2 * z for z in (3.0, 3.3)] for lr in LRS})
        for lr in LRS:
            for seed in (0, 1):
                runs.append(run(arm, "sweep", lr, seed, mechanism="qk_norm", max_attn_logit=8.0))
                s = 1.1 if lr <= 3 * best else 6.0
                runs.append(fired(arm, "sweep", lr, seed, s, tau=100.0, final_val_loss=2.0 +
                                  abs(math.log10(lr / best)) + 0.01 * seed))  # fmt: skip
        for lr in (best, 3 * best):
            for seed in (0, 1):
                runs.append(fired(arm, "taus", lr, seed, 1.1))
                runs.append(fired(arm, "taus", lr, seed, 1.2, on="abs"))
        for seed in range(3):
            runs.append(run(arm, "long", best, seed, max_attn_logit=40.0 * growth))
            runs.append(fired(arm, "long", best, seed, 1.1))
            runs.append(fired(arm, "long", best, seed, 1.1, schedule="wsd",
                              clip_fraction_plateau_first=0.2,
                              clip_fraction_plateau_last=0.05))  # fmt: skip
            for schedule in ("cosine", "wsd"):
                keys = {"part": "long", "optimizer": ARMS[arm][0], "side": ARMS[arm][1],
                        "schedule": schedule, "mechanism": "scaled", "qk_clip_tau": 20.0,
                        "lr": best, "seed": seed, "layer": 0}  # fmt: skip
                curves += [keys | {"step": step, "max_attn_logit": 30.0,
                                   "clip_fraction": 0.5 if step < 20 else 0.0}
                           for step in range(0, 100, 10)]  # fmt: skip
                for step in (0, 1500, 3000):
                    ledger.append(_ledger_row(arm, seed, step, 0, 15.0, tau=20.0,
                                              schedule=schedule, lr=best) | {
                        "max_abs_logit": 60.0 if arm == "muon" and step else 15.0,
                        "entropy": 0.01 if arm == "muon" else 1.0})  # fmt: skip
    return runs, curves, ledger


def test_the_section_says_the_right_things(tmp_path):
    runs, curves, ledger = _study()
    text = section(write(tmp_path, runs, curves, ledger, FLAGS))
    assert text.startswith("### When the optimizer owns the temperature")
    assert ("**Headline.** Over 3000 steps at each arm's best rate and 3x it (adamw: unclipped "
            "|z| up to 40; QK-Clip 20 fired in 3 of 3 runs, S after its first firing 1.1 "
            "tau; muon: unclipped |z| up to 200;") in text  # fmt: skip
    # (a): Muon's logits 5x AdamW's at every rate, seeds apart; the pinned arm's tie AdamW's
    # at every nominal rate, and are above them at its best rate and 10x it
    assert ("The largest logit above AdamW's, seeds apart: muon: 2 of 2 matched multiples, "
            "4 of 4 matched nominal rates; muon_pinned: 2 of 2 matched multiples, 0 of 4 "
            "matched nominal rates.") in text  # fmt: skip
    assert (
        "muon_pinned: at matched nominal rates more at 0, less at 0, a tie (seeds' ranges "
        "overlap) at 4 of 4" in text
    )
    assert "a rate counted only where the seeds' ranges are apart" in text
    assert "sequence 64 bytes, batch 16; weight decay 0.1 coupled" in text
    assert "500 steps on pydoc_data, 2 seeds. The long run: 3000 steps on 3 seeds" in text
    assert "`abababababababab…`" in text
    assert "this sweep's AdamW best is 0.01, which equals it" in text
    # the known answers, each with its verdict
    assert re.search(r"- holds: \(b\) QK-Clip bounds S in K2's regime", text)
    assert re.search(r"- holds: \(d\) reported: on the constant-rate plateau", text)
    assert re.search(r"- holds: \(e\) qk_norm bounds the logits under Muon", text)
    assert re.search(r"- holds: \(f\) QK-Clip keyed on \|logit\|", text)
    # the sweep's clipped runs at 10x the best rate, outside K2's regime
    assert "**Far above the best rate** (the sweep's clipped runs, tau 100; " in text
    assert "adamw lr 0.3 (30x best): S after the first firing up to 6 tau" in text
    # the saturated heads: Muon's, S at 15 below tau 20, |z| 60 above 2 tau, entropy 0.01
    assert "muon lr 0.1: 12 head-points, |z| up to 60, entropy 0.01 nats" in text
    # the firing table: half the heads clipped in the first fifth of the steps, none after
    assert "| adamw | wsd | 0.01 | 50.0% | 0.0% | 0.0% | 0.0% | 0.0% |" in text
    assert not re.search(r"\b1 (seeds|runs)\b", text) and "nan" not in text.lower()


def test_the_section_writes_one_seed_in_the_singular(tmp_path):
    runs, curves, ledger = _study()
    flags = FLAGS | {"seeds": 1, "long_seeds": 1}
    text = section(write(tmp_path, runs, curves, ledger, flags))
    assert "500 steps on pydoc_data, 1 seed. The long run: 3000 steps on 1 seed on" in text
    no_sidecar = tmp_path / "bare"
    no_sidecar.mkdir()
    text = section(write(no_sidecar, runs, curves, ledger))
    assert "? seeds" in text and "tau ? in the sweep" in text

"""Tests of attnlab/answer.py: each sentence's verb is chosen by the numbers (both wordings
of every choice, on hand-made tables), its numbers are the tables', a sentence whose CSVs
are absent is left out (that the module loads no JAX: tests/test_csv_only.py)."""

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnlab.answer import (
    QUESTION,
    held,
    lm_sentence,
    loss,
    opening,
    optimizer_sentence,
    rounded,
    saturation_sentence,
    step_ratio,
    threshold,
    training_sentence,
    variance_sentence,
)
from attnlab.harness.io import sidecar_path
from attnlab.report import tables_for

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"


def test_formatting():
    assert threshold("step_loss_below_1") == 1.0
    assert threshold("step_loss_below_0p1") == 0.1
    assert (loss(1.0), loss(0.1)) == ("1.0", "0.1")
    assert [rounded(x) for x in (302.0, 1596.1, 3953.4, 3.913, 1.07, 0.0431)] == [
        "300", "1,600", "4,000", "3.9", "1.1", "0.043",
    ]  # fmt: skip
    assert (held(3, 3), held(0, 3), held(1, 3)) == (
        "held in all 3 layers", "did not hold in any of 3 layers", "held in only 1 of 3 layers",
    )  # fmt: skip


# --- 1: the variance of q . k ----------------------------------------------------------------


def _logit(errors: list[float]) -> pd.DataFrame:
    d_k = np.array([1, 4, 16, 64])[: len(errors)]
    errors = np.array(errors)
    return pd.DataFrame({"d_k": d_k, "std_hp": np.sqrt(d_k) * (1 + errors), "rel_error_hp": errors})


def test_variance_grows_as_dk_or_not():
    within = variance_sentence(_logit([0.001, -0.002, 0.0005, 0.0012]))
    assert "is `sqrt(d_k)` to within 0.2% at every d_k from 1 to 64 (8.01 at d_k = 64)" in within
    assert "variance grows as d_k" in within and "restores unit variance" in within
    off = variance_sentence(_logit([0.001, 0.05, 0.0005, 0.0012]))
    assert "departs from `sqrt(d_k)` by up to 5% (at d_k = 4" in off
    assert "does not grow as d_k" in off and "does not restore unit variance" in off


# --- 2: saturation and the softmax Jacobian --------------------------------------------------


def _sweep(column: str, scaled: list[float], unscaled: list[float]) -> pd.DataFrame:
    d_k = [1, 16, 1024]
    rows = [("scaled", d, v) for d, v in zip(d_k, scaled, strict=True)]
    rows += [("unscaled", d, v) for d, v in zip(d_k, unscaled, strict=True)]
    frame = pd.DataFrame(rows, columns=["variant", "d_k", column])
    frame["n_keys"] = 256
    return frame


def test_saturates_or_not_and_the_jacobian_falls_below_or_not():
    weight = _sweep("max_weight_mean", [0.045, 0.043, 0.046], [0.045, 0.5, 0.93])
    norm = _sweep("jacobian_fro_mean", [0.096, 0.099, 0.099], [0.096, 0.287, 0.086])
    text = saturation_sentence(weight, norm)
    assert text.startswith("Unscaled, the softmax over 256 keys saturates as d_k grows")
    assert "from 0.045 at d_k = 1 to 0.93 at d_k = 1024" in text
    assert "stays between 0.043 and 0.046" in text
    assert "peaks at 0.287 at d_k = 16 and falls to 0.086 at d_k = 1024, below scaled" in text
    flat = _sweep("max_weight_mean", [0.045, 0.043, 0.046], [0.045, 0.2, 0.3])
    high = _sweep("jacobian_fro_mean", [0.096, 0.099, 0.099], [0.096, 0.287, 0.15])
    text = saturation_sentence(flat, high)
    assert "does not saturate" in text and "saturates as" not in text
    assert "falls to 0.150 at d_k = 1024, still above scaled attention's 0.099" in text


# --- 3: the training demo --------------------------------------------------------------------


def _summary(scaled: list[float], unscaled: list[float], unscaled_01: list[float]) -> pd.DataFrame:
    rows = []
    for seed, (s, u, u01) in enumerate(zip(scaled, unscaled, unscaled_01, strict=True)):
        rows.append(("scaled", seed, s, 2 * s))
        rows.append(("unscaled", seed, u, u01))
    columns = ["variant", "seed", "step_loss_below_1", "step_loss_below_0p1"]
    return pd.DataFrame(rows, columns=columns)


def test_step_ratio_is_paired_by_seed():
    summary = _summary([10, 20, 40], [30, 40, math.nan], [50, 60, math.nan])
    assert step_ratio(summary) == pytest.approx(2.5)  # median of 3 and 2; seed 2 never
    assert math.isnan(step_ratio(_summary([10], [math.nan], [math.nan])))


def test_trains_more_slowly_or_not():
    slow = training_sentence(_summary([60, 63, 70], [200, 206, 230], [500, 510, 520]),
                             "natural", 424 / 224, [1.87, 1.44])  # fmt: skip
    assert "unscaled attention trains (smoothed loss below 0.1 on 3 of 3 seeds)" in slow
    assert ", but more slowly than scaled attention." in slow
    assert "declared before any result was seen (`natural`)" in slow
    assert "a median 206 steps to reach smoothed loss 1.0 against scaled attention's 63" in slow
    assert "3.3x as many" in slow and "the article has 1.9x" in slow
    assert "(experiment 09), 1.9x and 1.4x." in slow
    fast = training_sentence(_summary([60, 63, 70], [30, 31, 35], [50, 60, 70]), "other", 2.0)
    assert ", and faster than scaled attention." in fast and "more slowly" not in fast
    assert "as 04 was run with `--reading` (`other`)" in fast
    assert "declared before" not in fast and "experiment 09" not in fast


def test_does_not_train_or_trains_on_only_some_seeds():
    nan = math.nan
    never = training_sentence(_summary([60, 63], [nan, nan], [nan, nan]), "natural", 2.0)
    assert never.startswith("On the article's recall task unscaled attention does not train ")
    assert "on 0 of 2 seeds" in never and "trains" not in never.replace("does not train", "")
    assert never.endswith(").")  # no speed without a ratio
    some = training_sentence(_summary([60, 63, 70], [200, nan, 230], [500, nan, nan]),
                             "natural", 2.0)  # fmt: skip
    assert "unscaled attention trains on only 1 of 3 seeds" in some
    assert "but more slowly" in some
    never_low = training_sentence(_summary([60, 63], [200, 210], [nan, nan]), "natural", 2.0)
    assert "does not train" in never_low and "; it is slower." in never_low


# --- 4: who owns the temperature in the language model ----------------------------------------


def _drift(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    """(mechanism, owner, ratio) per layer."""
    frame = pd.DataFrame(rows, columns=["mechanism", "owner_best", "ratio"])
    frame["holds"] = frame.ratio <= 2.0
    frame["layer"] = frame.groupby("mechanism").cumcount()
    return frame


def test_the_temperature_held_or_not():
    text = lm_sentence(_drift([
        ("scaled", "weights", 302.0), ("scaled", "weights", 1596.0),
        ("unscaled", "weights", 480.0), ("unscaled", "weights", 3953.0),
        ("qk_norm", "mechanism", 1.07), ("qk_norm", "mechanism", 3.9),
    ]))  # fmt: skip
    assert "the weights own the attention temperature" in text
    assert "under scaled and unscaled attention alike" in text
    assert "it did not hold in any of 4 layers when the weights drifted" in text
    assert "grew 300-1,600x (scaled) and 480-4,000x (unscaled)" in text
    assert "at most 2x" in text and "trained at 10x the best" in text
    assert "under qk-layernorm the mechanism owns it and it held in only 1 of 2 layers" in text
    assert "(1.1-3.9x)" in text
    text = lm_sentence(_drift([("scaled", "mechanism", 1.2), ("unscaled", "mechanism", 1.5)]))
    assert "the mechanism owns the attention temperature" in text
    assert "it held in all 2 layers when the weights drifted" in text
    assert "qk-layernorm" not in text
    text = lm_sentence(_drift([("scaled", "weights", 1.2), ("unscaled", "weights", 5.0)]))
    assert "it held in only 1 of 2 layers" in text


def test_different_owners_and_no_drift():
    frame = _drift([("scaled", "cap", 1.2), ("unscaled", "weights", 50.0)])
    text = lm_sentence(frame)
    assert (
        "has different owners: the cap owns it under scaled attention and the weights own it "
        "under unscaled attention"
    ) in text
    assert "held in only 1 of 2 layers" in text
    undrifted = lm_sentence(frame.drop(columns=["ratio", "holds"]))
    assert "drifted" not in undrifted and undrifted.endswith("unscaled attention.")


# --- the whole -------------------------------------------------------------------------------


def test_the_committed_answer():
    """Five parts, in order, read from the committed CSVs."""
    text = opening(tables_for(RESULTS))
    assert text.startswith(f"**{QUESTION}** On the article's recall task")
    parts = ["recall task", "standard deviation of `q · k`", "saturates", "language model",
             "Muon"]  # fmt: skip
    assert [text.index(p) for p in parts] == sorted(text.index(p) for p in parts)
    assert "shared/" not in text


def _copy(names: list[str], to: Path) -> None:
    for name in names:
        shutil.copy(RESULTS / name, to)
        if sidecar_path(RESULTS / name).is_file():
            shutil.copy(sidecar_path(RESULTS / name), to)


def test_a_sentence_whose_csvs_are_absent_is_left_out(tmp_path):
    _copy(["01_logit_variance.csv"], tmp_path)
    text = opening(tables_for(tmp_path))
    assert text.startswith(f"**{QUESTION}** Without the divisor")
    assert "recall task" not in text and "language model" not in text
    empty = tmp_path / "empty"
    empty.mkdir()
    assert opening(tables_for(empty)) == ""


def _runs(
    after: tuple[float, ...], first: float, last: float, muon_low: float = 25.0, wsd: bool = True
) -> pd.DataFrame:
    """15's runs: a sweep where AdamW is best at 1e-2 and Muon at 3e-2, Muon's logits below
    AdamW's at both nominal rates and above at the best (its low seed ``muon_low`` against
    AdamW's 20-22); Muon's clipped long WSD run at its best, S ``after`` tau on each seed
    after the clip first fired, the plateau clipped ``first`` then ``last``; and a clipped
    run at 10x its best, outside K2's regime, whose S reached 50 tau."""
    nan = float("nan")

    def row(part, optimizer, lr, logit, loss, seed=0, tau=nan, schedule="cosine", **more):
        return {"part": part, "optimizer": optimizer, "side": "shared", "side_lr": lr,
                "schedule": schedule, "mechanism": "scaled",
                "qk_clip_on": "none" if math.isnan(tau) else "signed", "qk_clip_tau": tau,
                "lr": lr, "seed": seed, "steps": 3000 if part == "long" else 500,
                "final_val_loss": loss, "max_attn_logit": logit, "first_clip_step": -1,
                "max_signed_after_first_clip": nan, "clip_fraction_plateau_first": nan,
                "clip_fraction_plateau_last": nan, **more}  # fmt: skip

    def fired(part, lr, s, seed=0, schedule="cosine", **more):
        return row(part, "muon", lr, 40.0, 2.0, seed, 20.0, schedule, first_clip_step=60,
                   max_signed_after_first_clip=20.0 * s, **more)  # fmt: skip

    logits = {("adamw", 1e-2): (20.0, 22.0), ("adamw", 3e-2): (300.0, 320.0),
              ("muon", 1e-2): (10.0, 12.0), ("muon", 3e-2): (muon_low, 28.0)}  # fmt: skip
    best = {"adamw": 1e-2, "muon": 3e-2}
    sweep = [row("sweep", o, lr, z, 2.0 + (lr != best[o]) + 0.01 * seed, seed)
             for (o, lr), seeds in logits.items() for seed, z in enumerate(seeds)]  # fmt: skip
    long = [fired("long", 3e-2, s, seed, "wsd" if wsd else "cosine",
                  clip_fraction_plateau_first=first if wsd else nan,
                  clip_fraction_plateau_last=last if wsd else nan)
            for seed, s in enumerate(after)]  # fmt: skip
    return pd.DataFrame([*sweep, *long, fired("taus", 0.3, 50.0)])


def test_the_sentence_names_the_optimizers_the_table_holds():
    """Lion's rows in Muon's place: the sentence is about Lion (15 --optimizers adamw lion),
    and a pinned arm is left out of it."""
    runs = _runs((1.1, 1.2, 1.5), 0.5, 0.1)
    lion = optimizer_sentence(runs.assign(optimizer=runs.optimizer.replace("muon", "lion")))
    assert lion.startswith("Under Lion and Kimi K2's QK-Clip (experiment 15)")
    assert "Lion's logits grew more than AdamW's" in lion and "Muon" not in lion
    pinned = runs.assign(side=runs.side.where(runs.optimizer != "muon", "pinned"))
    assert optimizer_sentence(pinned).startswith("Under AdamW and Kimi K2's QK-Clip")


def test_the_clip_held_or_not_and_fired_less_late_or_not():
    text = optimizer_sentence(_runs((1.1, 1.2, 1.5), 0.5, 0.1))
    assert text.startswith(
        "Under Muon and Kimi K2's QK-Clip (experiment 15), at each optimizer's "
        "best rate and 3x it with a tau that binds, the clip held S within 2 "
        "tau on every seed after it first fired (its worst median over seeds 1.2 tau), "
        "firing less late than early on K2's constant-rate plateau; "
    )
    assert "50 tau" not in text  # the run at 10x the best rate is outside K2's regime
    assert text.endswith(
        "Muon's logits grew more than AdamW's, seeds apart, at 1 of 1 matched "
        "multiples of the best rate and 0 of 2 matched nominal rates."
    )
    text = optimizer_sentence(_runs((1.1, 12.8, 1.5), 0.1, 0.5))
    assert (
        "the clip let S reach 13 tau on its worst seed after it first fired (its worst "
        "median over seeds 1.5 tau)" in text
    )
    assert "firing no less late than early on K2's constant-rate plateau" in text
    # Muon's low seed at the best rate inside AdamW's range: a tie, not more
    assert "at 0 of 1 matched multiples" in optimizer_sentence(_runs((1.1,), 0.5, 0.1, 21.0))
    cosine = optimizer_sentence(_runs((1.1,), 0.5, 0.1, wsd=False))
    assert "held S within 2 tau" in cosine and "plateau" not in cosine
    never = optimizer_sentence(_runs((), 0.5, 0.1))
    assert never.startswith("Under Muon and Kimi K2's QK-Clip (experiment 15); Muon's logits")

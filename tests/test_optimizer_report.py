"""The optimizer study's report section: the headline summarises the long run over its
seeds, and the trajectory table takes the median over seeds, layers and heads."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlab.harness.tables import Tables
from attnlab.studies.optimizer.report import RUN_COLUMNS, answer, trajectory
from attnlab.studies.optimizer.study import RUNS_CSV


def _long_rows(optimizer: str, lr: float, tau: float, seeds: int, logits, after) -> list[dict]:
    """Long-run rows of one rate: unclipped with largest logits ``logits``, clipped with
    largest S after the first firing ``after``, one per seed."""
    base = {c: 0 for c in RUN_COLUMNS} | {
        "part": "long",
        "optimizer": optimizer,
        "mechanism": "scaled",
        "lr": lr,
        "steps": 100,
    }
    rows = []
    for seed in range(seeds):
        rows.append(base | {"seed": seed, "qk_clip_tau": np.nan, "max_attn_logit": logits[seed]})
        rows.append(base | {"seed": seed, "qk_clip_tau": tau, "first_clip_step": 3 + seed,
                            "max_signed_after_first_clip": after[seed],
                            "clip_fraction_first_quarter": 0.5,
                            "clip_fraction_last_quarter": 0.1 * seed})  # fmt: skip
    return rows


def test_the_headline_gives_each_rate_the_range_over_the_long_runs_seeds(tmp_path):
    rows = _long_rows("muon", 0.3, 100.0, 2, [2e3, 5e5], [150.0, 120.0])
    pd.DataFrame(rows)[RUN_COLUMNS].to_csv(tmp_path / RUNS_CSV, index=False)
    text = answer(Tables(tmp_path, lambda name: "make"))
    assert "under muon at lr 0.3 (2 seeds) the largest logit reached 2e+03-5e+05 unclipped" in text
    assert "120-150 after QK-Clip 100 first fired (steps 3-4)" in text
    assert "50% of head-steps in the first quarter and 0%-10% in the last" in text


def test_the_headline_says_on_how_many_seeds_the_clip_fired(tmp_path):
    rows = _long_rows("adamw", 0.1, 100.0, 2, [2e3, 5e3], [150.0, np.nan])
    rows[-1]["first_clip_step"] = -1  # the second seed's clip never fired
    pd.DataFrame(rows)[RUN_COLUMNS].to_csv(tmp_path / RUNS_CSV, index=False)
    assert "with QK-Clip, which fired on 1 of 2 seeds" in answer(Tables(tmp_path, lambda n: ""))


def test_the_trajectory_is_the_median_over_seeds_layers_and_heads():
    keys = {"optimizer": "adamw", "mechanism": "scaled", "qk_clip_tau": np.nan, "lr": 0.1}
    rows = [keys | {"seed": seed, "step": step, "layer": 0, "head": head,
                    "max_logit": 10.0 * seed + head + step, "spectral_norm": 1.0,
                    "elasticity": 2.0, "owner": "weights", "q_moved": 0.5}
            for seed in range(3) for step in (0, 10) for head in range(2)]  # fmt: skip
    table = trajectory(pd.DataFrame(rows))
    assert len(table) == 2 and "seed" not in table  # one run, its two points
    # the median over seeds {0, 10, 20} and heads {0, 1}: (10 + 11) / 2, plus the step
    assert table.max_logit.tolist() == [10.5, 20.5]

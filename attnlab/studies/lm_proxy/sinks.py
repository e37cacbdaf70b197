"""Experiment 14's attention-sink answers (issue 71), read from ``14_lm_sinks.csv`` alone
(pandas, no JAX): the sink set (``study.SINKS``) at one width, each mechanism on
``SINK_SEEDS`` seeds, every head at the best rate and at ``DRIFT_FACTOR`` times it.

Per seed, a mechanism's *sink share* is the share of its heads (every layer) whose mean
weight on the first position exceeds Gu et al.'s 0.3 (``sink_head``, at the seed's lane of
the best rate); the tables give the mean over seeds with its standard error and the seeds'
values. Under uniform causal attention over ``T`` positions a head's first-position weight
is ``H_T / T`` (the harmonic number), 0.074 at T = 64: a sink head is one that puts four
times that on the first byte.

(f) Scaled attention develops sink heads: its mean sink share at the best rate is above 0
    (Gu et al. find sinks in models of about 60M parameters; ours is far smaller).
(g) Gated attention has fewer: its mean share is below scaled's (Qiu et al. 2025).
(h) A learned sink takes the excess weight off the first position: the sink mechanism's
    mean first-position weight is below scaled's.
(i) Sigmoid attention shows none: its share is 0 on every seed (Gu et al.: no sink under
    sigmoid attention without normalisation).
(j) Gated attention tolerates larger rates: its held-out loss at ``DRIFT_FACTOR`` times its
    best rate is no worse than scaled's at ``DRIFT_FACTOR`` times scaled's, within the two
    seed means' combined standard error.

Each is a rule that can come out either way; an answer whose mechanism or rate was not
trained does not hold, and says so.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from attnlab.studies.lm_proxy.answers import Answer
from attnlab.studies.lm_proxy.study import DRIFT_FACTOR

#: The columns the answers read.
SINK_COLUMNS = ["mechanism", "d_model", "seed", "weights", "layer", "head", "lr",
                "final_val_loss", "first_weight", "null_weight", "sink_head"]  # fmt: skip


def per_seed(sinks: pd.DataFrame, weights: str = "best") -> pd.DataFrame:
    """Per mechanism and seed at ``weights``: the sink share, the mean first-position and
    null weights over heads, the lane's held-out loss and its rate."""
    rows = sinks[sinks.weights == weights]
    grouped = rows.groupby(["mechanism", "seed"], sort=False)
    return grouped.agg(share=("sink_head", "mean"), first=("first_weight", "mean"),
                       null=("null_weight", "mean"), loss=("final_val_loss", "first"),
                       lr=("lr", "first")).reset_index()  # fmt: skip


def _mean_se(values: pd.Series) -> tuple[float, float]:
    n = len(values)
    se = float(values.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    return float(values.mean()), se


def _stated(seeds: pd.DataFrame, mechanism: str, column: str, digits: str = ".3f") -> str:
    cell = seeds[seeds.mechanism == mechanism]
    if cell.empty:
        return f"{mechanism}: not trained"
    mean, se = _mean_se(cell[column])
    values = ", ".join(f"{v:{digits}}" for v in cell[column])
    return f"{mechanism} {mean:{digits}} ± {se:{digits}} (seeds: {values})"


def _mean(seeds: pd.DataFrame, mechanism: str, column: str) -> float:
    cell = seeds[seeds.mechanism == mechanism]
    return float(cell[column].mean()) if len(cell) else float("nan")


def uniform_first_weight(length: int) -> float:
    """The first-position weight of uniform causal attention over ``length`` positions,
    ``(1/T) sum_i 1/i = H_T / T``: row ``i`` spreads its weight over ``i`` keys."""
    return float(np.sum(1.0 / np.arange(1, length + 1)) / length)


def sink_answers(sinks: pd.DataFrame, length: int = 64) -> list[Answer]:
    """(f)-(j) of the module docstring, on sequences of ``length`` positions."""
    best, drifted = per_seed(sinks, "best"), per_seed(sinks, "drifted")
    share = {m: _mean(best, m, "share") for m in ("scaled", "gated", "sigmoid")}
    first = {m: _mean(best, m, "first") for m in ("scaled", "sink")}
    sigmoid = best[best.mechanism == "sigmoid"]
    answers = [
        Answer("(f) scaled attention develops sink heads at its best rate",
               bool(share["scaled"] > 0), "sink share " + _stated(best, "scaled", "share")
               + "; first-position weight " + _stated(best, "scaled", "first") + " against "
               f"{uniform_first_weight(length):.3f} for uniform causal attention"),
        Answer("(g) gated attention has fewer sink heads than scaled",
               bool(share["gated"] < share["scaled"]),
               "sink share " + "; ".join(_stated(best, m, "share") for m in ("gated", "scaled"))),
        Answer("(h) a learned sink takes the excess weight off the first position",
               bool(first["sink"] < first["scaled"]),
               "first-position weight " + "; ".join(_stated(best, m, "first")
                                                    for m in ("sink", "scaled"))
               + "; weight on the sink " + _stated(best, "sink", "null")),
        Answer("(i) sigmoid attention shows no sink head", bool(len(sigmoid))
               and bool((sigmoid.share == 0).all()), "sink share " + _stated(best, "sigmoid",
                                                                           "share")),
    ]  # fmt: skip
    return [*answers, _tolerates(drifted)]


def _tolerates(drifted: pd.DataFrame) -> Answer:
    """(j): gated's loss at ``DRIFT_FACTOR`` x its best rate against scaled's."""
    label = (f"(j) gated attention's loss at {DRIFT_FACTOR:g}x its best rate is no worse "
             "than scaled's")  # fmt: skip
    cells = {m: drifted[drifted.mechanism == m] for m in ("gated", "scaled")}
    if any(c.empty for c in cells.values()):
        missing = [m for m, c in cells.items() if c.empty]
        return Answer(label, False, f"not measured: {DRIFT_FACTOR:g}x the best rate of "
                      f"{', '.join(missing)} was not swept")  # fmt: skip
    (g, g_se), (s, s_se) = (_mean_se(cells[m].loss) for m in ("gated", "scaled"))
    allowed = float(np.hypot(np.nan_to_num(g_se), np.nan_to_num(s_se)))
    rates = "; ".join(f"{m} at lr {cells[m].lr.iloc[0]:g}" for m in cells)
    return Answer(label, bool(g <= s + allowed),
                  f"held-out loss {_stated(drifted, 'gated', 'loss')}; "
                  f"{_stated(drifted, 'scaled', 'loss')} ({rates}; allowed: scaled's + "
                  f"{allowed:.3f}, the combined SE)")  # fmt: skip


def sink_table(sinks: pd.DataFrame) -> str:
    """A Markdown table: per mechanism at the best rate, the sink share, first-position and
    null weights (mean ± SE over seeds) and the rate."""
    best = per_seed(sinks, "best")
    lines = ["| mechanism | best lr | sink share | first-position weight | weight on nothing |",
             "|---|---|---|---|---|"]  # fmt: skip
    for mechanism, cell in best.groupby("mechanism", sort=False):
        cells = [" ± ".join(f"{v:.3f}" for v in _mean_se(cell[c])) for c in ("share", "first",
                                                                             "null")]  # fmt: skip
        rates = "/".join(f"{r:g}" for r in sorted(set(cell.lr)))
        lines.append(f"| {mechanism} | {rates} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

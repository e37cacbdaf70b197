"""The report's section for experiment 06: the measured condensation threshold."""

from __future__ import annotations

from attnlab.claims import ABOUT
from attnlab.harness.headlines import medians
from attnlab.harness.tables import Tables, markdown_table, num
from attnlab.harness.verdicts import Check, claim_rows, claims_block
from attnlab.studies.condensation.study import (
    CLAIMS,
    COLUMNS,
    CSV,
    DEPARTURE_RATIO,
    SATURATED_MAX_WEIGHT,
)
from attnlab.studies.condensation.thresholds import measured_thresholds

GRID = ["n_keys", "d_k", "threshold_dk", "max_weight_unscaled_mean"]


def _unsaturated_below_threshold(tables: Tables) -> tuple[str, str, bool]:
    """Every grid cell with ``d_k <= 2 ln n`` has unscaled mean max weight below 1/2."""
    frame = tables.get(CSV, GRID)
    below = frame[frame.d_k <= frame.threshold_dk]
    saturated = below[below.max_weight_unscaled_mean >= SATURATED_MAX_WEIGHT]
    if saturated.empty:
        return f"all {len(below)} cells below 2 ln n unsaturated", "", True
    worst = ", ".join(
        f"n = {int(r.n_keys)}, d_k = {int(r.d_k)}: {r.max_weight_unscaled_mean:.3f}"
        for r in saturated.itertuples()
    )
    holds_from = below.n_keys[~below.n_keys.isin(saturated.n_keys)].min()
    return f"saturated at {worst}", f"holds for n ≥ {num(holds_from)}", False


def _saturating_n_at_dk4(tables: Tables) -> tuple[str, str, bool]:
    """The largest grid n at which d_k = 4 rows saturate, against "fewer than about 7"."""
    frame = tables.get(CSV, GRID)
    at4 = frame[(frame.d_k == 4) & (frame.max_weight_unscaled_mean >= SATURATED_MAX_WEIGHT)]
    if at4.empty:
        return "no n saturates at d_k = 4", "", True
    n = int(at4.n_keys.max())
    weight = float(at4.loc[at4.n_keys.idxmax(), "max_weight_unscaled_mean"])
    return (
        f"saturated up to n = {n} (max weight {weight:.3f})",
        f"< 7 × (1 + {ABOUT:g})",
        (n < 7 * (1 + ABOUT)),
    )


#: Check name -> function of the tables returning (ours, detail, verdict).
CHECKS: dict[str, Check] = {
    "unsaturated_below_2ln_n": _unsaturated_below_threshold,
    "saturating_n_at_dk4": _saturating_n_at_dk4,
}


def section(tables: Tables) -> str:
    """Experiment 06: measured thresholds of unscaled attention against ``2 ln n``."""
    frame = tables.get(CSV, COLUMNS)
    found = measured_thresholds(frame)
    table = markdown_table(
        [
            "n",
            "2 ln n",
            f"d_k: max weight ≥ {SATURATED_MAX_WEIGHT:g} (grid / interp.)",
            "interp. / 2 ln n",
            f"d_k: unscaled ≥ {DEPARTURE_RATIO:g}× scaled (grid / interp.)",
            "unscaled max weight at d_k = 2 ln n",
        ],
        [
            (
                int(r.n_keys),
                f"{r.threshold_dk:.2f}",
                f"{num(r.saturation_dk_grid)} / {num(r.saturation_dk)}",
                num(r.saturation_dk / r.threshold_dk),
                f"{num(r.departure_dk_grid)} / {num(r.departure_dk)}",
                num(r.max_weight_at_threshold),
            )
            for r in found.itertuples()
        ],
    )
    return "\n\n".join(
        [
            "### Condensation threshold d_k = 2 ln n (experiment 06)",
            f"Mean max weight of unscaled and scaled attention over {frame.d_k.nunique()} head "
            f"widths and {frame.n_keys.nunique()} row lengths, {int(frame.trials.iloc[0])} rows "
            "per cell (exact-law logits, `results/06_condensation.csv`). For each n: the first "
            f"grid d_k at which unscaled attention puts at least {SATURATED_MAX_WEIGHT:g} of its "
            "mass on one key (saturation), and at which its max weight is at least "
            f"{DEPARTURE_RATIO:g}x scaled attention's on the same draws (departure), each also "
            "interpolated linearly in log2 d_k; and the unscaled max weight interpolated at "
            "d_k = 2 ln n (article 004: no saturation while d_k ≲ 2 ln n).",
            table,
            claims_block(claim_rows(CLAIMS, tables, CHECKS)),
        ]
    )


#: The headline of each CSV (``attnlab.studies.headline``).
HEADLINES = {
    CSV: lambda f: medians(f, "n_keys", "threshold_dk", "condensation threshold d_k per n"),
}

"""The report's section for experiment 06: the measured condensation threshold."""

from __future__ import annotations

from attnlab.harness.tables import Tables, markdown_table, num


def section(tables: Tables) -> str:
    """Experiment 06: measured thresholds of unscaled attention against ``2 ln n``."""
    from attnlab.studies.condensation.compute import (  # imports jax: only when built
        COLUMNS,
        DEPARTURE_RATIO,
        SATURATED_MAX_WEIGHT,
        measured_thresholds,
    )

    frame = tables.get("06_condensation.csv", COLUMNS)
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
        ]
    )

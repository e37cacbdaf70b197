"""Study condensation (experiment 06): where unscaled attention condenses onto one key,
over a grid of head widths d_k and row lengths n. Declared here: its CSV with the rule
``make verify`` compares each column by, the criteria its figure and report share, its
claims, figure and place in the report."""

from __future__ import annotations

import math

from attnlab.claims import CheckClaim, Claim, IdentityClaim
from attnlab.harness.declaration import BEYOND, EXACT, KEY, SE, UNCHECKED, Output, Study, mean

CSV = "06_condensation.csv"
#: Saturation criterion of the measured threshold: one key holds half of the mass.
SATURATED_MAX_WEIGHT = 0.5
#: Departure criterion: unscaled max weight at least this multiple of the scaled one.
DEPARTURE_RATIO = 2.0

CONDENSATION = Output(
    "06_condensation.py",
    {
        "n_keys": KEY,
        "d_k": KEY,
        "trials": UNCHECKED,
        "threshold_dk": EXACT,
        "max_weight_unscaled_mean": mean("max_weight_unscaled_sem"),
        "max_weight_unscaled_sem": SE,
        "max_weight_scaled_mean": mean("max_weight_scaled_sem"),
        "max_weight_scaled_sem": SE,
        "gap_mean": mean("gap_sem"),
        "gap_sem": SE,
    },
    out_flag="--out",
)

#: The CSV's columns, in order (their rules above).
COLUMNS = tuple(CONDENSATION.column_names)

SMALL_HEAD = "Keep the head small"

# fmt: off
CLAIMS: tuple[Claim, ...] = (
    IdentityClaim(SMALL_HEAD, "2 ln n at n = 256", "about 11 for n = 256 keys", 11, 0, 2 * math.log(256)),
    CheckClaim(SMALL_HEAD, "unscaled rows unsaturated (max weight < 0.5) while d_k <= 2 ln n", "stay below the softmax condensation threshold ... whenever d_k <~ 2 ln n", "every n", "unsaturated_below_2ln_n"),
    IdentityClaim(SMALL_HEAD, "n with 2 ln n = 4, e^2", "at d_k = 4, saturation would require attending over fewer than about 7 keys", 7, 0, math.exp(2)),
    CheckClaim(SMALL_HEAD, "largest n whose d_k = 4 rows saturate (max weight >= 0.5)", "at d_k = 4, saturation would require attending over fewer than about 7 keys", "< 7 (about)", "saturating_n_at_dk4", kind="measured"),
)
# fmt: on


STUDY = Study(
    "condensation",
    6,
    {
        CSV: CONDENSATION,
    },
    figures=("fig5_condensation",),
    claims=CLAIMS,
    part=BEYOND,
)

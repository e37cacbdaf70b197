"""Study failure_modes, declared: its outputs, their columns and the rules ``make verify``
compares them by, its figures and its place in the report."""

from __future__ import annotations

import numpy as np

from attnlab.claims import CheckClaim, Claim
from attnlab.harness.declaration import (
    BEYOND,
    EXACT,
    KEY,
    SE,
    UNCHECKED,
    Output,
    Rule,
    Study,
    close,
    mean,
)

#: float16's and bfloat16's machine epsilon: the tolerances of TV errors and masked row sums.
F16_EPS, BF16_EPS = 2.0**-10, 2.0**-7
#: verify-quick regenerates (c) with fewer samples (its means carry SEs), (a) and (b) whole.
QUICK = ("--samples", "10000")
SCRIPT = "07_failure_modes.py"


def _part(columns: dict[str, Rule]) -> Output:
    """The CSV of one part of the script, its columns in order; every part is regenerated
    by ``make verify-quick`` (with ``QUICK``)."""
    return Output(SCRIPT, columns, quick_flags=QUICK)


OVERFLOW = _part(
    {
        "method": KEY,
        "max_logit": KEY,
        "rows": UNCHECKED,
        "n_keys": KEY,
        "nonfinite_fraction": EXACT,
        "zero_row_fraction": close(4 / 256, 0.0),  # 4 of 256 rows
        "tv_error_max": close(F16_EPS, 0.0),
        "tv_error_mean": close(F16_EPS, 0.0),
    }
)

MASKS = _part(
    {
        "dtype": KEY,
        "fill": KEY,
        "fill_stored": EXACT,
        "row": KEY,
        "output_nan": EXACT,
        "grad_nan": EXACT,
        "row_sum": close(BF16_EPS, 0.0),
        "leaked_mass": EXACT,
        "max_abs_error": close(BF16_EPS, 0.0),
    }
)

CORRELATION = _part(
    {
        "d_k": KEY,
        "rho": KEY,
        "samples": UNCHECKED,
        "mean_measured": mean("mean_se"),
        "mean_se": SE,
        "mean_predicted": EXACT,
        "std_measured": mean("std_se"),
        "std_se": SE,
        "std_predicted": EXACT,
        "std_z": UNCHECKED,
    }
)


OVERFLOW_CSV = "07_failure_modes_overflow.csv"
MASKS_CSV = "07_failure_modes_masks.csv"
CORRELATION_CSV = "07_failure_modes_correlation.csv"
#: The CSV of each part of the study.
PART_CSVS: dict[str, str] = {
    "overflow": OVERFLOW_CSV,
    "masks": MASKS_CSV,
    "correlation": CORRELATION_CSV,
}
#: Each CSV's columns, in order (their rules above).
OVERFLOW_COLUMNS = tuple(OVERFLOW.column_names)
MASK_COLUMNS = tuple(MASKS.column_names)
CORRELATION_COLUMNS = tuple(CORRELATION.column_names)

#: The largest finite float16; ``exp(z)`` overflows in float16 for ``z > ln 65504``.
FLOAT16_MAX = float(np.finfo(np.float16).max)
FLOAT16_EXP_LIMIT = float(np.log(FLOAT16_MAX))
#: (a) An implementation's error is "too large" once its total-variation distance from the
#: float64 softmax of the same float16 logits exceeds this, in any row.
TV_TOLERANCE = 1e-2
#: (b) The reference implementation's row label in the fill column.
REFERENCE_FILL = "masked_softmax"
#: (b) Row kinds: key ``j`` may be attended iff ``mask[j]``.
MASK_ROWS: dict[str, np.ndarray] = {
    "partly masked": np.arange(8) < 5,
    "fully masked": np.zeros(8, bool),
}

# fmt: off
FAILURES = "000: failure modes at the boundaries"

CLAIMS: tuple[Claim, ...] = (
    CheckClaim(FAILURES, "a fully masked row filled with -inf gives NaN", "every logit -inf; the softmax then computes 0/0 and returns NaN", "NaN in every dtype", "minus_inf_fully_masked_nan"),
    CheckClaim(FAILURES, "-1e9 as mask value in float16", "-10^9 in 16-bit arithmetic ... behaves as -inf anyway", "same as -inf", "float16_minus_1e9_is_minus_inf"),
    CheckClaim(FAILURES, "-1e9 as mask value in float32: masked weights", "in 32-bit it produces a probability of exactly zero only by underflow", "exactly 0", "float32_minus_1e9_exact_zero"),
    CheckClaim(FAILURES, "largest logit at which a float16 softmax first overflows", "will overflow for logits above roughly 11", "roughly 11", "float16_overflow_logit", kind="measured"),
)
# fmt: on


STUDY = Study(
    "failure_modes",
    7,
    {
        OVERFLOW_CSV: OVERFLOW,
        MASKS_CSV: MASKS,
        CORRELATION_CSV: CORRELATION,
    },
    figures=("fig6_failure_modes",),
    claims=CLAIMS,
    part=BEYOND,
)

"""Which command makes which result file: the one registry that error messages quote."""

from __future__ import annotations

from pathlib import Path

RESULTS_DIR = Path("results")
FIGURES_DIR = Path("figures")

#: Result CSV name -> the command that regenerates it (run from the repository root).
MADE_BY: dict[str, str] = {
    "01_logit_variance.csv": "python experiments/01_logit_variance.py",
    "02_saturation_sweep.csv": "python experiments/02_saturation_sweep.py",
    "03_jacobian_norm.csv": "python experiments/03_jacobian_norm.py",
    "04_recall_curves.csv": "python experiments/04_associative_recall.py",
    "04_recall_summary.csv": "python experiments/04_associative_recall.py",
    "05_remedies_curves.csv": "python experiments/05_remedies.py",
    "05_remedies_summary.csv": "python experiments/05_remedies.py",
    "05_fold_curves.csv": "python experiments/05_remedies.py",
    "05_fold_check.csv": "python experiments/05_remedies.py",
    "05_sensitivity.csv": "python experiments/05_remedies.py",
    "06_condensation.csv": "python experiments/06_condensation.py",
    "07_failure_modes_overflow.csv": "python experiments/07_failure_modes.py",
    "07_failure_modes_masks.csv": "python experiments/07_failure_modes.py",
    "07_failure_modes_correlation.csv": "python experiments/07_failure_modes.py",
    "08_companion_claims.csv": "python experiments/08_companion_claims.py",
}


def made_by(csv_name: str) -> str:
    """The command that makes ``results/<csv_name>``."""
    return MADE_BY.get(csv_name, "make all")

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
}


def made_by(csv_name: str) -> str:
    """The command that makes ``results/<csv_name>``."""
    return MADE_BY.get(csv_name, "make all")

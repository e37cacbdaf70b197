"""Experiment 09: reconstruct the training demo's unstated set-up from the article's numbers.

Screens every declared reading by its step-0 ||grad W_Q|| (no training), fits the
survivors on the article's scaled run alone, and predicts the unscaled run with the best
readings (--stage runs one stage; a later stage alone reads the earlier CSVs from
--out-dir). Writes 09_fit_screen.csv, 09_fit_scores.csv, 09_fit_prediction_curves.csv.xz and
09_fit_prediction_summary.csv, each with a JSON sidecar. Method, score and its noise:
attnlab/studies/article_fit/README.md.
"""

import sys

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.studies import headline
from attnlab.studies.article_fit import flags
from attnlab.studies.article_fit.fits import FIRST_FIT

build_parser, run = flags.script(__doc__, FIRST_FIT)
main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())

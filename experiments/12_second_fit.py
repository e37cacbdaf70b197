"""Experiment 09, second pass: the second family of readings, fitted the first fit's way.

Screens every reading of the second family (finer batch-size and d_model grids) by its
step-0 ||grad W_Q|| (no training), fits the survivors under every smoothing of the loss on
the article's scaled run alone (a cascade: pass 2a one short run per reading on one seed,
pass 2b the best on more seeds to the longest run length), and predicts the unscaled run
with every member within the fit's noise (--stage runs one stage; a later stage alone reads
the earlier CSVs from --out-dir).
Writes 12_second_fit_screen.csv, 12_second_fit_scores.csv,
12_second_fit_prediction_curves.csv.xz and 12_second_fit_prediction_summary.csv, each with a
JSON sidecar. Method, stages and cuts: attnlab/studies/article_fit/README.md.
"""

import sys

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.studies import headline
from attnlab.studies.article_fit import flags
from attnlab.studies.article_fit.fits import SECOND_FIT

build_parser, run = flags.script(__doc__, SECOND_FIT)
main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())

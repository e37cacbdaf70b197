"""Experiment 02: softmax saturation of scaled and unscaled attention against d_k.

For each d_k, --trials rows of --n-keys logits z_i = q . k_i (standard normal q, k_i) are
drawn; scaled attention takes softmax(z / sqrt(d_k)) and unscaled attention softmax(z) of
the same draws. Writes the mean max weight and mean entropy (nats) with their standard
errors (article 004, "What Breaks Without It: Saturation", Figure 1).
"""

import sys

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.core.softmax_sweeps import run_saturation_sweep
from attnlab.harness import cli
from attnlab.studies import headline
from attnlab.studies.statics.flags import sweep_script
from attnlab.studies.statics.study import SATURATION_CSV

# A lambda, so that the function is looked up when the script runs (tests replace it).
build_parser, run = sweep_script(
    __doc__, SATURATION_CSV, "02 saturation", lambda config, bar: run_saturation_sweep(config, bar)
)
main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())

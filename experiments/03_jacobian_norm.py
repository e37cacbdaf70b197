"""Experiment 03: the Frobenius norm of the softmax Jacobian against d_k.

The same draws as experiment 02 (same flags, same seed): for each row of logits the norm
||diag(p) - p p^T||_F of scaled and unscaled attention, averaged over --trials rows, with
its standard error (article 004, "The Gradient Argument", Figure 2).
"""

import sys

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.core.softmax_sweeps import run_jacobian_sweep
from attnlab.harness import cli
from attnlab.studies import headline
from attnlab.studies.statics.flags import sweep_script
from attnlab.studies.statics.study import JACOBIAN_CSV

# A lambda, so that the function is looked up when the script runs (tests replace it).
build_parser, run = sweep_script(
    __doc__, JACOBIAN_CSV, "03 jacobian norm", lambda config, bar: run_jacobian_sweep(config, bar)
)
main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())

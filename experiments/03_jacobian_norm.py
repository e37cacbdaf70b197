"""Experiment 03: the Frobenius norm of the softmax Jacobian against d_k.

The same draws as experiment 02 (same flags, same seed): for each row of logits the norm
||diag(p) - p p^T||_F of scaled and unscaled attention, averaged over --trials rows, with
its standard error (article 004, "The Gradient Argument", Figure 2).
"""

import sys

from attnlab import cli
from attnlab.statics import add_sweep_flags, run_jacobian_sweep, sweep_config


def build_parser():
    parser = cli.new_parser(__doc__)
    add_sweep_flags(parser, "03_jacobian_norm.csv")
    return parser


def run(args):
    out = cli.check_writable(args.out, "--out")
    config = sweep_config(args)
    total = len(config.dks) * config.trials
    cli.run_table(args, out, "03 jacobian norm", total, lambda bar: run_jacobian_sweep(config, bar))


main = cli.entry_point(build_parser, run)

if __name__ == "__main__":
    sys.exit(main())

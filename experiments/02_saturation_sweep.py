"""Experiment 02: softmax saturation of scaled and unscaled attention against d_k.

For each d_k, --trials rows of --n-keys logits z_i = q . k_i (standard normal q, k_i) are
drawn; scaled attention takes softmax(z / sqrt(d_k)) and unscaled attention softmax(z) of
the same draws. Writes the mean max weight and mean entropy (nats) with their standard
errors (article 004, "What Breaks Without It: Saturation", Figure 1).
"""

import sys

from attnlab import cli
from attnlab.statics import add_sweep_flags, run_saturation_sweep, sweep_config


def build_parser():
    parser = cli.new_parser(__doc__)
    add_sweep_flags(parser, "02_saturation_sweep.csv")
    return parser


def run(args):
    out = cli.check_writable(args.out, "--out")
    config = sweep_config(args)
    total = len(config.dks) * config.trials
    cli.run_table(args, out, "02 saturation", total, lambda bar: run_saturation_sweep(config, bar))


main = cli.entry_point(build_parser, run)

if __name__ == "__main__":
    sys.exit(main())

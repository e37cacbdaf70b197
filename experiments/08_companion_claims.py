"""Experiment 08: the companion article's numbers (article 000), measured.

(1) how far the top logit of n = 512 standard normal logits sits above the row mean
("about 3.5 sigma", "nearly 28" at d_k = 64); (2) dividing by sqrt(d_model) = 22.6
instead of sqrt(d_k) = 8 with 8 heads: logit spread, max weight and entropy; (3) folding
the factor into W_Q (and W_K): logits, gradient and SGD-step ratios against the
derivation. Writes one long table (claim, quantity, setting, value, sem, predicted).
"""

import sys

from attnlab.harness import cli
from attnlab.studies.companion.compute import CompanionConfig, run_companion

DEFAULT = CompanionConfig()


def build_parser():
    parser = cli.new_parser(__doc__)
    parser.add_argument(
        "--trials", type=cli.int_at_least(2), default=DEFAULT.trials, help="softmax rows"
    )
    parser.add_argument(
        "--fold-setups",
        type=cli.int_at_least(2),
        default=DEFAULT.fold_setups,
        help="random (x, W) setups of the folding check",
    )
    cli.add_common_flags(parser, cli.RESULTS_DIR / "08_companion_claims.csv")
    return parser


def run(args):
    out = cli.check_writable(args.out, "--out")
    config = CompanionConfig(trials=args.trials, fold_setups=args.fold_setups, seed=args.seed)
    cli.run_table(
        args, out, "08 companion claims", config.trials, lambda bar: run_companion(config, bar)
    )


main = cli.entry_point(build_parser, run)

if __name__ == "__main__":
    sys.exit(main())

"""Do your results agree with the committed ones? (`make verify`, `make verify-quick`)

Regenerates every result CSV into a temporary directory (or reads --results-dir) and
compares each with --reference-dir's by tolerances that hold across machines (rules:
attnlab/verify.py, docs/verify.md). Exit: 0 all agree, 1 some differ, 2 bad input (a
flag, or a reference or result CSV that is malformed: cut short, lacking a column, rows
with the same keys).
"""

import sys
import time

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab import verify
from attnlab.harness import cli


def build_parser():
    parser = cli.new_parser(__doc__)
    add = parser.add_argument
    # fmt: off
    add("--quick", action="store_true",
        help="only the statics (01-03, with fewer trials) and the failure modes (07)")
    add("--csv", action="append", choices=sorted(verify.SPECS), metavar="NAME", default=None,
        help="check only this result CSV (repeatable; e.g. 02_saturation_sweep.csv)")
    add("--results-dir", type=cli.a_path, metavar="DIR", default=None,
        help="compare the CSVs already in this directory instead of regenerating them")
    add("--reference-dir", type=cli.a_path, metavar="DIR", default=cli.RESULTS_DIR,
        help="the committed CSVs to compare with")
    # fmt: on
    cli.add_quiet_flag(parser)
    return parser


def run(args, context):
    cli.check_results_dir(args.reference_dir, "--reference-dir")
    if args.results_dir is not None:
        cli.check_results_dir(args.results_dir, "--results-dir")
    names = verify.selected(args.quick, args.csv)
    started = time.perf_counter()
    verdicts = verify.verdicts_of(
        names, args.results_dir, args.reference_dir, args.quick, args.quiet
    )
    for verdict in verdicts:
        print(verdict.line())
    print(verify.tally(verdicts, args.reference_dir, time.perf_counter() - started))
    verify.check_agreement(verdicts, args.reference_dir)


main = cli.entry_point(build_parser, run)

if __name__ == "__main__":
    sys.exit(main())

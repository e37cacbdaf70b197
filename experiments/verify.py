"""Do your results agree with the committed ones? (`make verify`, `make verify-quick`)

Regenerates every result CSV into a temporary directory (or, with --results-dir, reads the
CSVs already there) and compares each with the committed one in --reference-dir, column
by column, with tolerances that hold across machines: Monte-Carlo means within 4 sqrt(2)
combined standard errors, per-seed training results within the committed seed range
widened by its spread, verdicts and identities exactly (rules: attnlab/verify.py).
Prints one line per CSV, `agrees` or `differs` with its worst column, and the tally last.
The exit status is the verdict: 0 every CSV agrees, 1 some CSV differs (one line on stderr
naming them) or a script failed while regenerating, 2 bad input (one line naming the flag).
--quick checks only 01-03 (fewer trials) and 07, in under a minute.
"""

import sys
import tempfile
import time
from pathlib import Path

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab import verify
from attnlab.harness import cli


def build_parser():
    parser = cli.new_parser(__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="only the statics (01-03, with fewer trials) and the failure modes (07)",
    )
    parser.add_argument(
        "--csv",
        action="append",
        choices=sorted(verify.SPECS),
        metavar="NAME",
        default=None,
        help="check only this result CSV (repeatable; e.g. 02_saturation_sweep.csv)",
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        metavar="DIR",
        default=None,
        help="compare the CSVs already in this directory instead of regenerating them",
    )
    parser.add_argument(
        "--reference-dir",
        type=Path,
        metavar="DIR",
        default=cli.RESULTS_DIR,
        help="the committed CSVs to compare with",
    )
    cli.add_quiet_flag(parser)
    return parser


def run(args):
    for flag, path in (
        ("--reference-dir", args.reference_dir),
        ("--results-dir", args.results_dir),
    ):
        if path is not None and not path.is_dir():
            raise cli.UsageError(f"{flag}: {path} is not an existing directory")
    names = verify.selected(args.quick, args.csv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="attnlab-verify-") as tmp:
        results_dir = args.results_dir
        if results_dir is None:
            results_dir = Path(tmp)
            verify.regenerate(names, results_dir, args.quick, args.quiet)
        verdicts = [verify.verify_csv(n, results_dir, args.reference_dir) for n in names]
    for verdict in verdicts:
        print(verdict.line())
    differ = [v.name for v in verdicts if not v.agrees]
    print(
        f"{len(verdicts) - len(differ)} of {len(verdicts)} CSVs agree with {args.reference_dir} "
        f"({time.perf_counter() - started:.0f} s)"
    )
    if differ:
        raise cli.RunError(f"{', '.join(differ)} differ from {args.reference_dir}")


main = cli.entry_point(build_parser, run)

if __name__ == "__main__":
    sys.exit(main())

"""Write results/REPORT.md: every number of the article beside ours, from the CSVs alone."""

import sys
from pathlib import Path

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.io import atomic_write_text
from attnlab.report import build_report


def build_parser():
    parser = cli.new_parser(__doc__)
    cli.add_results_dir_flag(parser)
    parser.add_argument(
        "--out", type=Path, default=cli.RESULTS_DIR / "REPORT.md", help="the report to write"
    )
    return parser


def run(args):
    out = cli.check_writable(args.out, "--out", suffix=".md")
    cli.check_dir_exists(args.results_dir, "--results-dir")
    text = build_report(args.results_dir)
    atomic_write_text(out, text)
    cli.WRITTEN.append(out)


main = cli.entry_point(build_parser, run)

if __name__ == "__main__":
    sys.exit(main())

"""Draw the suite's figures (PNG and PDF) from the result CSVs alone.

With no arguments every figure is drawn; name figures, or a group with --group, to draw
fewer. A missing or malformed CSV is reported with the command that makes it.
"""

import sys
from pathlib import Path

from attnlab import cli
from attnlab.plotting import FIGURES


def build_parser():
    parser = cli.new_parser(__doc__)
    parser.add_argument(
        "figures",
        nargs="*",
        choices=[[], *FIGURES],
        default=[],
        metavar="FIGURE",
        help=f"figures to draw, of: {', '.join(FIGURES)}",
    )
    groups = sorted({f.group for f in FIGURES.values()})
    parser.add_argument("--group", choices=groups, help="draw every figure of this group")
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=cli.RESULTS_DIR,
        help="directory holding the result CSVs",
    )
    parser.add_argument(
        "--figures-dir",
        type=Path,
        default=cli.FIGURES_DIR,
        help="directory the figures are written to",
    )
    return parser


def run(args):
    cli.check_dir_writable(args.figures_dir, "--figures-dir")
    cli.check_dir_exists(args.results_dir, "--results-dir")
    names = args.figures or [n for n, f in FIGURES.items() if args.group in (None, f.group)]
    with cli.staged_outputs(args.figures_dir) as stage:
        for name in names:
            FIGURES[name].draw(args.results_dir, stage)


main = cli.entry_point(build_parser, run)

if __name__ == "__main__":
    sys.exit(main())

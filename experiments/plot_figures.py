"""Draw the suite's figures (PNG and PDF) from the result CSVs alone.

With no arguments every figure is drawn; name figures, or a study with --study, to draw
fewer. A figure whose CSVs are missing or malformed in --results-dir is skipped and listed
with the command that makes them; the exit status is 0 when any figure was drawn.
"""

import sys
from pathlib import Path

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.tables import Tables
from attnlab.studies import FIGURES, made_by


def build_parser():
    parser = cli.new_parser(__doc__)
    # fmt: off
    parser.add_argument("figures", nargs="*", choices=[[], *FIGURES], default=[],
                        metavar="FIGURE", help=f"figures to draw, of: {', '.join(FIGURES)}")
    studies = list(dict.fromkeys(s.name for s in FIGURES.values()))
    parser.add_argument("--study", choices=studies, help="draw every figure of this study")
    cli.add_results_dir_flag(parser)
    parser.add_argument("--figures-dir", type=Path, default=cli.FIGURES_DIR,
                        help="directory the figures are written to")
    # fmt: on
    cli.add_quiet_flag(parser)
    return parser


def run(args):
    cli.check_dir_writable(args.figures_dir, "--figures-dir")
    cli.check_dir_exists(args.results_dir, "--results-dir")
    tables = Tables(args.results_dir, made_by)
    names = args.figures or [n for n, s in FIGURES.items() if args.study in (None, s.name)]
    skipped = []
    with cli.staged_outputs(args.figures_dir, args.written) as stage:
        for name in names:
            try:
                FIGURES[name].figure(name)(tables, stage)
            except cli.DataError as err:
                skipped.append(f"{name}: {err}")
        drawn = sorted(p.name for p in stage.iterdir())
    for line in skipped:
        print(f"skipped {line}", file=sys.stderr)
    if not drawn:
        raise cli.DataError(f"no figure drawn from {args.results_dir}: {skipped[0]}")


main = cli.entry_point(build_parser, run)

if __name__ == "__main__":
    sys.exit(main())

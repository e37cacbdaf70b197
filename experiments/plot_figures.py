"""Draw the suite's figures (PNG and PDF) from the result CSVs alone.

With no arguments every figure is drawn; name figures, or a study with --study, to draw
fewer. A figure whose CSVs are missing from --results-dir is skipped and listed with the
command that makes them; the exit status is 0 when any figure was drawn. A CSV or sidecar
that is there but malformed (cut short, not JSON, lacking columns or keys, text where
numbers are) draws nothing: one line naming it and the command that makes it, exit 2.
"""

import sys

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.io import MalformedError
from attnlab.report import CheckedTables
from attnlab.studies import FIGURES, made_by


def build_parser():
    parser = cli.new_parser(__doc__)
    # fmt: off
    parser.add_argument("figures", nargs="*", choices=[[], *FIGURES], default=[],
                        metavar="FIGURE", help=f"figures to draw, of: {', '.join(FIGURES)}")
    studies = list(dict.fromkeys(s.name for s in FIGURES.values()))
    parser.add_argument("--study", choices=studies, help="draw every figure of this study")
    cli.add_results_dir_flag(parser)
    parser.add_argument("--figures-dir", type=cli.a_path, default=cli.FIGURES_DIR,
                        help="directory the figures are written to")
    # fmt: on
    cli.add_quiet_flag(parser)
    return parser


def run(args, context):
    cli.check_dir_writable(args.figures_dir, "--figures-dir")
    cli.check_results_dir(args.results_dir, "--results-dir")
    tables = CheckedTables(args.results_dir, made_by)
    names = args.figures or [n for n, s in FIGURES.items() if args.study in (None, s.name)]
    skipped = []
    with cli.staged_outputs(args.figures_dir, context.written) as stage:
        for name in names:
            try:
                with tables.values_of(f"figure {name}"):
                    FIGURES[name].figure(name)(tables, stage)
            except MalformedError:
                raise  # the stage goes: nothing written
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

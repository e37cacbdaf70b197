"""Write results/REPORT.md: every number of the article beside ours, from the CSVs alone.

A section whose CSVs are absent from --results-dir is left out, and listed (in the report
and on stderr) with the command that makes them. From the committed results/ into
results/REPORT.md, with nothing left out, it also rewrites README.md's generated blocks
(the answer, the tally, the cards' comparison). Report and README open with the answer in
plain sentences (``attnlab.answer``).
"""

import sys
from pathlib import Path

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.io import atomic_write_text
from attnlab.report import build_report, left_out, readme_blocks, replace_block

REPORT = cli.RESULTS_DIR / "REPORT.md"
README = Path("README.md")


def build_parser():
    parser = cli.new_parser(__doc__)
    cli.add_results_dir_flag(parser)
    parser.add_argument("--out", type=cli.a_path, default=REPORT, help="the report to write")
    return parser


def run(args, context):
    out = cli.check_writable(args.out, "--out", suffix=".md")
    cli.check_results_dir(args.results_dir, "--results-dir")
    text = build_report(args.results_dir)
    missing = left_out(text)
    canonical = args.results_dir.resolve() == cli.RESULTS_DIR.resolve()
    update_readme = canonical and out.resolve() == REPORT.resolve() and README.is_file()
    readme = ""
    if update_readme and not missing:
        old = readme = README.read_text(encoding="utf-8")
        for block in readme_blocks(args.results_dir):
            readme = replace_block(readme, block)
        readme = "" if readme == old else readme
    atomic_write_text(out, text)
    context.written.append(out)
    if readme:
        atomic_write_text(README, readme)
        context.written.append(README)
    for line in missing:
        print(f"left out {line}", file=sys.stderr)


main = cli.entry_point(build_parser, run)

if __name__ == "__main__":
    sys.exit(main())

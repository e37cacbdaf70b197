"""attnlab.studies.bench.flags: the bench's flags read into a ``BenchConfig`` (the
defaults, --quick's sizes, the rounds, the seed and the statics' widths replaced), and
``--gemma`` alone a committed run like the defaults."""

from __future__ import annotations

from dataclasses import replace

from attnlab.harness import cli
from attnlab.studies.bench.config import QUICK, BenchConfig
from attnlab.studies.bench.flags import add_bench_flags, bench_config


def parser() -> cli.FlagParser:
    made = cli.new_parser("test")
    add_bench_flags(made)
    return made


def config(*argv: str) -> BenchConfig:
    return bench_config(parser().parse_args(list(argv)))


def test_the_flags_give_the_configuration():
    assert config() == BenchConfig()
    assert config("--quick") == replace(QUICK, repeats=5, seed=0)
    chosen = config("--repeats", "2", "--seed", "7", "--statics-dk", "4", "8")
    assert (chosen.repeats, chosen.seed, chosen.statics_dks) == (2, 7, (4, 8))


def test_gemma_alone_is_a_committed_run():
    made = parser()
    for argv, committed in ((["--gemma"], True), (["--gemma", "--quick"], False), ([], True)):
        assert cli.made_with_defaults(made, made.parse_args(argv)) is committed, argv

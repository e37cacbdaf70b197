"""attnlab.studies.failure_modes.flags: experiment 07's flags read into the configurations
of parts (a) and (c): the defaults, the widths sorted and each once, and a value that needs
more memory than there is a ``cli.UsageError`` naming its flag."""

from __future__ import annotations

import pytest

from attnlab.harness import cli
from attnlab.studies.failure_modes.compute import CorrelationConfig, OverflowConfig
from attnlab.studies.failure_modes.flags import add_failure_modes_flags, failure_modes_configs


def parse(*argv: str) -> tuple[OverflowConfig, CorrelationConfig]:
    parser = cli.new_parser("test")
    add_failure_modes_flags(parser)
    return failure_modes_configs(parser.parse_args(list(argv)))


def test_no_flags_give_the_default_configurations():
    assert parse() == (OverflowConfig(), CorrelationConfig())


def test_the_flags_reach_both_parts():
    overflow, correlation = parse("--rows", "8", "--dk", "16", "4", "16", "--samples", "9",
                                  "--seed", "3")  # fmt: skip
    assert (overflow.rows, overflow.seed) == (8, 3)
    assert (correlation.dks, correlation.samples, correlation.seed) == ((4, 16), 9, 3)


def test_too_many_rows_name_the_flag():
    with pytest.raises(cli.UsageError, match="--rows"):
        parse("--rows", str(10**12))

"""attnlab.harness.flags: the parser every script starts from keeps what a script declares
about its flags in fields of its own (``FlagParser``): the arguments it was given, each flag
put into its help group as it is added, the subject flags and the committed argument lists.
Nothing in the package or the scripts sets an attribute on a parser or reads argparse's
private state."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from attnlab.harness import cli
from attnlab.harness.flags import MEASURED, SHARED_GROUPS, flag_dest, help_group

REPO_ROOT = Path(__file__).resolve().parents[1]


def _sections(help_text: str) -> dict[str, list[str]]:
    """The sections of ``--help`` by title, each with the option strings it lists."""
    sections: dict[str, list[str]] = {}
    title = None
    for line in help_text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line[:-1]
            sections[title] = []
        elif title is not None and re.match(r"  \S", line):
            sections[title].append(line.split()[0].rstrip(","))
    return sections


def _parser() -> cli.FlagParser:
    parser = cli.new_parser("test")
    parser.declare_flags(groups={"mine": frozenset({"b", "seed"})})
    parser.add_argument("--a", type=int, default=1)
    parser.add_argument("-b", "--b-flag", dest="b", default="x")
    cli.add_seed_flag(parser)
    cli.add_out_dir_flag(parser)
    parser.add_argument("files", nargs="*", default=[])
    return parser


def test_each_flag_is_shown_in_its_group_in_the_declared_order():
    """Declared groups first (a dest they name wins over the shared groups'), then every
    other flag under "what is measured", then run control and outputs; --help and the
    positionals where argparse puts them."""
    sections = _sections(_parser().format_help())
    # run control is empty here (its --seed is declared "mine"): not shown
    assert list(sections) == ["positional arguments", "options", "mine", MEASURED, "outputs"]
    assert sections["options"] == ["-h"]
    assert sections["positional arguments"] == ["files"]
    assert sections["mine"] == ["-b", "--seed"]
    assert sections[MEASURED] == ["--a"]
    assert sections["outputs"] == ["--out-dir", "--quiet"]


def test_the_arguments_are_recorded_in_order_without_help():
    parser = _parser()
    assert [a.dest for a in parser.arguments] == ["a", "b", "seed", "out_dir", "quiet", "files"]
    args = parser.parse_args(["--a", "2", "f"])
    assert (args.a, args.b, args.files) == (2, "x", ["f"])


def test_help_groups_are_declared_before_the_first_flag():
    parser = cli.new_parser("test")
    parser.declare_flags(groups={"one": frozenset({"a"})})
    parser.declare_flags(groups={"two": frozenset({"b"})})  # added after the first
    parser.add_argument("--b")
    parser.add_argument("--a")
    assert list(_sections(parser.format_help()))[-2:] == ["one", "two"]
    with pytest.raises(ValueError, match="before the first flag"):
        parser.declare_flags(groups={"three": frozenset({"c"})})


def test_subject_and_committed_are_the_parsers_own_fields():
    parser = cli.new_parser("test")
    assert parser.subject_flags == frozenset() and parser.committed_arguments == ()
    parser.declare_flags(subject=frozenset({"mechanism"}), committed=(["--gemma"],))
    assert parser.subject_flags == {"mechanism"} and parser.committed_arguments == (["--gemma"],)


@pytest.mark.parametrize(
    ("names", "dest"),
    [(("--out-dir",), None), (("-q", "--quiet-run"), None), (("-x",), None), (("--a",), "b")],
)
def test_flag_dest_is_the_dest_argparse_gives(names, dest):
    kwargs = {} if dest is None else {"dest": dest}
    expected = argparse.ArgumentParser().add_argument(*names, **kwargs).dest
    assert flag_dest(names, dest) == expected


def test_help_group_takes_the_first_group_naming_the_flag():
    declared = {"mine": frozenset({"seed"})}
    assert help_group("seed", declared) == "mine"
    assert help_group("seed", {}) == "run control"
    assert help_group("out_dir", declared) == "outputs"
    assert help_group("steps", declared) == MEASURED
    assert list(SHARED_GROUPS) == ["run control", "outputs"]


# --- no argparse privates, no attribute set on a parser -----------------------------------

#: argparse's private state (a parser's or group's lists of actions, its private classes).
ARGPARSE_PRIVATE = re.compile(
    r"\._(?:actions|action_groups|group_actions|optionals|positionals|option_string_actions)\b"
    r"|\bargparse\._\w+|_HelpAction\b"
)
#: An attribute of a parser assigned (``parser.x = ...``, ``setattr(parser, ...)``).
PARSER_ASSIGNMENT = re.compile(
    r"\b\w*parser\.\w+(?:\s*:[^=\n]+)?\s*=(?!=)|setattr\(\s*\w*parser\b", re.IGNORECASE
)


def test_the_patterns_find_what_they_look_for():
    for text in ("parser._actions", "g._group_actions.remove(a)", "argparse._HelpAction"):
        assert ARGPARSE_PRIVATE.search(text), text
    for text in ("parser.flag_groups = {}", "setattr(parser, 'x', 1)", "parser.x: int = 1"):
        assert PARSER_ASSIGNMENT.search(text), text
    for text in ("self._arguments", "parser.arguments", "argparse.Action"):
        assert not ARGPARSE_PRIVATE.search(text), text
    for text in ("parser.add_argument('--a', default=1)", "if parser.prog == 'x':"):
        assert not PARSER_ASSIGNMENT.search(text), text


@pytest.mark.parametrize("pattern", [ARGPARSE_PRIVATE, PARSER_ASSIGNMENT], ids=["private", "set"])
def test_no_argparse_private_and_no_parser_attribute_is_set(pattern):
    """The package and the scripts use argparse's public API only: what a script declares
    about its flags is the ``FlagParser``'s own, never an attribute set on a parser."""
    files = [*REPO_ROOT.glob("attnlab/**/*.py"), *REPO_ROOT.glob("experiments/*.py")]
    offenders = [
        f"{path.relative_to(REPO_ROOT)}: {match.group(0)}"
        for path in files
        for match in pattern.finditer(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []

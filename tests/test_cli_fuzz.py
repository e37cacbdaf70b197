"""Every script's flags, fuzzed: a bad value exits 2 with one line naming the flag and
writes nothing; Ctrl-C at any point of a run exits 130 with one line and writes nothing.

The flags are discovered from each script's ``build_parser()``, so a new flag is fuzzed
without touching this file; a flag of a type this file has no bad values for fails
``test_every_flag_has_bad_values`` until the tables below learn it.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlab.core.references
import attnlab.harness.io
import attnlab.recall.tables
from attnlab.harness import cli
from attnlab.lm.flags import qk_clip_tau
from attnlab.lm.qk_clip import FLOAT32_MAX, FLOAT32_TINY
from attnlab.studies.article_fit.study import SCORES_2
from attnlab.studies.card.verdicts import Card

EXPERIMENTS_DIR = Path(__file__).resolve().parents[1] / "experiments"
SCRIPTS = sorted(
    path.stem
    for path in EXPERIMENTS_DIR.glob("*.py")
    if re.search(r"^(main\s*=|def main\b)", path.read_text(encoding="utf-8"), re.MULTILINE)
)

#: What each path flag names: a file or directory written, or a directory read.
PATH_ROLES = {
    "--out": "file_out",
    "--out-dir": "dir_out",
    "--figures-dir": "dir_out",
    "--results-dir": "dir_in",
    "--reference-dir": "dir_in",
    "--checkpoint": "dir_in",
    "--text": "file_in",
    "--long-text": "file_in",
    "--config": "file_in",
}
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0  # root may write anywhere

NOT_A_NUMBER = ["", " ", "abc", "1,5", "1.2.3", "0x10", "1e", "½", "12abc", "--"]
NOT_FINITE = ["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1e400"]
NOT_POSITIVE = ["0", "-0", "0.0", "-1", "-1e-300", "1e-400", *NOT_FINITE]
BAD_FLOATS = {
    cli.positive_float: NOT_POSITIVE,
    # QK-Clip's tau: float32's normal numbers only (a smaller one clips at tau 0)
    qk_clip_tau: [*NOT_POSITIVE, "1e-300", "1e-39", "1e39"],
}
FLOAT_OK = {
    cli.positive_float: lambda x: 0 < x < math.inf,
    qk_clip_tau: lambda x: FLOAT32_TINY <= x <= FLOAT32_MAX,
}

# Text with any character a command line can hold (no NUL, no lone surrogates).
ANY_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))


def _parses(convert: Callable[[str], object], text: str) -> bool:
    try:
        convert(text)
    except (ValueError, OverflowError):
        return False
    return True


NON_NUMERIC = ANY_TEXT.filter(lambda s: not _parses(float, s) and not _parses(int, s))


def _names(action: argparse.Action) -> list[str]:
    """How an error message names the flag: its option strings, or a positional's metavar."""
    return list(action.option_strings) or [action.metavar or action.dest]


def _fuzzed_actions(parser: cli.FlagParser) -> list[argparse.Action]:
    """Every argument that takes a value (not --help, not store_true flags)."""
    return [a for a in parser.arguments if a.nargs != 0]


def _valid_words(action: argparse.Action):
    """The valid words of a choice flag: its choices, or the ``names`` its type accepts."""
    return action.choices if action.choices is not None else action.type.names


#: Files of broken mechanisms ``_prepare`` writes, for the mechanism flags' bad references.
BAD_MECHANISM_FILES = {
    "broken.py": "raise RuntimeError('broken on import')\n",
    "mechs.py": (
        "import jax.numpy as jnp\n"
        "NOT_A_MECHANISM = 3\n"
        "def wrong_shape(q, k):\n    return q\n"
        "def dots(q, k):\n    return jnp.einsum('...qd,...kd->...qk', q, k)\n"
        "def wrong_dtype(q, k):\n    return dots(q, k).astype(jnp.float16)\n"
        "def nan_weights(q, k):\n    return dots(q, k) * jnp.nan\n"
    ),
    # What only jit or grad finds, and the API's limits (BROKEN: the words each gives).
    "traced_if.py": (
        "import jax.numpy as jnp\n"
        "def logits(q, k):\n"
        "    z = jnp.einsum('...qd,...kd->...qk', q, k)\n"
        "    if z.max() > 100:\n        return z / 10\n"
        "    return z\n"
    ),
    "numpy_inside.py": (
        "import numpy as np\n"
        "def logits(q, k):\n"
        "    return np.einsum('...qd,...kd->...qk', np.asarray(q), np.asarray(k))\n"
    ),
    "reserved.py": (
        "import jax.numpy as jnp, attnlab\n"
        "logits = attnlab.Mechanism('logits', lambda q, k, W_Q: W_Q * q @ k.swapaxes(-1, -2),\n"
        "                           params={'W_Q': 1.0})\n"
    ),
    "vector.py": (
        "import jax.numpy as jnp, attnlab\n"
        "logits = attnlab.Mechanism('logits', lambda q, k, g: (q * g) @ k.swapaxes(-1, -2),\n"
        "                           params={'g': lambda d: jnp.ones(d)})\n"
    ),
    "weights_like.py": (
        "import jax, jax.numpy as jnp\n"
        "def logits(q, k):\n"
        "    return jax.nn.softmax(jnp.einsum('...qd,...kd->...qk', q, k))\n"
    ),
    "syntax.py": "def logits(q, k)\n    return q\n",
    "exits.py": "import sys\nsys.exit(0)\n",  # at import: no silent exit 0
    "narrow.py": (  # fine at the main check's d_k 16 only
        "import jax.numpy as jnp\n"
        "def logits(q, k):\n"
        "    assert q.shape[-1] == 16, 'written for d_k 16'\n"
        "    return jnp.einsum('...qd,...kd->...qk', q, k)\n"
    ),
}

#: Broken mechanisms (file -> the words their one line gives the cause in).
BROKEN = {
    "traced_if.py": "cannot run under jax.jit (as training runs it): it uses Python control flow",
    "numpy_inside.py": "cannot run under jax.jit (as training runs it): it calls numpy on a traced",
    "reserved.py": "params: the name 'W_Q' is reserved",
    "vector.py": "params['g'] at d_k 16 must be one number",
    "weights_like.py": "its logits look like weights (every row non-negative and summing to one)",
    "syntax.py": "syntax error at line 1: expected ':'",
    "mechs.py": "gives non-finite weights at its initial scalars",
    "exits.py": "importing its file called sys.exit(0)",
    "narrow.py": "fails on random inputs at d_k 8 (q [1, 1, 8], k [1, 5, 8]): AssertionError",
}


def _bad_mechanisms(root: Path) -> list[str]:
    """References that name no working mechanism: not a built-in, a module or file that
    does not import or lacks the name, something that is not a mechanism, and mechanisms
    with logits of the wrong shape or dtype or non-finite weights."""
    return [
        "no-such-mechanism",
        "",
        "SCALED",
        "scaled ",
        "no_such_module_xyz:f",
        "attnlab:no_such_name",
        "attnlab.core.temperature:MECHANISMS",
        "/nonexistent/m.py:f",
        f"{root}/broken.py:f",
        f"{root}/mechs.py:missing",
        f"{root}/mechs.py:NOT_A_MECHANISM",
        f"{root}/mechs.py:wrong_shape",
        f"{root}/mechs.py:wrong_dtype",
        f"{root}/mechs.py:nan_weights",
        *(f"{root}/{f}:logits" for f in BROKEN if f != "mechs.py"),
    ]


MECHANISM_TYPES = (
    attnlab.core.references.mechanism_reference,
    attnlab.core.references.recall_mechanism_reference,
    attnlab.core.references.resolved_mechanism,
    attnlab.core.references.resolved_mechanisms,
)


def _is_reference(action: argparse.Action, text: str) -> bool:
    try:
        action.type(text)
    except argparse.ArgumentTypeError:
        return False
    return True


def _kind(action: argparse.Action) -> str:
    if action.type in MECHANISM_TYPES:
        return "mechanism"
    if action.choices is not None or hasattr(action.type, "names"):
        return "choice"
    if hasattr(action.type, "is_valid"):
        return "text"
    if action.type in (Path, cli.a_path):
        assert action.option_strings, action
        role = PATH_ROLES.get(action.option_strings[0])
        assert role, f"{action.option_strings[0]}: add its role to PATH_ROLES"
        return role
    if hasattr(action.type, "minimum"):
        return "int"
    if action.type in BAD_FLOATS:
        return "float"
    raise AssertionError(f"{_names(action)}: no bad values known for type {action.type!r}")


def _bad_paths(kind: str, root: Path) -> list[str]:
    no_write = [] if IS_ROOT else [root / "read_only" / "x.csv"]
    return [
        str(p)
        for p in {
            # x.json: a CSV's sidecar would overwrite it; /proc: says writable, is not.
            "file_out": [
                "/nonexistent/dir/x.csv",
                root / "a_dir",
                "",
                root / "a_file" / "x.csv",
                root / "x.json",
                "/proc/x.csv",
            ]
            + no_write,
            "dir_out": ["/nonexistent/dir", root / "a_file", root / "missing", "/proc", ""]
            + [p.parent for p in no_write],
            "dir_in": ["/nonexistent/dir", root / "a_file", root / "missing", ""],
            "file_in": ["/nonexistent/x.txt", root / "a_dir", root / "missing.txt", ""],
        }[kind]
    ]


def bad_values(action: argparse.Action, root: Path) -> list[list[str]]:
    """Fixed bad values of ``action``, each a list of command-line words after the flag."""
    kind = _kind(action)
    if kind == "choice":
        choices = sorted(c for c in _valid_words(action) if isinstance(c, str))
        words = ["not-a-choice", "", choices[0].upper(), choices[0] + " ", choices[0] + "x"]
        words = [w for w in words if w not in _valid_words(action)]
    elif kind == "int":
        low, high = action.type.minimum, action.type.maximum
        words = [*NOT_A_NUMBER, *NOT_FINITE, "1.5", "1e3", "2.0", str(low - 1), str(low - 10**30)]
        words += [] if high is None else [str(high + 1), str(10**30)]
    elif kind == "float":
        words = [*NOT_A_NUMBER, *BAD_FLOATS[action.type]]
    elif kind == "text":
        words = [w for w in ("no-such-thing", "zzz", "\n") if not action.type.is_valid(w)]
    elif kind == "mechanism":
        words = _bad_mechanisms(root)
    else:
        words = _bad_paths(kind, root)
    values = [[w] for w in words]
    if action.nargs == "+":
        values.append([])  # the flag given with no values
    return values


def bad_value_strategy(action: argparse.Action, root: Path) -> st.SearchStrategy[list[str]]:
    """Random bad values of ``action`` (never a valid one: a valid huge size would run)."""
    kind = _kind(action)
    fixed = st.sampled_from(bad_values(action, root))
    if kind == "choice":
        drawn = ANY_TEXT.filter(lambda s: s not in _valid_words(action) and not s.startswith("-"))
    elif kind == "int":
        low, high = action.type.minimum, action.type.maximum
        parts = [st.integers(max_value=low - 1).map(str), NON_NUMERIC]
        parts.append(st.floats().map(repr))  # "2.0", "1e+16", "nan": never integers
        if high is not None:
            parts.append(st.integers(min_value=high + 1).map(str))
        drawn = st.one_of(parts)
    elif kind == "float":
        valid = FLOAT_OK[action.type]
        drawn = st.one_of(
            st.floats().filter(lambda x: not valid(x)).map(repr),
            st.integers(309, 10**6).map(lambda e: f"1e{e}"),  # overflows to inf
            NON_NUMERIC,
        )
    elif kind == "text":
        drawn = ANY_TEXT.filter(lambda s: not action.type.is_valid(s) and not s.startswith("-"))
    elif kind == "mechanism":  # no ":": random text must not import arbitrary modules
        drawn = ANY_TEXT.filter(lambda s: ":" not in s and not s.startswith("-")).filter(
            lambda s: not _is_reference(action, s)
        )
    else:
        suffix = "/x.csv" if kind == "file_out" else ""
        drawn = ANY_TEXT.filter(lambda s: "/" not in s).map(lambda s: f"/nonexistent/{s}{suffix}")
    return st.one_of(fixed, drawn.map(lambda w: [w]))


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _prepare(root: Path) -> Path:
    """The directories the bad paths need; returns the (empty) directory for outputs."""
    (root / "outputs").mkdir(exist_ok=True)
    (root / "a_dir").mkdir(exist_ok=True)
    (root / "a_file").write_text("not a directory\n")
    for file_name, text in BAD_MECHANISM_FILES.items():
        (root / file_name).write_text(text)
    if not IS_ROOT:
        (root / "read_only").mkdir(exist_ok=True)
        (root / "read_only").chmod(0o555)
    return root / "outputs"


def _base_argv(parser: cli.FlagParser, outputs: Path) -> list[str]:
    """Every path flag pointed into ``outputs`` (valid), --quiet where there is one."""
    argv = []
    for action in parser.arguments:
        if action.option_strings and action.type in (Path, cli.a_path):
            role = PATH_ROLES[action.option_strings[0]]
            if action.default is None and role in ("dir_in", "file_in"):
                continue  # an optional input (13's --checkpoint, --text): its default is valid
            suffix = Path(action.default).suffix if action.default else ".csv"
            path = outputs / f"{action.dest}{suffix}" if role == "file_out" else outputs
            argv += [action.option_strings[0], str(path)]
        elif "--quiet" in action.option_strings:
            argv.append("--quiet")
        elif action.required:
            assert _kind(action) == "mechanism", f"{_names(action)}: give a valid value here"
            argv += [action.option_strings[0], "scaled"]
    return argv


def _argv(parser, outputs: Path, action: argparse.Action, words: list[str]) -> list[str]:
    """The base flags then the bad one (argparse keeps the last value of a repeated flag)."""
    flag = action.option_strings[:1]
    return [*_base_argv(parser, outputs), *flag, *words]


def _assert_one_line(err: str, names: list[str]) -> None:
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err, err
    pattern = "|".join(rf"(?<![\w-]){re.escape(n)}(?![\w-])" for n in names)
    assert re.search(pattern, err), (names, err)


def _assert_rejected(module, run_main, capsys, root: Path, argv: list[str], names) -> None:
    before = _listing(root)
    code = run_main(module, argv)
    captured = capsys.readouterr()
    assert code == 2, (argv, captured.err)
    assert captured.out == "", captured.out
    _assert_one_line(captured.err, names)
    assert _listing(root) == before, argv


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_flag_has_bad_values(name, load_script, tmp_path):
    actions = _fuzzed_actions(load_script(name).build_parser())
    assert actions
    for action in actions:
        assert bad_values(action, tmp_path), _names(action)


@pytest.mark.parametrize("name", SCRIPTS)
def test_fixed_bad_values_exit_2(name, load_script, run_main, in_tmp_path, capsys, monkeypatch):
    module = load_script(name)
    _fake_computation(name, module, monkeypatch, "forbid")
    parser = module.build_parser()
    outputs = _prepare(in_tmp_path)
    for action in _fuzzed_actions(parser):
        for words in bad_values(action, in_tmp_path):
            argv = _argv(parser, outputs, action, words)
            _assert_rejected(module, run_main, capsys, in_tmp_path, argv, _names(action))


@pytest.mark.parametrize("name", SCRIPTS)
@settings(
    max_examples=25,
    deadline=None,
    database=None,  # the working directory must stay as it was
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_random_bad_values_exit_2(
    name, load_script, run_main, in_tmp_path, capsys, monkeypatch, data
):
    module = load_script(name)
    _fake_computation(name, module, monkeypatch, "forbid")
    parser = module.build_parser()
    outputs = _prepare(in_tmp_path)
    action = data.draw(st.sampled_from(_fuzzed_actions(parser)), label="flag")
    words = data.draw(bad_value_strategy(action, in_tmp_path), label="values")
    argv = _argv(parser, outputs, action, words)
    _assert_rejected(module, run_main, capsys, in_tmp_path, argv, _names(action))


#: Bad combinations of individually valid values.
CROSS_FLAG = [
    ("04_associative_recall", ["--pairs", "40", "--key-tokens", "32"], "--pairs"),
    ("04_associative_recall", ["--seed", str(cli.MAX_SEED), "--seeds", "2"], "--seeds"),
    ("05_remedies", ["--steps", "10", "--fold-step", "10"], "--fold-step"),
    ("10_widths", ["--steps", "100", "--record-every", "30"], "--record-every"),
    ("10_widths", ["--lr", "0.02"], "--lrs"),
    ("10_widths", ["--dk", "4", "--lr-dks", "8"], "--lr-dks"),
    (
        "05_remedies",
        ["--seed", str(cli.MAX_SEED), "--seeds", "1", "--sensitivity-seeds", "2"],
        "--sensitivity-seeds",
    ),
]


@pytest.mark.parametrize(("name", "words", "flag"), CROSS_FLAG)
def test_cross_flag_checks_exit_2(
    name, words, flag, load_script, run_main, in_tmp_path, capsys, monkeypatch
):
    module = load_script(name)
    _fake_computation(name, module, monkeypatch, "forbid")
    argv = [*_base_argv(module.build_parser(), _prepare(in_tmp_path)), *words]
    _assert_rejected(module, run_main, capsys, in_tmp_path, argv, [flag])


def _mechanism_flags(parser: cli.FlagParser) -> list[argparse.Action]:
    return [a for a in parser.arguments if a.type in MECHANISM_TYPES]


TAKING = ("05_remedies", "10_widths", "11_mechanism_card", "13_real_model", "14_lm_proxy",
          "15_optimizer_drift")  # fmt: skip
MECHANISM_SCRIPTS = [n for n in SCRIPTS if n in TAKING]


def test_every_script_that_takes_a_mechanism_is_covered(load_script):
    taking = [n for n in SCRIPTS if _mechanism_flags(load_script(n).build_parser())]
    assert taking == MECHANISM_SCRIPTS == list(TAKING)


@pytest.mark.parametrize("file", list(BROKEN))
@pytest.mark.parametrize("name", MECHANISM_SCRIPTS)
def test_a_broken_mechanism_is_one_worded_line_in_every_script_that_takes_one(
    name, file, load_script, run_main, in_tmp_path, capsys, monkeypatch
):
    """Each broken case through every mechanism flag of 05, 10, 11, 13, 14 and 15: exit 2, one line
    naming the flag and the cause in words (no traceback, no raw exception repr), nothing
    written, no run folder (``_assert_rejected``)."""
    module = load_script(name)
    _fake_computation(name, module, monkeypatch, "forbid")
    parser = module.build_parser()
    outputs = _prepare(in_tmp_path)
    attribute = "nan_weights" if file == "mechs.py" else "logits"
    for action in _mechanism_flags(parser):
        argv = _argv(parser, outputs, action, [f"{in_tmp_path}/{file}:{attribute}"])
        _assert_rejected(module, run_main, capsys, in_tmp_path, argv, _names(action))
        assert run_main(module, argv) == 2
        err = capsys.readouterr().err
        assert BROKEN[file] in err, err
        assert not re.search(r"\w+Error\(", err), err  # no raw reprs
        assert not (in_tmp_path / "results").exists()


# --- Ctrl-C ----------------------------------------------------------------------------

FRAME = pd.DataFrame({"x": [1.0, 2.0]})


def _frame(*_args, **_kwargs) -> pd.DataFrame:
    return FRAME


def _scores_frame(*_args, **_kwargs) -> pd.DataFrame:
    """A fit's frame: every column either fit's script selects."""
    return pd.DataFrame({c: [0] for c in SCORES_2.column_names})


def _forbidden(*_args, **_kwargs):
    raise AssertionError("a bad flag got through: the script started computing")


def _fake_draw(name: str) -> Callable[[object, Path], list[Path]]:
    def draw(tables: object, figures_dir: Path) -> list[Path]:
        paths = [Path(figures_dir) / f"{name}.png", Path(figures_dir) / f"{name}.pdf"]
        for path in paths:
            attnlab.harness.io.atomic_write_text(path, name)
        return paths

    return draw


def _fake_computation(name: str, module: ModuleType, monkeypatch, mode: str = "fake") -> None:
    """Replace the script's computation by instant fakes. ``mode``: "fake" returns small
    frames, "interrupt" makes the first fake raise KeyboardInterrupt, and "forbid" makes
    every one fail the test (flags must be rejected before anything is computed)."""

    def wrap(fake: Callable[..., object], first: bool) -> Callable[..., object]:
        if mode == "forbid":
            return _forbidden
        return _interrupting(fake, 0) if mode == "interrupt" and first else fake

    fakes: dict[str, Callable[..., object]] = {
        "01_logit_variance": {"run_logit_variance": _frame},
        "02_saturation_sweep": {"run_saturation_sweep": _frame},
        "03_jacobian_norm": {"run_jacobian_sweep": _frame},
        "04_associative_recall": {"train_and_evaluate": lambda *a: {}},
        "05_remedies": {
            "compute.run_remedies": lambda *a: {},
            "compute.run_fold": lambda *a: (FRAME, FRAME),
            "compute.run_sensitivity": _frame,
        },
        "06_condensation": {"run_condensation": _frame},
        "07_failure_modes": {
            "run_failure_modes": lambda *a: dict.fromkeys(module.PART_CSVS, FRAME)
        },
        "08_companion_claims": {"run_companion": _frame},
        "09_article_fit": {
            "flags.pipeline.screen_readings": _frame,
            "flags.pipeline.candidates_of": lambda *a: [],
            "flags.pipeline.fit": _scores_frame,
            "flags.pipeline.predicted_readings": lambda scores: [("natural", 10)],
            "flags.pipeline.predict": lambda *a: (FRAME, FRAME),
        },
        "12_second_fit": {
            "flags.pipeline.screen_readings": _frame,
            "flags.pipeline.candidates_of": lambda *a: [],
            "flags.pipeline.fit": _scores_frame,
            "flags.pipeline.predicted_readings": lambda scores: [("natural/mean25", 10)],
            "flags.pipeline.predict": lambda *a: (FRAME, FRAME),
        },
        "10_widths": {
            "run_widths": lambda *a: [],
            "jacobian_frame": _frame,
            "summary_frame": _frame,
            "curves_frame": _frame,
            "lr_frame": _frame,
            "divergence_note": lambda summary: None,
        },
        "11_mechanism_card": {
            "api.wings.total_work": lambda *a: 1,
            "api.wings.run_cards": lambda *a: [
                SimpleNamespace(
                    name=name,
                    reference=attnlab.core.references.resolve(name),
                    card=Card(*[FRAME] * 8),
                    verdicts=pd.DataFrame({"mechanism": [name]}),
                    read_from={},
                )
                for name in ("scaled",)  # one card: its writes are ~20 Ctrl-C points
            ],
            "api.wings.draw_recall_card": lambda card, name, folder: _fake_draw("card")(
                card, folder
            ),
            "api.wings.card_markdown": lambda *a: "card\n",
            "api.store.comparison_markdown": lambda *a: "comparison\n",
        },
        "13_real_model": {
            "measure.tables": lambda *a: ({"13_real_model_heads.csv": FRAME}, {}),
            "measure.text_tokens": lambda *a: 10**9,
        },
        "14_lm_proxy": {
            "pieces": lambda *a: [],
            "run_pieces": lambda *a: [],
            "tables": lambda *a: (FRAME, FRAME, FRAME, FRAME, []),
        },
        "15_optimizer_drift": {
            "total_units": lambda *a: 1,
            "run_study": lambda *a: (FRAME, FRAME, None, []),
        },
        "bench": {"run_bench": _frame, "bench_markdown": lambda frame: "| x |\n"},
        "make_report": {"build_report": lambda results_dir: "# report\n"},
        "plot_figures": {},
        "verify": {"verify.selected": lambda quick, only: [], "verify.regenerate": lambda *a: None},
    }.get(name)
    assert fakes is not None, f"{name}: add fakes of its computation to _fake_computation"
    for i, (attr, fake) in enumerate(fakes.items()):
        owner, _, attr = attr.rpartition(".")
        target = functools.reduce(getattr, owner.split("."), module) if owner else module
        assert hasattr(target, attr), attr
        monkeypatch.setattr(target, attr, wrap(fake, i == 0))
    monkeypatch.setattr(attnlab.recall.tables, "curves_frame", _frame)
    monkeypatch.setattr(attnlab.recall.tables, "summary_frame", _frame)
    if name == "plot_figures":
        for i, (fig, study) in enumerate(list(module.FIGURES.items())):
            draw = wrap(_fake_draw(fig), i == 0)
            fake = SimpleNamespace(name=study.name, figure=lambda _name, draw=draw: draw)
            monkeypatch.setitem(module.FIGURES, fig, fake)


def _interrupting(function: Callable[..., object], after: int) -> Callable[..., object]:
    """``function``, but the call after ``after`` calls raises KeyboardInterrupt."""
    calls = [0]

    def wrapper(*args, **kwargs):
        calls[0] += 1
        if calls[0] > after:
            raise KeyboardInterrupt
        return function(*args, **kwargs)

    wrapper.calls = calls  # type: ignore[attr-defined]
    return wrapper


def _patch_writes(module: ModuleType, monkeypatch, after: int):
    write = _interrupting(attnlab.harness.io.atomic_write_text, after)
    monkeypatch.setattr(attnlab.harness.io, "atomic_write_text", write)
    if hasattr(module, "atomic_write_text"):
        monkeypatch.setattr(module, "atomic_write_text", write)
    return write


def _assert_interrupted(code: int, capsys) -> None:
    captured = capsys.readouterr()
    assert code == 130, captured.err
    assert captured.out == ""
    assert captured.err.endswith("\n") and captured.err.count("\n") == 1, captured.err
    assert "interrupted; nothing written" in captured.err


@pytest.mark.parametrize("name", SCRIPTS)
def test_ctrl_c_anywhere_exits_130_and_writes_nothing(
    name, load_script, run_main, tmp_path, monkeypatch, capsys
):
    module = load_script(name)
    outputs = _prepare(tmp_path)
    argv = _base_argv(module.build_parser(), outputs)

    # An uninterrupted run with the fakes: it writes, and we count its writes.
    with monkeypatch.context() as patch:
        _fake_computation(name, module, patch)
        writes = _patch_writes(module, patch, after=10**6)
        assert run_main(module, argv) == 0, capsys.readouterr().err
        capsys.readouterr()
        assert (writes.calls[0] > 0) == any(outputs.iterdir())
    shutil.rmtree(outputs)
    outputs.mkdir()
    before = _listing(tmp_path)

    # Ctrl-C during the computation, then at each of the writes.
    for after in [None, *range(writes.calls[0])]:
        with monkeypatch.context() as patch:
            _fake_computation(name, module, patch, "interrupt" if after is None else "fake")
            if after is not None:
                _patch_writes(module, patch, after)
            _assert_interrupted(run_main(module, argv), capsys)
            assert _listing(tmp_path) == before, after

"""Tests of the documentation: README's size, and that README's examples work as written
(that every relative link of README.md, docs/*.md and the study READMEs resolves:
tests/test_docs_names.py).

README's shell examples: every line of a fenced ``bash`` block that runs a script of
``experiments/`` is parsed by that script's own parser (a dry parse, no run), and the block
of *Running one experiment*, which is written at small settings, is run as written, line
by line and in order, with its folder ``/tmp/mine`` moved into a temporary directory.
"""

import re
import shlex
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
#: README's folder for your own runs, in its examples.
EXAMPLE_DIR = "/tmp/mine"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _fenced(text: str, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang == language]


def _commands(block: str) -> list[list[str]]:
    """The block's commands as argument lists (continuations joined, comments dropped)."""
    joined = block.replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.strip()]


def _section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _script(command: list[str]) -> str | None:
    """The ``experiments/`` script a command runs, if any."""
    for word in command[:2]:
        if word.startswith("experiments/") and word.endswith(".py"):
            return Path(word).stem
    return None


def test_readme_is_short():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert len(text.encode("utf-8")) <= 20_000


def _readme_commands() -> list[list[str]]:
    text = README.read_text(encoding="utf-8")
    return [c for block in _fenced(text, "bash") for c in _commands(block) if _script(c)]


def _mechanism_code() -> str:
    """The first ``python`` block of *Test your own attention*: ``my_attention.py``."""
    code, _notebook = _fenced(
        _section(README.read_text(encoding="utf-8"), "Test your own attention"), "python"
    )
    return code


def test_readme_notebook_example(tmp_path, monkeypatch):
    """The second block, *From a notebook*, in five lines: it cards ``my_attention.py``'s
    function with ``attnlab.card`` (faked here: its own test is tests/test_card_api.py)."""
    import types

    import attnlab

    _code, notebook = _fenced(
        _section(README.read_text(encoding="utf-8"), "Test your own attention"), "python"
    )
    assert len(notebook.splitlines()) <= 5
    (tmp_path / "my_attention.py").write_text(_mechanism_code(), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    calls = []

    def fake(mechanism, **kwargs):
        calls.append((mechanism, kwargs))
        return types.SimpleNamespace(verdicts=None)

    monkeypatch.setattr(attnlab, "card", fake, raising=False)
    exec(compile(notebook, "notebook", "exec"), {})
    ((mechanism, kwargs),) = calls
    assert mechanism.__name__ == "logits" and kwargs["out_dir"] == "my_cards"


def test_readme_mechanism_example():
    """The example mechanism of *Test your own attention* gives scaled attention's logits."""
    code = _mechanism_code()
    namespace: dict = {}
    exec(compile(code, "my_attention.py", "exec"), namespace)
    q, k = jnp.ones((2, 3, 16)), jnp.arange(2 * 5 * 16, dtype=jnp.float32).reshape(2, 5, 16)
    expected = np.einsum("bqd,bkd->bqk", np.asarray(q), np.asarray(k)) / 4.0
    # Sums of 16 integers below 2^24, divided by 4: exact in float32.
    np.testing.assert_array_equal(namespace["logits"](q, k), expected)


@pytest.mark.parametrize("command", _readme_commands(), ids=lambda c: " ".join(c[1:4]))
def test_readme_examples_parse(command, load_script, tmp_path, monkeypatch):
    """Each example's flags parse with its script's own parser (``--help`` lines: that the
    script exists); files the examples name are written from README first."""
    module = load_script(_script(command))
    argv = [w.replace(EXAMPLE_DIR, str(tmp_path)) for w in command[2:]]
    if "--help" in argv:
        return
    code = _mechanism_code()
    (tmp_path / "my_attention.py").write_text(code, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    module.build_parser().parse_args(argv)


def test_running_one_experiment_runs_as_written(load_script, run_main, tmp_path, capsys):
    block = _fenced(_section(README.read_text(encoding="utf-8"), "Running one experiment"), "bash")
    mine = tmp_path / "mine"
    for command in _commands("".join(block)):
        command = [w.replace(EXAMPLE_DIR, str(mine)) for w in command]
        if command[:2] == ["mkdir", "-p"]:
            Path(command[2]).mkdir(parents=True)
            continue
        assert command[0] == ".venv/bin/python" and _script(command), command
        assert run_main(load_script(_script(command)), command[2:]) == 0, capsys.readouterr().err
    for name in ("fig1_saturation.png", "fig3_training.png", "REPORT.md"):
        assert (mine / name).is_file(), name

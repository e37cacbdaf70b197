"""Every dotted ``attnlab.…`` name and every repository path that README.md, docs/*.md and
the study READMEs quote exists: a module, or an attribute of one; a file or folder of the
repository (paths with a placeholder, ``NAME``, ``<…>``, ``*``, left out), and every
relative markdown link's target (an image's too; in a fenced block, those without a
placeholder). The checker is shown to catch a module that is not there.

And every name of this package that a docstring of attnlab/ or experiments/ quotes exists
(``docstring_names`` says which are checked, ``defined_names`` what counts as defined):
the checker is shown to catch a name that is not there."""

from __future__ import annotations

import ast
import builtins
import csv
import importlib
import json
import keyword
import lzma
import re
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
DOCUMENTS += sorted((REPO / "attnlab" / "studies").glob("*/README.md"))
#: ``attnlab.a.b`` (a word boundary before it: not part of a path or another name).
DOTTED = re.compile(r"(?<![\w/.])attnlab(?:\.[A-Za-z_<][\w<>]*)+")
#: A path in backticks or a link target, from a top-level folder of the repository.
PATH = re.compile(r"(?<![\w/.])((?:attnlab|experiments|tests|docs|results|figures)/[\w./<>{},-]*)")
#: A relative link target of markdown, ``[text](target)`` or an image's ``![alt](target)``:
#: neither a web address nor an anchor of the same page (``#…`` is cut off the target).
LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)\s#]+)")
#: A fenced code block of markdown: its language and its text.
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
#: Paths that name a kind of file, not one (placeholders) or what runs write (ignored).
PLACEHOLDER = re.compile(r"NAME|NN_|<|\*|…|\{|LABEL|results/runs/|cards/user/|\.\.\.")


def dotted_names(text: str) -> set[str]:
    """The package's dotted names in ``text`` (a tensor name with a placeholder, such as
    ``attnlab.h.<i>.attn.scale`` of a checkpoint, left out)."""
    return {m.rstrip(".") for m in DOTTED.findall(text) if "<" not in m}


def repository_paths(text: str) -> set[str]:
    found = {p.rstrip(".,:;)") for p in PATH.findall(text)}
    return {p for p in found if p and not PLACEHOLDER.search(p)}


def link_targets(text: str) -> set[str]:
    """The relative link targets of markdown ``text``, resolved from its own folder: every
    one outside fenced code blocks, and those inside one that hold no placeholder."""
    fenced = "\n".join(body for _, body in FENCE.findall(text))
    inside = {m for m in LINK.findall(fenced) if not PLACEHOLDER.search(m)}
    return set(LINK.findall(FENCE.sub("", text))) | inside


def resolves(name: str) -> bool:
    """Whether ``name`` is a module, or a chain of attributes of the longest module prefix."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_quoted_name_and_path_exists(document: Path):
    text = document.read_text(encoding="utf-8")
    missing = sorted(n for n in dotted_names(text) if not resolves(n))
    assert missing == [], f"{document.relative_to(REPO)} names what does not exist"
    absent = sorted(p for p in repository_paths(text) if not (REPO / p).exists())
    for where in (document.parent, REPO):
        absent = [p for p in absent if not (where / p).exists()]
    assert absent == [], f"{document.relative_to(REPO)} quotes paths that do not exist"
    broken = sorted(t for t in link_targets(text) if not (document.parent / t).exists())
    assert broken == [], f"{document.relative_to(REPO)} links to what does not exist"


def test_a_renamed_module_is_caught():
    text = "see `attnlab.studies.card.lm_verdicts` and `attnlab/studies/card/lm_verdicts.py`"
    assert all(resolves(n) for n in dotted_names(text))
    renamed = text.replace("lm_verdicts", "lm_rules")
    assert not any(resolves(n) for n in dotted_names(renamed))
    assert all(not (REPO / p).exists() for p in repository_paths(renamed))
    assert dotted_names("attnlab.claims.STATIC_CLAIMS.") == {"attnlab.claims.STATIC_CLAIMS"}
    folder = REPO / "attnlab" / "studies" / "recall"
    link = "[`tables.py`](../../recall/tables.py), [a](https://x.org/y.py), [b](#top)"
    assert link_targets(link) == {"../../recall/tables.py"}
    fenced = "![fig](figures/NAME.png#x) [c](c.md)\n```md\n[d](d.md) [e](cards/NAME.md)\n```\n"
    assert link_targets(fenced) == {"figures/NAME.png", "c.md", "d.md"}
    assert (folder / "../../recall/tables.py").exists()
    assert not (folder / "../../recall/summaries.py").exists()


# --- docstrings: the package's names they quote ----------------------------------------------

#: The code whose docstrings are checked: every module of the package and every script.
SOURCES = sorted([*(REPO / "attnlab").rglob("*.py"), *(REPO / "experiments").glob("*.py")])
#: Where a name may be defined: the code, and the tests (their helpers and fixtures).
DEFINING = SOURCES + sorted((REPO / "tests").glob("*.py"))
#: What a docstring quotes: the text between double backquotes (across a line break too).
QUOTED = re.compile(r"``(.+?)``", re.DOTALL)
#: A quote that is a name, an attribute (``store.draw_card``) or a call of either
#: (``make_optimizer(name, lr, ...)``): the name, the attribute's last.
CALLED = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*\.)*(_?[A-Za-z][A-Za-z0-9_]*)(?:\(.*)?", re.DOTALL)
#: The names checked: snake_case with an underscore (``headroom``, one word, is not:
#: English words are quoted too), or CONSTANT_CASE with one.
SNAKE = re.compile(r"_?[a-z][a-z0-9]*(?:_[a-z0-9]+)+")
CONSTANT = re.compile(r"_?[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
#: An identifier inside a string of the code (``"tokenizer.ggml.bos_token_id"`` holds
#: ``bos_token_id``).
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Names the docstrings cite from other projects' code, which neither this repository nor a
#: module it imports defines: Hugging Face transformers' (and its tokenizer converters'),
#: Llama 4's reference implementation, Megatron-LM's and maxtext's, Hugging Face's model
#: types.
ELSEWHERE = {
    "ROPE_INIT_FUNCTIONS", "_compute_yarn_parameters", "_init_weights", "rotate_half",
    "generate_merges", "with_split", "_get_attn_scale", "qk_clip_alpha", "get_optimizer",
    "qwen3_moe",
}  # fmt: skip


def checked(name: str) -> bool:
    """Whether ``name`` is one ``docstring_names`` checks: snake_case or CONSTANT_CASE with an
    underscore, no placeholder (``NAME_CSVS``, ``NN_``), and no part a single letter (math:
    ``w_l``, ``gamma_h``, ``x_0``; mixed case, ``W_q``, is math too and not checked)."""
    if PLACEHOLDER.search(name):
        return False
    if CONSTANT.fullmatch(name):
        return True
    parts = name.strip("_").split("_")
    return bool(SNAKE.fullmatch(name)) and not any(len(p) == 1 and p.isalpha() for p in parts)


def docstrings(tree: ast.AST):
    """``(line, docstring)`` of the module and of every class and function in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            text = ast.get_docstring(node, clean=False)
            if text:
                yield getattr(node, "lineno", 1), text


def docstring_names(text: str) -> set[str]:
    """The names ``text`` quotes in double backquotes (alone, as an attribute or called) that
    are ``checked``."""
    names = {m.group(1) for q in QUOTED.findall(text) if (m := CALLED.fullmatch(q.strip()))}
    return {n for n in names if checked(n)}


def _defined_in(path: Path, strings: bool) -> set[str]:
    """What ``path`` defines: functions, classes, their parameters, names and attributes
    assigned, keyword arguments, imported names, flags' dests (``--out-dir``: ``out_dir``),
    module names; with ``strings``, the identifiers inside its strings (docstrings left out:
    column names, config keys, environment variables, mechanisms' names)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and ast.get_docstring(node, clean=False)
    }
    found = {path.stem}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            found.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            found.add(node.arg)
        elif isinstance(node, ast.alias):
            found.add((node.asname or node.name).rpartition(".")[2])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            found |= {
                a.value.lstrip("-").replace("-", "_")
                for a in node.args
                if isinstance(a, ast.Constant) and str(a.value).startswith("--")
            }
        elif strings and isinstance(node, ast.Constant) and isinstance(node.value, str):
            found |= set() if id(node) in docs else set(WORD.findall(node.value))
    return found


def _imported_modules() -> set[str]:
    """Every module (and ``module.name``) the package and the scripts import, but theirs."""
    found = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    ours = ("attnlab", "_interrupt", "__future__")
    return {m for m in found if m.partition(".")[0] not in ours}


def _namespace(name: str) -> set[str]:
    """The names of module ``name`` (or of attribute ``name`` of a module) and of the modules
    and classes it holds; nothing where it does not import."""
    try:
        found = importlib.import_module(name)
    except ImportError:
        module, _, attribute = name.rpartition(".")
        try:
            found = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError, ValueError):
            return set()
    names = set(dir(found))
    for attribute in list(names):
        inner = getattr(found, attribute, None)
        if isinstance(inner, types.ModuleType | type):
            names |= set(dir(inner))
    return names


def defined_names() -> set[str]:
    """What a quoted name may be: a Python builtin, keyword or standard module; a name of a
    module the code imports (JAX's, numpy's, the standard library's...); what the code and
    the tests define (``_defined_in``: the code's strings too, the tests' not, or a
    test's own examples would count); a column of a committed CSV; a flag of a committed
    sidecar."""
    known = set(dir(builtins)) | set(keyword.kwlist) | set(sys.stdlib_module_names)
    for name in _imported_modules():
        known |= _namespace(name)
    for path in DEFINING:
        known |= _defined_in(path, strings=path in SOURCES)
    for path in (REPO / "results").rglob("*.csv*"):
        with (lzma.open if path.suffix == ".xz" else open)(path, "rt", encoding="utf-8") as f:
            known |= set(next(csv.reader(f), []))
    for path in (REPO / "results").rglob("*.json"):
        flags = json.loads(path.read_text(encoding="utf-8")).get("flags")
        known |= set(flags) if isinstance(flags, dict) else set()
    return known


def is_defined(name: str, known: set[str]) -> bool:
    """``name`` is defined, or ends a defined name after an underscore (a docstring naming
    the columns ``over_bound_clipped_before``, ``..._from_below`` by ``clipped_before``)."""
    return name in known or name in ELSEWHERE or any(k.endswith(f"_{name}") for k in known)


@pytest.fixture(scope="module")
def known() -> set[str]:
    return defined_names()


def test_every_name_a_docstring_quotes_is_defined(known):
    missing = []
    for path in SOURCES:
        where = str(path.relative_to(REPO))
        for line, text in docstrings(ast.parse(path.read_text(encoding="utf-8"))):
            missing += [
                f"{where}:{line}: ``{name}``"
                for name in sorted(docstring_names(text))
                if not is_defined(name, known)
            ]
    assert missing == [], f"docstrings quote names defined nowhere: {missing}"


def test_a_stale_name_in_a_docstring_is_caught(known):
    text = """``(headroom, censored)`` (``headroom_censored``), ``make_optimizer(name, lr)``,
    ``store.draw_card``, ``attnlab.mechanism``, ``13_real_model_heads.csv``,
    ``w_l`` and ``W_q``, ``NAME_CSVS``, ``clipped_before``, ``float16``, ``block_until_ready``,
    ``out_dir``, ``max_weight_mean``, ``TOLERANCE``, ``FAST_TEST_BUDGET_S``, ``sched_getaffinity``,
    ``NO_SUCH_CONSTANT``"""
    names = docstring_names(text)
    assert names == {"headroom_censored", "make_optimizer", "draw_card", "clipped_before",
                     "block_until_ready", "out_dir", "max_weight_mean", "FAST_TEST_BUDGET_S",
                     "sched_getaffinity", "NO_SUCH_CONSTANT"}  # fmt: skip
    missing = {n for n in names if not is_defined(n, known)}
    assert missing == {"headroom_censored", "NO_SUCH_CONSTANT"}

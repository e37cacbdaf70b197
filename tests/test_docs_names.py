"""Every dotted ``attnlab.…`` name and every repository path that README.md, docs/*.md and
the study READMEs quote exists: a module, or an attribute of one; a file or folder of the
repository (paths with a placeholder, ``NAME``, ``<…>``, ``*``, left out), and every
relative markdown link's target. The checker is shown to catch a module that is not there."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
DOCUMENTS += sorted((REPO / "attnlab" / "studies").glob("*/README.md"))
#: ``attnlab.a.b`` (a word boundary before it: not part of a path or another name).
DOTTED = re.compile(r"(?<![\w/.])attnlab(?:\.[A-Za-z_<][\w<>]*)+")
#: A path in backticks or a link target, from a top-level folder of the repository.
PATH = re.compile(r"(?<![\w/.])((?:attnlab|experiments|tests|docs|results|figures)/[\w./<>{},-]*)")
#: A relative link target of markdown, ``[text](target)``: neither a web address nor an
#: anchor of the same page (``#…`` is cut off the target).
LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)\s#]+)")
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
    """The relative link targets of markdown ``text``, resolved from its own folder."""
    return {m for m in LINK.findall(text) if not PLACEHOLDER.search(m)}


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
    assert (folder / "../../recall/tables.py").exists()
    assert not (folder / "../../recall/summaries.py").exists()

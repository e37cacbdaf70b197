"""Mechanisms by reference: what ``--mechanism`` and the card's arguments name.

A reference is a built-in name (``attnlab.core.temperature.BUILTINS``), ``MODULE:NAME``
(an importable module) or ``path/to/file.py:NAME``; ``load_mechanism`` resolves all three
and checks what it finds (``attnlab.core.mechanism_check.check_mechanism``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from functools import cache
from pathlib import Path

from attnlab.core.mechanism import (
    Mechanism,
    MechanismError,
    MechanismReferenceError,
    as_mechanism,
    refusal,
)
from attnlab.core.mechanism_check import check_mechanism, explain
from attnlab.core.positional import POSITIONAL
from attnlab.core.temperature import BUILTINS

#: Mechanism objects already checked, by identity (kept, so that no id is reused).
_CHECKED: dict[int, Mechanism] = {}


def _checked(mechanism: Mechanism) -> Mechanism:
    """``mechanism`` itself after ``check_mechanism`` (once per object)."""
    if _CHECKED.get(id(mechanism)) is not mechanism:
        check_mechanism(mechanism)
        _CHECKED[id(mechanism)] = mechanism
    return mechanism


#: Every built-in by name: the recall task's twelve (``BUILTINS``) and the language model's
#: three more (``POSITIONAL``).
ALL_BUILTINS: dict[str, Mechanism] = {**BUILTINS, **POSITIONAL}


def is_builtin(mechanism: Mechanism) -> bool:
    """Whether ``mechanism`` is the built-in of its name (the object itself, not a namesake):
    one of ``ALL_BUILTINS``."""
    return ALL_BUILTINS.get(mechanism.name) is mechanism


def _import_file(path: Path):
    module_name = f"attnlab_user_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise MechanismReferenceError(f"cannot import {str(path)!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[module_name]
        raise MechanismReferenceError(f"importing {str(path)!r} failed: {explain(err)}") from None
    return module


def load_mechanism(reference: str | Mechanism) -> Mechanism:
    """The mechanism a reference names: a built-in name (``attnlab.core.temperature``),
    ``MODULE:NAME`` (an importable module) or ``path/to/file.py:NAME``; the object found is
    passed through ``as_mechanism`` and ``check_mechanism``. The same reference (a file's
    by its absolute path) always gives the same object, so its trainings share compiled
    programs. A ``Mechanism`` is its own reference: it is checked and returned as it is.

    Raises ``MechanismReferenceError`` (the reference names no mechanism) or
    ``MechanismError`` (what it names does not work), each with the reason.
    """
    if isinstance(reference, Mechanism):
        return _checked(reference)
    if not isinstance(reference, str) or not reference:
        raise MechanismReferenceError(f"{reference!r} is not a mechanism reference")
    where, _, attribute = reference.rpartition(":")
    if where.endswith(".py") and Path(where).is_file():
        return _load_mechanism(f"{Path(where).resolve()}:{attribute}")
    return _load_mechanism(reference)


@cache
def _load_mechanism(reference: str) -> Mechanism:
    """``load_mechanism`` of ``reference`` (a file's path absolute), cached."""
    if reference in ALL_BUILTINS:
        return ALL_BUILTINS[reference]
    if ":" not in reference:
        raise MechanismReferenceError(
            f"{reference!r} is not a built-in mechanism ({', '.join(ALL_BUILTINS)}) and not of "
            "the form MODULE:NAME or path/to/file.py:NAME"
        )
    where, _, attribute = reference.rpartition(":")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise MechanismReferenceError(f"no file {where!r}")
        module = _import_file(path)
    else:
        try:
            module = importlib.import_module(where)
        except Exception as err:
            raise MechanismReferenceError(
                f"cannot import module {where!r}: {explain(err)}"
            ) from None
    if not hasattr(module, attribute):
        raise MechanismReferenceError(f"{where!r} has no attribute {attribute!r}")
    obj = getattr(module, attribute)
    if not (isinstance(obj, Mechanism) or callable(obj)) or isinstance(obj, type):
        raise MechanismReferenceError(
            f"{reference!r} is a {type(obj).__name__}, not a Mechanism or a function logits(q, k)"
        )
    mechanism = as_mechanism(obj, name=attribute)
    check_mechanism(mechanism)
    return mechanism


def mechanism_reference(text: str) -> str:
    """An argparse type: a reference ``load_mechanism`` resolves (a built-in name,
    ``MODULE:NAME`` or ``path/to/file.py:NAME``) to a mechanism that runs; else the reason."""
    try:
        load_mechanism(text)
    except (MechanismReferenceError, MechanismError) as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def recall_refusal(mechanism: Mechanism) -> str | None:
    """Why the recall task (one head over unordered slots: no positions, heads or a mask of
    its own) cannot run ``mechanism``, in one line; None if it can."""
    if mechanism.needs_positions():
        return refusal(mechanism, mechanism.needs_positions())
    try:
        mechanism.head_values(16, 1)
    except MechanismError as err:
        return str(err)
    return None


def recall_mechanism_reference(text: str) -> str:
    """An argparse type: a ``mechanism_reference`` that the recall task can run
    (``recall_refusal``)."""
    problem = recall_refusal(load_mechanism(mechanism_reference(text)))
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def mechanism_references(text: str) -> list[str]:
    """An argparse type: comma-separated references, each a ``mechanism_reference`` (the
    card's baselines)."""
    parts = text.split(",")
    if any(not p for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of mechanisms")
    return [mechanism_reference(p) for p in parts]

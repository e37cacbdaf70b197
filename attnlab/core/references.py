"""Mechanisms by reference: what ``--mechanism`` and the card's arguments name.

A reference is a built-in name (``ALL_BUILTINS`` below: the recall task's
``attnlab.core.temperature.BUILTINS`` and the positional ones), ``MODULE:NAME``
(an importable module) or ``path/to/file.py:NAME``; ``load_mechanism`` resolves all three
and checks what it finds (``attnlab.core.mechanism_check.check_mechanism``). Importing a
user's file or module, and checking what it names, each run within a time limit
(``IMPORT_TIMEOUT_S``), and a file that exits (``sys.exit``) at import is refused like one
that raises: one line, never a hang or a silent exit.

A name is resolved once, where it enters (``resolve``: a flag's argparse type
``resolved_mechanism``, the card's Python API, a recall configuration's ``mechanisms``:
``RecallConfig``, ``WidthsConfig``), into a ``MechanismRef``: the mechanism and the
reference it came from, which the card, the recall studies and 14/15 carry from there on. It
crosses a process boundary as its reference and is resolved once again on arrival.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TypeVar

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

T = TypeVar("T")

#: The seconds that importing a mechanism's file (or module), and then checking what it
#: names (``check_mechanism``), may each take before ``load_mechanism`` refuses it in one
#: line. ``--mechanism`` is resolved while the command line is parsed (argparse converts a
#: value as it reads it, before a later ``--help`` acts), so a file that loops or waits at
#: import would otherwise hang the script with no word. Importing a mechanism's file takes
#: well under a second (JAX's own import, if it is the first, about 2 s) and its check a few
#: small compilations, 1-5 s on a laptop's CPU; 60 s is ten times that, for a slow or busy
#: machine, and still short enough to wait for. ``IMPORT_TIMEOUT_ENV`` sets another limit
#: (tests set it low). The limit is a SIGALRM timer, so it holds in the main thread only
#: (a reference resolved in a worker thread has none), and where nothing else uses SIGALRM;
#: a loop inside one compiled XLA computation is not interrupted until it returns.
IMPORT_TIMEOUT_S = 60.0
IMPORT_TIMEOUT_ENV = "ATTNLAB_IMPORT_TIMEOUT_S"
#: Once the limit has run out, the seconds between further alarms: while JAX's own code
#: runs (``_in_jax``: an exception raised inside its compiler leaves XLA's state broken,
#: and the process crashes as it exits), and should code that catches everything
#: (``except BaseException``) swallow one.
RETRY_S = 0.05


def import_timeout_s() -> float:
    """The time limit in seconds: ``IMPORT_TIMEOUT_ENV`` if set (a positive number), else
    ``IMPORT_TIMEOUT_S``; ``MechanismReferenceError`` if the variable holds anything else."""
    text = os.environ.get(IMPORT_TIMEOUT_ENV)
    if text is None:
        return IMPORT_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise MechanismReferenceError(
            f"{IMPORT_TIMEOUT_ENV}={text!r} is not a positive number of seconds"
        )
    return seconds


@cache
def _jax_folders() -> tuple[str, ...]:
    import jax
    import jaxlib

    return tuple(str(Path(m.__file__).parent) + os.sep for m in (jax, jaxlib))


def _in_jax(frame: object) -> bool:
    """Whether ``frame``, where a signal found the main thread, is JAX's or jaxlib's code."""
    return getattr(getattr(frame, "f_code", None), "co_filename", "").startswith(_jax_folders())


class _TimeUp(BaseException):
    """The time limit ``token`` set ran out (``_time_limit``). Not an ``Exception``: a
    user's ``except Exception`` around a loop cannot swallow it."""

    def __init__(self, token: object) -> None:
        super().__init__("time limit")
        self.token = token


def _can_time() -> bool:
    """Whether a SIGALRM timer can limit the time here: a platform with ``setitimer``, the
    main thread, and SIGALRM not already someone's (a limit around this one, a test
    runner's timeout)."""
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN)
        and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    )


@contextlib.contextmanager
def _time_limit(seconds: float, token: object) -> Iterator[None]:
    """Within the block, ``_TimeUp(token)`` is raised once ``seconds`` have passed (where
    ``_can_time``; elsewhere, a block within another's limit included, it runs without one
    of its own); SIGALRM's handler is put back after it."""
    if not _can_time():
        yield
        return
    armed = [True]

    def expire(signum: int, frame: object) -> None:
        if armed[0] and not _in_jax(frame):  # in JAX's code: the next alarm, RETRY_S on
            raise _TimeUp(token)

    previous = signal.signal(signal.SIGALRM, expire)
    _jax_folders()
    signal.setitimer(signal.ITIMER_REAL, seconds, RETRY_S)
    try:
        yield
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _limited(call: Callable[[], T], error: type[Exception], what: str, limit: str) -> T:
    """``call()`` within ``import_timeout_s()``; ``error``, one line of ``what`` and the
    limit (``limit``: what it is on), if the time runs out or ``call`` exits
    (``sys.exit``). KeyboardInterrupt (Ctrl-C, and the run's signals) goes through."""
    seconds, token = import_timeout_s(), object()
    try:
        with _time_limit(seconds, token):
            return call()
    except _TimeUp as up:
        if up.token is not token:  # the limit of a call around this one
            raise
        raise error(
            f"{what} did not finish within {seconds:g} s (the limit on {limit}, "
            f"{IMPORT_TIMEOUT_ENV}): does it loop or wait?"
        ) from None
    except SystemExit as exit_:
        raise error(
            f"{what} called sys.exit({exit_.code!r}); a mechanism's code must not exit "
            "(a script's own code goes under if __name__ == '__main__':)"
        ) from None


def _check(mechanism: Mechanism, reference: str | None = None) -> None:
    """``check_mechanism(mechanism)`` within the time limit (``_limited``)."""
    named = f"{reference!r}: checking" if reference else "checking"
    _limited(
        lambda: check_mechanism(mechanism),
        MechanismError,
        f"{named} mechanism {mechanism.name!r}",
        "checking a mechanism",
    )


#: Mechanism objects already checked, by identity (kept, so that no id is reused).
_CHECKED: dict[int, Mechanism] = {}


def _checked(mechanism: Mechanism) -> Mechanism:
    """``mechanism`` itself after ``check_mechanism`` (once per object)."""
    if _CHECKED.get(id(mechanism)) is not mechanism:
        _check(mechanism)
        _CHECKED[id(mechanism)] = mechanism
    return mechanism


#: Every built-in by name: the recall task's fourteen (``BUILTINS``) and the language model's
#: three more (``POSITIONAL``).
ALL_BUILTINS: dict[str, Mechanism] = {**BUILTINS, **POSITIONAL}


def is_builtin(mechanism: Mechanism) -> bool:
    """Whether ``mechanism`` is the built-in of its name (the object itself, not a namesake):
    one of ``ALL_BUILTINS``."""
    return ALL_BUILTINS.get(mechanism.name) is mechanism


def _import_file(path: Path, reference: str):
    """The module of the file ``path`` (for ``reference``), imported within the time limit
    (``_limited``); ``MechanismReferenceError`` if importing it fails, exits or runs out of
    time."""
    module_name = f"attnlab_user_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise MechanismReferenceError(f"cannot import {str(path)!r}")
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def execute() -> None:
        try:
            loader.exec_module(module)
        except Exception as err:
            raise MechanismReferenceError(
                f"importing {str(path)!r} failed: {explain(err)}"
            ) from None

    sys.modules[module_name] = module
    try:
        _limited(
            execute,
            MechanismReferenceError,
            f"{reference!r}: importing its file",
            "importing a mechanism's file",
        )
    except BaseException:  # failed, exited, ran out of time or interrupted: not imported
        sys.modules.pop(module_name, None)
        raise
    return module


def _import_module(where: str, reference: str):
    """``importlib.import_module(where)`` within the time limit (``_limited``);
    ``MechanismReferenceError`` if importing it fails, exits or runs out of time."""

    def execute():
        try:
            return importlib.import_module(where)
        except Exception as err:
            raise MechanismReferenceError(
                f"cannot import module {where!r}: {explain(err)}"
            ) from None

    return _limited(
        execute,
        MechanismReferenceError,
        f"{reference!r}: importing module {where!r}",
        "importing a mechanism's module",
    )


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
        module = _import_file(path, reference)
    else:
        module = _import_module(where, reference)
    if not hasattr(module, attribute):
        raise MechanismReferenceError(f"{where!r} has no attribute {attribute!r}")
    obj = getattr(module, attribute)
    if not (isinstance(obj, Mechanism) or callable(obj)) or isinstance(obj, type):
        raise MechanismReferenceError(
            f"{reference!r} is a {type(obj).__name__}, not a Mechanism or a function logits(q, k)"
        )
    mechanism = as_mechanism(obj, name=attribute)
    _check(mechanism, reference)
    return mechanism


@dataclass(frozen=True)
class MechanismRef:
    """A mechanism resolved once (``resolve``), with the reference it was resolved from.

    ``reference``: the text that named it (a built-in name, ``MODULE:NAME`` or
    ``path/to/file.py:NAME``), as given, for provenance; None for a ``Mechanism`` object
    handed over as itself (the card's Python API). ``mechanism``: what ``load_mechanism``
    resolved, checked. Equal when both are. Pickled as its reference and resolved again on
    arrival (a user's mechanism from a file need not pickle; ``load_mechanism``'s cache
    makes that once per process and reference); one without a reference does not pickle
    (``TypeError``), so it runs in the process that holds it (``portable``).
    """

    reference: str | None
    mechanism: Mechanism

    @property
    def name(self) -> str:
        """The mechanism's name (what a table's ``mechanism`` column holds)."""
        return self.mechanism.name

    @property
    def text(self) -> str:
        """The reference, or for a ``Mechanism`` object ``NAME (a Mechanism object)``."""
        return self.reference or f"{self.name} (a Mechanism object)"

    @property
    def portable(self) -> bool:
        """Whether it can cross to another process (it has a reference to resolve there)."""
        return self.reference is not None

    def __reduce__(self) -> tuple[Callable[[str], MechanismRef], tuple[str]]:
        if self.reference is None:
            raise TypeError(f"{self.text} has no reference to resolve in another process")
        return resolve, (self.reference,)


def resolve(reference: str | Mechanism | MechanismRef) -> MechanismRef:
    """Where a mechanism enters: ``reference`` (``load_mechanism``'s) resolved and checked,
    kept beside what it names; a ``Mechanism`` object with no reference; a ``MechanismRef``
    as it is. Raises what ``load_mechanism`` raises."""
    if isinstance(reference, MechanismRef):
        return reference
    text = reference if isinstance(reference, str) else None
    return MechanismRef(text, load_mechanism(reference))


def resolved_mechanism(text: str) -> MechanismRef:
    """An argparse type: ``text`` resolved (``resolve``: a built-in name, ``MODULE:NAME`` or
    ``path/to/file.py:NAME``) to a mechanism that runs; else the reason."""
    try:
        return resolve(text)
    except (MechanismReferenceError, MechanismError) as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def mechanism_reference(text: str) -> str:
    """An argparse type: ``text`` itself once ``resolved_mechanism`` has checked it, for the
    studies whose configurations carry references as text."""
    return resolved_mechanism(text).text


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
    problem = recall_refusal(resolved_mechanism(text).mechanism)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def resolved_mechanisms(text: str) -> list[MechanismRef]:
    """An argparse type: comma-separated references, each a ``resolved_mechanism`` (the
    card's baselines)."""
    parts = text.split(",")
    if any(not p for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of mechanisms")
    return [resolved_mechanism(p) for p in parts]

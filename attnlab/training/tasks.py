"""The task contract and its registry: what the lanes engine (``attnlab.training.lanes``)
and the studies that train (the card) need of a training task, by name.

A ``Task`` is a NamedTuple of a name and small functions, as optax's
``GradientTransformation`` is of two (a task is a value, not a subclass to learn):

==============  ==========================================================================
``name``        its name in ``TASKS``, the card's ``--task`` and a card's folder
``about``       what it is, in a line (``--help``'s)
``defaults``    ``(quick, seed, **options) -> config``: its configuration at its defaults
                (``quick``: a look in about a minute), a frozen dataclass with ``steps``
                and ``chunk_steps``; ``options`` are the ``flags`` it takes
``programs``    ``(config, mechanism) -> Programs``: init, the loss and step in ``lax.scan``
                chunks, and the held-out evaluation, compiled, and the per-step metrics
``data``        ``config -> (data, held_out)``: what every lane's steps read, and what the
                evaluation reads
``seed_keys``   ``seed -> (init key, data key)``
``constants``   ``(config, mechanism) -> {name: value}``: the mechanism's constants
``refusal``     ``(mechanism, config) -> str | None``: why it cannot train a mechanism
``lrs``         the peak rates a sweep of it spans (the card's, on a task without a card
                section of its own)
``flags``       the card's flags (their dests) that apply to it beyond the card's own
==============  ==========================================================================

``TASKS`` holds every task by name: the built-ins (``recall``, 04's associative recall;
``lm``, 14's byte-level language model) are named by where they live and imported when
first asked for (the training floor imports neither wing); ``TASKS.register`` adds one. A
new task is a module that builds a ``Task`` and registers it; no study changes
(``tests/test_training_tasks.py`` cards a built-in on a toy task).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import jax

from attnlab.core.mechanism import Mechanism
from attnlab.training.lanes import Lanes, Programs, run_lanes


class Task(NamedTuple):
    """A training task (module docstring)."""

    name: str
    about: str
    defaults: Callable[..., Any]
    programs: Callable[[Any, Mechanism], Programs]
    data: Callable[[Any], tuple[Any, Any]]
    seed_keys: Callable[[int], tuple[jax.Array, jax.Array]]
    constants: Callable[[Any, Mechanism], dict[str, float]]
    refusal: Callable[[Mechanism, Any], str | None] = lambda mechanism, config: None
    lrs: tuple[float, ...] = (1e-3, 1e-2, 1e-1)
    flags: tuple[str, ...] = ()


#: The built-in tasks: name -> ``"module:attribute"`` of their ``Task``.
BUILTIN_TASKS = {"recall": "attnlab.recall.recall_task:RECALL_TASK",
                 "lm": "attnlab.lm.lm_task:LM_TASK"}  # fmt: skip


class TaskRegistry(Mapping[str, Task]):
    """Every task by name: the built-ins (imported when first asked for), then those
    registered (``register``). ``KeyError`` naming the tasks for another name."""

    def __init__(self) -> None:
        self._registered: dict[str, Task] = {}

    def __getitem__(self, name: str) -> Task:
        if name in self._registered:
            return self._registered[name]
        if name not in BUILTIN_TASKS:
            raise KeyError(f"task must be one of {list(self)}, got {name!r}")
        module, _, attribute = BUILTIN_TASKS[name].partition(":")
        return getattr(importlib.import_module(module), attribute)

    def __iter__(self) -> Iterator[str]:
        return iter([*BUILTIN_TASKS, *self._registered])

    def __len__(self) -> int:
        return len(BUILTIN_TASKS) + len(self._registered)

    def register(self, task: Task) -> Task:
        """Register ``task`` under its name (not a built-in's, nor one registered already);
        returns it."""
        if task.name in BUILTIN_TASKS or task.name in self._registered:
            raise ValueError(f"task {task.name!r} is taken; give yours another name")
        self._registered[task.name] = task
        return task

    def unregister(self, name: str) -> None:
        """Forget the registered task ``name``."""
        self._registered.pop(name, None)


#: The registry (module docstring).
TASKS = TaskRegistry()


def train_task(
    task: Task,
    config: Any,
    mechanism: Mechanism,
    lrs: list[float],
    seeds: list[int],
    on_chunk: Callable[[int], None] | None = None,
) -> Lanes:
    """``mechanism`` trained on ``task`` at ``config`` at every (rate, seed) of ``lrs x
    seeds``, as lanes of the engine (``run_lanes``)."""
    data, held_out = task.data(config)
    return run_lanes(task.programs(config, mechanism), lrs, seeds, task.seed_keys,
                     task.constants(config, mechanism), data, held_out, config.steps,
                     config.chunk_steps, on_chunk)  # fmt: skip

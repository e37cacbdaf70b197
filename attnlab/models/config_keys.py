"""A ``config.json``'s keys read and checked: the one set of checks every family's parser
calls, so that a key of another type than the family reads is a ``CheckpointError`` of one
line naming the file and the key, never a traceback later.

``positive_int``, ``positive_number`` (finite: not JSON's NaN or Infinity), ``choice`` (one
of the strings allowed), ``boolean`` (true or false, not the string ``"false"``),
``an_object``, ``names`` (a list of strings) and ``model_type_of``; a JSON ``null`` is
Hugging Face's "not set": the default. ``check_layers``: more layers than their
descriptions fit in memory, refused before a parser builds anything per layer.
``model_type``: a checkpoint folder's ``config.json``'s ``model_type``, which picks its
family.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from attnlab.core.machine import memory_budget_bytes
from attnlab.models.files import CONFIG, CheckpointError, in_bytes, is_file, read_json

#: What one layer's description holds in Python objects at most, in bytes: its type, its
#: rotary positions, its tensors' names and shapes, a ledger row (``check_layers``).
LAYER_RECORD_BYTES = 2**10


def _value(raw: Mapping[str, Any], name: str, default: Any, where: str) -> Any:
    """``raw[name]``, ``default`` where absent or null (JSON's ``null`` is Hugging Face's
    "not set"); ``CheckpointError`` naming ``where`` unless ``raw`` is a JSON object (a
    nested key's parent may be anything)."""
    if not isinstance(raw, Mapping):
        raise CheckpointError(f"{where}: {name}'s parent must be an object, got {raw!r}")
    value = raw.get(name)
    return default if value is None else value


def positive_int(
    raw: Mapping[str, Any], name: str, where: str, default: Any = None, label: str = ""
) -> int:
    """``raw[name]`` (``default`` where absent or null); ``CheckpointError`` naming ``where``
    and the key (``label``, default ``name``) unless it is a positive integer (a bool is not
    one)."""
    value = _value(raw, name, default, where)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CheckpointError(f"{where}: {label or name} must be a positive integer, got {value!r}")
    return value


def positive_number(
    raw: Mapping[str, Any], name: str, where: str, default: Any = None, label: str = ""
) -> float:
    """``raw[name]`` (``default`` where absent or null) as a float; ``CheckpointError`` naming
    ``where`` and the key (``label``, default ``name``) unless it is a positive finite
    number (not a bool, JSON's NaN or Infinity)."""
    value = _value(raw, name, default, where)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise CheckpointError(f"{where}: {label or name} must be a positive number, got {value!r}")
    return float(value)


def choice(
    raw: Mapping[str, Any], name: str, where: str, allowed: Collection[str], default: Any = None,
    label: str = "",
) -> str:  # fmt: skip
    """``raw[name]`` (``default`` where absent or null); ``CheckpointError`` naming ``where``
    and the key (``label``, default ``name``) unless it is one of the strings ``allowed`` (a list or
    an object never is, and is never hashed)."""
    value = _value(raw, name, default, where)
    if not isinstance(value, str) or value not in allowed:
        raise CheckpointError(f"{where}: {label or name} {value!r}, only {', '.join(allowed)}")
    return value


def boolean(raw: Mapping[str, Any], name: str, where: str, default: bool, label: str = "") -> bool:
    """``raw[name]`` (``default`` where absent or null); ``CheckpointError`` naming
    ``where`` and the key (``label``, default ``name``) unless it is true or false (the
    string ``"false"`` is not)."""
    value = _value(raw, name, None, where)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise CheckpointError(f"{where}: {label or name} must be true or false, got {value!r}")
    return value


def an_object(raw: Mapping[str, Any], name: str, where: str, label: str = "") -> dict | None:
    """``raw[name]``, a JSON object, or None where absent or null; ``CheckpointError``
    naming ``where`` and the key (``label``, default ``name``) for anything else."""
    value = _value(raw, name, None, where)
    if value is not None and not isinstance(value, dict):
        raise CheckpointError(f"{where}: {label or name} must be an object, got {value!r}")
    return value


def names(raw: Mapping[str, Any], name: str, where: str) -> list[str]:
    """``raw[name]``, a list of strings (empty where absent or null); ``CheckpointError``
    naming ``where`` and the key for anything else (``architectures: [5]``)."""
    value = _value(raw, name, None, where)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CheckpointError(f"{where}: {name} must be a list of names, got {value!r}")
    return value


def model_type_of(raw: Mapping[str, Any], where: str) -> str | None:
    """``raw``'s ``model_type``, None where absent; ``CheckpointError`` naming ``where``
    unless it is a string (a list or an object is no family's key)."""
    kind = _value(raw, "model_type", None, where)
    if kind is not None and not isinstance(kind, str):
        raise CheckpointError(f"{where}: model_type must be a name, got {kind!r}")
    return kind


def check_layers(count: int, where: str, field: str = "num_hidden_layers") -> None:
    """Before a parser builds anything per layer: ``CheckpointError`` naming ``where`` and
    ``field`` when ``count`` layers' descriptions (``LAYER_RECORD_BYTES`` each) take more
    than ``attnlab.core.machine.memory_budget_bytes()``: ``field`` 10^9 is one line at
    once, not tuples built until memory fills."""
    need, budget = count * LAYER_RECORD_BYTES, memory_budget_bytes()
    if need > budget:
        raise CheckpointError(
            f"{where}: {field} is {count}, whose descriptions alone take {in_bytes(need)}, more "
            f"than the {in_bytes(budget)} a run may use"
        )


def model_type(directory: Path | str) -> str | None:
    """``config.json``'s ``model_type`` in ``directory`` (``model_type_of``), None where the
    file is missing (the family's loader then names it); ``CheckpointError`` where it
    cannot be looked at or read, or the key is not a name."""
    path = Path(directory) / CONFIG
    return model_type_of(read_json(path), str(path)) if is_file(path) else None

"""Ways a committed CSV or JSON sidecar gets damaged, for the fault-injection tests of
``make_report``, ``plot_figures`` and ``verify`` (issue 55: every one is one line on stderr
naming the file, exit status 2, no traceback, nothing written).

Each damage takes the file's bytes and returns them damaged; ``copy_damaged`` copies a
committed file into a folder and damages it there. The CSV damages edit the text, so they
need a CSV without quoted fields (01, 02, 03 and 06 are).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

Damage = Callable[[bytes], bytes]


def _lines(data: bytes) -> list[str]:
    text = data.decode("utf-8")
    assert '"' not in text, "the CSV damages edit unquoted CSVs only"
    return text.splitlines(keepends=True)


def cut_mid_line(data: bytes) -> bytes:
    """The file cut off halfway through its last line (no newline at the end)."""
    *head, last = _lines(data)
    return "".join([*head, last[: len(last) // 2]]).encode()


def cut_then_newline(data: bytes) -> bytes:
    """Cut off halfway through its fourth line, with a newline after: a last line with fewer
    fields than the header (a copy cut short, then a line break appended)."""
    lines = _lines(data)
    return "".join([*lines[:3], lines[3][: len(lines[3]) // 2], "\n"]).encode()


def text_in(column: str) -> Damage:
    """The first row's value of ``column`` replaced by text."""

    def damage(data: bytes) -> bytes:
        header, first, *rest = _lines(data)
        cells = first.rstrip("\n").split(",")
        cells[header.rstrip("\n").split(",").index(column)] = "oops"
        return "".join([header, ",".join(cells) + "\n", *rest]).encode()

    damage.__name__ = f"text_in_{column}"
    return damage


def duplicated_row(data: bytes) -> bytes:
    """The first row once more at the end."""
    lines = _lines(data)
    return "".join([*lines, lines[1]]).encode()


def without_last_column(data: bytes) -> bytes:
    """Every line without its last field."""
    return "".join(line.rstrip("\n").rsplit(",", 1)[0] + "\n" for line in _lines(data)).encode()


def emptied(data: bytes) -> bytes:
    """No bytes at all."""
    return b""


def not_json(data: bytes) -> bytes:
    """The first half of the sidecar: not JSON."""
    return data[: len(data) // 2]


def not_an_object(data: bytes) -> bytes:
    """A JSON list of the sidecar's keys."""
    return json.dumps(sorted(json.loads(data))).encode()


def lacking(*keys: str) -> Damage:
    """The sidecar without ``keys``."""

    def damage(data: bytes) -> bytes:
        meta = json.loads(data)
        return json.dumps({k: v for k, v in meta.items() if k not in keys}).encode()

    damage.__name__ = f"lacking_{'_'.join(keys)}"
    return damage


#: A CSV's damages: (name, damage).
CSV_DAMAGES: dict[str, Damage] = {
    "cut mid-line": cut_mid_line,
    "cut, then a newline": cut_then_newline,
    "empty": emptied,
    "a column lacking": without_last_column,
}
#: A sidecar's damages.
SIDECAR_DAMAGES: dict[str, Damage] = {
    "not JSON": not_json,
    "not an object": not_an_object,
    "lacking flags": lacking("flags"),
    "lacking wall_time_s and git_commit": lacking("wall_time_s", "git_commit"),
    "empty": emptied,
}


def copy_damaged(source: Path, into: Path, damage: Damage | None = None) -> Path:
    """Copy ``source`` into folder ``into``, damaged by ``damage`` (if given); the copy."""
    target = into / source.name
    if damage is None:
        shutil.copy(source, target)
    else:
        target.write_bytes(damage(source.read_bytes()))
    return target


def listing(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too) with its bytes: what a run left."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    } | {str(p.relative_to(folder)) + "/": b"" for p in folder.rglob("*") if p.is_dir()}


def assert_one_line_naming(err: str, path: Path, command: str) -> None:
    """``err`` is one line, no traceback, naming ``path`` and ``command``."""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err, err
    assert str(path) in err, err
    assert command in err, err

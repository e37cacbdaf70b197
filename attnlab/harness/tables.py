"""Checked access to the result CSVs, and the report's formatting helpers.

Figures and report sections read the CSVs only through ``Tables``: a missing or malformed
CSV is reported with the command that makes it (``made_by``, which the caller takes from
the registry of studies), never as a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.harness.errors import DataError
from attnlab.harness.io import read_csv_checked, require_columns, sidecar_path


class Tables:
    """Lazy, checked access to the result CSVs of one results directory."""

    def __init__(self, results_dir: Path, made_by: Callable[[str], str]):
        self.results_dir = Path(results_dir)
        self._made_by = made_by
        self._frames: dict[str, pd.DataFrame] = {}
        self._flags: dict[str, dict] = {}
        self._parent: dict[str, str] = {}  # a subset's name -> its CSV's

    def made_by(self, name: str) -> str:
        """The command that makes CSV ``name`` (a subset's: its CSV's)."""
        return self._made_by(self._parent.get(name, name))

    def get(self, name: str, columns: Sequence[str] = ()) -> pd.DataFrame:
        """The CSV ``name``, which must hold ``columns`` (else a one-line DataError)."""
        if name not in self._frames:
            path = self.results_dir / name
            self._frames[name] = read_csv_checked(path, columns, self.made_by(name))
        path = self.results_dir / self._parent.get(name, name)
        require_columns(self._frames[name], columns, path, self.made_by(name))
        return self._frames[name]

    def has(self, name: str) -> bool:
        """Whether CSV ``name`` exists in the results directory (read or not)."""
        return name in self._frames or (self.results_dir / self._parent.get(name, name)).is_file()

    def flags(self, name: str) -> dict:
        """The flags recorded in the JSON sidecar of CSV ``name`` (empty if it has none);
        read once, like the CSVs."""
        if name not in self._flags:
            path = sidecar_path(self.results_dir / name)
            meta = json.loads(path.read_text()) if path.is_file() else {}
            self._flags[name] = meta.get("flags", {})
        return self._flags[name]

    def subset(self, name: str, column: str, value: object) -> str:
        """The rows of CSV ``name`` whose ``column`` equals ``value``, registered as a table
        of their own; returns its name, ``name[column=value]``, for ``get`` and ``flags``
        (the CSV's flags). A subset with no rows is a DataError like an empty CSV's."""
        key = f"{name}[{column}={value}]"
        if key not in self._frames:
            rows = select(self.get(name, [column]), {column: value}).reset_index(drop=True)
            if rows.empty:
                raise DataError(
                    f"{self.results_dir / name} has no rows with {column} {value}; "
                    f"run `{self.made_by(name)}` to make it"
                )
            self._frames[key], self._flags[key] = rows, self.flags(name)
            self._parent[key] = name
        return key


def select(frame: pd.DataFrame, where: dict[str, object]) -> pd.DataFrame:
    """The rows of ``frame`` whose columns equal every value of ``where``."""
    mask = np.ones(len(frame), bool)
    for column, value in where.items():
        mask &= (frame[column] == value).to_numpy()
    return frame[mask]


def seeds_text(n: int) -> str:
    """``"1 seed"``, ``"5 seeds"``."""
    return f"{n} seed" + ("" if n == 1 else "s")


def fmt(x: float, digits: int = 4) -> str:
    """``x`` with ``digits`` significant digits."""
    return f"{x:.{digits}g}"


def num(x: float, digits: int = 3, missing: str = "never") -> str:
    """A number with ``digits`` significant digits; NaN reads ``missing``."""
    return missing if not np.isfinite(x) else f"{x:.{digits}g}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table; ``|`` inside a cell is escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def provenance(
    results_dir: Path,
    names: Sequence[str],
    made_by: Callable[[str], str] | None = None,
) -> str:
    """One line per CSV: commit, backend and device count, wall time from its sidecar; a
    CSV without a sidecar is listed as such, with the command that makes it
    (``made_by``), never left out."""
    lines = []
    for name in names:
        path = sidecar_path(Path(results_dir) / name)
        if path.is_file():
            meta = json.loads(path.read_text())
            line = (
                f"- `{name}`: commit `{meta.get('git_commit')}`, {meta.get('jax_backend')} "
                f"x{meta.get('device_count')}, {meta.get('wall_time_s')} s"
            )
        else:
            command = f"; `{made_by(name)}` makes it with one" if made_by is not None else ""
            line = f"- `{name}`: no sidecar `{path.name}`, so how it was made is unknown{command}"
        lines.append(line)
    return "\n".join(lines)

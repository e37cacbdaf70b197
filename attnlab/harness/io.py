"""Atomic CSV writes, JSON provenance sidecars, and checked CSV reads.

Every CSV ``results/NAME.csv`` has a sidecar ``results/NAME.json`` recording how it was made:
the flags, the seed, package versions, the JAX backend and devices, the git commit and the
wall time. Files are written to a temporary name in the same directory and renamed, so an
interrupted run never leaves a half-written file behind.

A CSV named ``NAME.csv.xz`` is written xz-compressed (``compact``; pandas reads it as it
reads a CSV, ``xz -dk`` gives the plain file): the per-step curves whose members repeat one
training run, which xz's window stores once. Its sidecar is ``NAME.json`` like any CSV's.
"""

from __future__ import annotations

import csv
import io
import json
import lzma
import os
import platform
import subprocess
import tempfile
import warnings
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnlab.harness.errors import DataError

#: Floats are written with 8 significant digits: float32 precision, and byte-identical
#: output for identical inputs.
FLOAT_FORMAT = "%.8g"
#: ``git status`` pathspecs of the code: the whole tree but the generated outputs (README.md
#: among them: ``make_report`` writes its times block, so ``make reproduce`` modifies it).
OUTPUT_PATHSPECS = (":(top,exclude)results", ":(top,exclude)figures", ":(top,exclude)README.md")
PACKAGES = ("attnlab", "jax", "jaxlib", "flax", "optax", "numpy", "pandas", "matplotlib")
#: The suffix of a compressed CSV (see ``compact``).
COMPRESSED_CSV = ".csv.xz"
#: The keys of a sidecar that the report reads, each with the types its value may have
#: (``read_sidecar_checked``); ``provenance`` writes them all.
SIDECAR_KEYS: dict[str, tuple[type, ...]] = {
    "flags": (dict,),
    "wall_time_s": (int, float),
    "git_commit": (str, type(None)),
    "jax_backend": (str,),
    "device_count": (int,),
}
#: The key of a sidecar naming the CSV it describes (its file name), which a reader checks
#: (``read_sidecar_checked``: another CSV's sidecar copied in is refused). Sidecars written
#: before it was recorded lack it.
SIDECAR_CSV = "csv"
_JSON_TYPES = {dict: "an object", list: "a list", str: "text", int: "a number",
               float: "a number", bool: "true or false", type(None): "null"}  # fmt: skip


class MalformedError(DataError):
    """A file a stage needs that is there but cannot be used as it is: cut short, not a CSV
    or not JSON, lacking columns, keys or rows, holding text where numbers are. Unlike an
    absent CSV, which the report and the figures leave out, it stops them (exit status 2)."""


def is_csv(path: Path | str) -> bool:
    """Whether ``path`` names a result CSV, plain (``.csv``) or compressed (``.csv.xz``)."""
    return str(path).endswith((".csv", COMPRESSED_CSV))


def compact(data: bytes) -> bytes:
    """The bytes of a ``.csv.xz``: ``data`` xz-compressed at preset 9 (a 64 MiB window, so
    a curve repeated a few MB later is stored once), one stream with a CRC64 check; a
    deterministic function of ``data``, so the same CSV gives the same bytes."""
    return lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=9)


def open_csv_text(path: Path):
    """A CSV opened for reading as text, decompressing a ``.csv.xz``."""
    if str(path).endswith(COMPRESSED_CSV):
        return lzma.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and a rename."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory and a rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be read
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """Write ``frame`` atomically with the suite's fixed float format (``compact``ed where
    ``path`` ends in ``.csv.xz``)."""
    data = frame.to_csv(index=False, float_format=FLOAT_FORMAT, lineterminator="\n").encode()
    atomic_write_bytes(path, compact(data) if str(path).endswith(COMPRESSED_CSV) else data)


def _git_commit(root: Path | None = None) -> str | None:
    """``HEAD`` of the git work tree at ``root`` (default: this package's directory), with
    ``-dirty`` if a tracked file outside results/, figures/ and README.md is modified; None if git
    or the repository is unavailable."""
    cwd = Path(__file__).resolve().parent if root is None else Path(root)
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=cwd,
        )
        # Regenerating the committed outputs modifies them; only a change to the code
        # (anything outside results/, figures/ and README.md) makes the run "-dirty".
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", *OUTPUT_PATHSPECS],
            capture_output=True,
            text=True,
            check=True,
            cwd=cwd,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def provenance(flags: Mapping[str, Any], wall_time_s: float) -> dict[str, Any]:
    """The sidecar's content: flags, whether they are the committed defaults (the flag
    ``made_with_defaults`` of a run's ``RunContext.sidecar_flags``, None where unknown),
    seed, versions, backend, devices, commit, wall time."""
    import jax

    meta = ("made_with_defaults",)
    return {
        "flags": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in flags.items() if k not in meta
        },
        "made_with_defaults": flags.get("made_with_defaults"),
        "seed": flags.get("seed"),
        "versions": _versions(),
        "jax_backend": jax.default_backend(),
        "device_count": jax.device_count(),
        "devices": [str(d) for d in jax.devices()],
        "process_count": jax.process_count(),
        "git_commit": _git_commit(),
        "wall_time_s": round(wall_time_s, 3),
        "platform": platform.platform(),
    }


def sidecar_path(csv_path: Path) -> Path:
    """``results/NAME.csv`` (or ``NAME.csv.xz``) -> ``results/NAME.json``."""
    path = Path(csv_path)
    return path.with_name(path.name.removesuffix(".xz").removesuffix(".csv") + ".json")


def write_sidecar(csv_path: Path, flags: Mapping[str, Any], wall_time_s: float) -> None:
    """Write the provenance sidecar of ``csv_path`` atomically, naming its CSV
    (``SIDECAR_CSV``)."""
    meta = {**provenance(flags, wall_time_s), SIDECAR_CSV: Path(csv_path).name}
    text = json.dumps(meta, indent=2, sort_keys=True) + "\n"
    atomic_write_text(sidecar_path(csv_path), text)


def require_columns(frame: pd.DataFrame, columns: Iterable[str], path: Path, made_by: str) -> None:
    """Raise a DataError naming ``path`` and ``made_by`` if ``frame`` lacks any of ``columns``."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise MalformedError(
            f"{path} lacks columns {', '.join(missing)}; run `{made_by}` to make it"
        )


def _short_line(text: str) -> tuple[int, int, int] | None:
    """The first line of CSV ``text`` with fewer fields than its header: (line number,
    its fields, the header's); None when every line has them all. A line with more fields
    fails in pandas."""
    if '"' in text:  # quoted fields may hold commas and newlines: the csv module counts
        reader = csv.reader(io.StringIO(text))
        header = len(next(reader, []))
        for row in reader:
            if len(row) < header:
                return reader.line_num, len(row), header
        return None
    lines = text.split("\n")[:-1]  # the text ends in a newline
    header = lines[0].count(",")
    for number, line in enumerate(lines[1:], start=2):
        if line.count(",") < header:
            return number, line.count(",") + 1 if line else 0, header + 1
    return None


def read_csv_checked(path: Path, columns: Iterable[str], made_by: str) -> pd.DataFrame:
    """Read a CSV that must exist and hold ``columns``; else raise a DataError naming the
    file and ``made_by``, the command that makes it (a ``MalformedError`` when the file is
    there: empty, cut short (its last line without its newline, or any line with fewer
    fields than the header), not a CSV, lacking columns or rows)."""
    path = Path(path)
    hint = f"run `{made_by}` to make it"
    if not path.is_file():
        raise DataError(f"{path} is missing; {hint}")
    try:
        with open_csv_text(path) as f:
            text = f.read()
        if not text:
            raise MalformedError(f"{path} is empty; {hint}")
        if not text.endswith("\n"):
            raise MalformedError(f"{path} is cut short (its last line has no newline); {hint}")
        short = _short_line(text) if "\n" in text[:-1] else None
        if short is not None:
            line, fields, header = short
            raise MalformedError(
                f"{path} is cut short or malformed (line {line} has {fields} fields, the "
                f"header {header}); {hint}"
            )
        with warnings.catch_warnings():
            # A row with more fields than the header must fail, not shift into the index.
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(io.StringIO(text), index_col=False)
    except (
        pd.errors.ParserError,
        pd.errors.ParserWarning,
        pd.errors.EmptyDataError,
        UnicodeDecodeError,
        csv.Error,  # e.g. a NUL byte
        lzma.LZMAError,  # a damaged .csv.xz
        EOFError,  # a truncated one
    ) as err:
        reason = " ".join(str(err).split())  # one line, whatever pandas says
        raise MalformedError(f"{path} is malformed ({reason}); {hint}") from None
    require_columns(frame, columns, path, made_by)
    if frame.empty:
        raise MalformedError(f"{path} has no rows; {hint}")
    return frame


def require_numbers(
    frame: pd.DataFrame,
    path: Path,
    made_by: str,
    numeric: Sequence[str] = (),
    mixed: Sequence[str] = (),
) -> None:
    """A ``MalformedError`` naming ``path`` and ``made_by`` where a column of ``frame``
    holds text where numbers are: a column of ``numeric`` that is not all numbers, or any
    column but those of ``mixed`` whose values are partly numbers and partly text."""
    for column in frame.columns:
        values = frame[column]
        if pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            continue
        if column in mixed and column not in numeric:
            continue
        present = values.dropna()
        text = pd.to_numeric(present.astype(str), errors="coerce").isna()
        if text.any() and (column in numeric or not text.all()):
            first = int(text.to_numpy().argmax())
            row = present.index[first]  # read_csv numbers the rows from 0, after the header
            line = f" on line {row + 2}" if isinstance(row, int | np.integer) else ""
            raise MalformedError(
                f"{path} is malformed (column {column} holds text where numbers are: "
                f"{str(present.iloc[first])[:40]!r}{line}); run `{made_by}` to make it"
            )


def require_unique_keys(frame: pd.DataFrame, keys: Sequence[str], path: Path, made_by: str) -> None:
    """A ``MalformedError`` naming ``path`` and ``made_by`` where two rows of ``frame`` have
    the same values in every column of ``keys`` (a row written twice)."""
    keys = [k for k in keys if k in frame.columns]
    duplicated = frame.duplicated(keys).to_numpy() if keys else np.zeros(0, bool)
    if duplicated.any():
        row, count = int(duplicated.argmax()), int(duplicated.sum())
        first = ", ".join(f"{k}={frame[k].iloc[row]}" for k in keys)
        more = f"; {count} such rows" if count > 1 else ""
        raise MalformedError(
            f"{path} is malformed (line {row + 2} repeats the keys of an earlier row, "
            f"{first}{more}); run `{made_by}` to make it"
        )


def read_sidecar_checked(
    path: Path, made_by: str, keys: Mapping[str, tuple[type, ...]] = SIDECAR_KEYS
) -> dict[str, Any]:
    """The JSON sidecar at ``path``, which must exist and be a JSON object holding ``keys``
    (key -> the types its value may have) and, where it names its CSV (``SIDECAR_CSV``),
    name one whose sidecar ``path`` is (not another's copied in), else a DataError naming
    the file and ``made_by``, the command that makes it (a ``MalformedError`` when the
    file is there)."""
    path = Path(path)
    hint = f"run `{made_by}` to make it"
    if not path.is_file():
        raise DataError(f"{path} is missing; {hint}")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        reason = " ".join(str(err).split())
        raise MalformedError(f"{path} is not JSON ({reason}); {hint}") from None
    if not isinstance(meta, dict):
        raise MalformedError(f"{path} is not a JSON object; {hint}")
    missing = [key for key in keys if key not in meta]
    if missing:
        raise MalformedError(f"{path} lacks keys {', '.join(missing)}; {hint}")
    for key, types in keys.items():
        value = meta[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            wanted = " or ".join(dict.fromkeys(_JSON_TYPES.get(t, t.__name__) for t in types))
            given = _JSON_TYPES.get(type(value), type(value).__name__)
            raise MalformedError(f"{path} holds {given} as {key}, not {wanted}; {hint}")
    named = meta.get(SIDECAR_CSV)
    if named is not None and not (
        isinstance(named, str) and is_csv(named) and "/" not in named
        and sidecar_path(path.with_name(named)) == path
    ):  # fmt: skip
        raise MalformedError(f"{path} is the sidecar of {named!r}, not of its own CSV; {hint}")
    return meta


def write_result(
    frame: pd.DataFrame, csv_path: Path, flags: Mapping[str, Any], wall_time_s: float
) -> None:
    """Write a result CSV and its provenance sidecar, each atomically."""
    write_csv(frame, csv_path)
    write_sidecar(csv_path, flags, wall_time_s)


def write_results(
    frames: Mapping[str, pd.DataFrame | None],
    folder: Path,
    flags: Mapping[str, Any],
    wall_time_s: float,
) -> None:
    """``write_result`` of each frame of ``frames`` (CSV name -> frame; None: not made) into
    ``folder``, with the same sidecar ``flags`` and ``wall_time_s``."""
    for name, frame in frames.items():
        if frame is not None:
            write_result(frame, folder / name, flags, wall_time_s)

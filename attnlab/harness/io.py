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

import json
import lzma
import os
import platform
import subprocess
import tempfile
import warnings
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from attnlab.harness.errors import DataError

#: Floats are written with 8 significant digits: float32 precision, and byte-identical
#: output for identical inputs.
FLOAT_FORMAT = "%.8g"
#: ``git status`` pathspecs of the code: the whole tree but the generated outputs.
OUTPUT_PATHSPECS = (":(top,exclude)results", ":(top,exclude)figures")
PACKAGES = ("attnlab", "jax", "jaxlib", "flax", "optax", "numpy", "pandas", "matplotlib")
#: The suffix of a compressed CSV (see ``compact``).
COMPRESSED_CSV = ".csv.xz"


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
    ``-dirty`` if a tracked file outside results/ and figures/ is modified; None if git
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
        # (anything outside results/ and figures/) makes the run "-dirty".
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
    """The sidecar's content: flags, whether they are the committed defaults (``cli``'s
    ``made_with_defaults``, None where unknown), seed, versions, backend, devices, commit,
    wall time."""
    import jax

    meta = ("made_with_defaults", "run_folder", "out_dir_given", "written")
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
    """Write the provenance sidecar of ``csv_path`` atomically."""
    text = json.dumps(provenance(flags, wall_time_s), indent=2, sort_keys=True) + "\n"
    atomic_write_text(sidecar_path(csv_path), text)


def require_columns(frame: pd.DataFrame, columns: Iterable[str], path: Path, made_by: str) -> None:
    """Raise a DataError naming ``path`` and ``made_by`` if ``frame`` lacks any of ``columns``."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise DataError(f"{path} lacks columns {', '.join(missing)}; run `{made_by}` to make it")


def read_csv_checked(path: Path, columns: Iterable[str], made_by: str) -> pd.DataFrame:
    """Read a CSV that must exist and hold ``columns``; else raise a DataError naming the
    file and ``made_by``, the command that makes it."""
    path = Path(path)
    hint = f"run `{made_by}` to make it"
    if not path.is_file():
        raise DataError(f"{path} is missing; {hint}")
    try:
        with warnings.catch_warnings():
            # A row with more fields than the header must fail, not shift into the index.
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(path, index_col=False)
    except (
        pd.errors.ParserError,
        pd.errors.ParserWarning,
        pd.errors.EmptyDataError,
        UnicodeDecodeError,
        lzma.LZMAError,  # a damaged .csv.xz
        EOFError,  # a truncated one
    ) as err:
        reason = " ".join(str(err).split())  # one line, whatever pandas says
        raise DataError(f"{path} is malformed ({reason}); {hint}") from None
    require_columns(frame, columns, path, made_by)
    if frame.empty:
        raise DataError(f"{path} has no rows; {hint}")
    return frame


def write_result(
    frame: pd.DataFrame, csv_path: Path, flags: Mapping[str, Any], wall_time_s: float
) -> None:
    """Write a result CSV and its provenance sidecar, each atomically."""
    write_csv(frame, csv_path)
    write_sidecar(csv_path, flags, wall_time_s)

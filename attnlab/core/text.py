"""Text the suite reads offline: CPython's own prose (the default of experiments 13 and 14)
or a user's file, with its checksum; and bytes as tokens for the byte-level language model.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
import stat
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


class NotRegularFileError(ValueError):
    """A text path that is no regular file: a FIFO (reading it waits for a writer), a device
    such as ``/dev/zero`` (it never ends) or a folder."""


def read_text(path: Path | None, limit: int | None = None) -> TextSource:
    """``path``'s UTF-8 text, or the standard library's prose (``stdlib_prose``) if None.
    Of a file longer than ``limit`` bytes (None: no limit) only the first ``limit`` are read
    (less a character they cut), its source then saying so and its checksum that of the
    text read. ``NotRegularFileError`` (a ``ValueError``, looked at before a byte is read,
    so a FIFO never blocks) for a path that is not a regular file; ``OSError`` where it
    cannot be opened, ``UnicodeDecodeError`` where it is not UTF-8."""
    if path is None:
        return TextSource.of(stdlib_prose(), STDLIB_SOURCE)
    # O_NONBLOCK: opening a FIFO for reading would wait for a writer; a regular file ignores it
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise NotRegularFileError(f"{path} is {_kind(mode)}, not a regular file")
    with os.fdopen(descriptor, "rb") as handle:
        data = handle.read() if limit is None else handle.read(limit + 1)
    cut = limit is not None and len(data) > limit
    source = f"{path} (its first {limit} bytes)" if cut else str(path)
    # Decoded from the bytes, not read in text mode, so that line endings stay as in the file
    # and the checksum is the file's own; a character cut at the limit is left out.
    text = codecs.getincrementaldecoder("utf-8")().decode(data[:limit], final=not cut)
    return TextSource.of(text, source)


def _kind(mode: int) -> str:
    """What a file of ``mode`` (``os.stat``'s) that is not a regular file is, in words."""
    for test, words in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISDIR, "a folder"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISSOCK, "a socket")):  # fmt: skip
        if test(mode):
            return words
    return "no regular file"


def byte_tokens(text: str) -> np.ndarray:
    """``text``'s UTF-8 bytes as tokens ``[n]`` (uint8; the vocabulary is the 256 bytes)."""
    return np.frombuffer(text.encode("utf-8"), np.uint8).copy()

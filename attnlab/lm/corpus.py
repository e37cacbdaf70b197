"""A long text the suite reads offline: the Python standard library's own source.

Experiment 14's prose (``attnlab.core.text.stdlib_prose``, 126 kB) would be read some 40
times by a run of 5000 steps of 16 windows of 65 bytes (5.2 MB); its held-out loss would
then measure memorising. The standard library's top-level modules (``Lib/*.py``: code,
comments and docstrings, 4.7 MB in CPython 3.11) are read about once by such a run. Their
bytes depend on the Python that runs the suite: the sidecars record the source, with its
version, and the SHA-256.
"""

from __future__ import annotations

import platform
import sysconfig
from pathlib import Path

from attnlab.core.text import TextSource, read_text


def stdlib_files() -> list[Path]:
    """The standard library's top-level modules, ``<stdlib>/*.py``, sorted by name."""
    return sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def stdlib_source() -> TextSource:
    """The files of ``stdlib_files`` decoded as UTF-8, each followed by one newline, joined
    in order; its source names the Python version and the number of files."""
    files = stdlib_files()
    text = "".join(read_text(path).text + "\n" for path in files)
    name = f"CPython {platform.python_version()} standard library, Lib/*.py ({len(files)} files)"
    return TextSource.of(text, name)

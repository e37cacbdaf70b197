"""attnlab.core.text: bytes as tokens round-trip to UTF-8, the default text is the standard
library's prose with its SHA-256, a user's file is read as UTF-8 with its own, no further
than a limit, and what is no regular file (a FIFO, /dev/zero, a folder) is refused before a
byte is read."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
from events import fifo_with_a_writer

from attnlab.core.text import STDLIB_SOURCE, byte_tokens, read_text, stdlib_prose

#: ASCII, two-byte (é), three-byte (日, ✓) and four-byte (𝄞) UTF-8 characters.
MIXED = "héllo, 日本 ✓ 𝄞\n"


def test_byte_tokens_round_trip_utf8():
    """Tokens are the UTF-8 bytes, one per byte (not one per character), as uint8."""
    tokens = byte_tokens(MIXED)
    assert tokens.dtype == np.uint8
    assert tokens.shape == (len(MIXED.encode("utf-8")),)
    assert len(tokens) > len(MIXED)  # multi-byte characters are several tokens
    assert tokens.tobytes().decode("utf-8") == MIXED
    assert list(byte_tokens("AZ")) == [65, 90]
    assert byte_tokens("").shape == (0,)


def test_byte_tokens_are_a_writable_copy():
    """The array owns its bytes (``np.frombuffer`` alone would be read-only)."""
    tokens = byte_tokens("abc")
    tokens[0] = 0
    assert byte_tokens("abc")[0] == ord("a")


def test_read_text_default_is_stdlib_prose_with_its_sha256():
    """``read_text(None)``: the prose of ``pydoc_data.topics``, named, with the SHA-256 of
    its UTF-8 text; every paragraph unindented, of 20 words or more, ending with a full
    stop, none repeated (``stdlib_prose``'s contract)."""
    source = read_text(None)
    assert source.text == stdlib_prose()
    assert source.source == STDLIB_SOURCE
    assert source.sha256 == hashlib.sha256(source.text.encode("utf-8")).hexdigest()
    paragraphs = source.text.split("\n\n")
    assert len(paragraphs) > 10
    assert len(set(paragraphs)) == len(paragraphs)
    for paragraph in paragraphs:
        assert "\n" not in paragraph and not paragraph.startswith(" ")
        assert len(paragraph.split()) >= 20 and paragraph.endswith(".")


def test_read_text_reads_a_utf8_file(tmp_path):
    """A file's text, its path as the source and its own checksum; another text, another
    checksum."""
    path = tmp_path / "corpus.txt"
    path.write_bytes(MIXED.encode("utf-8"))
    source = read_text(path)
    assert source.text == MIXED
    assert source.source == str(path)
    assert source.sha256 == hashlib.sha256(MIXED.encode("utf-8")).hexdigest()
    assert source.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()  # LF-only file
    path.write_bytes(b"other")
    assert read_text(path).sha256 != source.sha256


def test_read_text_keeps_crlf_line_endings_and_checksums_the_file(tmp_path):
    """Read in text mode, ``a\r\nb`` would come back as ``a\nb`` and its checksum would not
    be the file's: the bytes are decoded as they are."""
    path = tmp_path / "crlf.txt"
    path.write_bytes(b"a\r\nb")
    source = read_text(path)
    assert source.text == "a\r\nb"
    assert source.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_read_text_reads_no_further_than_its_limit(tmp_path):
    """Of a longer file, the first ``limit`` bytes less a character they cut (``é`` is two
    bytes: 5 bytes hold two and half of one), the source saying so, the checksum of what was
    read; a file within the limit is read whole, and a cut character at its real end is
    still an error."""
    path = tmp_path / "accents.txt"
    path.write_bytes("é".encode() * 10)
    source = read_text(path, limit=5)
    assert source.text == "éé"
    assert source.source == f"{path} (its first 5 bytes)"
    assert source.sha256 == hashlib.sha256("éé".encode()).hexdigest()
    assert read_text(path, limit=20) == read_text(path)
    assert read_text(path, limit=20).source == str(path)
    path.write_bytes("é".encode() * 10 + b"\xc3")
    with pytest.raises(UnicodeDecodeError):
        read_text(path, limit=100)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_a_device_or_a_folder_is_refused_before_reading(tmp_path):
    """A FIFO would wait for a writer, ``/dev/zero`` never ends (it filled memory until a
    MemoryError): each is a ``ValueError`` naming the path and what it is, before a byte is
    read, whatever the limit."""
    fifo = tmp_path / "fifo"
    with fifo_with_a_writer(fifo), pytest.raises(ValueError, match="is a FIFO, not a regular"):
        read_text(fifo)
    with pytest.raises(ValueError, match="^/dev/zero is a character device, not a regular"):
        read_text(Path("/dev/zero"), limit=2**20)
    with pytest.raises(ValueError, match="is a folder, not a regular file"):
        read_text(tmp_path, limit=2**20)

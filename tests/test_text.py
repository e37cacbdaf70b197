"""attnlab.core.text: bytes as tokens round-trip to UTF-8, the default text is the standard
library's prose with its SHA-256, and a user's file is read as UTF-8 with its own."""

from __future__ import annotations

import hashlib

import numpy as np

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

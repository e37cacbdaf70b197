"""attnlab.lm.corpus: the long run's text is the standard library's top-level modules,
in a fixed order, large enough that 5000 steps of 16 x 65 bytes read it about once."""

from __future__ import annotations

import hashlib

from attnlab.lm.corpus import stdlib_files, stdlib_source


def test_the_standard_library_source_is_read_whole_in_order_with_its_checksum():
    files = stdlib_files()
    assert files == sorted(files) and all(f.suffix == ".py" for f in files)
    source = stdlib_source()
    assert source.text.startswith(files[0].read_bytes().decode("utf-8"))
    assert source.sha256 == hashlib.sha256(source.text.encode("utf-8")).hexdigest()
    assert f"({len(files)} files)" in source.source
    assert len(source.text.encode("utf-8")) > 0.8 * 5000 * 16 * 65  # read about once
    assert stdlib_source() == source

"""attnlab.models.gemma3_gguf: the packaged Gemma 3 270M assembled and checked by its
SHA-256, or one line and exit 2 (the package missing, bytes not the model's)."""

from __future__ import annotations

import sys

import pytest

from attnlab.models import gemma3_gguf
from attnlab.models.files import CheckpointError


def test_without_the_package_it_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gemma3_gguf, "installed", lambda: False)
    with pytest.raises(CheckpointError, match=r"is not installed \(make gemma\)"):
        gemma3_gguf.assemble(tmp_path / "g.gguf")
    assert gemma3_gguf.main([str(tmp_path / "g.gguf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "make gemma" in err
    assert gemma3_gguf.main([]) == 2  # usage: one PATH


def test_bytes_that_are_not_the_model_are_refused_and_nothing_is_left(tmp_path, monkeypatch):
    """A package whose parts assemble to other bytes: the file is not put in place, and its
    partial copy is removed."""

    class Package:
        @staticmethod
        def assemble(path, overwrite):
            path.write_bytes(b"not the model")

    monkeypatch.setattr(gemma3_gguf, "installed", lambda: True)
    monkeypatch.setitem(sys.modules, gemma3_gguf.PACKAGE, Package)
    target = tmp_path / "g.gguf"
    with pytest.raises(CheckpointError, match="not Gemma 3 270M's"):
        gemma3_gguf.assemble(target)
    assert list(tmp_path.iterdir()) == []

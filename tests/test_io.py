"""Atomic CSV writes, provenance sidecars and checked reads (attnlab.harness.io)."""

from __future__ import annotations

import json
import lzma
import os
import shutil
import stat
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnlab.harness import io
from attnlab.harness.io import (
    DataError,
    MalformedError,
    read_csv_checked,
    read_sidecar_checked,
    sidecar_path,
    write_csv,
    write_sidecar,
)

COLUMNS = ["variant", "d_k", "max_weight_mean"]
MADE_BY = "python experiments/02_saturation_sweep.py"
RAGGED = b"variant,d_k,max_weight_mean\nscaled,1,0.5\nunscaled,1,0.5,9,9\n"


def _frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "variant": ["scaled", "unscaled"],
            "d_k": [4, 4],
            "max_weight_mean": np.array([0.21135919, 0.39641065], np.float64),
        }
    )


# --- write_csv ----------------------------------------------------------------------------


def test_write_csv_leaves_only_the_file_and_reads_back(tmp_path):
    path = tmp_path / "table.csv"
    write_csv(_frame(), path)
    assert os.listdir(tmp_path) == ["table.csv"]  # no temporary file left behind
    # Exact: the values have 8 significant digits, which FLOAT_FORMAT writes unrounded.
    pd.testing.assert_frame_equal(pd.read_csv(path), _frame(), check_exact=True)
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[0] == ",".join(COLUMNS)
    assert text.endswith("\n") and "\r" not in text


def test_write_csv_is_byte_identical_for_the_same_frame(tmp_path):
    write_csv(_frame(), tmp_path / "a.csv")
    write_csv(_frame().copy(), tmp_path / "b.csv")
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()


def test_write_csv_uses_eight_significant_digits(tmp_path):
    path = tmp_path / "t.csv"
    write_csv(pd.DataFrame({"x": [1 / 3, 2.0, 1e-12]}), path)
    assert path.read_text().splitlines() == ["x", "0.33333333", "2", "1e-12"]


def test_write_csv_replaces_an_existing_file(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("old\n")
    write_csv(_frame(), path)
    pd.testing.assert_frame_equal(pd.read_csv(path), _frame(), check_exact=True)
    assert os.listdir(tmp_path) == ["t.csv"]


def test_interrupted_write_keeps_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    path.write_text("old\n")

    def fail(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(io.os, "replace", fail)
    with pytest.raises(KeyboardInterrupt):
        write_csv(_frame(), path)
    assert os.listdir(tmp_path) == ["t.csv"]
    assert path.read_text() == "old\n"


def test_written_file_is_readable_by_group_and_others(tmp_path):
    # mkstemp creates 0600 files; a result table is meant to be read by others too.
    umask = os.umask(0)
    os.umask(umask)
    if umask & 0o044:
        pytest.skip("a umask that hides files from group and others")
    path = tmp_path / "t.csv"
    write_csv(_frame(), path)
    mode = stat.S_IMODE(path.stat().st_mode)
    assert mode & 0o644 == 0o644
    assert mode & 0o111 == 0


# --- write_sidecar --------------------------------------------------------------------------


def test_sidecar_path():
    assert sidecar_path(Path("results/02_saturation_sweep.csv")) == Path(
        "results/02_saturation_sweep.json"
    )
    assert sidecar_path(Path("results/09_c.csv.xz")) == Path("results/09_c.json")


# --- compressed CSVs ------------------------------------------------------------------------


def test_a_csv_xz_is_the_compacted_plain_csv_and_reads_back(tmp_path):
    frame = pd.DataFrame({"step": np.arange(3000), "loss": np.linspace(0, 1, 3000)})
    write_csv(frame, tmp_path / "c.csv")
    write_csv(frame, tmp_path / "c.csv.xz")
    plain = (tmp_path / "c.csv").read_bytes()
    packed = (tmp_path / "c.csv.xz").read_bytes()
    assert packed == io.compact(plain) and lzma.decompress(packed) == plain
    assert len(packed) < len(plain)
    pd.testing.assert_frame_equal(
        read_csv_checked(tmp_path / "c.csv.xz", ["step"], "make"),
        read_csv_checked(tmp_path / "c.csv", ["step"], "make"),
    )
    assert io.is_csv(tmp_path / "c.csv.xz") and not io.is_csv(tmp_path / "c.json")


def test_compact_stores_a_repeated_curve_once():
    # Members of one run repeat its curve megabytes apart: within xz's 64 MiB window.
    rng = np.random.default_rng(0)
    block = "".join(f"{x:.8g}\n" for x in rng.standard_normal(30_000)).encode()
    assert len(block) > 2**18  # far beyond gzip's 32 KiB window
    assert len(io.compact(block * 3)) < 1.01 * len(io.compact(block))


@pytest.mark.parametrize("cut", [0.5, 0.99])
def test_read_csv_checked_truncated_xz_is_one_line(tmp_path, cut):
    write_csv(pd.DataFrame({"a": np.arange(1000)}), tmp_path / "c.csv.xz")
    data = (tmp_path / "c.csv.xz").read_bytes()
    (tmp_path / "c.csv.xz").write_bytes(data[: int(cut * len(data))])
    with pytest.raises(DataError, match="is malformed") as err:
        read_csv_checked(tmp_path / "c.csv.xz", ["a"], "make all")
    assert "\n" not in str(err.value)


def test_write_sidecar_content(tmp_path):
    csv = tmp_path / "t.csv"
    flags = {"dk": [1, 4], "seed": 7, "out": csv, "quiet": True, "sampler": "direct"}
    write_sidecar(csv, flags, wall_time_s=1.23456)
    assert os.listdir(tmp_path) == ["t.json"]
    text = (tmp_path / "t.json").read_text()
    assert text.endswith("\n")
    side = json.loads(text)
    for key in (
        "flags",
        "seed",
        "versions",
        "jax_backend",
        "device_count",
        "git_commit",
        "wall_time_s",
    ):
        assert key in side, key
    assert side["flags"] == {
        "dk": [1, 4],
        "seed": 7,
        "out": str(csv),  # paths become strings
        "quiet": True,
        "sampler": "direct",
    }
    assert side["seed"] == 7
    assert side["wall_time_s"] == 1.235  # exact: round(., 3) and JSON's repr round-trip
    for package in ("python", "jax", "jaxlib", "numpy", "pandas", "attnlab"):
        assert isinstance(side["versions"][package], str), package
    assert side["jax_backend"] in {"cpu", "gpu", "tpu", "cuda", "rocm"}
    assert isinstance(side["device_count"], int) and side["device_count"] >= 1
    assert side["git_commit"] is None or isinstance(side["git_commit"], str)


def _git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` with a fixed identity and no user or system configuration."""
    env = dict(
        os.environ,
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
    )
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_commit_dirty_counts_only_code_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)  # no user configuration
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    repo = tmp_path / "repo"
    for sub in ("results", "figures", "attnlab"):
        (repo / sub).mkdir(parents=True)
    (repo / "results" / "t.csv").write_text("x\n1\n")
    (repo / "figures" / "f.svg").write_text("<svg/>\n")
    (repo / "attnlab" / "code.py").write_text("X = 1\n")
    (repo / "README.md").write_text("# r\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    head = _git(repo, "rev-parse", "HEAD")

    assert io._git_commit(repo) == head  # clean
    # Regenerated outputs are not a change to the code.
    (repo / "results" / "t.csv").write_text("x\n2\n")
    (repo / "figures" / "f.svg").write_text("<svg></svg>\n")
    (repo / "README.md").write_text("# r\n\ntimes\n")  # make_report's times block
    assert io._git_commit(repo) == head
    # Nor is an untracked file.
    (repo / "attnlab" / "new.py").write_text("Y = 2\n")
    assert io._git_commit(repo) == head
    # A modified tracked file elsewhere is.
    (repo / "attnlab" / "code.py").write_text("X = 2\n")
    assert io._git_commit(repo) == f"{head}-dirty"


def test_git_commit_outside_a_repository_is_none(tmp_path, monkeypatch):
    # git must not find a repository above tmp_path either.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert io._git_commit(tmp_path) is None


def test_write_sidecar_without_seed(tmp_path):
    csv = tmp_path / "t.csv"
    write_sidecar(csv, {"quiet": False}, wall_time_s=0.0)
    assert json.loads(sidecar_path(csv).read_text())["seed"] is None


# --- read_csv_checked ---------------------------------------------------------------------


def test_read_csv_checked_returns_the_frame(tmp_path):
    path = tmp_path / "t.csv"
    write_csv(_frame(), path)
    frame = read_csv_checked(path, COLUMNS, MADE_BY)
    pd.testing.assert_frame_equal(frame, _frame(), check_exact=True)  # 8 digits: exact
    # Extra columns are fine, and so is a subset being asked for.
    assert list(read_csv_checked(path, ["d_k"], MADE_BY).columns) == COLUMNS


def _assert_data_error(path: Path, columns=COLUMNS) -> str:
    with pytest.raises(DataError) as info:
        read_csv_checked(path, columns, MADE_BY)
    message = str(info.value)
    assert str(path) in message
    assert MADE_BY in message
    return message


def test_read_csv_checked_missing(tmp_path):
    assert "missing" in _assert_data_error(tmp_path / "absent.csv")


def test_read_csv_checked_directory_is_missing(tmp_path):
    (tmp_path / "t.csv").mkdir()
    _assert_data_error(tmp_path / "t.csv")


@pytest.mark.parametrize(
    "content",
    [
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe",  # binary garbage, not UTF-8
        bytes(np.random.default_rng(0).integers(0, 256, 300, dtype=np.uint8)),
        RAGGED,
    ],
    ids=["png", "random", "ragged"],
)
def test_read_csv_checked_malformed(tmp_path, content):
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    _assert_data_error(path)


def test_read_csv_checked_malformed_message_is_one_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(RAGGED)
    assert "\n" not in _assert_data_error(path)


def test_read_csv_checked_wrong_columns(tmp_path):
    path = tmp_path / "t.csv"
    write_csv(pd.DataFrame({"variant": ["scaled"], "dk": [1]}), path)
    message = _assert_data_error(path)
    assert "d_k" in message and "max_weight_mean" in message


@pytest.mark.parametrize("content", [b"", b"\n\n", b"variant,d_k,max_weight_mean\n"])
def test_read_csv_checked_empty(tmp_path, content):
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    _assert_data_error(path)


def test_read_csv_checked_rejects_a_surplus_field_in_every_row(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("variant,d_k,max_weight_mean\nscaled,4,0.2,9\nunscaled,4,0.4,9\n")
    _assert_data_error(path)


def test_read_csv_checked_never_shifts_columns_on_trailing_commas(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("variant,d_k,max_weight_mean\nscaled,4,0.2,\nunscaled,4,0.4,\n")
    frame = read_csv_checked(path, COLUMNS, MADE_BY)
    assert list(frame.variant) == ["scaled", "unscaled"]
    assert list(frame.max_weight_mean) == [0.2, 0.4]  # exact: parsed like the literals


# --- damaged files: cut short, text among numbers, repeated keys, sidecars (issue 55) ----


@pytest.mark.parametrize(
    "content, reason",
    [
        (
            b"variant,d_k,max_weight_mean\nscaled,4,0.2\nunscaled,4,0.",
            "its last line has no newline",
        ),
        (
            b"variant,d_k,max_weight_mean\nscaled,4\nunscaled,4,0.4\n",
            "line 2 has 2 fields, the header 3",
        ),
        (b"variant,d_k,max_weight_mean\nscaled,4,0.2\n\nunscaled,4,0.4\n", "line 3 has 0 fields"),
        (b'variant,d_k,max_weight_mean\n"scaled, a",4\n', "line 2 has 2 fields, the header 3"),
        (b"", "is empty"),
    ],
    ids=["cut mid-line", "a short line", "a blank line", "a short quoted line", "empty"],
)
def test_read_csv_checked_refuses_a_csv_cut_short(tmp_path, content, reason):
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    with pytest.raises(io.MalformedError, match=reason):
        read_csv_checked(path, COLUMNS, MADE_BY)
    assert reason in _assert_data_error(path)


def test_a_missing_csv_is_not_malformed(tmp_path):
    with pytest.raises(DataError) as info:
        read_csv_checked(tmp_path / "absent.csv", COLUMNS, MADE_BY)
    assert not isinstance(info.value, io.MalformedError)


def test_require_numbers(tmp_path):
    frame = pd.DataFrame(
        {"variant": ["scaled", "unscaled"], "d_k": ["4", "oops"], "fill": ["-inf", "min"]}
    )
    path = tmp_path / "t.csv"
    with pytest.raises(
        io.MalformedError, match="column d_k holds text where numbers are: 'oops' on line 3"
    ):
        io.require_numbers(frame, path, MADE_BY, mixed=["fill"])
    io.require_numbers(frame.drop(columns="d_k"), path, MADE_BY, mixed=["fill"])
    with pytest.raises(io.MalformedError, match="column fill"):
        io.require_numbers(frame.drop(columns="d_k"), path, MADE_BY)
    with pytest.raises(io.MalformedError, match="column variant .* 'scaled' on line 2"):
        io.require_numbers(frame[["variant"]], path, MADE_BY, numeric=["variant"])
    io.require_numbers(_frame(), path, MADE_BY, numeric=["d_k", "max_weight_mean"])


def test_require_unique_keys(tmp_path):
    io.require_unique_keys(_frame(), ["variant", "d_k"], tmp_path, MADE_BY)
    io.require_unique_keys(_frame(), ["variant", "absent"], tmp_path, MADE_BY)  # not in it
    twice = pd.concat([_frame(), _frame()], ignore_index=True)
    with pytest.raises(io.MalformedError, match="line 4 repeats the keys of an earlier row, "
                       "variant=scaled, d_k=4; 2 such rows"):  # fmt: skip
        io.require_unique_keys(twice, ["variant", "d_k"], tmp_path, MADE_BY)


@pytest.mark.parametrize(
    "content, reason",
    [
        (b'{"flags": {}, "wall_time_s": 1', "is not JSON"),
        (b"", "is not JSON"),
        (b"\xff\xfe", "is not JSON"),
        (b"[1, 2]", "is not a JSON object"),
        (b'{"wall_time_s": 1}', "lacks keys flags, git_commit, jax_backend, device_count"),
        (b'{"flags": [], "wall_time_s": 1, "git_commit": null, "jax_backend": "cpu", '
         b'"device_count": 1}', "holds a list as flags, not an object"),
        (b'{"flags": {}, "wall_time_s": "3 s", "git_commit": null, "jax_backend": "cpu", '
         b'"device_count": 1}', "holds text as wall_time_s, not a number"),
        (b'{"flags": {}, "wall_time_s": true, "git_commit": null, "jax_backend": "cpu", '
         b'"device_count": 1}', "holds true or false as wall_time_s"),
    ],
)  # fmt: skip
def test_read_sidecar_checked_refuses_a_damaged_sidecar(tmp_path, content, reason):
    path = tmp_path / "t.json"
    path.write_bytes(content)
    with pytest.raises(io.MalformedError, match=reason) as info:
        io.read_sidecar_checked(path, MADE_BY)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and MADE_BY in message


def test_read_sidecar_checked_reads_what_write_sidecar_wrote(tmp_path):
    write_sidecar(tmp_path / "t.csv", {"dk": [4]}, wall_time_s=1.5)
    meta = io.read_sidecar_checked(tmp_path / "t.json", MADE_BY)
    assert meta["flags"] == {"dk": [4]} and meta["wall_time_s"] == 1.5
    with pytest.raises(DataError, match="is missing"):
        io.read_sidecar_checked(tmp_path / "absent.json", MADE_BY)


def test_a_sidecar_names_its_csv_and_another_csvs_is_refused(tmp_path):
    """``write_sidecar`` records its CSV's name, so a sidecar copied beside another CSV
    is refused when read checked, naming the file and the command (issue 67)."""
    write_sidecar(tmp_path / "a.csv.xz", {"dk": [4]}, wall_time_s=1.5)
    assert read_sidecar_checked(tmp_path / "a.json", MADE_BY)["csv"] == "a.csv.xz"
    shutil.copy(tmp_path / "a.json", tmp_path / "b.json")
    with pytest.raises(MalformedError) as info:
        read_sidecar_checked(tmp_path / "b.json", MADE_BY)
    message = str(info.value)
    assert str(tmp_path / "b.json") in message and "'a.csv.xz'" in message and MADE_BY in message

"""A checkpoint's files read and checked, for every family: ``config.json`` (``read_json``),
``model.safetensors`` (``safetensors.numpy``, no PyTorch: ``check_weights_header`` from the
header alone, then ``read_tensors``) and ``tokenizer.json`` (``tokenizers``), what a
loaded checkpoint is (``Checkpoint``), and the one way a family loads a folder of them
(``load_directory``: config -> the family's parse -> files and header -> tensors ->
tokenizer -> ``Checkpoint``). The config's keys are checked by ``config_keys``.

Every failure is a ``CheckpointError`` of one line naming the file and what is wrong: a
file missing or unreadable, a folder or file that cannot be looked at (a loop of symbolic
links, no permission), sizes the weights file's header or the machine's memory cannot hold,
a tensor missing, of another shape, not floating point, or holding a NaN or an infinity, a
tokenizer whose ids reach past the embedding table (``check_token_ids``) or that lacks a
token the family needs.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.core.machine import machine_memory_bytes
from attnlab.core.mechanism import Mechanism
from attnlab.core.references import ALL_BUILTINS

CONFIG, WEIGHTS, TOKENIZER = "config.json", "model.safetensors", "tokenizer.json"
#: A sharded checkpoint's index (Hugging Face's): ``weight_map``, tensor name -> shard file.
WEIGHTS_INDEX = "model.safetensors.index.json"
#: The floating-point types a weights file's tensors may have (safetensors' names): an
#: integer or boolean weight is no trained model's. numpy has no bfloat16: a file holding
#: one is read by ``_read_raw`` (a bfloat16 is the top 16 bits of a float32).
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
#: Little-endian numpy types of the safetensors dtypes ``_read_raw`` reads (BF16: its bits).
RAW_DTYPES = {"F16": "<f2", "BF16": "<u2", "F32": "<f4", "F64": "<f8"}
#: Bytes of one float32 number: every tensor is read as float32.
FLOAT32_BYTES = 4


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file and what is wrong."""


class UnknownMechanismError(CheckpointError):
    """A checkpoint's ``attnlab.mechanism`` (``config.json``'s own object, which a family
    may read) that is no built-in and was not supplied: ``name``, and ``made_from``, the
    reference its maker recorded (None if none)."""

    def __init__(self, message: str, name: str, made_from: str | None) -> None:
        super().__init__(message)
        self.name, self.made_from = name, made_from


def mechanism_of(
    name: str, made_by: Any, supplied: Mapping[str, Mechanism], where: str
) -> Mechanism:
    """The mechanism ``attnlab.mechanism`` names: one ``supplied`` under that name, else the
    built-in of the name unless the maker recorded another reference (``made_by.mechanism``:
    a researcher's namesake of a built-in is never read as the built-in)."""
    made_from = made_by.get("mechanism") if isinstance(made_by, dict) else None
    made_from = made_from if isinstance(made_from, str) else None
    found = supplied.get(name)
    if found is None and name in ALL_BUILTINS and made_from in (None, name):
        found = ALL_BUILTINS[name]
    if found is not None and found.gate is not None:
        why = "gates its heads' output, which no checkpoint family here reads"
        raise UnknownMechanismError(f"{where}: attnlab.mechanism {name!r} {why}", name, made_from)
    if found is not None:
        return found
    if name in ALL_BUILTINS:
        why = f"was made from {made_from!r}, not the built-in of its name, and was not supplied"
    elif made_from:
        why = f"is not a built-in and was not supplied (it was made from {made_from!r})"
    else:
        why = f"is neither a built-in ({', '.join(ALL_BUILTINS)}) nor supplied"
    raise UnknownMechanismError(f"{where}: attnlab.mechanism {name!r} {why}", name, made_from)


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint of any family: its ``model_type`` (the registry's key), its
    configuration (the family's), tensors by the family's names (float32 numpy), tokenizer
    (no padding, no truncation), where it came from, its weights' checksum, the longest row
    it reads, and ``config.json``'s ``attnlab`` object (empty for a checkpoint not written
    here)."""

    model_type: str
    config: Any
    tensors: dict[str, np.ndarray]
    tokenizer: Any  # tokenizers.Tokenizer
    directory: Path
    weights_sha256: str
    max_seq_length: int
    attnlab: dict[str, Any] = field(default_factory=dict)


def sha256(path: Path) -> str:
    """The hex SHA-256 of a file's bytes; of a sharded checkpoint's index (``weights``),
    of the index's bytes and then each shard's, in the shards' name order."""
    digest = hashlib.sha256()
    for part in [path, *shards(path)] if _is_index(path) else [path]:
        with open(part, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def weights(directory: Path) -> Path:
    """The checkpoint's weights as every reader here takes them: ``model.safetensors``, or
    where there is none and the checkpoint is sharded, its index (``WEIGHTS_INDEX``)."""
    single, index = directory / WEIGHTS, directory / WEIGHTS_INDEX
    return index if not is_file(single) and is_file(index) else single


def _is_index(path: Path) -> bool:
    return Path(path).name.endswith(".index.json")


def shards(path: Path) -> dict[Path, frozenset[str]]:
    """The safetensors files ``path`` stands for, each with the tensor names the index maps
    to it: the file itself (an empty set: whatever it holds), or for an index
    (``WEIGHTS_INDEX``) its ``weight_map``'s shards, in name order.
    ``CheckpointError`` naming the index unless its ``weight_map`` is an object of tensor
    names to plain file names in the index's folder (no folder part), each a file there."""
    path = Path(path)
    if not _is_index(path):
        return {path: frozenset()}
    weight_map = read_json(path).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{path}: weight_map must be an object of tensor names to files")
    held: dict[Path, set[str]] = {}
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or Path(shard).name != shard or shard in ("", ".", ".."):
            raise CheckpointError(f"{path}: {name} is mapped to {shard!r}, not a file beside it")
        held.setdefault(path.parent / shard, set()).add(name)
    for shard in held:
        if not is_file(shard):
            raise CheckpointError(f"{path}: its shard {shard.name} is missing")
    return {shard: frozenset(held[shard]) for shard in sorted(held)}


def weights_bytes(path: Path) -> int:
    """The bytes of the safetensors files ``path`` stands for (``shards``)."""
    return sum(shard.stat().st_size for shard in shards(path))


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; ``CheckpointError`` naming the file if it cannot be read
    or is not an object."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:  # ValueError: not UTF-8, not JSON
        raise CheckpointError(f"{path}: cannot be read as JSON ({one_reason(err)})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: is not a JSON object")
    return raw


def one_reason(err: BaseException) -> str:
    """An error's cause in one line: an OSError's words (its path is named already)."""
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return " ".join(str(err).split()) or type(err).__name__


def _kind(path: Path) -> int | None:
    """``path``'s file type (``stat.S_IFMT``; links followed), None where nothing is there;
    ``CheckpointError`` where it cannot be looked at (a loop of symbolic links, a folder
    without permission)."""
    try:
        return stat.S_IFMT(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError) as err:  # ValueError: a NUL in the path
        raise CheckpointError(f"{path}: cannot be read ({one_reason(err)})") from None


def is_file(path: Path) -> bool:
    """Whether ``path`` is a file (False where nothing is there); ``CheckpointError`` where
    it cannot be looked at (``_kind``)."""
    return _kind(path) == stat.S_IFREG


def files_present(directory: Path) -> None:
    """``CheckpointError`` unless ``directory`` holds config.json, model.safetensors (or a
    sharded checkpoint's index, ``WEIGHTS_INDEX``) and tokenizer.json (each one line: not
    a directory, a loop of links, no permission, missing)."""
    if _kind(directory) != stat.S_IFDIR:
        raise CheckpointError(f"{directory}: is not a directory")
    for name in (CONFIG, WEIGHTS, TOKENIZER):  # in this order: config.json is looked at first
        path = weights(directory) if name == WEIGHTS else directory / name
        if not is_file(path):
            raise CheckpointError(f"{path}: is missing")


def read_header(path: Path, prefix: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every tensor the safetensors file ``path`` lists (or, for a sharded checkpoint's
    index, its shards together: ``shards``), by name (``prefix`` dropped), with its shape
    and dtype (safetensors' name: ``F32``, ``I64``, ...), from the headers alone: no
    tensor is read. ``CheckpointError`` naming the file if one is unreadable, or where a
    shard holds other tensors than the index maps to it."""
    from safetensors import SafetensorError, safe_open

    header = {}
    for shard, mapped in shards(path).items():
        try:
            with safe_open(str(shard), framework="numpy") as handle:
                names = list(handle.keys())
                for name in names:
                    view = handle.get_slice(name)
                    header[name.removeprefix(prefix)] = (tuple(view.get_shape()),
                                                         view.get_dtype())  # fmt: skip
        except (OSError, SafetensorError, ValueError, TypeError) as err:
            raise CheckpointError(
                f"{shard}: cannot be read as safetensors ({one_reason(err)})"
            ) from None
        if mapped and set(names) != mapped:
            other = sorted(set(names) ^ mapped)[0]
            raise CheckpointError(f"{path}: maps {shard.name} a tensor set other than it holds "
                                  f"({other!r} in one, not the other)")  # fmt: skip
    return header


def check_weights_header(
    path: Path,
    prefix: str,
    layers: tuple[str, int, str],
    shapes: Callable[[], dict[str, tuple[int, ...]]],
    where: str = CONFIG,
) -> None:
    """Before any tensor is read, and before the model's list of tensors is made: the
    sizes ``config.json`` (``where``) gives against the safetensors file ``path``'s header
    (``read_header``, names with ``prefix`` dropped) and the machine's memory, so that an
    absurd size (``n_layer`` 10^9) is one line at once, not memory filling for minutes.
    ``layers`` is the config's field of the number of layers, its value and the prefix of
    a layer's tensor names before its index (``"h."``); ``shapes()`` (called only once the
    number of layers is known to be no more than the header lists) gives every tensor the
    model reads and its shape. ``CheckpointError`` (one line) if

    - the config asks for more layers than the file holds tensors of;
    - a tensor is missing, or its shape is another than the config implies, or it is not
      floating point (``FLOAT_DTYPES``);
    - the file and the float32 copies of the model's tensors take more than the memory this
      process may use (``attnlab.core.machine.machine_memory_bytes``: the machine's, or
      the process's limit where tighter).
    """
    header = read_header(path, prefix)
    field, count, layer_prefix = layers
    pattern = re.compile(rf"{re.escape(layer_prefix)}(\d+)\.")
    held = {int(m.group(1)) for name in header if (m := pattern.match(name))}
    if count > len(held):
        shown = count if count < 10**12 else f"{count:.3g}"
        raise CheckpointError(
            f"{where}: {field} is {shown}, but {path} holds the tensors of {len(held)} layers"
        )
    implied = 0
    for name, shape in shapes().items():
        if name not in header:
            raise CheckpointError(f"{path}: lacks tensor {name}")
        stored, dtype = header[name]
        if stored != shape:
            raise CheckpointError(f"{path}: {name} has shape {stored}, config.json implies {shape}")
        if dtype not in FLOAT_DTYPES:
            raise CheckpointError(
                f"{path}: {name} is {dtype}, not floating point ({', '.join(FLOAT_DTYPES)})"
            )
        implied += math.prod(shape)
    need = weights_bytes(path) + FLOAT32_BYTES * implied  # the files read, then float32 copies
    check_memory(path, need, f"reading its {implied:,} parameters takes")


def check_memory(path: Path, need: int, what: str) -> None:
    """``CheckpointError`` naming ``path`` where reading it needs ``need`` bytes, more than
    this process may use (``attnlab.core.machine.machine_memory_bytes``: the machine's,
    or the process's limit where tighter); ``what`` says what takes them (``its float32
    tensors take``)."""
    memory = machine_memory_bytes()
    if need > memory:
        raise CheckpointError(
            f"{path}: {what} {in_bytes(need)}, more than the {in_bytes(memory)} of memory this "
            "process may use"
        )


def in_bytes(n: int) -> str:
    """``n`` bytes in words: ``3.2 GiB``, ``512 KiB``."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} bytes"


def read_tensors(
    path: Path, shapes: dict[str, tuple[int, ...]], prefix: str, owned: str | None = None
) -> dict:
    """The tensors ``shapes`` names from the safetensors file ``path`` (through
    ``safetensors.numpy``, no PyTorch, or ``_read_raw`` where it holds bfloat16; a name's
    ``prefix`` dropped), as float32;
    ``CheckpointError`` naming the file if it is unreadable or a tensor is missing, has
    another shape, is not floating point, or holds a NaN or an infinity (or a number
    float32 cannot hold): a NaN weight gives tables of NaN, not an error. Tensors it does
    not name are ignored, except those whose name starts with ``owned`` (a model's own
    tensors: one it does not name is an error)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    raw = "BF16" in {dtype for _, dtype in read_header(path, "").values()}
    stored = {}
    for shard in shards(path):  # the file itself, or each shard of an index
        try:
            stored |= _read_raw(shard) if raw else load_file(shard)
        except (OSError, SafetensorError, ValueError, TypeError, KeyError) as err:
            raise CheckpointError(
                f"{shard}: cannot be read as safetensors ({one_reason(err)})"
            ) from None
    stored = {k.removeprefix(prefix): v for k, v in stored.items()}
    unnamed = sorted(k for k in stored if owned and k.startswith(owned) and k not in shapes)
    if unnamed:
        raise CheckpointError(
            f"{path}: holds {unnamed[0]}, which the model config.json describes does not have"
        )
    tensors = {}
    for name, shape in shapes.items():
        if name not in stored:
            raise CheckpointError(f"{path}: lacks tensor {name}")
        value = stored[name]
        if tuple(value.shape) != shape:
            raise CheckpointError(
                f"{path}: {name} has shape {tuple(value.shape)}, config.json implies {shape}"
            )
        if value.dtype.kind != "f":
            raise CheckpointError(f"{path}: {name} is {value.dtype}, not floating point")
        if not np.isfinite(value).all():
            raise CheckpointError(f"{path}: {name} holds NaN or infinite values")
        tensors[name] = np.asarray(value, np.float32)
        if not np.isfinite(tensors[name]).all():
            raise CheckpointError(f"{path}: {name} holds numbers beyond float32's range")
    return tensors


def _read_raw(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of the safetensors file ``path`` from its bytes (an 8-byte little-endian
    header length, the JSON header of dtypes, shapes and ``data_offsets``, then the data):
    bfloat16 as float32 (its 16 bits shifted to a float32's top), the others as stored;
    a dtype not in ``RAW_DTYPES`` is returned as raw bytes (``uint8``) for the caller to
    refuse as not floating point."""
    with open(path, "rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(size))
        data = handle.read()
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        start, end = entry["data_offsets"]
        dtype = RAW_DTYPES.get(entry["dtype"], "u1")
        value = np.frombuffer(data[start:end], dtype)
        if entry["dtype"] == "BF16":
            value = (value.astype("<u4") << 16).view("<f4")
        out[name] = value.reshape(entry["shape"]) if dtype != "u1" else value
    return out


def read_tokenizer(path: Path):
    """The ``tokenizers`` tokenizer of ``path`` without padding or truncation;
    ``CheckpointError`` naming the file if it cannot be read."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception on a bad file
        raise CheckpointError(f"{path}: cannot be read ({err})") from None
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def check_token_ids(tokenizer: Any, vocab_size: int, path: Path) -> None:
    """``CheckpointError`` naming the tokenizer file ``path`` and its largest id unless every
    id the tokenizer gives (its vocabulary and added tokens) is below ``vocab_size``: the
    embedding lookup would clamp a larger one to the last row, silently."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    if not vocab:
        return
    token, largest = max(vocab.items(), key=lambda item: item[1])
    if largest >= vocab_size:
        raise CheckpointError(
            f"{path}: token {token!r} has id {largest}, past config.json's vocab_size "
            f"{vocab_size} (ids 0 to {vocab_size - 1})"
        )


def load_directory(
    directory: Path | str,
    parse: Callable[[dict[str, Any], str], Any],
    shapes: Callable[[Any], dict[str, tuple[int, ...]]],
    layers: Callable[[Any], tuple[str, int, str]],
    context: Callable[[Any], int],
    prefix: str = "",
    owned: str | None = None,
    tokens: tuple[str, ...] = (),
) -> Checkpoint:
    """The checkpoint in ``directory`` as a family reads it, checked in this order (the
    first failure is the ``CheckpointError``, one line naming the file):

    - ``config.json``, the weights and ``tokenizer.json`` present (``files_present``);
    - ``config.json`` parsed by the family's ``parse(raw, where)``;
    - the sizes it gives against the weights' header and the memory, before any tensor is
      read (``check_weights_header``; ``layers(config)`` is the config's field of the
      number of layers, its value and the prefix of a layer's tensor names);
    - every tensor of ``shapes(config)`` (``read_tensors``: stored names with ``prefix``
      dropped; one starting with ``owned`` that ``shapes`` does not name is an error);
    - the tokenizer, its ids below the config's ``vocab_size`` (``check_token_ids``) and
      each of ``tokens`` in it;
    - ``context(config)``, the longest row it reads.

    The ``Checkpoint``'s ``model_type`` and ``attnlab`` object are ``config.json``'s, its
    checksum the weights' (``sha256``)."""
    directory = Path(directory)
    files_present(directory)
    raw = read_json(directory / CONFIG)
    where = str(directory / CONFIG)
    config = parse(raw, where)
    path = weights(directory)
    check_weights_header(path, prefix, layers(config), lambda: shapes(config), where)
    tensors = read_tensors(path, shapes(config), prefix, owned)
    tokenizer = read_tokenizer(directory / TOKENIZER)
    check_token_ids(tokenizer, config.vocab_size, directory / TOKENIZER)
    for token in tokens:
        if tokenizer.token_to_id(token) is None:
            raise CheckpointError(f"{directory / TOKENIZER}: has no {token} token")
    longest = context(config)
    return Checkpoint(
        raw["model_type"], config, tensors, tokenizer, directory, sha256(path), longest,
        raw.get("attnlab", {}),
    )  # fmt: skip

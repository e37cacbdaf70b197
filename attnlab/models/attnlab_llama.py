"""``attnlab_llama``: experiment 14's models (``attnlab.lm.model``) in Llama's layout, as
``attnlab.lm.export.causal_lm_llama_config`` writes them, read on the shared decoder
(``attnlab.models.decoder``) with what they have and Llama has not, each set in
``config.json``'s ``attnlab`` object: ``mlp: "plain"`` (GPT-2's MLP, no ``gate_proj``),
``positions: "learned"`` (the table ``decoder.POSITION_TABLE``, no rotary) or ``"none"``,
and ``mechanism``, any built-in or supplied ``Mechanism`` (``files.mechanism_of``) whose
learned scalars are tensors of the layers (``decoder.learned_name``). Its own
``model_type`` (``MODEL_TYPE``), so that a Llama reader refuses it rather than compute
another model."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attnlab.core.mechanism import Mechanism
from attnlab.models.config_keys import an_object, choice
from attnlab.models.decoder import load_decoder
from attnlab.models.decoder_config import MLPS, POSITIONS, DecoderConfig, parse_decoder
from attnlab.models.files import CONFIG, Checkpoint, CheckpointError, mechanism_of

#: ``model_type`` of Llama's layout with ``attnlab``'s extensions (module docstring).
MODEL_TYPE = "attnlab_llama"


def parse_attnlab_llama_config(
    raw: dict[str, Any], where: str = CONFIG, mechanisms: Mapping[str, Mechanism] | None = None
) -> DecoderConfig:
    """An ``attnlab_llama`` ``config.json``: Llama's keys, and the ``attnlab`` object's
    ``mlp`` (``MLPS``), ``positions`` (``POSITIONS``) and ``mechanism`` (a built-in or one
    of ``mechanisms``: ``files.mechanism_of``); ``CheckpointError`` naming the key
    otherwise."""
    if raw.get("model_type") != MODEL_TYPE:
        raise CheckpointError(
            f"{where}: model_type {raw.get('model_type')!r} is not {MODEL_TYPE!r}"
        )
    ours = an_object(raw, "attnlab", where) or {}
    for key, allowed in (("mlp", MLPS), ("positions", POSITIONS)):
        choice(ours, key, where, allowed, allowed[0], f"attnlab.{key}")
    name = ours.get("mechanism", "scaled")
    if not isinstance(name, str) or not name:
        raise CheckpointError(f"{where}: attnlab.mechanism must be a name, got {name!r}")
    attention = mechanism_of(name, ours.get("made_by"), mechanisms or {}, where)
    return parse_decoder(
        raw, where, attention=attention, mlp=ours.get("mlp", MLPS[0]),
        positions=ours.get("positions", POSITIONS[0]),
    )  # fmt: skip


def load_attnlab_llama(
    directory: Path | str, mechanisms: Mapping[str, Mechanism] | None = None
) -> Checkpoint:
    """An ``attnlab_llama`` checkpoint, its mechanism a built-in or one of ``mechanisms``
    (``decoder.load_decoder`` with ``parse_attnlab_llama_config``)."""
    return load_decoder(directory, lambda raw, where: parse_attnlab_llama_config(
        raw, where, mechanisms))  # fmt: skip

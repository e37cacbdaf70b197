"""attnlab.models.attnlab_llama: the ``attnlab`` object read into the decoder's choices (a
plain MLP without ``gate_proj``, a learned position table, a mechanism's learned scalar in
every layer; none set: Llama's decoder), what it does not read refused in one line naming
the key, and a mechanism neither built in nor supplied named. The round trip of experiment
14's models through this family is tests/test_lm_export.py's."""

from __future__ import annotations

import re

import pytest

from attnlab.core.hooks import scaled_logits
from attnlab.core.mechanism import Mechanism
from attnlab.models import llama
from attnlab.models.attnlab_llama import MODEL_TYPE, parse_attnlab_llama_config
from attnlab.models.decoder import POSITION_TABLE, decoder_shapes, learned_name
from attnlab.models.files import CONFIG, CheckpointError, UnknownMechanismError

#: Llama's tiny config as an ``attnlab_llama`` one, its ``attnlab`` object not yet set.
RAW = llama.TINY | {"model_type": MODEL_TYPE}


def test_the_attnlab_object_sets_the_decoders_choices():
    ours = {"mlp": "plain", "positions": "learned", "mechanism": "qk_norm"}
    config = parse_attnlab_llama_config(RAW | {"attnlab": ours})
    shapes = decoder_shapes(config)
    assert (config.mlp, config.positions, config.mechanism) == ("plain", "learned", "qk_norm")
    assert not any(name.endswith("gate_proj.weight") for name in shapes)
    assert shapes[POSITION_TABLE] == (RAW["max_position_embeddings"], RAW["hidden_size"])
    assert shapes[learned_name(1, "scale")] == ()
    plain = parse_attnlab_llama_config(RAW)
    assert (plain.mlp, plain.positions, plain.mechanism) == ("gated", "rotary", "scaled")
    assert decoder_shapes(plain) == decoder_shapes(llama.parse_llama_config(llama.TINY))


@pytest.mark.parametrize(
    ("change", "words"),
    [({"model_type": "llama"}, "model_type 'llama' is not 'attnlab_llama'"),
     ({"attnlab": "plain"}, "attnlab must be an object, got 'plain'"),
     ({"attnlab": {"mlp": "swiglu"}}, "attnlab.mlp 'swiglu', only gated, plain"),
     ({"attnlab": {"positions": ["learned"]}},
      "attnlab.positions ['learned'], only rotary, learned, none"),
     ({"attnlab": {"mechanism": 5}}, "attnlab.mechanism must be a name, got 5")],
)  # fmt: skip
def test_what_it_does_not_read_is_one_line_naming_the_key(change, words):
    with pytest.raises(CheckpointError, match=f"^{re.escape(f'{CONFIG}: {words}')}$"):
        parse_attnlab_llama_config(RAW | change)


def test_a_mechanism_neither_built_in_nor_supplied_is_named():
    mine = RAW | {"attnlab": {"mechanism": "mine"}}
    with pytest.raises(UnknownMechanismError) as caught:
        parse_attnlab_llama_config(mine)
    assert caught.value.name == "mine"
    supplied = Mechanism("mine", scaled_logits, constants={"scale": 0.5})
    assert parse_attnlab_llama_config(mine, CONFIG, {"mine": supplied}).attention is supplied

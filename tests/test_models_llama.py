"""attnlab.models.llama: Llama and Mistral read by one parser (Mistral's sliding window on
every layer, none in Llama's), and a Llama reader refusing every other ``model_type``,
``attnlab_llama`` (experiment 14's models in Llama's layout) among them. The forward on
Llama's tiny checkpoint is tests/test_models_decoder.py's."""

from __future__ import annotations

import re

import pytest

from attnlab.models import llama
from attnlab.models.files import CONFIG, CheckpointError


def test_mistral_slides_every_layer_and_llama_none():
    mistral = llama.parse_llama_config(llama.TINY | {"model_type": "mistral", "sliding_window": 5})
    assert mistral.windows == (5, 5) and mistral.layer_types == ("sliding_attention",) * 2
    assert llama.parse_llama_config(llama.TINY).windows == (None, None)


@pytest.mark.parametrize("kind", ["attnlab_llama", "qwen3", None])
def test_a_llama_reader_refuses_another_model_type(kind):
    words = f"{CONFIG}: model_type {kind!r} is not llama"
    with pytest.raises(CheckpointError, match=f"^{re.escape(words)}$"):
        llama.parse_llama_config(llama.TINY | {"model_type": kind})

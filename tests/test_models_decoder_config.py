"""attnlab.models.decoder_config through each family's parser: config keys of another type
in one line naming the key, more layers than memory holds the description of (refused
before anything is built per layer, the rotary positions read once a layer type), and
transformers v5's ``rope_parameters``."""

from __future__ import annotations

import re

import pytest
from support import DECODER_FAMILIES as FAMILIES

from attnlab.core.machine import MEMORY_ENV
from attnlab.models import decoder_config, gemma3, llama, olmo2
from attnlab.models.files import CONFIG, CheckpointError

#: OLMo 2's tiny config with YaRN's mscale pair instead of its attention_factor.
YARN_MSCALE = {k: v for k, v in olmo2.TINY["rope_scaling"].items() if k != "attention_factor"}


@pytest.mark.parametrize(
    "family, change, key",
    [("llama", {"hidden_act": ["silu"]}, "hidden_act"),
     ("llama", {"hidden_act": {"silu": 1}}, "hidden_act"),
     ("gemma2", {"hidden_activation": ["gelu_pytorch_tanh"]}, "hidden_activation"),
     ("llama", {"layer_types": [{}, {}]}, "layer_types"),
     ("llama", {"rope_scaling": "linear"}, "rope_scaling"),
     ("llama", {"rope_scaling": 5}, "rope_scaling"),
     ("llama", {"rope_parameters": ["x"]}, "rope_parameters"),
     ("llama", {"tie_word_embeddings": "false"}, "tie_word_embeddings"),
     ("llama", {"rope_scaling": llama.TINY["rope_scaling"] | {"high_freq_factor": 1.0}},
      "rope_scaling.high_freq_factor"),
     ("olmo2", {"rope_theta": 1}, "rope_theta"),
     ("olmo2", {"rope_scaling": olmo2.TINY["rope_scaling"]
                | {"original_max_position_embeddings": 0.5}},
      "rope_scaling.original_max_position_embeddings"),
     ("olmo2", {"rope_scaling": YARN_MSCALE | {"mscale": "x", "mscale_all_dim": 1}},
      "rope_scaling.mscale"),
     ("olmo2", {"rope_scaling": olmo2.TINY["rope_scaling"] | {"truncate": "no"}},
      "rope_scaling.truncate"),
     ("gemma3_text", {"sliding_window_pattern": 0}, "sliding_window_pattern"),
     ("qwen3", {"use_sliding_window": "false"}, "use_sliding_window")],
)  # fmt: skip
def test_config_keys_of_another_type_are_one_line_naming_the_key(family, change, key):
    """Each was a traceback (TypeError, ValueError, ZeroDivisionError, a math domain error),
    or NaN rotary tables (Llama 3's factors equal), YaRN's two only in the forward pass
    after work began: the parser refuses it, naming the file and the key."""
    raw, parse, _ = FAMILIES[family]
    with pytest.raises(CheckpointError, match=f"^{CONFIG}: {re.escape(key)}") as caught:
        parse(raw | change, CONFIG)
    assert "\n" not in str(caught.value)


def test_a_billion_layers_is_refused_before_anything_is_built_per_layer(monkeypatch):
    """``num_hidden_layers`` 10^9 built per-layer tuples for minutes before the weights'
    header was looked at: the layers' descriptions are checked against the memory first
    (``config_keys.check_layers``), for ``--config`` and ``--checkpoint`` alike, and the
    rotary positions are read once a layer type, not once a layer."""
    built = []

    def per_layer(raw, n_layer, *args):
        built.append(n_layer)
        if n_layer > 10**4:
            raise AssertionError(f"a tuple of {n_layer} layer types is being built")
        return real_layer_types(raw, n_layer, *args)

    real_layer_types = decoder_config.layer_types
    monkeypatch.setattr(decoder_config, "layer_types", per_layer)
    with pytest.raises(CheckpointError, match=f"^{CONFIG}: num_hidden_layers is 1000000000, "):
        llama.parse_llama_config(llama.TINY | {"num_hidden_layers": 10**9})
    assert built == []
    monkeypatch.setenv(MEMORY_ENV, str(2**20))  # a budget of 512 KiB: 512 layers of 1 KiB
    with pytest.raises(CheckpointError, match="num_hidden_layers is 1000, whose descriptions"):
        llama.parse_llama_config(llama.TINY | {"num_hidden_layers": 1000})
    read = []
    real_read_rope = decoder_config.read_rope
    monkeypatch.setattr(
        decoder_config, "read_rope", lambda *a: read.append(a) or real_read_rope(*a)
    )
    assert len(llama.parse_llama_config(llama.TINY | {"num_hidden_layers": 500}).ropes) == 500
    assert len(read) == 1


def test_transformers_v5_rope_parameters_are_read():
    """``rope_parameters`` (with its own rope_theta) beside, and instead of, rope_scaling
    and rope_theta; by layer type for Gemma 3."""
    raw = {k: v for k, v in llama.TINY.items() if k not in ("rope_scaling", "rope_theta")}
    raw["rope_parameters"] = {"rope_theta": 10000.0, **llama.TINY["rope_scaling"]}
    assert llama.parse_llama_config(raw).ropes == llama.parse_llama_config(llama.TINY).ropes
    g3 = {k: v for k, v in gemma3.TINY.items() if k != "rope_scaling"}
    g3["rope_parameters"] = {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    }
    assert gemma3.parse_gemma3_config(g3).ropes == gemma3.parse_gemma3_config(gemma3.TINY).ropes

"""Helpers that several test modules share: experiments' flags and configurations at tiny
sizes, a researcher's mechanism files, tiny checkpoints of each model family written here
(and the ways one is broken), and the bounds and readers more than one test uses.

A test module imports what another also uses from a support module (this one,
numpy_reference.py, damage.py, events.py), never from another test module:
tests/test_conftest.py checks."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path

import jax
import numpy as np
import optax

from attnlab.harness import cli
from attnlab.lm.export import write_gpt2
from attnlab.models import gemma2, gemma3, llama, olmo2, qwen3
from attnlab.models.bert import SENTENCE_CONFIG, parse_config, tensor_shapes
from attnlab.models.files import CONFIG, TOKENIZER, WEIGHTS
from attnlab.models.gpt2 import PREFIX, gpt2_shapes, parse_gpt2_config
from attnlab.recall.config import RecallConfig
from attnlab.studies.card.compute import CardConfig
from attnlab.studies.card.sweep import SWEEP_BASE, SweepConfig
from attnlab.studies.real_model.flags import add_real_model_flags, real_model_config
from attnlab.studies.real_model.flags import real_model_request as flags_request

# --- experiments at tiny sizes -----------------------------------------------------------

#: Experiment 04 at tiny sizes (its flags).
TINY_RECALL = [
    "--steps", "30", "--seeds", "2", "--batch-size", "8", "--dk", "16", "--d-model", "16",
    "--eval-size", "64", "--chunk-steps", "10", "--quiet",
]  # fmt: skip

#: A card small enough for a test: every section, widths powers of 4 (so q.k / sqrt(d)
#: and q.k * (1 / sqrt(d)) round alike and a user's function matches scaled exactly).
TINY_CARD = CardConfig(
    statics_dks=(4, 16),
    statics_ns=(16, 64),
    n_keys=16,
    n_dk=16,
    trials=64,
    precision_trials=4,
    training=RecallConfig(
        d_k=16,
        d_model=16,
        steps=20,
        batch_size=8,
        seeds=1,
        eval_size=32,
        chunk_steps=10,
        mechanisms=("scaled",),
    ),  # fmt: skip
    sweep=SweepConfig(
        base=dataclasses.replace(
            SWEEP_BASE, steps=20, seeds=1, eval_size=32, batch_size=8, chunk_steps=10
        ),  # fmt: skip
        dks=(4, 16),
        lr_dks=(16,),
        lrs=(1e-3, 1e-2),
        record_every=10,
    ),
    precision_dks=(16,),
    precision_sigmas=(1.0, 4.0),
    quick=True,  # it stands in for QUICK in tests/test_experiments_card.py
)

#: A researcher's mechanism file: scaled dot-product logits written out (the card's user
#: mechanism in its tests).
CARD_USER_FILE = textwrap.dedent(
    """
    import jax.numpy as jnp

    def logits(q, k):
        return jnp.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5
    """
)

#: A mechanism of one's own, as a researcher would write it (cosine logits times 4: its
#: temperature is the mechanism's, so its owner must read "mechanism").
LM_USER_FILE = """\
import jax.numpy as jnp

def cosine(q, k):
    q = q / jnp.sqrt(jnp.sum(q * q, -1, keepdims=True) + 1e-6)
    k = k / jnp.sqrt(jnp.sum(k * k, -1, keepdims=True) + 1e-6)
    return 4.0 * jnp.einsum("...qd,...kd->...qk", q, k)
"""
#: ALiBi as a researcher would bring it: ten lines, positions and the head index.
ALIBI_FILE = """\
import jax.numpy as jnp

def alibi(q, k, q_pos, k_pos, head, n_heads):
    d = q.shape[-1]
    slope = 2.0 ** (-8.0 * (head + 1) / n_heads)
    z = jnp.einsum("...qd,...kd->...qk", q, k) / jnp.sqrt(jnp.float32(d))
    return z - slope * (q_pos - k_pos)
"""


def real_model_request(*argv: str):
    """Experiment 13's flags ``argv`` read into its ``RealModelRequest`` (each as given)."""
    parser = cli.new_parser("test")
    add_real_model_flags(parser)
    return flags_request(parser.parse_args(list(argv)))


def parse_real_model_flags(*argv: str):
    """Experiment 13's flags ``argv`` read into its ``RealModelConfig``."""
    return real_model_config(real_model_request(*argv))


# --- tolerances ---------------------------------------------------------------------

#: 14's forward (separate W_Q, W_K, W_V) against 13's (GPT-2's c_attn, zero biases), both
#: float32: each matmul of width n errs by at most n u relatively (u = 2^-24, Higham 2002
#: sec. 3.1); the widest is 4 d_model = 128, seven contractions a layer and the head:
#: 15 * 128 u = 1.1e-4 of the logits' scale.
LM_LOGIT_RTOL = 15 * 128 * 2.0**-24


# --- tiny checkpoints -------------------------------------------------------------

#: A 2-layer GPT-2 of width 16 (2 heads of 8), 256 byte tokens, 16 positions.
TINY_GPT2 = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "vocab_size": 256,
    "n_positions": 16,
    "n_embd": 16,
    "n_layer": 2,
    "n_head": 2,
    "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-5,
}


def write_tiny_gpt2(directory: Path, seed: int = 0, mechanisms=None, **overrides) -> Path:
    """A tiny GPT-2 checkpoint (``TINY_GPT2`` with ``overrides``, tied head) of random weights
    and biases N(0, 0.3^2) (LayerNorm scales 1 + that), in ``directory``; ``mechanisms``
    as ``parse_gpt2_config`` takes them (a researcher's that ``attnlab`` names)."""
    config = TINY_GPT2 | overrides
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in gpt2_shapes(parse_gpt2_config(config, mechanisms=mechanisms)).items():
        value = 0.3 * rng.standard_normal(shape)
        tensors[name] = (value + (1.0 if ".ln_" in name or "ln_f.w" in name else 0.0)).astype(
            np.float32
        )
    write_gpt2(directory, tensors, config)
    return directory


def break_gpt2(directory: Path, how: str) -> str:
    """Break a tiny GPT-2 checkpoint (``write_tiny_gpt2``) as ``how`` says (one of
    ``BROKEN_GPT2``); return the file (and field) the error must name."""
    from safetensors.numpy import load_file, save_file

    config = json.loads((directory / CONFIG).read_text())
    if how in ("missing tensor", "wrong shape", "nan weight", "integer weight"):
        stored = load_file(directory / WEIGHTS)
        name = PREFIX + "h.1.mlp.c_fc.weight"
        if how == "missing tensor":
            del stored[name]
        elif how == "wrong shape":
            stored[name] = stored[name].T.copy()
        elif how == "nan weight":
            stored[name] = stored[name].copy()
            stored[name][3, 7] = np.nan
        else:
            stored[name] = stored[name].astype(np.int64)
        save_file(stored, directory / WEIGHTS)
        return {
            "nan weight": f"{WEIGHTS}: h.1.mlp.c_fc.weight holds NaN or infinite values",
            "integer weight": f"{WEIGHTS}: h.1.mlp.c_fc.weight is I64, not floating point",
        }.get(how, WEIGHTS)
    if how == "a billion layers":  # refused from the header: no list of 12e9 tensors is made
        (directory / CONFIG).write_text(json.dumps(config | {"n_layer": 10**9}))
        return f"{CONFIG}: n_layer is 1000000000, but"
    if how == "a huge vocabulary":
        (directory / CONFIG).write_text(json.dumps(config | {"vocab_size": 10**12}))
        return f"{WEIGHTS}: wte.weight has shape (256, 16), config.json implies (1000000000000, 16)"
    changes = {
        "unknown model_type": {"model_type": "mamba"},
        "inverse layer scaling": {"scale_attn_by_inverse_layer_idx": True},
        "unknown mechanism": {"attnlab": {"mechanism": "no_such_mechanism"}},
        "rotary": {"attnlab": {"positions": "rotary"}},
        "relu": {"activation_function": "relu"},
    }
    (directory / CONFIG).write_text(json.dumps(config | changes[how]))
    return CONFIG


#: Every way ``break_gpt2`` breaks a checkpoint.
BROKEN_GPT2 = ["missing tensor", "wrong shape", "unknown model_type", "inverse layer scaling",
               "unknown mechanism", "rotary", "relu", "nan weight", "integer weight",
               "a billion layers", "a huge vocabulary"]  # fmt: skip


#: A 2-layer BERT of width 16 (2 heads of 8).
TINY_BERT = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "hidden_act": "gelu",
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "initializer_range": 0.02,
}
TINY_WORDS = [
    "the",
    "a",
    "of",
    "and",
    "to",
    "in",
    "is",
    "it",
    "that",
    "was",
    "for",
    "on",
    "are",
    "as",
    "with",
    "his",
    "they",
    "at",
    "be",
    "this",
]


def write_tiny_bert(directory: Path, seed: int = 0, prefix: str = "") -> Path:
    """A BERT-layout checkpoint with random weights (``N(0, 0.5^2)``, so attention is not
    uniform) and a word-level tokenizer over ``TINY_WORDS``, built with ``tokenizers``."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel

    directory.mkdir(parents=True, exist_ok=True)
    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *TINY_WORDS])}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer.save(str(directory / TOKENIZER))
    config = TINY_BERT | {"vocab_size": len(vocab)}
    (directory / CONFIG).write_text(json.dumps(config), encoding="utf-8")
    rng = np.random.default_rng(seed)
    shapes = tensor_shapes(parse_config(config))
    tensors = {prefix + n: rng.normal(0, 0.5, s).astype(np.float32) for n, s in shapes.items()}
    save_file(tensors, str(directory / WEIGHTS))
    return directory


#: A tensor of the tiny checkpoint that a broken one spoils (``break_bert``).
SPOILT_BERT = "encoder.layer.1.attention.self.key.weight"


def change_config(directory: Path, name: str, change: dict) -> None:
    """Update the JSON file ``name`` of ``directory`` (``{}`` where there is none) with
    ``change``."""
    path = directory / name
    raw = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps(raw | change))


def _spoil_bert(directory: Path, how: str) -> None:
    """Replace ``SPOILT_BERT`` in the weights file: a NaN in it, or its values as int32."""
    from safetensors.numpy import load_file, save_file

    stored = load_file(directory / WEIGHTS)
    value = stored[SPOILT_BERT].copy()
    if how == "nan":
        value[1, 2] = np.nan
    elif how == "inf":
        value[0, 0] = -np.inf
    else:
        value = (value * 100).astype(np.int32)
    save_file(stored | {SPOILT_BERT: value}, str(directory / WEIGHTS))


def break_bert(directory: Path, how: str) -> str:
    """Break a tiny BERT checkpoint (``write_tiny_bert``) as ``how`` says (one of
    ``BROKEN_BERT``); return the file (and what more) the error must name."""
    if how == "missing file":
        (directory / TOKENIZER).unlink()
        return TOKENIZER
    if how == "other architecture":
        change_config(
            directory, CONFIG, {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}
        )
        return CONFIG
    if how in ("nan weight", "infinite weight", "integer weight"):
        _spoil_bert(directory, {"nan weight": "nan", "infinite weight": "inf"}.get(how, "int"))
        return f"{WEIGHTS}: {SPOILT_BERT}"
    if how == "a billion layers":  # refused from the header, before a list of 16e9 tensors
        change_config(directory, CONFIG, {"num_hidden_layers": 10**9})
        return f"{CONFIG}: num_hidden_layers is 1000000000, but"
    if how == "a huge width":  # refused from the header, before any tensor is read
        change_config(directory, CONFIG, {"hidden_size": 2**40, "num_attention_heads": 2})
        return f"{WEIGHTS}: embeddings.word_embeddings.weight has shape (24, 16), config.json"
    if how == "config a loop of links":
        (directory / CONFIG).unlink()
        (directory / CONFIG).symlink_to(CONFIG)
        return f"{CONFIG}: cannot be read (Too many levels of symbolic links)"
    if how == "max_seq_length not an integer":
        change_config(directory, SENTENCE_CONFIG, {"max_seq_length": "long"})
        return f"{SENTENCE_CONFIG}: max_seq_length must be a positive integer, got 'long'"
    if how == "architectures not names":  # was an AttributeError
        change_config(directory, CONFIG, {"architectures": [5]})
        return f"{CONFIG}: architectures must be a list of names, got [5]"
    if how == "model_type a list":  # was a TypeError (unhashable) in the registry
        change_config(directory, CONFIG, {"model_type": ["bert"]})
        return f"{CONFIG}: model_type must be a name, got ['bert']"
    if how == "a token id past vocab_size":  # the lookup clamped it to the last row, silently
        raw = json.loads((directory / TOKENIZER).read_text())
        raw["model"]["vocab"]["zebra"] = 500  # 25 tokens, the largest id 500: vocab_size 24
        (directory / TOKENIZER).write_text(json.dumps(raw))
        return f"{TOKENIZER}: token 'zebra' has id 500, past config.json's vocab_size 24"
    if how == "max_seq_length past the positions":
        change_config(directory, SENTENCE_CONFIG, {"max_seq_length": 65})
        return f"{SENTENCE_CONFIG}: max_seq_length 65 is more than"
    change_config(directory, CONFIG, {"intermediate_size": 48})  # the tensors say 32
    return WEIGHTS


#: Every way ``break_bert`` breaks a checkpoint (13 refuses each: test_real_model_experiment).
BROKEN_BERT = [
    "missing file", "other architecture", "mismatched shape", "nan weight", "infinite weight",
    "integer weight", "a billion layers", "a huge width", "config a loop of links",
    "max_seq_length not an integer", "max_seq_length past the positions",
    "architectures not names", "model_type a list", "a token id past vocab_size",
]  # fmt: skip


#: Each decoder family on Llama's layout: ``(tiny raw config, its parser, the feature that
#: distinguishes it)``.
DECODER_FAMILIES = {
    "llama": (llama.TINY, llama.parse_llama_config, "rope_scaling"),
    "qwen3": (qwen3.TINY, qwen3.parse_qwen3_config, "qk_norm"),
    "olmo2": (olmo2.TINY, olmo2.parse_olmo2_config, "full_width_qk_norm"),
    "gemma2": (gemma2.TINY, gemma2.parse_gemma2_config, "one_plus_w"),
    "gemma3_text": (gemma3.TINY, gemma3.parse_gemma3_config, "local_rope"),
}

#: The published configs (``tests/fixtures/configs/<name>/config.json``).
CONFIG_FIXTURES = Path(__file__).parent / "fixtures" / "configs"


# --- optimizers ------------------------------------------------------------------------


def matrix_and_vector() -> dict[str, np.ndarray]:
    """A matrix (decayed) and a vector (not), float32."""
    rng = np.random.default_rng(11)
    return {"w": rng.standard_normal((3, 2)).astype(np.float32),
            "b": rng.standard_normal(2).astype(np.float32)}  # fmt: skip


def optimizer_updates(optimizer, params, grads_per_step) -> list:
    """Every step's update, the parameters moved by each, in one compiled program."""

    @jax.jit
    def run(params, steps):
        state, current, out = optimizer.init(params), params, []
        for g in steps:
            updates, state = optimizer.update(g, state, current)
            current = optax.apply_updates(current, updates)
            out.append(updates)
        return out

    return [jax.tree.map(np.asarray, u) for u in run(params, grads_per_step)]


# --- readers -------------------------------------------------------------------------


def predicted_cells(text: str) -> dict[tuple[str, str], bool]:
    """``(mechanism, verdict) -> predicted`` of the first table in ``text``: a row per
    verdict, a column per mechanism, cells starting yes or no (others left out)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    names = [c.strip() for c in lines[0].strip("|").split("|")][1:]
    out = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        for name, cell in zip(names, cells[1:], strict=True):
            if cell.startswith(("yes", "no")):
                out[name, cells[0]] = cell.startswith("yes")
    return out

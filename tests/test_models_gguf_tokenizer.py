"""attnlab.models.gguf_tokenizer: tokenizers built from hand-made GGUF tokenizer metadata give
ids worked out by hand (Llama's and Gemma's SentencePiece, GPT-2's byte level), each answer
one that a construction differing where transformers' converters differ would miss (merges
ranked by score or by position, a space put before the text or not, a run of spaces respelled
or not, the chunking regex ``tokenizer.ggml.pre`` names); BOS, EOS, byte fallback and control
tokens; every refusal in one line naming the key. The slow test builds Gemma 3 270M's
tokenizer from its GGUF and checks the ids transformers gives."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnlab.models.files import CheckpointError
from attnlab.models.gguf_tokenizer import gguf_tokenizer

WHERE = "tiny.gguf"

# A SentencePiece vocabulary laid out as Gemma's is: control tokens, a run of two spaces
# (user-defined, type 4, written as spaces as llama.cpp writes Gemma's), then the 256 byte
# pieces (type 6), then normal pieces (type 1) whose scores do NOT follow their order: "ab"
# comes before "bc" in the file but scores lower, so ranking merges by score (Llama) and by
# position (Gemma) split "abc" differently.
SP_CONTROL = ["<pad>", "<eos>", "<bos>", "<unk>"]  # ids 0..3
SP_BYTES = [f"<0x{byte:02X}>" for byte in range(256)]  # ids 5..260: <0xNN> is 5 + NN
SP_PIECES = {  # piece: score, ids 261..270
    "\u2581": -1.0,
    "a": -2.0,
    "b": -3.0,
    "c": -4.0,
    "h": -5.0,
    "i": -6.0,
    "ab": -9.0,
    "bc": -7.0,
    "hi": -8.0,
    "\u2581hi": -10.0,
}
SP_TOKENS = [*SP_CONTROL, "  ", *SP_BYTES, *SP_PIECES]
PAD, EOS, BOS, UNK, TWO_SPACES = 0, 1, 2, 3, 4
SP_SPACE, SP_A, SP_B, SP_C, SP_H, SP_I, SP_AB, SP_BC, SP_HI, SP_SPACE_HI = range(261, 271)


def byte_id(byte: int) -> int:
    """The id of the byte piece ``<0xNN>`` in the SentencePiece vocabulary."""
    return 5 + byte


def sentencepiece(architecture: str = "llama", **changes: Any) -> dict[str, Any]:
    """GGUF tokenizer metadata of the tiny SentencePiece vocabulary, with ``changes`` (a value
    of None removes the key)."""
    metadata = {
        "general.architecture": architecture,
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": SP_TOKENS,
        "tokenizer.ggml.scores": [0.0] * 4 + [-1000.0] + [0.0] * 256 + list(SP_PIECES.values()),
        "tokenizer.ggml.token_type": [3] * 4 + [4] + [6] * 256 + [1] * len(SP_PIECES),
        "tokenizer.ggml.bos_token_id": BOS,
        "tokenizer.ggml.eos_token_id": EOS,
        "tokenizer.ggml.unknown_token_id": UNK,
        "tokenizer.ggml.padding_token_id": PAD,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": False,
        "tokenizer.ggml.add_space_prefix": architecture == "llama",
    }
    metadata.update(changes)
    return {key: value for key, value in metadata.items() if value is not None}


# A byte-level vocabulary: GPT-2 spells a space "Ġ" and the bytes of "é" (C3 A9) "Ã©".
BL_TOKENS = ["<|endoftext|>", "h", "i", "Ġ", "t", "1", "2", "3", "4", "Ã", "©"]
BL_TOKENS += ["hi", "Ġt", "Ġth", "12", "123", "1234", "Ã©"]
BL_MERGES = ["h i", "Ġ t", "Ġt h", "1 2", "12 3", "123 4", "Ã ©"]
ENDOFTEXT, BL_H, BL_I, BL_SPACE, BL_T, ONE, TWO, THREE, FOUR = range(9)
BL_HI, BL_SPACE_T, BL_SPACE_TH, TWELVE, ONE23, ONE234, E_ACUTE = range(11, 18)


def byte_level(**changes: Any) -> dict[str, Any]:
    """GGUF tokenizer metadata of the tiny byte-level vocabulary, with ``changes`` (a value of
    None removes the key)."""
    metadata = {
        "general.architecture": "gpt2",
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": BL_TOKENS,
        "tokenizer.ggml.token_type": [3] + [1] * (len(BL_TOKENS) - 1),
        "tokenizer.ggml.merges": BL_MERGES,
        "tokenizer.ggml.bos_token_id": ENDOFTEXT,
        "tokenizer.ggml.eos_token_id": ENDOFTEXT,
        "tokenizer.ggml.add_bos_token": False,
    }
    metadata.update(changes)
    return {key: value for key, value in metadata.items() if value is not None}


def ids(metadata: dict[str, Any], text: str) -> list[int]:
    """The ids ``text`` encodes to (special tokens added as the metadata says)."""
    return gguf_tokenizer(metadata, WHERE).encode(text).ids


def refused(metadata: dict[str, Any], pattern: str) -> str:
    """The one-line ``CheckpointError`` message building ``metadata`` gives, checked to name
    ``WHERE`` first and to match ``pattern``."""
    with pytest.raises(CheckpointError, match=pattern) as caught:
        gguf_tokenizer(metadata, WHERE)
    message = str(caught.value)
    assert message.startswith(f"{WHERE}: ") and "\n" not in message
    return message


# --- Llama's SentencePiece (general.architecture llama) -------------------------------------


def test_llama_puts_a_space_before_the_text_where_add_space_prefix_says_so():
    # "hi" is read as "▁hi": h+i (score -8) merges first, then ▁+hi (-10); BOS first.
    assert ids(sentencepiece(), "hi") == [BOS, SP_SPACE_HI]
    # Each space is a ▁ too: "▁hi▁hi" is two "▁hi".
    assert ids(sentencepiece(), "hi hi") == [BOS, SP_SPACE_HI, SP_SPACE_HI]
    # Without the prefix, "hi" is the piece "hi".
    assert ids(sentencepiece(**{"tokenizer.ggml.add_space_prefix": False}), "hi") == [BOS, SP_HI]
    # Absent, the flag is true for a SentencePiece vocabulary (llama.cpp's default).
    assert ids(sentencepiece(**{"tokenizer.ggml.add_space_prefix": None}), "hi") == [
        BOS,
        SP_SPACE_HI,
    ]


def test_llama_ranks_merges_by_score():
    # "abc": b+c (score -7) outranks a+b (-9), so "a" "bc"; the prefix ▁ has no merge with "a".
    assert ids(sentencepiece(), "abc") == [BOS, SP_SPACE, SP_A, SP_BC]
    assert ids(sentencepiece(**{"tokenizer.ggml.add_space_prefix": False}), "abc") == [
        BOS,
        SP_A,
        SP_BC,
    ]


def test_llama_puts_no_second_space_before_text_starting_with_one():
    # "  hi" is "▁▁hi" (transformers 5's non-legacy Metaspace adds no third ▁), and Llama does
    # not respell the file's "  ", so no ▁+▁ merge: "▁" then "▁hi". The legacy shape (a ▁
    # prepended always) would give ▁ ▁ ▁hi.
    assert ids(sentencepiece(), "  hi") == [BOS, SP_SPACE, SP_SPACE_HI]


def test_llama_puts_the_space_before_the_first_text_only():
    # Text after a special token gets no ▁ (prepend_scheme "first", as transformers 5 builds
    # it): "hi" is "hi" there. Prepending always would make it "▁hi".
    assert ids(sentencepiece(), "<eos>hi") == [BOS, EOS, SP_HI]
    assert ids(sentencepiece(), "hi<eos>hi") == [BOS, SP_SPACE_HI, EOS, SP_HI]


def test_llama_decodes_what_it_encodes():
    tokenizer = gguf_tokenizer(sentencepiece(), WHERE)
    for text in ("hi", "hi hi", "abc", "h\u00e9 hi"):
        assert tokenizer.decode(tokenizer.encode(text).ids) == text
    # As transformers' LlamaTokenizer: the decoder strips one leading space, which text that
    # starts with one never had put before it.
    assert tokenizer.decode(tokenizer.encode("  hi").ids) == " hi"


# --- Gemma's SentencePiece (general.architecture gemma3) ------------------------------------


def test_gemma_puts_no_space_before_the_text():
    # The same file read as Gemma's: "hi" is the piece "hi", whatever add_space_prefix says.
    assert ids(sentencepiece("gemma3"), "hi") == [BOS, SP_HI]
    assert ids(sentencepiece("gemma3", **{"tokenizer.ggml.add_space_prefix": True}), "hi") == [
        BOS,
        SP_HI,
    ]
    # A space inside is a ▁: "hi▁hi", h+i merging first (position 269 before ▁hi's 270).
    assert ids(sentencepiece("gemma3"), "hi hi") == [BOS, SP_HI, SP_SPACE_HI]


def test_gemma_ranks_merges_by_position_not_score():
    # "ab" (id 267) comes before "bc" (268) in the file, so a+b merges first: "ab" "c".
    assert ids(sentencepiece("gemma3"), "abc") == [BOS, SP_AB, SP_C]


def test_gemma_respells_a_run_of_spaces_as_pieces():
    # The file's "  " (id 4) is Gemma's "▁▁": "  hi" is "▁▁hi", ▁+▁ (position 4) merging first.
    # Unrespelled, no ▁+▁ merge exists and it would be ▁ ▁hi.
    assert ids(sentencepiece("gemma3"), "  hi") == [BOS, TWO_SPACES, SP_HI]


@pytest.mark.parametrize("architecture", ["gemma", "gemma2", "gemma3"])
def test_every_gemma_architecture_reads_gemmas_shape(architecture):
    assert ids(sentencepiece(architecture), "abc") == [BOS, SP_AB, SP_C]


def test_gemma_decodes_what_it_encodes():
    tokenizer = gguf_tokenizer(sentencepiece("gemma3"), WHERE)
    for text in ("hi", "  hi", "abc hi", "h\u00e9"):
        assert tokenizer.decode(tokenizer.encode(text).ids) == text


# --- Both SentencePiece shapes --------------------------------------------------------------


@pytest.mark.parametrize("architecture", ["llama", "gemma3"])
def test_a_character_the_vocabulary_lacks_falls_back_to_its_bytes(architecture):
    # "é" is no piece: its UTF-8 bytes C3 A9 are, as <0xC3> <0xA9> (not <unk>).
    prefix = [SP_SPACE] if architecture == "llama" else []
    expected = [BOS, *prefix, SP_H, byte_id(0xC3), byte_id(0xA9)]
    assert ids(sentencepiece(architecture), "h\u00e9") == expected


@pytest.mark.parametrize("architecture", ["llama", "gemma3"])
def test_bos_and_eos_follow_the_flags(architecture):
    hi = ids(sentencepiece(architecture, **{"tokenizer.ggml.add_bos_token": False}), "hi")
    assert hi == [SP_SPACE_HI if architecture == "llama" else SP_HI]
    with_eos = sentencepiece(architecture, **{"tokenizer.ggml.add_eos_token": True})
    assert ids(with_eos, "hi") == [BOS, *hi, EOS]
    # Absent, add_bos_token is true for a SentencePiece vocabulary (llama.cpp's default).
    assert ids(sentencepiece(architecture, **{"tokenizer.ggml.add_bos_token": None}), "hi") == [
        BOS,
        *hi,
    ]
    # Asked for none, none are added.
    tokenizer = gguf_tokenizer(with_eos, WHERE)
    assert tokenizer.encode("hi", add_special_tokens=False).ids == hi


@pytest.mark.parametrize("architecture", ["llama", "gemma3"])
def test_control_tokens_are_matched_whole_in_the_text(architecture):
    hi = [SP_SPACE_HI] if architecture == "llama" else [SP_HI]
    assert ids(sentencepiece(architecture), "hi<eos>") == [BOS, *hi, EOS]
    assert ids(sentencepiece(architecture), "<pad>") == [BOS, PAD]


def test_numpy_arrays_read_as_lists():
    arrays = {
        "tokenizer.ggml.tokens": np.array(SP_TOKENS),
        "tokenizer.ggml.scores": np.array(sentencepiece()["tokenizer.ggml.scores"], np.float32),
        "tokenizer.ggml.token_type": np.array(sentencepiece()["tokenizer.ggml.token_type"]),
    }
    assert ids(sentencepiece(**arrays), "abc") == [BOS, SP_SPACE, SP_A, SP_BC]


# --- GPT-2's byte level -------------------------------------------------------------------


def test_byte_level_merges_in_the_files_order():
    # GPT-2's regex cuts "hi thi" into "hi" and " thi" ("Ġthi"). In "Ġthi", h+i (the first
    # merge) goes before Ġ+t (the second), which leaves no "Ġt" "h" for Ġt+h: "Ġt" "hi". Merges
    # taken in the reverse order would give "Ġth" "i".
    assert ids(byte_level(), "hi thi") == [BL_HI, BL_SPACE_T, BL_HI]
    assert ids(byte_level(), "thi") == [BL_T, BL_HI]
    assert ids(byte_level(), " th") == [BL_SPACE_TH]
    # "é" is the bytes C3 A9, spelled "Ã©", one merge.
    assert ids(byte_level(), "h\u00e9") == [BL_H, E_ACUTE]


def test_byte_level_splits_digits_as_tokenizer_ggml_pre_names():
    # GPT-2's regex keeps "1234" whole (merged 1+2, 12+3, 123+4); Llama 3's cuts digits in
    # threes (123, 4); Qwen2's one by one.
    assert ids(byte_level(), "1234") == [ONE234]
    assert ids(byte_level(**{"tokenizer.ggml.pre": "llama-bpe"}), "1234") == [ONE23, FOUR]
    assert ids(byte_level(**{"tokenizer.ggml.pre": "qwen2"}), "1234") == [ONE, TWO, THREE, FOUR]
    # A name it does not know is GPT-2's split, never a regex of its own.
    assert ids(byte_level(**{"tokenizer.ggml.pre": r"\p{N}"}), "1234") == [ONE234]


def test_byte_level_bos_and_control_tokens():
    # No BOS unless asked for (absent, the flag is false for a byte-level vocabulary).
    assert ids(byte_level(**{"tokenizer.ggml.add_bos_token": None}), "hi") == [BL_HI]
    assert ids(byte_level(**{"tokenizer.ggml.add_bos_token": True}), "hi") == [ENDOFTEXT, BL_HI]
    assert ids(byte_level(), "hi<|endoftext|>") == [BL_HI, ENDOFTEXT]


def test_byte_level_decodes_what_it_encodes():
    tokenizer = gguf_tokenizer(byte_level(), WHERE)
    for text in ("hi thi", "h\u00e9 1234", "hi<|endoftext|>"):
        assert tokenizer.decode(tokenizer.encode(text).ids, skip_special_tokens=False) == text


def test_no_padding_no_truncation():
    tokenizer = gguf_tokenizer(sentencepiece("gemma3"), WHERE)
    assert tokenizer.padding is None and tokenizer.truncation is None


# --- Refusals -------------------------------------------------------------------------------


def test_refuses_a_tokenizer_model_not_read_here():
    message = refused(sentencepiece(**{"tokenizer.ggml.model": "bert"}), "tokenizer.ggml.model")
    assert message == f"{WHERE}: tokenizer.ggml.model 'bert' is not read here (llama, gpt2)"


@pytest.mark.parametrize(
    ("metadata", "key"),
    [
        (sentencepiece(**{"tokenizer.ggml.model": None}), "tokenizer.ggml.model"),
        (sentencepiece(**{"tokenizer.ggml.tokens": None}), "tokenizer.ggml.tokens"),
        (sentencepiece(**{"tokenizer.ggml.scores": None}), "tokenizer.ggml.scores"),
        (sentencepiece(**{"tokenizer.ggml.token_type": None}), "tokenizer.ggml.token_type"),
        (sentencepiece(**{"general.architecture": None}), "general.architecture"),
        (byte_level(**{"tokenizer.ggml.merges": None}), "tokenizer.ggml.merges"),
    ],
)
def test_refuses_a_missing_key(metadata, key):
    refused(metadata, f"^{WHERE}: {key} is missing$")


@pytest.mark.parametrize(("flag", "key"), [("add_bos_token", "bos"), ("add_eos_token", "eos")])
def test_refuses_a_flag_without_its_token(flag, key):
    metadata = sentencepiece(
        **{f"tokenizer.ggml.{flag}": True, f"tokenizer.ggml.{key}_token_id": None}
    )
    refused(metadata, rf"tokenizer\.ggml\.{key}_token_id is missing \(tokenizer\.ggml\.{flag}")


@pytest.mark.parametrize(
    ("key", "entries"),
    [
        ("tokenizer.ggml.scores", len(SP_TOKENS) - 1),
        ("tokenizer.ggml.token_type", len(SP_TOKENS) + 1),
    ],
)
def test_refuses_arrays_of_another_length_than_the_tokens(key, entries):
    metadata = sentencepiece(**{key: [1] * entries})
    refused(metadata, f"{key} holds {entries} entries for {len(SP_TOKENS)} tokens")


@pytest.mark.parametrize(
    "key",
    [
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.padding_token_id",
    ],
)
def test_refuses_a_special_token_id_past_the_vocabulary(key):
    size = len(SP_TOKENS)
    refused(sentencepiece(**{key: size}), f"{key} {size} is past the vocabulary of {size} tokens")
    refused(sentencepiece(**{key: -1}), f"{key} -1 is negative")


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"tokenizer.ggml.add_bos_token": "yes"}, "tokenizer.ggml.add_bos_token is 'yes', not a"),
        ({"tokenizer.ggml.bos_token_id": 2.0}, "tokenizer.ggml.bos_token_id is 2.0, not a token"),
        ({"tokenizer.ggml.tokens": "abc"}, "tokenizer.ggml.tokens is 'abc', not an array"),
        ({"tokenizer.ggml.tokens": [*SP_TOKENS[:-1], 7]}, r"tokens\[270\] is 7, not a string"),
        ({"tokenizer.ggml.tokens": []}, "tokenizer.ggml.tokens is empty"),
        ({"tokenizer.ggml.token_type": [True] * len(SP_TOKENS)}, r"token_type\[0\] is True"),
        ({"tokenizer.ggml.scores": [math.nan] * len(SP_TOKENS)}, r"scores\[0\] is nan, not a"),
        ({"general.architecture": ["gemma3"]}, "general.architecture is an array of 1, not a"),
    ],
)
def test_refuses_a_value_of_another_type(changes, pattern):
    refused(sentencepiece(**changes), pattern)


def test_refuses_a_merge_the_vocabulary_cannot_make():
    merges = [*BL_MERGES, "h x"]
    refused(byte_level(**{"tokenizer.ggml.merges": merges}), r"merges\[7\] 'h x' is not two tokens")
    refused(byte_level(**{"tokenizer.ggml.merges": ["h t"]}), r"'h t' merges to 'ht', which is not")
    refused(byte_level(**{"tokenizer.ggml.pre": 3}), "tokenizer.ggml.pre is 3, not a string")


# --- Gemma 3 270M, against transformers -----------------------------------------------------


@pytest.fixture(scope="session")
def gemma3_metadata(gemma3_gguf: Path) -> dict[str, Any]:
    """Gemma 3 270M's GGUF metadata (the ``gemma3_gguf`` fixture's file)."""
    import gguf  # imported here: only this fixture reads a GGUF file

    reader = gguf.GGUFReader(str(gemma3_gguf))
    return {
        key: field.contents() for key, field in reader.fields.items() if not key.startswith("GGUF.")
    }


@pytest.mark.slow  # assembles a 253 MB file and parses its 262,144-token vocabulary
def test_gemma3_270m_gives_transformers_ids(gemma3_metadata, gemma3_reference):
    """The ids transformers 5.25.0's GGUF loader gives five strings (the reference's
    ``token_ids``, BOS 2 first), and the text back from them."""
    tokenizer = gguf_tokenizer(gemma3_metadata, "gemma-3-270m-q4_k_m.gguf")
    assert tokenizer.get_vocab_size() == 262144
    for text, expected in gemma3_reference["token_ids"].items():
        assert tokenizer.encode(text).ids == expected, text
        assert tokenizer.decode(expected) == text

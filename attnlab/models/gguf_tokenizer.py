"""A GGUF file's tokenizer (llama.cpp's ``tokenizer.ggml.*`` metadata) built as a Hugging Face
``tokenizers.Tokenizer`` that gives the ids transformers' GGUF loader gives
(``gguf_tokenizer``). No transformers: what its converters build is built here directly.

``tokenizer.ggml.model`` says which tokenizer it is:

- ``llama``: SentencePiece BPE with byte fallback. The vocabulary is ``tokens`` (id = position),
  the merges are recovered from it (``derived_merges``, as ``GGUFTokenizerSkeleton`` and
  ``convert_slow_tokenizer.generate_merges`` recover them: every way of writing a token as two
  tokens, the merged token's rank first). Two shapes, by ``general.architecture``:

  - Llama's (``GGUFLlamaConverter`` on ``LlamaConverter``, non-legacy, as transformers 5's
    ``LlamaTokenizer``): merges ranked by ``scores``; no normalizer; a ``Metaspace``
    pre-tokenizer writing each space as ``▁`` and, where ``add_space_prefix`` (default true),
    putting one ``▁`` before the text unless it already starts with one; the decoder strips
    that space back off.
  - Gemma's (``GEMMA_ARCHITECTURES``: ``GGUFGemmaConverter`` on ``GemmaConverter``, as
    transformers 5's ``gemma_tokenizer`` and ``GemmaTokenizer``): merges ranked by position in
    the file (the scores are ranks with a placeholder -1000 punched through them, the runs of
    whitespace among them); a run of spaces in the file respelled as ``▁``s first
    (``gemma_spelling``), which is how the merges reach it; spaces written as ``▁`` by a
    normalizer and nothing put before the text (``add_space_prefix`` is not read).

- ``gpt2``: byte-level BPE (``GGUFGPTConverter`` on ``GPT2Converter``): the file's
  ``merges``; GPT-2's split of the text into chunks, or the one ``tokenizer.ggml.pre`` names
  where it names one of ``PRE_SPLITS`` (transformers 5's ``with_split``); a ``ByteLevel``
  decoder. ``add_space_prefix`` is not read (llama.cpp never prepends a space for it).

Both: every control token (``token_type`` 3) and the tokens that ``bos_token_id``,
``eos_token_id``, ``unknown_token_id`` and ``padding_token_id`` name are special added tokens
(matched in the text as they are, never split); a post-processor puts BOS first where
``add_bos_token`` (default: true for ``llama``, false for ``gpt2``, llama.cpp's defaults) and
EOS last where ``add_eos_token`` (default false). No padding, no truncation.

Every failure is a ``CheckpointError`` of one line naming ``where`` and the key: a tokenizer
model not read here, a key missing or of another type, ``tokens`` / ``scores`` /
``token_type`` of different lengths, a special token id past the vocabulary, a merge naming
a token the vocabulary lacks. Nothing in the metadata is executed or evaluated: its strings
are tokens, and its regex choice is by name from ``PRE_SPLITS``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

import numpy as np
from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    normalizers,
    pre_tokenizers,
    processors,
)
from tokenizers.models import BPE

from attnlab.models.files import CheckpointError

MODEL = "tokenizer.ggml.model"
TOKENS = "tokenizer.ggml.tokens"
SCORES = "tokenizer.ggml.scores"
TOKEN_TYPE = "tokenizer.ggml.token_type"
MERGES = "tokenizer.ggml.merges"
PRE = "tokenizer.ggml.pre"
ARCHITECTURE = "general.architecture"
ADD_BOS, ADD_EOS = "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"
ADD_SPACE_PREFIX = "tokenizer.ggml.add_space_prefix"
BOS_ID, EOS_ID = "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"
UNKNOWN_ID, PADDING_ID = "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"

#: The ``tokenizer.ggml.model`` values read here.
TOKENIZER_MODELS = ("llama", "gpt2")
#: ``general.architecture`` values whose ``llama`` tokenizer is Gemma's SentencePiece.
GEMMA_ARCHITECTURES = ("gemma", "gemma2", "gemma3")
#: Per tokenizer model, ``add_bos_token``, ``add_eos_token`` and ``add_space_prefix`` where
#: the file does not state them (llama.cpp's defaults for its SPM and BPE vocabularies).
DEFAULT_FLAGS = {
    "llama": {ADD_BOS: True, ADD_EOS: False, ADD_SPACE_PREFIX: True},
    "gpt2": {ADD_BOS: False, ADD_EOS: False, ADD_SPACE_PREFIX: False},
}
#: llama.cpp's type of a control token (``LLAMA_TOKEN_TYPE_CONTROL``).
CONTROL = 3
#: SentencePiece's spelling of a space.
SPACE = "\u2581"

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN35_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_UPPER, _LOWER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
_TEKKEN_SPLIT = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT4O_SPLIT = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTION}"
    rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTION}"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: ``tokenizer.ggml.pre`` -> the regex its vocabulary's merges were learned on, where it is
#: not GPT-2's (which ``ByteLevel`` applies itself): the names transformers 5 knows.
PRE_SPLITS = {
    name: split
    for split, names in (
        (
            _LLAMA3_SPLIT,
            "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano "
            "dbrx smaug-bpe",
        ),
        (_TEKKEN_SPLIT, "tekken"),
        (_QWEN2_SPLIT, "qwen2 deepseek-r1-qwen kormo f2llmv2 megrez"),
        (_QWEN35_SPLIT, "qwen35"),
        (_GPT4O_SPLIT, "gpt-4o llama4 kanana2 talkie minimax-m2"),
    )
    for name in names.split()
}


def gguf_tokenizer(metadata: Mapping[str, Any], where: str) -> Tokenizer:
    """The tokenizer the GGUF metadata ``metadata`` (key -> value, arrays as lists or numpy
    arrays) describes, built as the module docstring says; ``CheckpointError`` of one line
    naming ``where`` and the key for anything it lists."""
    kind = _value(metadata, MODEL, where)
    if kind not in TOKENIZER_MODELS:
        raise CheckpointError(
            f"{where}: {MODEL} {_shown(kind)} is not read here ({', '.join(TOKENIZER_MODELS)})"
        )
    tokens = _array(metadata, TOKENS, where, str, "a string")
    if not tokens:
        raise CheckpointError(f"{where}: {TOKENS} is empty")
    token_type = _array(metadata, TOKEN_TYPE, where, int, "an integer", len(tokens))
    add_bos, add_eos, add_space_prefix = (
        _flag(metadata, key, default, where) for key, default in DEFAULT_FLAGS[kind].items()
    )
    bos = _token_id(metadata, BOS_ID, len(tokens), where, needed_by=ADD_BOS if add_bos else "")
    eos = _token_id(metadata, EOS_ID, len(tokens), where, needed_by=ADD_EOS if add_eos else "")
    unknown = _token_id(metadata, UNKNOWN_ID, len(tokens), where)
    padding = _token_id(metadata, PADDING_ID, len(tokens), where)
    if kind == "llama":
        scores = _array(metadata, SCORES, where, float, "a finite number", len(tokens))
        architecture = _value(metadata, ARCHITECTURE, where)
        if architecture in GEMMA_ARCHITECTURES:
            tokens = [gemma_spelling(token) for token in tokens]
            tokenizer = gemma_tokenizer(tokens, tokens[unknown] if unknown is not None else None)
        else:
            tokenizer = llama_tokenizer(
                tokens, scores, tokens[unknown] if unknown is not None else None, add_space_prefix
            )
        special = special_tokens(tokens, token_type, (bos, eos, unknown, padding))
    else:
        merges = file_merges(_array(metadata, MERGES, where, str, "a string"), tokens, where)
        tokenizer = byte_level_tokenizer(tokens, merges, _pre_name(metadata, where))
        alphabet = set(pre_tokenizers.ByteLevel.alphabet())
        special = [
            token
            for token in special_tokens(tokens, token_type, (bos, eos, unknown, padding))
            if set(token.content) <= alphabet  # another spelling: a mislabelled byte sequence
        ]
    tokenizer.add_special_tokens(special)
    tokenizer.post_processor = bos_eos_template(
        (tokens[bos], bos) if add_bos else None, (tokens[eos], eos) if add_eos else None
    )
    return tokenizer


def gemma_spelling(token: str) -> str:
    """``token`` as Gemma's vocabulary spells it: a run of whitespace holding a space (which
    llama.cpp writes as spaces) as that many ``▁``, any other token as it is. (Like
    transformers, a run mixing a space with a tab or newline is respelled all ``▁`` too;
    Gemma 3's vocabulary has none.)"""
    return SPACE * len(token) if " " in token and not token.strip() else token


def derived_merges(
    tokens: Sequence[str], rank: Mapping[str, float] | None = None
) -> list[tuple[str, str]]:
    """The merges of a SentencePiece BPE vocabulary ``tokens`` (id = position), recovered from
    it as ``convert_slow_tokenizer.generate_merges`` does: each way of writing a token as two
    tokens, ordered by the merged token's ``rank`` (highest first; default: earlier in
    ``tokens`` is higher), then by the longer left piece, then the longer right piece, ties
    in vocabulary order. (``generate_merges`` also orders one token's splits by their ids
    first, which never decides: they differ in their left piece's length.)"""
    vocab = {token: index for index, token in enumerate(tokens)}
    if rank is None:
        rank = {token: -index for token, index in vocab.items()}
    found = [
        (rank[token], cut, len(token) - cut, token[:cut], token[cut:])
        for token in vocab
        for cut in range(1, len(token))
        if token[:cut] in vocab and token[cut:] in vocab
    ]
    found.sort(key=itemgetter(0, 1, 2), reverse=True)  # stable: ties keep vocabulary order
    return [(left, right) for *_, left, right in found]


def llama_tokenizer(
    tokens: Sequence[str], scores: Sequence[float], unknown: str | None, add_space_prefix: bool
) -> Tokenizer:
    """Llama's SentencePiece BPE: merges ranked by ``scores``; each space written as ``▁`` and,
    where ``add_space_prefix``, one ``▁`` before text that does not start with one (the
    decoder strips it again); byte fallback for what the vocabulary lacks."""
    tokenizer = _sentencepiece_bpe(
        tokens, derived_merges(tokens, dict(zip(tokens, scores, strict=True))), unknown
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement=SPACE, prepend_scheme="first" if add_space_prefix else "never", split=False
    )
    tokenizer.decoder = _sentencepiece_decoder(strip_prefix=add_space_prefix)
    return tokenizer


def gemma_tokenizer(tokens: Sequence[str], unknown: str | None) -> Tokenizer:
    """Gemma's SentencePiece BPE over ``tokens`` as Gemma spells them (``gemma_spelling``):
    merges ranked by position; each space written as ``▁``, nothing put before the text
    (``GemmaTokenizer``'s ``Split(" ")`` pre-tokenizer, which follows that normalizer and so
    never finds a space, is left out); byte fallback for what the vocabulary lacks."""
    tokenizer = _sentencepiece_bpe(tokens, derived_merges(tokens), unknown)
    tokenizer.normalizer = normalizers.Replace(" ", SPACE)
    tokenizer.decoder = _sentencepiece_decoder(strip_prefix=False)
    return tokenizer


def byte_level_tokenizer(
    tokens: Sequence[str], merges: list[tuple[str, str]], pre: str | None
) -> Tokenizer:
    """GPT-2's byte-level BPE over ``tokens`` (id = position) and ``merges``: the text cut into
    chunks by GPT-2's regex, or by ``PRE_SPLITS[pre]`` where ``pre`` names one, each chunk's
    bytes spelled as GPT-2's 256 characters; no unknown token, no byte fallback."""
    vocab = {token: index for index, token in enumerate(tokens)}
    tokenizer = Tokenizer(
        BPE(
            vocab,
            merges,
            dropout=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
        )
    )
    if pre in PRE_SPLITS:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(PRE_SPLITS[pre]), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def special_tokens(
    tokens: Sequence[str], token_type: Sequence[int], named: Iterable[int | None]
) -> list[AddedToken]:
    """The special added tokens: every control token (``token_type`` 3), then the ``named``
    ids (BOS, EOS, unknown, padding) not among them; each matched in the raw text."""
    ids = [index for index, kind in enumerate(token_type) if kind == CONTROL]
    ids += sorted({index for index in named if index is not None} - set(ids))
    return [AddedToken(tokens[index], normalized=False, special=True) for index in ids]


def bos_eos_template(
    bos: tuple[str, int] | None, eos: tuple[str, int] | None
) -> processors.TemplateProcessing:
    """The post-processor putting ``bos`` (token, id) before each sequence and ``eos`` after
    it, where given (a pair: ``BOS A EOS BOS B EOS``, as ``LlamaTokenizer`` builds it)."""
    named = [(name, token) for name, token in (("BOS", bos), ("EOS", eos)) if token is not None]

    def sequence(piece: str, type_id: int) -> list[str]:
        before = [f"BOS:{type_id}"] if bos else []
        after = [f"EOS:{type_id}"] if eos else []
        return [*before, f"{piece}:{type_id}", *after]

    return processors.TemplateProcessing(
        single=sequence("$A", 0),
        pair=sequence("$A", 0) + sequence("$B", 1),
        special_tokens=[
            {"id": name, "ids": [index], "tokens": [token]} for name, (token, index) in named
        ],
    )


def file_merges(merges: Sequence[str], tokens: Sequence[str], where: str) -> list[tuple[str, str]]:
    """``tokenizer.ggml.merges`` (``"left right"`` strings) as pairs; ``CheckpointError`` naming
    the entry where one is not two tokens joined by a space or merges to no token."""
    vocab = set(tokens)
    pairs = []
    for index, merge in enumerate(merges):
        pair = tuple(merge.split(" "))
        if len(pair) != 2 or not (pair[0] in vocab and pair[1] in vocab):
            raise CheckpointError(
                f"{where}: {MERGES}[{index}] {_shown(merge)} is not two tokens of "
                f"{TOKENS} joined by one space"
            )
        if pair[0] + pair[1] not in vocab:
            raise CheckpointError(
                f"{where}: {MERGES}[{index}] {_shown(merge)} merges to "
                f"{_shown(pair[0] + pair[1])}, which is not in {TOKENS}"
            )
        pairs.append(pair)
    return pairs


def _sentencepiece_bpe(
    tokens: Sequence[str], merges: list[tuple[str, str]], unknown: str | None
) -> Tokenizer:
    """A SentencePiece BPE model (``<0xXX>`` byte pieces for what the vocabulary lacks,
    consecutive unknowns fused) over ``tokens`` (id = position) and ``merges``."""
    vocab = {token: index for index, token in enumerate(tokens)}
    return Tokenizer(
        BPE(vocab, merges, unk_token=unknown, fuse_unk=True, byte_fallback=True, dropout=None)
    )


def _sentencepiece_decoder(strip_prefix: bool) -> decoders.Sequence:
    """``▁`` back to a space, ``<0xXX>`` pieces back to their bytes and joined; and where
    ``strip_prefix``, the one space the pre-tokenizer put first taken off."""
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if strip_prefix:
        steps.append(decoders.Strip(content=" ", left=1, right=0))
    return decoders.Sequence(steps)


def _pre_name(metadata: Mapping[str, Any], where: str) -> str | None:
    """``tokenizer.ggml.pre`` (None where absent); ``CheckpointError`` if not a string."""
    pre = metadata.get(PRE)
    if pre is not None and not isinstance(pre, str):
        raise CheckpointError(f"{where}: {PRE} is {_shown(pre)}, not a string")
    return pre


def _value(metadata: Mapping[str, Any], key: str, where: str) -> str:
    """The string at ``key``; ``CheckpointError`` where it is missing or not a string."""
    if key not in metadata:
        raise CheckpointError(f"{where}: {key} is missing")
    value = metadata[key]
    if not isinstance(value, str):
        raise CheckpointError(f"{where}: {key} is {_shown(value)}, not a string")
    return value


def _array(
    metadata: Mapping[str, Any],
    key: str,
    where: str,
    kind: type,
    what: str,
    length: int | None = None,
) -> list[Any]:
    """The array at ``key`` (a list, tuple or 1-d numpy array) as a list of ``kind`` (``float``
    takes integers too, and only finite values; neither number takes a bool), of ``length``
    entries where given (the number of tokens); ``CheckpointError`` naming ``key`` (and the
    first bad entry) otherwise."""
    if key not in metadata:
        raise CheckpointError(f"{where}: {key} is missing")
    value = metadata[key]
    if isinstance(value, np.ndarray) and value.ndim == 1:
        value = value.tolist()
    if not isinstance(value, list | tuple):
        raise CheckpointError(f"{where}: {key} is {_shown(value)}, not an array")
    if length is not None and len(value) != length:
        raise CheckpointError(
            f"{where}: {key} holds {len(value)} entries for {length} tokens ({TOKENS})"
        )
    accepted = (int, float) if kind is float else (kind,)

    def fits(item: Any) -> bool:
        return type(item) in accepted and (kind is not float or math.isfinite(item))

    bad = next((at for at, item in enumerate(value) if not fits(item)), None)
    if bad is not None:
        raise CheckpointError(f"{where}: {key}[{bad}] is {_shown(value[bad])}, not {what}")
    return list(value)


def _flag(metadata: Mapping[str, Any], key: str, default: bool, where: str) -> bool:
    """The boolean at ``key``, ``default`` where absent; ``CheckpointError`` if not a bool."""
    value = metadata.get(key, default)
    if not isinstance(value, bool | np.bool_):
        raise CheckpointError(f"{where}: {key} is {_shown(value)}, not a boolean")
    return bool(value)


def _token_id(
    metadata: Mapping[str, Any], key: str, size: int, where: str, needed_by: str = ""
) -> int | None:
    """The token id at ``key`` (None where absent, unless the flag ``needed_by`` is true);
    ``CheckpointError`` where it is not an integer or not below ``size``, the number of
    tokens."""
    if key not in metadata:
        if needed_by:
            raise CheckpointError(f"{where}: {key} is missing ({needed_by} is true)")
        return None
    value = metadata[key]
    if not isinstance(value, int | np.integer) or isinstance(value, bool):
        raise CheckpointError(f"{where}: {key} is {_shown(value)}, not a token id")
    if value < 0:
        raise CheckpointError(f"{where}: {key} {value} is negative, not a token id")
    if value >= size:
        raise CheckpointError(
            f"{where}: {key} {value} is past the vocabulary of {size} tokens (ids 0 to {size - 1})"
        )
    return int(value)


def _shown(value: Any) -> str:
    """``value`` for a one-line message: its repr up to 60 characters, an array by its shape."""
    if isinstance(value, np.ndarray):
        return f"a {value.ndim}-d numpy array of {value.size}"
    if isinstance(value, list | tuple):
        return f"an array of {len(value)}"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."

"""Pretrained architectures read from checkpoints, built on ``attnlab.core``'s attention: a
registry of checkpoint families.

``files``: a checkpoint's files (``config.json``, ``model.safetensors`` without PyTorch,
``tokenizer.json``) read and checked, and the one loader of a folder of them, for every
family; ``config_keys``: the checks of ``config.json``'s keys every parser calls.
``layers``: what the families share inside a forward (layer and RMS norms, rotary
positions, grouped-query key/value heads, the per-layer ``Trace``). ``decoder`` and
``decoder_config``: the decoder the Llama-layout families share, its forward and its
configuration. ``registry``: ``model_type`` -> family, and ``read_checkpoint``.
``ledger``: the temperature ledger of a decoder's config and weights. One module a family:
``bert`` (Hugging Face ``BertModel``, sentence-transformers' pooled embedding; the packaged
all-MiniLM-L6-v2), ``gpt2`` (``GPT2LMHeadModel``), and on the shared decoder ``llama``
(Llama, Mistral), ``attnlab_llama`` (experiment 14's models in Llama's layout), ``qwen3``,
``olmo2``, ``gemma2`` and ``gemma3``; every decoder head through ``Mechanism.attend``.
Experiment 14's own model and its exports live in ``attnlab.lm``.
"""

"""Pretrained architectures read from checkpoints, built on ``attnlab.core``'s attention: a
registry of checkpoint families.

``files``: a checkpoint's files (``config.json``, ``model.safetensors`` without PyTorch,
``tokenizer.json``) read and checked, for every family. ``layers``: what the families share
inside a forward (layer norm, the per-layer ``Trace``). ``registry``: ``model_type`` ->
family, and ``read_checkpoint``. One module a family: ``bert`` (Hugging Face ``BertModel``,
sentence-transformers' pooled embedding; the packaged all-MiniLM-L6-v2) and ``gpt2``
(``GPT2LMHeadModel``, causal, every head through ``Mechanism.attend``). ``causal_lm`` and
``gpt2_export``: the suite's causal LM (experiment 14's) and its GPT-2 export (moving to
``attnlab/lm/``).
"""

"""Pretrained architectures read from checkpoints, built on ``attnlab.core``'s attention.

``checkpoint``: a BERT-family checkpoint directory (``config.json``, ``model.safetensors``,
``tokenizer.json``), checked and loaded without PyTorch; the default is the packaged
``sentence-transformers/all-MiniLM-L6-v2``. ``bert``: the encoder (Hugging Face
``BertModel`` layout) and sentence-transformers' pooled embedding. ``gpt2``: the GPT-2
family (``GPT2LMHeadModel`` layout), causal, every head through ``Mechanism.attend``;
``read_checkpoint`` picks the family by ``model_type``. ``gpt2_export``: the suite's causal
LM (``causal_lm``, experiment 14's) written as a GPT-2 checkpoint, and GPT-2's
initialisation.
"""

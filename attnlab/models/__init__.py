"""Pretrained architectures read from checkpoints, built on ``attnlab.core``'s attention.

``checkpoint``: a BERT-family checkpoint directory (``config.json``, ``model.safetensors``,
``tokenizer.json``), checked and loaded without PyTorch; the default is the packaged
``sentence-transformers/all-MiniLM-L6-v2``. ``bert``: the encoder (Hugging Face
``BertModel`` layout) and sentence-transformers' pooled embedding.
"""

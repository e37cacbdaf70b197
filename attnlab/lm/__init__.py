"""The language-model wing (begun): what decides the attention temperature from the
optimizer's side, for experiment 14's causal LM and for a researcher's own training loop.

==================  ==========================================================================
``optim``           14's AdamW: warmup and cosine decay, clipping, rate-independent decay;
                    the z-loss
``optimizers``      the optimizer seam: a configuration's name and rate -> an optax
                    ``GradientTransformation`` (``adamw``: 14's; ``muon``: Muon on the hidden
                    matrices, 14's AdamW on the rest)
``qk_clip``         QK-Clip (Kimi K2, Megatron-LM): rescale each head's W_q, W_k after a step
                    so that its largest logit is at most ``tau``
``ledger``          the temperature ledger: per layer and head, what sets the logits' scale
==================  ==========================================================================

The model, the task and the loop still live in ``attnlab.models.causal_lm`` and
``attnlab.training.tasks.lm``. This package's ``__init__`` imports nothing.
"""

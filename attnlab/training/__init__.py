"""What both training wings stand on (``attnlab.recall``, 04's recall task, and
``attnlab.lm``, 14's language model): the optimizers and what their steps share.

==============  ==========================================================================
``optimizers``  the registry of optimizers by name (``adam``, ``adamw``, ``muon``,
                ``lion``): a frozen dataclass of hyperparameters with a ``build``; the
                ``Recipe`` they share; ``make_optimizer``, the one switch to optax
``schedules``   warmup and cosine or warmup-stable-decay schedules; weight decay
                independent of the rate or coupled to it
==============  ==========================================================================

This package's ``__init__`` imports nothing; import the module you need.
"""

"""What both training wings stand on (``attnlab.recall``, 04's recall task, and
``attnlab.lm``, 14's language model): the lanes engine, the task and optimizer registries,
and what the optimizers' steps share.

==============  ==========================================================================
``lanes``       the engine: a task's compiled programs (init, chunk, evaluate) run for
                every (rate, seed) as lanes, in ``lax.scan`` chunks, padded and sharded,
                with progress and the divergence record (``run_lanes``)
``tasks``       the ``Task`` contract and ``TASKS``, the registry by name (``recall``,
                ``lm``, a user's); ``train_task`` trains a mechanism on one
``optimizers``  the registry of optimizers by name (``adam``, ``adamw``, ``muon``,
                ``lion``): a frozen dataclass of hyperparameters with a ``build``; the
                ``Recipe`` they share; ``make_optimizer``, the one switch to optax
``schedules``   warmup and cosine or warmup-stable-decay schedules; weight decay
                independent of the rate or coupled to it
==============  ==========================================================================

This package imports neither wing (``TASKS`` names the built-ins by module and imports
them when first asked for); its ``__init__`` imports nothing.
"""

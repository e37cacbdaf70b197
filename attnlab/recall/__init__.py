"""The recall wing: article 004's associative-recall demo, everything about training it, and
what the studies that train it share (04, 05, 09, 10, 11's recall card, 12, the bench).

==============  ==========================================================================
``task``        the associative-recall sequences and their keyed data streams
``model``       the single-head attention model (Flax linen) and its laws
``config``      ``RecallConfig``, a seed's key streams, the model a configuration builds
``step``        the optimiser (``adam`` of ``attnlab.training.optimizers``), one
                training step, readable top to bottom, and a chunk of them in
                ``lax.scan``
``trainer``     ``Run``s as lanes of one compiled program: ``Trainer``, ``train_runs``
``recall_task`` the recall task as a ``Task`` of ``attnlab.training.tasks.TASKS`` (its
                model, loss and step on the lanes engine)
``columns``     the training tables' columns and ``make verify`` rules (no JAX, so
                declarations import it)
``tables``      training results -> the per-step curves and per-seed summaries
``flags``       the recall flags every recall training script shares (``--reading``)
``readings``    the declared readings of the set-up the article leaves unstated (the
                families the fits choose among, which ``--reading`` names)
``predictions`` the fits' predictions of the article's training numbers (09, 12; judged
                by the recall study beside its own reading)
``widths``      the demo across widths and learning rates as lanes of the Trainer, with
                diagnostics of the temperature (10 and the card)
==============  ==========================================================================

The language model (``attnlab.lm``) is the other wing; neither imports the other. What
both use lies below them in ``attnlab.training`` (the lanes engine, the task and optimizer
registries) and ``attnlab.core`` (the per-run summary and divergence record in ``curves``,
padding and sharding of lanes in ``parallel``, the progress callback in ``progress``); the
studies that train recall run ``Trainer``, whose lanes mix widths and mechanisms. This
package's ``__init__`` imports nothing; import the module you need.
"""

"""The training engine: the recall task of article 004, its model, a configuration, the step
and the ``Trainer`` that every training of the suite runs through (04, 05, 09, 10, 12, the
card and the bench). A study says *what* to train (mechanisms, readings, widths, learning
rates as lanes); this package says *how*.

==================  ==========================================================================
``task``            the associative-recall sequences and their keyed data streams
``model``           the single-head attention model (Flax linen) and its laws
``config``          ``RecallConfig``, a seed's key streams, the model a configuration builds
``step``            one training step, readable top to bottom, and a chunk of them in a scan
``trainer``         ``Run``s as lanes of one compiled program: ``Trainer``, ``train_runs``
``lanes``           how the Trainer lays out its lanes in blocks for the compiled chunk
``tasks/lm``        the byte-level language-model task: data, loss, step, lanes of a sweep
==================  ==========================================================================

What the studies make of its results lives above it: the recall studies' tables and flags
in ``attnlab.recall``, the readings of the article's unstated set-up in ``attnlab.fits``,
the sweeps in ``attnlab.sweeps``; the language model's optimizers and QK-Clip in
``attnlab.lm``. This package's ``__init__`` imports nothing; import the
module you need.
"""

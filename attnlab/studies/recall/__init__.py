"""Associative recall (experiment 04, Figure 3): article 004, "A Training Demo".

The task (``task.py``, data), the single-head model (``model.py``) and its training loop
(``train.py``) are kept apart; ``summary.py`` turns curves into milestones and plateaus.
Judges ``attnlab.claims.TRAINING_CLAIMS``: the step-0 W_Q gradient norms and their ratio,
the loss milestones, the unscaled plateau, final losses and held-out accuracy.
"""

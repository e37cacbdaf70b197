"""Associative recall (experiment 04, Figure 3): article 004, "A Training Demo". The task
(``task.py``, data), the single-head model (``model.py``) and the training engine every
training study uses (``train.py``) are kept apart; ``summary.py`` turns curves into
milestones and plateaus. Judges ``attnlab.claims.TRAINING_CLAIMS``; the set-up and its
choices are in this folder's README.md.
"""

"""Associative recall (experiment 04, Figure 3): article 004, "A Training Demo", trained by
the recall wing's engine (``attnlab.recall``) under 04's reading of the set-up. Judges
``attnlab.claims.TRAINING_CLAIMS`` on its summary CSV (``study.py``) beside each fit of
09; the set-up and its choices are in this folder's README.md.
"""

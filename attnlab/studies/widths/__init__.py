"""Experiment 10 (Figures 8 and 9): the training demo across head widths, and the drift of
the attention temperature once training moves the weights. Judges
``attnlab.studies.widths.study.CLAIMS`` (article 004's training claims about width, and its
closing question); the runs and diagnostics are in this folder's README.md.
"""

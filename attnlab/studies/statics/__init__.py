"""Statics (experiments 01-03, Figures 1-2): article 004, "The Variance Argument", "What
Breaks Without It: Saturation" and "The Gradient Argument". Judges
``attnlab.studies.statics.study.CLAIMS``; the method (samplers, the Jacobian norm) is in this
folder's README.md.
"""

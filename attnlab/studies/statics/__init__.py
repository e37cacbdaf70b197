"""Statics (experiments 01-03, Figures 1-2): article 004, "The Variance Argument", "What
Breaks Without It: Saturation" and "The Gradient Argument".

Judges the 21 static numbers of ``attnlab.claims.STATIC_CLAIMS``: the std of ``q . k``,
max weight and entropy of scaled and unscaled softmax rows, and the softmax-Jacobian norm
against d_k (its peak and the crossing of the two curves).
"""

"""Experiment 10 (Figures 8 and 9): the training demo across head widths, and the drift of
the attention temperature once training moves the weights.

Tests article 004's training claims that one width cannot: unscaled attention at large
``d_k`` as a hard gather with frozen routing and a learnable payload; the slow-down as the
softmax Jacobian at work (beside 03's static ratio at 16 keys); ``d_k = 1`` making the two
variants identical; muP's ``1/d`` and learning-rate transfer across widths; and the
closing question, whether the variance argument still holds after the weights drift.
"""

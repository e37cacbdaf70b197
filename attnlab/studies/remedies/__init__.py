"""Remedies (experiment 05, Figure 4): the temperature mechanisms article 004 lists, side by
side on the recall task; folding the factor into a trained model (article 000); and how the
unscaled slow-down depends on batch size and embedding scale.
The method is in this folder's README.md.
"""

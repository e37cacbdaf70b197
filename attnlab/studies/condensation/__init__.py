"""Condensation threshold (experiment 06, Figure 5): article 004, "Keep the head small":
unscaled rows stay unsaturated while d_k <~ 2 ln n (about 11 for n = 256 keys).
The method is in this folder's README.md.
"""

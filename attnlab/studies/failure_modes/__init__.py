"""Failure modes (experiment 07, Figure 6): article 000, "Failure modes at the boundaries":
float16 softmax overflow, fill values of fully masked rows, correlated queries and keys.
The method is in this folder's README.md.
"""

"""Experiment 15: when the optimizer owns the temperature (this folder's README.md): the
causal LM of 14 under AdamW and Muon, with and without QK-Clip, over a sweep of rates and
a run ten times as long."""

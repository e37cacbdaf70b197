"""Benchmarks (``make bench``): our attention and samplers against JAX and numpy baselines,
the training loop, scaling with d_k and n. Timings, not results: never part of
``make all`` or ``make verify``.
The method is in this folder's README.md.
"""

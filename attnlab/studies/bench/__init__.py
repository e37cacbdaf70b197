"""Benchmarks (``make bench``): timings, not results, so never part of ``make all`` or
``make verify``. The rows and their method: this folder's README.md."""

"""Associative recall: the task (data), the single-head model, and its training loop."""

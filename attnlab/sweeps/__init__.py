"""What several studies share that is not the engine: the tables of a learning-rate sweep
of the causal language model (``lm``: from trained lanes, with JAX; ``lm_tables``: from
its CSV rows, pandas only), which experiment 14 and the card's language-model task both
write and read."""

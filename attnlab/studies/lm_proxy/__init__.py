"""Experiment 14: the small-scale proxy of Wortsman et al. 2023 on a byte-level causal LM
(this folder's README.md): attention logit growth with the learning rate, qk-layernorm
against 1/sqrt(d), and who owns the attention temperature after training."""

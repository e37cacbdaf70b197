"""Experiment 09 (Figure 7): the training demo's unstated set-up (article 004, "A Training
Demo"), reconstructed from the article's own numbers: a screen of the declared family of
readings (``attnlab.recall.readings``), a fit on the scaled run alone, and a
prediction of the unscaled run. The method, the score and its noise are written once, in
this folder's README.md.
"""

"""Experiment 09: the training demo's unstated set-up, reconstructed from the article's own
numbers, openly (article 004, Figure 3).

Three stages over the declared family of readings (``attnlab.studies.recall.readings``):

1. **Screen** (no training): every reading's step-0 ``||grad W_Q||`` for scaled and
   unscaled attention, median over seeds; kept when the scaled median lies within a factor
   1.5 of the article's 0.1085.
2. **Fit on the scaled run only** (the fit never reads an unscaled number). Each candidate
   is scored by the article's four scaled numbers, ``||grad W_Q||`` at step 0 = 0.1085,
   smoothed loss 1.0 at step 224, 0.1 at step 436 and final smoothed loss 0.00562:

       score = sqrt(mean_i log(ours_i / article_i)^2)

   over the four terms (root-mean-square log ratio; 0 is a perfect match, 0.1 about 10%
   off on average), ``ours_i`` the median over the fit seeds. A milestone a seed never
   reaches within the horizon counts as reached *at* the horizon (a censored value: the
   term is then a lower bound on the miss). The final-loss term takes the best run length
   of ``RUN_LENGTHS``: Adam has no schedule, so the smoothed loss at step ``L - 1`` of one
   long run *is* the final loss of an ``L``-step run. Pass 2a trains candidates for a short
   horizon (stopped early once every seed has crossed loss 0.1, after which no milestone
   can change) and scores the first three terms; pass 2b trains the best few (finalists) to
   the longest run length and adds the final-loss term; the ranking is by the full score.
3. **Predict the unscaled run**: the best reading, both variants, many seeds, identical
   initialisation and data, at its best run length; the report compares every number the
   fit did not see with the article, each with its seed-range verdict.
"""

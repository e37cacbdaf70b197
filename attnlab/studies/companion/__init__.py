"""Article 000's numbers (experiment 08): the top logit near sqrt(2 ln n) sigma, dividing by
the model width instead of the head width, and folding the factor into W_Q. Judges
``attnlab.studies.companion.study.CLAIMS``.
The method is in this folder's README.md.
"""

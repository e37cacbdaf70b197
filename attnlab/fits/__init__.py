"""What the article fits share that is not the engine: the fits' predictions of the
article's training numbers (``predictions``), which the article-fit study writes and the
recall study judges beside its own reading."""

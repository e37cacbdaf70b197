"""What the article fits share that is not the engine: the declared readings of the set-up
the article leaves unstated (``readings``: the families the fits choose among, which
``--reading`` of the recall scripts names), and the fits' predictions of the article's
training numbers (``predictions``), which the article-fit study writes and the recall
study judges beside its own reading."""

"""attnlab/studies/card/headroom.py: the headroom read from the precision cells, on both
sides of every cell (the cells computed: ``test_card_precision``)."""

from __future__ import annotations

import pandas as pd

from attnlab.studies.card.headroom import TOLERANCE, headroom


def test_headroom_reads_the_first_bad_cell():
    def rows(good: list[bool], finite: bool = True) -> pd.DataFrame:
        return pd.DataFrame(
            {"sigma": [1.0, 2.0, 4.0, 8.0], "finite_float16": finite,
             "max_error": [0.0 if g else 2 * TOLERANCE for g in good]}
        )  # fmt: skip

    assert headroom(rows([True, True, False, True])) == (2.0, False)
    assert headroom(rows([False, True, True, True])) == (0.0, False)
    assert headroom(rows([True] * 4)) == (8.0, True)
    assert headroom(rows([True] * 4, finite=False)) == (0.0, False)
    unordered = rows([True, True, True, False]).iloc[::-1]
    assert headroom(unordered) == (4.0, False)

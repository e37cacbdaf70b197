"""attnlab.models.layers: the attention masks of causal and sliding-window layers, by hand."""

from __future__ import annotations

import numpy as np

from attnlab.models.layers import causal_masks


def test_causal_masks_by_hand():
    """A global layer: query i sees keys 0..i; a sliding layer of window 3: keys i-2..i
    (i - W < j <= i), so row 3 sees 1, 2, 3 and row 4 sees 2, 3, 4."""
    masks = np.asarray(causal_masks(5, (None, 3)))
    np.testing.assert_array_equal(masks[0], np.tril(np.ones((5, 5), bool)))
    expected = np.zeros((5, 5), bool)
    for i, keys in enumerate([[0], [0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]]):
        expected[i, keys] = True
    np.testing.assert_array_equal(masks[1], expected)
    # a window as long as the row is no window
    np.testing.assert_array_equal(np.asarray(causal_masks(5, (5,)))[0], masks[0])

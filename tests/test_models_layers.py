"""attnlab.models.layers: the attention masks of causal and sliding-window layers, by hand;
YaRN's attention factor and Llama 3's frequencies."""

from __future__ import annotations

import math

import jax
import numpy as np

from attnlab.models.layers import Rope, causal_masks, inverse_frequencies, rope_tables, rotate


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


def test_yarn_attention_factor_multiplies_the_logits_by_its_square():
    rope = Rope(10000.0)
    cos, sin = rope_tables(inverse_frequencies(rope, 8), 1.2079, 5)
    plain = rope_tables(inverse_frequencies(rope, 8), 1.0, 5)
    q, k = jax.random.normal(jax.random.key(0), (2, 5, 8))
    z = rotate(q, cos, sin) @ rotate(k, cos, sin).T
    z1 = rotate(q, *plain) @ rotate(k, *plain).T
    np.testing.assert_allclose(z, 1.2079**2 * z1, rtol=1e-5)  # 5 products of 8: ~8 eps32


def test_llama3_frequencies_keep_the_fast_and_divide_the_slow():
    rope = Rope(500000.0, "llama3", 8.0, 1.0, 4.0, 8192)
    plain = inverse_frequencies(Rope(500000.0), 128)
    scaled = inverse_frequencies(rope, 128)
    wavelength = 2 * math.pi / plain
    np.testing.assert_array_equal(scaled[wavelength < 2048], plain[wavelength < 2048])
    np.testing.assert_allclose(scaled[wavelength > 8192], plain[wavelength > 8192] / 8)

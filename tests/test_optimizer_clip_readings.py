"""attnlab.studies.optimizer.clip_readings: the first firing and what follows it, read from
every recorded step."""

from __future__ import annotations

import numpy as np

from attnlab.studies.optimizer.clip_readings import after_first_clip
from attnlab.studies.optimizer.study import TAU


def test_the_steps_after_the_first_clip_are_read_from_every_step():
    signed = np.array(
        [[[50, 60], [120, 10], [90, 250], [150, 80]], [[50, 60], [70, 10], [90, 20], [95, 80]]],
        float,
    )  # [lanes, steps, L]
    fraction = (signed > TAU).astype(float) / 2
    first, after, over = after_first_clip(signed.max(axis=-1), fraction, 2 * TAU)
    assert first.tolist() == [1, -1] and over.tolist() == [1, 0]
    assert after[0] == 250 and np.isnan(after[1])

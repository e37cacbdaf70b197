"""attnlab.recall.recall_task: 04's recall task trains on the lanes engine through the
registry, and its held-out loss at step 0 is about ln 32 (32 values, uniform logits)."""

from __future__ import annotations

import dataclasses
import math

from attnlab.core.references import load_mechanism
from attnlab.training.tasks import TASKS, train_task


def test_recall_trains_on_the_engine():
    """Two rates, one seed, 40 steps at d_k 16: every lane's loss recorded per step, the
    held-out loss at step 0 within 0.5 of ln 32 (small initial logits), lower at the end
    for the larger rate, nothing diverged."""
    task = TASKS["recall"]
    config = dataclasses.replace(task.defaults(True, 0), steps=40, chunk_steps=20, eval_size=64,
                                 d_k=16, d_model=16)  # fmt: skip
    lanes = train_task(task, config, load_mechanism("scaled"), [1e-3, 1e-2], [0])
    assert lanes.metrics["loss"].shape == (2, 40) and lanes.initial_loss.shape == (2, 64)
    assert abs(lanes.initial_loss.mean() - math.log(32)) < 0.5
    assert lanes.final_loss[1].mean() < lanes.initial_loss[1].mean()
    assert (lanes.diverged_step == -1).all()

"""attnlab.lm.lm_task: 14's language model trains on the lanes engine through the registry,
its held-out loss at step 0 about ln 256, and it refuses a per-head vector of another
length in one line."""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp

from attnlab.core.mechanism import Mechanism
from attnlab.core.references import load_mechanism
from attnlab.training.tasks import TASKS, train_task


def test_the_language_model_trains_on_the_engine():
    """One rate, one seed, 20 steps at d_model 32: the held-out loss at step 0 within 0.5 of
    ln 256 (small initial logits), lower at the end."""
    task = TASKS["lm"]
    config = dataclasses.replace(task.defaults(True, 0), steps=20, warmup=2, chunk_steps=10,
                                 d_model=32, eval_windows=8)  # fmt: skip
    lanes = train_task(task, config, load_mechanism("scaled"), [1e-2], [0])
    assert lanes.metrics["loss"].shape == (1, 20)
    assert abs(lanes.initial_loss.mean() - math.log(256)) < 0.5
    assert lanes.final_loss.mean() < lanes.initial_loss.mean()


def test_a_per_head_vector_of_another_length_is_refused():
    three = Mechanism("three", lambda q, k, t: t * jnp.einsum("...qd,...kd->...qk", q, k),
                      params={"t": lambda d_k: jnp.ones(3)}, per_head=("t",))  # fmt: skip
    config = TASKS["lm"].defaults()
    assert "(d_model 64)" in TASKS["lm"].refusal(three, config)
    assert TASKS["lm"].refusal(load_mechanism("scaled"), config) is None

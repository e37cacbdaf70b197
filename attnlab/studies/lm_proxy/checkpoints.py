"""Experiment 14's trained models saved as checkpoints (``attnlab.lm.export``): each
mechanism's model at its best rate, at ``ONE_WIDTH_D_MODEL``, first seed, learned
positions, under ``results/checkpoints/14_lm_<mechanism>_d<width>/``, in GPT-2's layout or
(``--layout llama``) Llama's; experiment 13 reads either (``--checkpoint``)."""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from attnlab.core.mechanism import Mechanism
from attnlab.core.references import is_builtin
from attnlab.lm.export import Saved, saved_model
from attnlab.lm.train import SweepResult
from attnlab.studies.lm_proxy.study import SCRIPT, checkpoint_name


def best_model(
    result: SweepResult, rate: float, mechanism: Mechanism, reference: str, layout: str
) -> Saved:
    """The lane of ``result`` at ``rate`` and its first seed, as a checkpoint in ``layout``
    (a key of ``LAYOUTS``) whose ``attnlab`` object records the held-out loss 14 measured
    (mean over windows and SE, nats per byte) and how it was made (the mechanism: a
    built-in's name, else ``reference``, which experiment 13 then asks for again)."""
    lm = result.config
    lane = int(np.flatnonzero(np.isclose(result.lrs, rate))[0])
    params = jax.tree.map(lambda x: np.asarray(x[lane]), result.params)
    model = lm.model(mechanism)
    losses = result.final_loss[lane]
    record = {
        "held_out_loss": float(losses.mean()),
        "held_out_loss_se": float(losses.std(ddof=1) / math.sqrt(len(losses))),
        "made_by": {
            "script": f"experiments/{SCRIPT}",
            "mechanism": mechanism.name if is_builtin(mechanism) else reference,
            "lr": float(rate),
            "seed": int(result.seeds[lane]),
            "lm_config": dataclasses.asdict(lm),
        },
    }
    name = checkpoint_name(mechanism.name, lm.d_model)
    return saved_model(name, params, model, record, layout)

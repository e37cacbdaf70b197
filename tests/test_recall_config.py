"""attnlab.recall.config: a ``RecallConfig`` field of the wrong kind or out of its range is a
ValueError naming the field (the module's key streams and model are used, and tested, by
test_recall_trainer and test_recall_readings)."""

from __future__ import annotations

import pytest

from attnlab.recall.config import RecallConfig

#: ``(field, changes)``: the changes to the defaults that make ``field`` wrong.
BAD_FIELDS = [
    ("steps", {"steps": 0}),
    ("batch_size", {"batch_size": -1}),
    ("lr", {"lr": float("nan")}),
    ("mechanisms", {"mechanisms": ("nope",)}),
    ("slot", {"slot": "pairs"}),
    ("init", {"init": "xavier"}),
    ("bias", {"bias": 1}),
    ("embed_init_std", {"init": "gpt", "embed_init_std": 0.5}),
]


@pytest.mark.parametrize(("field", "changes"), BAD_FIELDS, ids=[f for f, _ in BAD_FIELDS])
def test_a_bad_field_is_refused_naming_it(field, changes):
    with pytest.raises(ValueError, match=rf"\bRecallConfig\.{field}\b"):
        RecallConfig(**changes)

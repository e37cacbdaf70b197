"""attnlab.models.config_keys: a value of another type is one line naming the file and the
key (its label where given), JSON's null is the default, a bool is no number,
``check_layers`` holds the layers' descriptions to the memory budget, and ``model_type``
reads a folder's ``config.json``."""

from __future__ import annotations

import json
import re

import pytest

from attnlab.core.machine import MEMORY_ENV
from attnlab.models.config_keys import (
    an_object,
    boolean,
    check_layers,
    choice,
    model_type,
    names,
    positive_int,
    positive_number,
)
from attnlab.models.files import CONFIG, CheckpointError


def _choice(raw, name, where):
    return choice(raw, name, where, ("a", "b"))


def _boolean(raw, name, where):
    return boolean(raw, name, where, True)


@pytest.mark.parametrize(
    ("check", "value", "words"),
    [(positive_int, 2.0, "n must be a positive integer, got 2.0"),
     (positive_int, True, "n must be a positive integer, got True"),
     (positive_int, 0, "n must be a positive integer, got 0"),
     (positive_number, float("nan"), "n must be a positive number, got nan"),
     (positive_number, False, "n must be a positive number, got False"),
     (_choice, ["a"], "n ['a'], only a, b"),
     (_boolean, "false", "n must be true or false, got 'false'"),
     (an_object, [1], "n must be an object, got [1]"),
     (names, [5], "n must be a list of names, got [5]")],
)  # fmt: skip
def test_a_value_of_another_type_is_one_line_naming_the_key(check, value, words):
    with pytest.raises(CheckpointError, match=f"^{re.escape(f'where: {words}')}$"):
        check({"n": value}, "n", "where")


def test_null_is_the_default_and_a_label_names_a_nested_key():
    assert positive_int({"n": None}, "n", "w", 3) == 3
    assert positive_number({}, "n", "w", 2) == 2.0
    assert boolean({"n": None}, "n", "w", True) is True
    assert an_object({"n": None}, "n", "w") is None and names({}, "n", "w") == []
    with pytest.raises(CheckpointError, match=r"^w: rope\.factor must be a positive number"):
        positive_number({"factor": -1}, "factor", "w", label="rope.factor")
    with pytest.raises(CheckpointError, match="^w: n's parent must be an object, got 5$"):
        positive_int(5, "n", "w")


def test_check_layers_holds_the_descriptions_to_the_budget(monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, str(2**20))  # a budget of 512 KiB: 512 layers of 1 KiB
    check_layers(512, "w")
    words = "w: n_layer is 513, whose descriptions alone take 513 KiB, more than the 512 KiB"
    with pytest.raises(CheckpointError, match=f"^{re.escape(words)} a run may use$"):
        check_layers(513, "w", "n_layer")


def test_model_type_of_a_folder(tmp_path):
    assert model_type(tmp_path) is None  # no config.json: the family's loader names it
    (tmp_path / CONFIG).write_text(json.dumps({"model_type": "llama"}))
    assert model_type(tmp_path) == "llama"
    (tmp_path / CONFIG).write_text(json.dumps({"model_type": ["llama"]}))
    with pytest.raises(CheckpointError, match=r"config\.json: model_type must be a name"):
        model_type(tmp_path)

"""attnlab.training.tasks: the registry holds the built-ins by name and refuses another
name in one line; both built-ins train on the one engine; and a third task, registered
here and nowhere else, is carded (a built-in mechanism on it) through ``attnlab.card``
without any study knowing it."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import attnlab
from attnlab.core.mechanism import Mechanism
from attnlab.core.references import load_mechanism
from attnlab.training.lanes import Programs
from attnlab.training.optimizers import make_optimizer
from attnlab.training.tasks import TASKS, Task, train_task


class State(NamedTuple):
    """A lane's parameters, optimizer state and data key."""

    params: dict
    opt_state: optax.OptState
    data_key: jax.Array


@dataclasses.dataclass(frozen=True)
class FindConfig:
    """The toy task: ``keys`` random unit vectors of width ``d``; the query is one of them
    plus noise; the target is which."""

    d: int = 8
    keys: int = 6
    batch: int = 32
    noise: float = 0.3
    steps: int = 60
    chunk_steps: int = 30
    held_out: int = 256


def find_batch(key: jax.Array, config: FindConfig, size: int):
    k1, k2, k3 = jax.random.split(key, 3)
    x = jax.random.normal(k1, (size, config.keys, config.d)) / jnp.sqrt(config.d)
    target = jax.random.randint(k2, (size,), 0, config.keys)
    noise = config.noise * jax.random.normal(k3, (size, config.d)) / jnp.sqrt(config.d)
    return x, target, x[jnp.arange(size), target] + noise


def find_programs(config: FindConfig, mechanism: Mechanism) -> Programs:
    """One head: logits of ``q W_q`` against ``x W_k`` through the mechanism; the loss is
    the cross-entropy of which key the query came from."""

    def logits(params, theta, x, q):
        z, _, _ = mechanism.attend((q @ params["W_q"])[:, None, :], x @ params["W_k"], theta)
        return z[:, 0, :]

    def loss(params, constants, batch):
        x, target, q = batch
        z = logits(params, {**params["theta"], **constants}, x, q)
        ce = optax.softmax_cross_entropy_with_integer_labels(z, target).mean()
        return ce, jnp.max(z)

    def init(keys, data_keys):
        def one(key):
            kq, kk = jax.random.split(key)
            shape = (config.d, config.d)
            params = {"W_q": jax.random.normal(kq, shape) / np.sqrt(config.d),
                      "W_k": jax.random.normal(kk, shape) / np.sqrt(config.d),
                      "theta": mechanism.param_values(config.d)}  # fmt: skip
            return params, make_optimizer("adam", 1.0).init(params)

        params, opt = jax.vmap(one)(keys)
        return State(params, opt, jax.random.key_data(data_keys))

    def chunk(state, steps, data, rates, constants):
        def lane(params, opt, data_key, lr, lane_constants):
            optimizer = make_optimizer("adam", lr)

            def body(carry, step):
                p, o = carry
                batch = find_batch(jax.random.fold_in(jax.random.wrap_key_data(data_key), step),
                                   config, config.batch)  # fmt: skip
                (value, top), grads = jax.value_and_grad(loss, has_aux=True)(
                    p, lane_constants, batch
                )
                updates, o = optimizer.update(grads, o, p)
                return (optax.apply_updates(p, updates), o), {"loss": value, "max_logit": top}

            (params, opt), metrics = jax.lax.scan(body, (params, opt), steps)
            return (params, opt, data_key), metrics

        (params, opt, keys), metrics = jax.vmap(lane, in_axes=(0, 0, 0, 0, 0))(
            *state, rates, constants
        )
        return State(params, opt, keys), metrics

    def evaluate(params, held_out, constants):
        def one(p, c):
            x, target, q = held_out
            z = logits(p, {**p["theta"], **c}, x, q)
            losses = optax.softmax_cross_entropy_with_integer_labels(z, target)
            return losses, jnp.mean(jnp.argmax(z, -1) == target)

        return jax.vmap(one)(params, constants)

    return Programs(init, jax.jit(chunk), jax.jit(evaluate), ("loss", "max_logit"))


FIND = Task(
    name="test_find_the_key",
    about="which of six keys a noisy query came from",
    defaults=lambda quick=False, seed=0: FindConfig(),
    programs=find_programs,
    data=lambda config: (None, find_batch(jax.random.key(99), config, config.held_out)),
    seed_keys=lambda seed: (jax.random.key(2 * seed), jax.random.key(2 * seed + 1)),
    constants=lambda config, mechanism: mechanism.constant_values(config.d),
    lrs=(1e-2, 1e-1),
)


@pytest.fixture
def find_task():
    TASKS.register(FIND)
    yield FIND
    TASKS.unregister(FIND.name)


def test_the_registry_holds_the_built_ins_and_refuses_another_name():
    assert list(TASKS)[:2] == ["recall", "lm"] and "lm" in TASKS
    assert TASKS["lm"].name == "lm" and TASKS["recall"].flags == ()
    with pytest.raises(KeyError, match="task must be one of \\['recall', 'lm'\\], got 'nope'"):
        TASKS["nope"]
    with pytest.raises(ValueError, match="'lm' is taken"):
        TASKS.register(FIND._replace(name="lm"))


def test_a_name_registered_already_is_taken(find_task):
    with pytest.raises(ValueError, match=f"'{find_task.name}' is taken"):
        TASKS.register(find_task)


def test_the_toy_task_learns_on_the_engine(find_task):
    """Sixty steps of Adam at 0.1 take the held-out loss from about ln 6 well below it."""
    lanes = train_task(find_task, FindConfig(), load_mechanism("scaled"), [1e-1], [0])
    assert lanes.metrics["loss"].shape == (1, 60) and lanes.metrics["max_logit"].shape == (1, 60)
    assert lanes.final_loss.mean() < 0.5 * lanes.initial_loss.mean()


def test_a_built_in_is_carded_on_a_registered_task(find_task, tmp_path):
    """No study names the task: the card finds it in the registry, trains ``scaled`` at its
    two rates, judges both verdicts, and writes the card in a folder of the task's name."""
    report = attnlab.card("scaled", task=find_task.name, out_dir=tmp_path, progress=False,
                          committed=tmp_path / "none")  # fmt: skip
    rows = report.tables.training
    assert rows.lr.tolist() == [1e-2, 1e-1] and (rows.mechanism == "scaled").all()
    verdicts = dict(zip(report.verdicts.verdict, report.verdicts.passed, strict=True))
    assert verdicts == {"trains": True, "stable at every rate": True}
    assert report.folder == tmp_path / "cards" / "scaled" / find_task.name
    assert (report.folder / "training.csv").is_file() and (report.folder / "card.md").is_file()
    assert "# Card on a registered task: scaled" in report.markdown

"""Flags of the recall experiments (04, 05, 10, and the fits), kept beside their configuration.

``--reading NAME`` (a member of ``attnlab.recall.readings.FAMILY``, or ``natural``)
sets the slot, init, bias, d_model and batch size at once. Those five flags may still be
given beside it only with the reading's own value: a flag typed on the command line with a
different value is a UsageError naming both flags. (Typed flags are recorded in
``harness.flags.TYPED_FLAGS``, which the sidecars keep as provenance.)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from attnlab.core.references import MechanismRef, recall_mechanism_reference
from attnlab.core.temperature import BUILTINS
from attnlab.harness import cli
from attnlab.harness.flags import TYPED_FLAGS, FlagParser, StoreTyped, StoreTypedBool
from attnlab.harness.memory import FLOAT32_BYTES, Need, Size, product, size
from attnlab.recall.config import RecallConfig
from attnlab.recall.model import INITS, SLOTS
from attnlab.recall.readings import FAMILY, Reading, get_reading
from attnlab.training.lanes import CPU_BLOCK_BYTES

#: The flags a reading sets, and the RecallConfig fields they set.
READING_FLAGS = {
    "--slot": "slot",
    "--init": "init",
    "--bias": "bias",
    "--d-model": "d_model",
    "--batch-size": "batch_size",
}


def reading_name(text: str) -> str:
    """An argparse type: a reading of ``readings.FAMILY`` (or ``natural``), kept by name."""
    try:
        get_reading(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


reading_name.names = frozenset({r.name for r in FAMILY} | {"natural"})  # type: ignore[attr-defined]


def substring_of(family: Sequence[Reading]) -> Callable[[str], str]:
    """An argparse type: a substring of at least one name of ``family``'s readings (its
    ``is_valid(text)`` says whether ``text`` is one)."""

    def is_valid(text: str) -> bool:
        return any(text in r.name for r in family)

    def family_substring(text: str) -> str:
        if not is_valid(text):
            raise argparse.ArgumentTypeError(f"no reading's name contains {text!r}")
        return text

    family_substring.is_valid = is_valid  # type: ignore[attr-defined]
    return family_substring


#: ``substring_of`` the first family (experiment 09's first pass).
family_substring = substring_of(FAMILY)


def add_mechanisms_flag(
    parser: argparse.ArgumentParser,
    flag: str,
    default: Iterable[str | MechanismRef],
    help: str,
) -> None:
    """``flag``: one or more mechanism references the recall task can run
    (``recall_mechanism_reference``); ``default`` as the references' text (a configuration's
    ``MechanismRef``s: ``.text``)."""
    parser.add_argument(
        flag,
        nargs="+",
        type=recall_mechanism_reference,
        default=[d if isinstance(d, str) else d.text for d in default],
        metavar="MECHANISM",
        help=f"{help}; a built-in ({', '.join(BUILTINS)}), MODULE:NAME or path/to/file.py:NAME",
    )


#: The recall flags the article states (d_k 256; 16 pairs over 32 key and 32 value tokens;
#: Adam at 3e-4; 2000 held-out sequences), and those it leaves open.
ARTICLE_FLAGS = frozenset({"dk", "pairs", "key_tokens", "value_tokens", "lr", "eval_size"})
UNSTATED_FLAGS = frozenset(
    {"d_model", "batch_size", "steps", "seeds", "smoothing", "embed_init_std", "slot", "init"}
    | {"bias", "reading"}
)
#: The recall flags' help groups, before every other flag's: title -> dests.
RECALL_GROUPS = {
    "the article's settings (004, A Training Demo)": ARTICLE_FLAGS,
    "the set-up the article leaves unstated": UNSTATED_FLAGS,
}


def add_recall_flags(
    parser: FlagParser, default: RecallConfig | None = None, head_width: bool = True
) -> None:
    """Flags for every field of ``RecallConfig`` a user may want to change; the defaults are
    those of ``default`` (the article's configuration if None). ``head_width=False`` leaves
    out ``--dk`` (for a script that sweeps widths; ``recall_config`` then takes ``d_k``).
    The first flags of ``parser``: their help groups (``RECALL_GROUPS``) come first."""
    default = RecallConfig() if default is None else default
    parser.declare_flags(groups=RECALL_GROUPS)
    add = parser.add_argument

    def add_reading_flag(flag: str, **kwargs: Any) -> None:
        """A flag ``--reading`` also sets (``READING_FLAGS``), recorded as typed."""
        action = StoreTypedBool if flag == "--bias" else StoreTyped
        add(flag, default=getattr(default, READING_FLAGS[flag]), action=action, **kwargs)

    if head_width:
        cli.add_int_flag(parser, "--dk", default.d_k, "head width d_k")
    add_reading_flag(
        "--d-model",
        type=cli.positive_int,
        help="embedding width of one token (unused by --slot onehot)",
    )
    cli.add_int_flag(
        parser, "--pairs", default.pairs, "key-value pairs per sequence (<= --key-tokens)"
    )
    cli.add_int_flag(parser, "--key-tokens", default.n_key_tokens, "size of the key vocabulary", 2)
    cli.add_int_flag(
        parser, "--value-tokens", default.n_value_tokens, "size of the value vocabulary", 2
    )
    cli.add_int_flag(parser, "--steps", default.steps, "training steps")
    add_reading_flag("--batch-size", type=cli.positive_int, help="sequences per step")
    add("--lr", type=cli.positive_float, default=default.lr, help="Adam learning rate")
    cli.add_int_flag(parser, "--seeds", default.seeds, "how many seeds")
    cli.add_seed_flag(parser, default.seed, help="the first seed")
    cli.add_int_flag(parser, "--eval-size", default.eval_size, "held-out sequences per seed")
    cli.add_int_flag(
        parser, "--smoothing", default.smoothing, "trailing window (steps) of the smoothed loss"
    )
    add(
        "--embed-init-std",
        type=cli.positive_float,
        default=default.embed_init_std,
        help="std of the embedding entries at initialisation",
    )
    cli.add_int_flag(
        parser,
        "--chunk-steps",
        default.chunk_steps,
        "steps per compiled chunk (progress and divergence checks between chunks)",
    )
    add_reading_flag(
        "--slot",
        choices=SLOTS,
        help="how a key-value pair becomes a slot (laws: attnlab/recall/model.py)",
    )
    add_reading_flag(
        "--init", choices=INITS, help="initialisation convention (laws: attnlab/recall/model.py)"
    )
    add_reading_flag("--bias", help="biases on the Q, K, V projections and the readout")
    add(
        "--reading",
        type=reading_name,
        default=None,
        metavar="NAME",
        help="a declared reading (attnlab/recall/readings.py) or 'natural': sets "
        "--slot, --init, --bias, --d-model and --batch-size",
    )
    parser.set_defaults(**{TYPED_FLAGS: []})


def recall_config(args: argparse.Namespace, **overrides: Any) -> RecallConfig:
    """The configuration the flags describe; raises UsageError on inconsistent values."""
    if args.pairs > args.key_tokens:
        raise cli.UsageError(
            f"--pairs: {args.pairs} pairs need at least as many key tokens "
            f"(--key-tokens is {args.key_tokens})"
        )
    cli.check_seeds(args.seed, args.seeds, "--seeds")
    chosen = {field: getattr(args, field) for field in READING_FLAGS.values()}
    if args.reading is not None:
        reading = get_reading(args.reading)
        given = set(getattr(args, TYPED_FLAGS))
        for flag, field in READING_FLAGS.items():
            typed = given & ({flag, "--no-bias"} if flag == "--bias" else {flag})
            value = getattr(reading, field)
            if field == "d_model" and value is None:
                continue  # a onehot reading has no d_model: --d-model stays as given
            if typed and chosen[field] != value:
                raise cli.UsageError(
                    f"{min(typed)}: {chosen[field]!r} conflicts with --reading {args.reading} "
                    f"(which sets {field} = {value!r}); give one or the other"
                )
            chosen[field] = value
    if chosen["init"] != "natural" and args.embed_init_std != 1.0:
        raise cli.UsageError(
            f"--embed-init-std: applies to --init natural only (init is {chosen['init']})"
        )
    overrides.setdefault("d_k", args.dk)
    return RecallConfig(
        d_model=chosen["d_model"],
        pairs=args.pairs,
        n_key_tokens=args.key_tokens,
        n_value_tokens=args.value_tokens,
        steps=args.steps,
        batch_size=chosen["batch_size"],
        lr=args.lr,
        seeds=args.seeds,
        seed=args.seed,
        eval_size=args.eval_size,
        smoothing=args.smoothing,
        embed_init_std=args.embed_init_std,
        chunk_steps=args.chunk_steps,
        slot=chosen["slot"],
        init=chosen["init"],
        bias=chosen["bias"],
        **overrides,
    )


#: The flag of each ``RecallConfig`` field the memory estimate names.
FLAG_OF_FIELD = {
    "d_k": "--dk",
    "d_model": "--d-model",
    "pairs": "--pairs",
    "n_key_tokens": "--key-tokens",
    "n_value_tokens": "--value-tokens",
    "steps": "--steps",
    "batch_size": "--batch-size",
    "seeds": "--seeds",
    "eval_size": "--eval-size",
    "chunk_steps": "--chunk-steps",
}
#: Bytes per parameter of a lane: the float32 value and Adam's two moments.
LANE_PARAM_BYTES = 3 * FLOAT32_BYTES
#: ``[B, pairs, d_k]`` float32 activations of one training step of one lane (keys, values
#: and their gradients: ``attnlab.recall.trainer.lane_bytes``'s six).
STEP_ACTIVATIONS = 6
#: ``[eval_size, pairs, d_k]`` float32 activations of one lane's held-out evaluation.
EVAL_ACTIVATIONS = 3
#: Bytes per lane and step of the records kept: the per-step metrics (float32) and the
#: curves table's row (about 20 float64 columns), rounded up.
LANE_STEP_BYTES = 256


def recall_params(config: RecallConfig) -> int:
    """How many parameters the recall model of ``config`` has (``attnlab.recall.model``):
    ``W_Q (q_in, d_k)``, ``W_K`` and ``W_V (kv_in, d_k)``, ``W_O (d_k, n_value)``, the
    embedding tables ``(n_key + n_value, d_model)`` unless ``slot`` is onehot, and the
    biases; ``q_in, kv_in`` are ``d_model, 2 d_model`` (concat), ``d_model, d_model`` (sum,
    separate) or ``n_key, n_key + n_value`` (onehot)."""
    d, n_key, n_value = config.d_model, config.n_key_tokens, config.n_value_tokens
    if config.slot == "onehot":
        q_in, kv_in, tables = n_key, n_key + n_value, 0
    else:
        q_in, kv_in, tables = d, (2 * d if config.slot == "concat" else d), (n_key + n_value) * d
    biases = 3 * config.d_k + n_value if config.bias else 0
    return tables + (q_in + 2 * kv_in + n_value) * config.d_k + biases


def recall_needs(
    config: RecallConfig,
    default: RecallConfig | None = None,
    lanes: int | None = None,
    all_lanes: int | None = None,
    lane_sizes: Sequence[Size] = (),
    flags: Mapping[str, str] | None = None,
) -> list[Need]:
    """The largest allocations of training ``config`` (``attnlab.harness.memory``), with
    ``lanes`` lanes trained together (default: every mechanism on every seed) and
    ``all_lanes`` whose records are kept (default ``lanes``), ``block`` of them in one
    call (``attnlab.training.lanes.block_size`` on one CPU: as many as fit
    ``CPU_BLOCK_BYTES``, at least one); ``P = recall_params(config)``,
    ``S = 2 pairs + 2 + 2 n_key`` int32 numbers drawn per sequence (its tokens and the
    permutation its keys are chosen from):

    * the lanes' states: ``lanes * P * LANE_PARAM_BYTES``;
    * the batches of one chunk: ``seeds * chunk_steps * batch_size * S * 4``;
    * one step's activations: ``block * STEP_ACTIVATIONS * batch_size * pairs * d_k * 4``;
    * the held-out sets and their evaluation: ``seeds * eval_size * S * 4 + block *
      EVAL_ACTIVATIONS * eval_size * pairs * d_k * 4``;
    * the records: ``all_lanes * steps * LANE_STEP_BYTES``.

    ``default`` (``RecallConfig()`` if None) holds the flags' defaults, ``lane_sizes`` the
    flags the lane count grows with beside ``--seeds``, and ``flags`` renames the flag of a
    field (``FLAG_OF_FIELD``; 05's grid has its own batch sizes and seeds)."""
    default = RecallConfig() if default is None else default
    lanes = len(config.mechanisms) * config.seeds if lanes is None else lanes
    all_lanes = lanes if all_lanes is None else all_lanes
    named = {**FLAG_OF_FIELD, **(flags or {})}

    def grown(*fields: str) -> tuple[Size, ...]:
        return tuple(size(named[f], getattr(config, f), getattr(default, f)) for f in fields)

    lane_count = (*grown("seeds"), *lane_sizes)
    params = recall_params(config)
    sequence = 2 * config.pairs + 2 + 2 * config.n_key_tokens
    activations = product(config.batch_size, config.pairs, config.d_k, FLOAT32_BYTES)
    eval_activations = product(config.eval_size, config.pairs, config.d_k, FLOAT32_BYTES)
    lane = params * LANE_PARAM_BYTES + STEP_ACTIVATIONS * activations  # lanes.lane_bytes
    block = min(lanes, max(1, CPU_BLOCK_BYTES // max(lane, 1)))
    return [
        Need(
            product(lanes, params, LANE_PARAM_BYTES),
            "the parameters and Adam moments of every lane",
            (*grown("d_k", "d_model", "n_key_tokens", "n_value_tokens"), *lane_count),
        ),
        Need(
            product(config.seeds, config.chunk_steps, config.batch_size, sequence, 4),
            "the batches of one chunk of steps",
            grown("batch_size", "chunk_steps", "seeds", "pairs", "n_key_tokens"),
        ),
        Need(
            product(block, STEP_ACTIVATIONS, activations),
            "one training step's activations",
            (*grown("batch_size", "pairs", "d_k"), *lane_count),
        ),
        Need(
            product(config.seeds, config.eval_size, sequence, 4)
            + product(block, EVAL_ACTIVATIONS, eval_activations),
            "the held-out sequences and their evaluation",
            (*grown("eval_size", "pairs", "d_k", "n_key_tokens"), *lane_count),
        ),
        Need(
            product(all_lanes, config.steps, LANE_STEP_BYTES),
            "the per-step records of every lane",
            (*grown("steps"), *lane_count),
        ),
    ]

"""Experiment 13's inputs read and measured: the text and the checkpoints checked against
the configuration (``read_inputs``), then the encoder's or the causal tables
(``tables``) with what the sidecars add, written by ``run`` (or, with ``--config``, a
config's static ledger printed: ``config_ledger``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from attnlab.core.mechanism import Mechanism
from attnlab.core.references import load_mechanism
from attnlab.core.text import TextSource, read_text
from attnlab.harness import cli
from attnlab.harness.io import write_result
from attnlab.models.files import Checkpoint, CheckpointError, UnknownMechanismError
from attnlab.models.registry import family_of, read_checkpoint
from attnlab.studies.real_model.causal import causal_progress_steps, run_causal
from attnlab.studies.real_model.compute import (
    RealModelConfig,
    progress_steps,
    provenance,
    run_real_model,
    text_tokens,
)
from attnlab.studies.real_model.flags import RealModelRequest, real_model_config, resolved
from attnlab.studies.real_model.ledger import config_ledger_text
from attnlab.studies.real_model.study import CAUSAL_TABLES, causal_table_names

#: Bytes of a ``--text`` file read per token ``--tokens`` asks for: English prose takes
#: about 4 a token in these tokenizers; the margin covers whitespace, markup and what a
#: tokenizer drops. A file is never read further (``/dev/zero`` would never end), and one
#: whose first bytes hold too few tokens is refused naming ``--tokens``.
TEXT_BYTES_PER_TOKEN = 64


@dataclass(frozen=True)
class Inputs:
    """What experiment 13 reads: the text and the checkpoints, ``causal`` when all are
    GPT-2-family (then several may be given), ``packaged`` when none was named."""

    source: TextSource
    checkpoints: list[Checkpoint]
    causal: bool
    packaged: bool
    config: RealModelConfig


def _supplied(references: tuple[str, ...]) -> dict[str, Mechanism]:
    """``--mechanisms`` by name; ``cli.UsageError`` if two share a name."""
    supplied: dict[str, Mechanism] = {}
    for mechanism in map(load_mechanism, references):
        if mechanism.name in supplied:
            raise cli.UsageError(f"--mechanisms: two are named {mechanism.name!r}")
        supplied[mechanism.name] = mechanism
    return supplied


def text_source(path: Path | None, tokens: int) -> TextSource:
    """``--text`` (None: the default prose), of a file only the bytes ``tokens`` tokens need
    (``TEXT_BYTES_PER_TOKEN`` each); ``cli.UsageError`` naming ``--text`` where it cannot be
    read, is not a regular file (a FIFO, ``/dev/zero``) or is not UTF-8."""
    try:
        return read_text(path, TEXT_BYTES_PER_TOKEN * tokens)
    except (OSError, ValueError) as err:  # ValueError: not a regular file, not UTF-8
        raise cli.UsageError(f"--text: cannot read {path} as UTF-8 text ({err})") from None


def read_inputs(request: RealModelRequest, config: RealModelConfig) -> Inputs:
    """The ``request``'s text and checkpoints (with its mechanisms, the user's mechanisms
    its GPT-2 checkpoints name) read and checked against ``config``, where ``--lengths`` or
    ``--counterfactual-length`` was not given first fitted to the checkpoints' shortest
    context (``flags.real_model_config``): every row length within each checkpoint's
    context, enough tokens in the text for each; ``cli.UsageError`` naming the flag
    otherwise. The configuration that runs is ``Inputs.config``."""
    source = text_source(request.text, config.tokens)
    supplied = _supplied(request.mechanisms)
    try:
        folders = [Path(d).resolve() for d in request.checkpoint or ()]
    except (OSError, RuntimeError) as err:  # RuntimeError: a loop of symbolic links (3.11)
        raise cli.UsageError(f"--checkpoint: cannot be read ({err})") from None
    for i, folder in enumerate(folders):  # the tables name each checkpoint by its folder
        cli.check_settled(folder, "--checkpoint")  # no killed run's move half done there
        if folder in folders[:i]:
            raise cli.UsageError(f"--checkpoint: {folder} is given twice")
        if folder.name in (f.name for f in folders[:i]):
            raise cli.UsageError(f"--checkpoint: two directories named {folder.name!r}; rename one")
    try:
        checkpoints = [read_checkpoint(d, supplied) for d in request.checkpoint or (None,)]
    except UnknownMechanismError as err:  # the maker's path is theirs: never offered to run
        raise cli.UsageError(
            f"--mechanisms: {err}; name your own file that defines it: --mechanisms "
            f"path/to/your_file.py:{err.name}"
        ) from None
    except CheckpointError as err:
        raise cli.UsageError(f"--checkpoint: {err}") from None
    causal = all(family_of(c).causal for c in checkpoints)
    if len(checkpoints) > 1 and not causal:
        raise cli.UsageError(
            "--checkpoint: several directories are read only if all are decoders (causal)"
        )
    if request.tables != CAUSAL_TABLES and not causal:
        raise cli.UsageError("--tables: names the causal tables; an encoder's are 13_real_model_*")
    if supplied and not causal:
        raise cli.UsageError("--mechanisms: only a GPT-2 checkpoint names a mechanism")
    named_by = {c.config.mechanism for c in checkpoints} if supplied else set()
    unused = sorted(set(supplied) - named_by)
    if unused:
        named = ", ".join(sorted(named_by))
        raise cli.UsageError(
            f"--mechanisms: no --checkpoint names {unused[0]!r} (they name {named})"
        )
    if request.lengths is None or request.counterfactual_length is None:  # fit the checkpoints
        config = real_model_config(request, min(c.max_seq_length for c in checkpoints))
    if causal and config.tokens < max(config.lengths):
        raise cli.UsageError(f"--tokens: {config.tokens} do not fill one row of each --lengths")
    for checkpoint in checkpoints:
        if max(config.lengths) > checkpoint.max_seq_length:
            raise cli.UsageError(
                f"--lengths: {max(config.lengths)} is longer than {checkpoint.directory}'s "
                f"max_seq_length {checkpoint.max_seq_length}"
            )
        found = text_tokens(checkpoint, source.text)
        if found < config.tokens:
            cut = request.text is not None and source.source != str(request.text)  # read_text's
            read = f" in its first {TEXT_BYTES_PER_TOKEN * config.tokens} bytes" if cut else ""
            raise cli.UsageError(
                f"--tokens: the text has {found} tokens{read}, fewer than {config.tokens}"
            )
    return Inputs(source, checkpoints, causal, request.checkpoint is None, config)


def tables(
    config: RealModelConfig, inputs: Inputs, quiet: bool, name: str = CAUSAL_TABLES
) -> tuple[dict[str, pd.DataFrame], dict]:
    """The CSVs of experiment 13 by name (the causal ones when ``inputs.causal``, named
    ``name``: ``study.causal_table_names``) and what the sidecars add to the flags
    (``provenance``; listed per checkpoint when causal), with a progress bar unless
    ``quiet``."""
    if inputs.causal:
        steps = causal_progress_steps(len(inputs.checkpoints))
        with cli.progress(steps, "13 causal", quiet) as bar:
            frames = run_causal(config, inputs.checkpoints, inputs.source.text, bar.update)
        names = causal_table_names(name)
        frames = {names[table]: frame for table, frame in frames.items()}
        records = [provenance(c, inputs.source, config, False) for c in inputs.checkpoints]
        listed = {k: [r[k] for r in records] for k in ("checkpoint", "weights_sha256")}
        return frames, {**records[0], **listed}
    (checkpoint,) = inputs.checkpoints
    with cli.progress(progress_steps(config), "13 real model", quiet) as bar:
        frames = run_real_model(config, checkpoint, inputs.source.text, bar.update)
    return frames, provenance(checkpoint, inputs.source, config, inputs.packaged)


def config_ledger(request: RealModelRequest) -> str:
    """The static temperature ledger of ``request.config`` (``ledger.config_ledger_text``);
    ``cli.UsageError`` naming the file and key for a config it does not read, or where
    another flag that reads a checkpoint or text is given too."""
    for flag in ("checkpoint", "text", "lengths", "counterfactual_length", "mechanisms"):
        if getattr(request, flag):
            raise cli.UsageError(
                f"--config: prints a config's ledger alone; drop --{flag.replace('_', '-')}"
            )
    try:
        return config_ledger_text(request.config)
    except CheckpointError as err:
        raise cli.UsageError(f"--config: {err}") from None


def run(request: RealModelRequest, context: cli.RunContext) -> None:
    """Experiment 13's run: the inputs read (``read_inputs``), the tables measured
    (``tables``) and written into the run's output folder, each with its sidecar (the
    flags but ``--config``, the lengths that ran and what ``tables`` adds); with
    ``request.config``, its static ledger printed (``config_ledger``) and nothing written."""
    if request.config is not None:
        if context.out_dir_given:  # checked as for any run: a folder named must be one
            cli.check_dir_writable(context.out_dir, "--out-dir")
        print(config_ledger(request))
        return
    config = real_model_config(request)
    out_dir = cli.prepare_out_dir(context)
    inputs = read_inputs(request, config)  # inputs.config: fitted to the checkpoints
    started = time.perf_counter()
    frames, found = tables(inputs.config, inputs, context.quiet, request.tables)
    wall = time.perf_counter() - started
    sidecar = {k: v for k, v in context.sidecar_flags.items() if k != "config"}  # not written
    with cli.staged_outputs(out_dir, context.written) as stage:
        for name, frame in frames.items():
            flags = {**sidecar, **resolved(inputs.config), **found}
            write_result(frame, stage / name, flags, wall)

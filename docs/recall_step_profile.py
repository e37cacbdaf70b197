"""The recall step's one-lane path, measured (docs/performance.md, issue 70's item 3): at
04's sizes every recall lane runs as a block of its own (one lane is larger than
``attnlab.training.lanes.CPU_BLOCK_BYTES``, so ``block_size`` is 1 on CPU), vmapped over
that one lane. This times the bench's chunk (``BenchConfig.recall``: 04's sizes, one
seed, 50 steps) through ``Trainer``'s compiled program, against the same chunk of the same
lane run unbatched (its lane axis dropped and restored, as 14's ``chunk_program`` runs a
lone lane), each as a fraction of the float32 matmul peak (``measure_peak``, the bench's
2048^3), and says whether the two give the same losses bit for bit. Timed as the bench
times (``interleaved_median_seconds``), the first call (compiling) apart. Timings, not
results: nothing here is written or compared with committed numbers.

    .venv/bin/python docs/recall_step_profile.py
"""

from __future__ import annotations

import jax
import numpy as np

from attnlab.core.temperature import MECHANISMS
from attnlab.recall.step import METRICS, recall_optimizer, scan_steps
from attnlab.recall.trainer import Run, Trainer
from attnlab.studies.bench.config import BenchConfig
from attnlab.studies.bench.recall_step import recall_step_flops
from attnlab.studies.bench.timing import interleaved_median_seconds, measure_peak

ROUNDS = 9
MIN_SECONDS = 0.5
PEAK_SIZE = 2048


def main() -> None:
    config = BenchConfig().recall
    trainer = Trainer([Run(config, MECHANISMS["scaled"])])
    draw, vmapped = trainer.chunk_programs()
    batches = draw()
    block = trainer.blocks.blocks[0]  # the one lane's block, as Trainer.run calls it

    def one(state, seed, lr, constants, batches):
        lane = jax.tree.map(lambda x: x[seed], batches)
        return scan_steps(trainer.model, recall_optimizer(lr), state, lane, METRICS, constants)

    @jax.jit
    def unbatched(state, args, batches):
        state, args = jax.tree.map(lambda x: x[0], (state, args))
        out = one(state, args["seed"], args["rate"], args["constants"], batches)
        return jax.tree.map(lambda x: x[None], out)

    calls = {"vmapped one lane (Trainer)": lambda: vmapped(batches),
             "unbatched": lambda: unbatched(block.state, block.args, batches)}  # fmt: skip
    same = np.array_equal(np.asarray(calls["unbatched"]()[1]["loss"]),
                          np.asarray(calls["vmapped one lane (Trainer)"]()[1]["loss"]))  # fmt: skip
    seconds = interleaved_median_seconds(calls, ROUNDS, min_seconds=MIN_SECONDS)
    _, peak = measure_peak(PEAK_SIZE, ROUNDS)
    flops = recall_step_flops(config)
    print(f"peak {peak / 1e9:.0f} GFLOP/s; {flops:.3g} FLOPs per step; {config.chunk_steps} "
          f"steps a chunk; losses bit-identical: {same}")  # fmt: skip
    for name, s in seconds.items():
        per_step = s / config.chunk_steps
        print(f"{name}: {1e3 * per_step:.2f} ms per step, {flops / per_step / peak:.1%} of peak")


if __name__ == "__main__":
    main()

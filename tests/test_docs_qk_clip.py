"""docs/qk_clip.md: its training loop (a Flax model of a researcher's own, optax, the
ledger logged and attnlab.qk_clip applied each step) runs as written, and the clip holds:
after the clip first fires, every step's largest logit (before that step's clip) stays
within one update's growth of tau, where without the clip it grows past it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

DOC = Path(__file__).resolve().parents[1] / "docs" / "qk_clip.md"
#: The doc's settings line, TAU last.
SETTINGS = "D, H, d, T, TAU = 32, 4, 8, 16, 5.0"


def run_loop(tau: float) -> list[np.ndarray]:
    """The doc's loop as written, in a namespace of its own, with ``TAU`` set to ``tau``
    (``inf``: no head is ever clipped) and each printed line kept; each step's largest
    logit per head, as printed."""
    (code,) = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert SETTINGS in code and code.count("print(") == 1
    code = code.replace(SETTINGS, SETTINGS.replace("5.0", f"float('{tau}')"))
    logged: list[tuple] = []
    namespace = {"print": lambda *line: logged.append(line)}
    exec(compile(code, str(DOC), "exec"), namespace)
    return [np.asarray(line[3]) for line in logged]


def test_the_docs_loop_runs_and_the_clip_holds():
    clipped, free = run_loop(5.0), run_loop(float("inf"))
    assert len(clipped) == len(free) == 20
    first = next(t for t, s in enumerate(clipped) if (s > 5.0).any())
    # one adam step of rate 3e-2 on unit-scale weights moves a logit by a bounded factor:
    # 1.5 tau is that growth's bound here, far below the unclipped run's
    assert all((s <= 1.5 * 5.0).all() for s in clipped[first + 1 :])
    assert max(float(s.max()) for s in free) > 2 * max(float(s.max()) for s in clipped[first + 1 :])

"""The progress callback every long computation of the suite takes: ``on_progress(units)``
after each piece of its work (a chunk of steps, a block of trials), or None for none. The
scripts pass a tqdm bar's ``update`` (the harness's ``cli.progress``)."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[int], None] | None

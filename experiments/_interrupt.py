"""A signal while an experiment script is still importing: one line, exit ``128 + signum``.

Every script imports this module first. When the script runs as the program (``python
experiments/NN_name.py``), a SIGINT (Ctrl-C), SIGTERM or SIGHUP before its
``cli.entry_point`` starts prints one line and exits 130, 143 or 129 without a traceback
(nothing has been written yet); ``entry_point`` then installs its own handlers
(``attnlab.harness.signals``), which raise an exception it handles. Imported any other way
(the tests load scripts as modules), it does nothing.
"""

import os
import signal
import sys
from pathlib import Path


def _interrupted(signum: int, frame: object) -> None:
    name = os.path.basename(sys.argv[0]) or "attnlab"
    os.write(2, f"{name}: interrupted; nothing written\n".encode())
    os._exit(128 + signum)


_main = getattr(sys.modules.get("__main__"), "__file__", None)
if _main is not None and Path(_main).resolve().parent == Path(__file__).resolve().parent:
    for _name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, _name):
            signal.signal(getattr(signal, _name), _interrupted)

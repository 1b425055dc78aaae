"""The ``specreplay`` console script: a signal handler first, then the command line (issue 17).

A SIGINT or SIGTERM that arrived while the command line was still importing (typer, polars, NumPy,
Numba: a second or more on a cold disk) ended the process with exit 130 or 143 and no line. The
entry point's first statement now installs a handler for both, before any heavy import: it writes
one line on stderr and exits 128 + the signal's number at once (``os._exit``: nothing has been
written yet, so nothing needs unwinding). While a command runs, its own handler
(``specreplay.cli._signals_unwind``) takes over, removes the output's temporary folder and says
what was written; it restores this one when the command ends.

This module imports only the standard library; ``specreplay/__init__.py`` does the same.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

__all__ = ["install", "main"]

_STARTED = False
"""Whether the command line has been handed the process (after its imports)."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Write the one line and leave with 128 + ``signum`` (no unwinding: nothing is written)."""
    del frame
    name = signal.Signals(signum).name
    how = "interrupted" if signum == signal.SIGINT else "terminated"
    when = (
        "outside a command's work; no partial output left"
        if _STARTED
        else ("while starting; nothing written")
    )
    os.write(2, f"error: specreplay {how} ({name}) {when}\n".encode())
    os._exit(128 + signum)


def install() -> None:
    """Install the handler for SIGINT and SIGTERM (from the main thread only)."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _on_signal)


def main() -> None:
    """Run the command line with the start-up handler in place."""
    install()
    global _STARTED
    from specreplay.cli import app

    _STARTED = True
    app()

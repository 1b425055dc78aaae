"""The progress bar of the command line and the Python API (a helper, not a verb).

``progress_bar(quiet, what, total)`` is a :data:`~specreplay.replay.scan.Progress` factory once
``quiet`` is bound: a rich bar on stderr (stdout stays parseable), drawn only on a terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["progress_bar"]


@contextmanager
def progress_bar(quiet: bool, what: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)`` driving a rich progress bar on stderr (a no-op when quiet)."""
    if quiet or not sys.stderr.isatty():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    count = (
        TextColumn("{task.completed:,}/{task.total:,}")
        if total is not None
        else TextColumn("{task.completed:,}")  # no known total: a count, no percentage
    )
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        count,
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(what, total=total)
        yield lambda n: bar.advance(task, n)

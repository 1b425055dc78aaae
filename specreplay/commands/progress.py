"""Progress of the command line and the Python API (a helper, not a verb).

One run draws **one** rich display on stderr, a line per phase (reading, replaying, resampling,
law tests, plots and files …): :class:`Phases` is that display, and calling it is a
:data:`~specreplay.replay.scan.Progress` factory: ``with phases("replaying", rows) as advance:``
adds the phase's line (a bar with a count when the total is known, else a pulse and a count) and
marks it done, with its time, when the block ends. Decisions:

- drawn only when stderr is a terminal and not ``--quiet``; otherwise every phase is a no-op;
- stdout stays parseable: the display never redirects stdout (rich would otherwise route
  ``print`` through its stderr console), and the command prints its text after the display has
  closed; the display is transient (gone once the command ends);
- a phase shorter than a second still gets its line: whether it will take longer is not known
  when it starts.

``progress_bar(quiet, what, total)`` is a one-phase display (the API's ``progress=True``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType
from typing import Any

__all__ = ["Phases", "progress_bar"]


class Phases:
    """One transient rich display on stderr for a command's run, a task per phase."""

    def __init__(self, quiet: bool) -> None:
        self._on = not quiet and sys.stderr.isatty()
        self._bar: Any = None

    def __enter__(self) -> Phases:
        if self._on:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[count]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._bar.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __call__(
        self, what: str, total: int | None
    ) -> AbstractContextManager[Callable[[int], None]]:
        """Return the context of phase ``what`` (``total`` units, or None when not known)."""
        return self._phase(what, total)

    @contextmanager
    def _phase(self, what: str, total: int | None) -> Iterator[Callable[[int], None]]:
        bar = self._bar
        if bar is None:
            yield _nothing
            return
        task = bar.add_task(what, total=total, count=_count(0, total))

        def advance(n: int) -> None:
            done = bar.tasks[task].completed + n
            bar.update(task, completed=done, count=_count(done, total))

        try:
            yield advance
        finally:
            done = int(bar.tasks[task].completed)
            bar.update(task, total=max(done, 1) if total is None else total)
            if total is None:
                bar.update(task, completed=max(done, 1))
            bar.stop_task(task)


def _nothing(n: int) -> None:
    """Advance nothing (no display)."""


def _count(done: float, total: int | None) -> str:
    return f"{int(done):,}/{total:,}" if total is not None else (f"{int(done):,}" if done else "")


@contextmanager
def progress_bar(quiet: bool, what: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)`` of a one-phase display on stderr (a no-op when quiet)."""
    with Phases(quiet) as phases, phases(what, total) as advance:
        yield advance

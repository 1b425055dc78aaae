"""Progress of the command line and the Python API (a helper, not a verb).

One run draws **one** rich display on stderr, a line per phase (reading, replaying, resampling,
law tests, plots and files …): :class:`Phases` is that display, and calling it is a
:data:`~specreplay.replay.scan.Progress` factory: ``with phases("replaying", rows) as advance:``
adds the phase's line (a bar with a count when the total is known, else a pulse and a count) and
marks it done, with its time, when the block ends. Decisions:

- drawn only when stderr is a terminal and not ``--quiet``. When stderr is not a terminal (CI,
  a pipe, a log file) and not ``--quiet``, plain lines instead (issue 16): one at each phase's
  start, one at least every :data:`PLAIN_EVERY` seconds within a phase (a timer thread: a phase
  that advances nothing for minutes, a compile or one large batch, still says it is alive), and
  one at its end, each with the time since the run started (``specreplay: 0:01:05 replaying
  1,200,000/4,000,000 rows (30%)``); ``--quiet`` silences both;
- stdout stays parseable: the display never redirects stdout (rich would otherwise route
  ``print`` through its stderr console), and the command prints its text after the display has
  closed; the display is transient (gone once the command ends);
- a phase shorter than a second still gets its line: whether it will take longer is not known
  when it starts.

``progress_bar(quiet, what, total)`` is a one-phase display (the API's ``progress=True``).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType
from typing import Any, TextIO

__all__ = ["PLAIN_EVERY", "Phases", "progress_bar"]

PLAIN_EVERY = 30.0
"""Seconds between two plain progress lines within a phase (stderr not a terminal)."""


class Phases:
    """One transient rich display on stderr for a command's run, a task per phase."""

    def __init__(self, quiet: bool) -> None:
        tty = sys.stderr.isatty()
        self._on = not quiet and tty
        self._plain = None if quiet or tty else _PlainLines(sys.stderr)
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
        if self._plain is not None:
            with self._plain.phase(what, total) as step:
                yield step
            return
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


class _PlainLines:
    """Progress as plain lines on a stream that is not a terminal (see the module docstring)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.start = time.monotonic()
        self._lock = threading.Lock()

    def _say(self, text: str) -> None:
        s = int(time.monotonic() - self.start)
        with self._lock:
            self.stream.write(f"specreplay: {s // 3600}:{s // 60 % 60:02d}:{s % 60:02d} {text}\n")
            self.stream.flush()

    @contextmanager
    def phase(self, what: str, total: int | None) -> Iterator[Callable[[int], None]]:
        done = [0]
        began = time.monotonic()
        stop = threading.Event()

        def status() -> str:
            if total:
                return f"{what} {done[0]:,}/{total:,} ({100 * done[0] // total}%)"
            return f"{what} {done[0]:,}" if done[0] else f"{what} …"

        def beat() -> None:
            while not stop.wait(PLAIN_EVERY):
                self._say(status())

        def advance(n: int) -> None:
            done[0] += n

        self._say(f"{what} …")
        timer = threading.Thread(target=beat, name="specreplay-progress", daemon=True)
        timer.start()
        try:
            yield advance
        finally:
            stop.set()
            timer.join()
            self._say(f"{what} done in {time.monotonic() - began:.1f} s")


def _nothing(n: int) -> None:
    """Advance nothing (no display)."""


def _count(done: float, total: int | None) -> str:
    return f"{int(done):,}/{total:,}" if total is not None else (f"{int(done):,}" if done else "")


@contextmanager
def progress_bar(quiet: bool, what: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)`` of a one-phase display on stderr (a no-op when quiet)."""
    with Phases(quiet) as phases, phases(what, total) as advance:
        yield advance

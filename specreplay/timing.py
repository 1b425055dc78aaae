"""Stage timers: where a run's time goes (``bench/scale.py``, docs/scale.md "Benchmarks").

``with stage("validating rows"):`` adds the block's wall time to this process's total for that
stage, and ``@stage("fold")`` on a function times each of its calls; stages may nest (an inner
stage's time is inside its outer stage's too) and may be entered from several threads (each
entry counts its own wall time). A timer costs two ``time.perf_counter`` calls and a lock: cheap
beside a batch, too dear inside a kernel loop.

When the environment variable ``SPECREPLAY_TIMINGS`` names a file, the totals are **appended** to
it as one JSON line (``{"stage": seconds, ...}``) when the process exits. Appending never
truncates what is there; the file is opened without following a symbolic link and written only
when it is a regular file (a device, a FIFO or a folder of that name is left alone, with one line
on stderr). Dask workers keep their own totals and write nothing unless their environment sets
the variable.

**start-up** is the stage before the first one: from the process's start to the first stage
entered (any stage, any thread), so it holds the interpreter's start, the imports and
whatever a command does before its first timed block (parsing options, checking the output
folder). Numba loads a cached kernel at its first call, inside the stage that makes it; a
kernel loaded before the first stage would count here. The process's start comes from Linux:
``/proc/self/stat``'s ``starttime`` (clock ticks since boot, so up to one tick, 10 ms, early)
against ``CLOCK_BOOTTIME`` now, the clock of ``/proc/uptime``. Where that fails (no /proc,
another system), start-up counts from the first import of :mod:`specreplay` instead
(``specreplay.IMPORTED_AT``), which leaves out the interpreter's own start: :data:`STARTED_AT`
says which (``"process"`` or ``"import"``). A process that enters no stage records none.
"""

from __future__ import annotations

import atexit
import json
import os
import stat
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

__all__ = ["ENV", "STARTED_AT", "START_UP", "stage", "start_ticks", "timed", "totals"]

ENV = "SPECREPLAY_TIMINGS"
START_UP = "start-up"
"""The stage from the process's start to the first stage entered."""


def start_ticks(stat_line: bytes) -> int:
    """Return the ``starttime`` of a ``/proc/PID/stat`` line: clock ticks from boot to the start.

    The command name (field 2, in parentheses) may hold spaces and ``)``: the fields after its
    last ``)`` are fields 3 onwards, ``starttime`` being field 22 (proc(5)).
    """
    fields = stat_line[stat_line.rindex(b")") + 2 :].split()
    return int(fields[22 - 3])


def _process_age() -> float | None:
    """Seconds since this process started (Linux), or None when /proc cannot tell."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            ticks = start_ticks(fh.read())
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return age if 0.0 <= age < 86_400.0 * 365 else None


def _origin() -> tuple[float, str]:
    """Return the start on the ``perf_counter`` clock and ``"process"``, or ``"import"``."""
    age = _process_age()
    if age is not None:
        return time.perf_counter() - age, "process"
    import specreplay

    return specreplay.IMPORTED_AT, "import"


_lock = threading.Lock()
_totals: dict[str, float] = {}
_ORIGIN, STARTED_AT = _origin()
_started = False  # whether a stage was entered yet (start-up recorded)


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Add the wall time of the ``with`` block to stage ``name``'s total."""
    t0 = time.perf_counter()
    if not _started:
        _start_up_ends(t0)
    try:
        yield
    finally:
        dt = time.perf_counter() - t0
        with _lock:
            _totals[name] = _totals.get(name, 0.0) + dt


def _start_up_ends(t0: float) -> None:
    """Record :data:`START_UP` (the first stage begins at ``t0``), once per process."""
    global _started
    with _lock:
        if not _started:
            _started = True
            _totals[START_UP] = _totals.get(START_UP, 0.0) + max(0.0, t0 - _ORIGIN)


def timed[T](name: str, items: Iterable[T]) -> Iterator[T]:
    """Yield ``items``, adding the time each one takes to produce to stage ``name``.

    The consumer's time between items is not counted: only the producer's (a reader's
    decoding, say), so a stage timed this way and the stages of the loop body add up.
    """
    it = iter(items)
    while True:
        with stage(name):
            try:
                item = next(it)
            except StopIteration:
                return
        yield item


def totals() -> dict[str, float]:
    """Return a copy of this process's totals so far, in seconds, by stage."""
    with _lock:
        return dict(_totals)


def _write_at_exit() -> None:
    path = os.environ.get(ENV)
    if not path or not _totals:
        return
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        print(f"specreplay: {ENV}={path}: not written ({exc.strerror})", file=sys.stderr)
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            print(f"specreplay: {ENV}={path}: not a regular file, not written", file=sys.stderr)
            return
        line = json.dumps({k: round(v, 6) for k, v in sorted(totals().items())}) + "\n"
        os.write(fd, line.encode())
    finally:
        os.close(fd)


atexit.register(_write_at_exit)

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

__all__ = ["ENV", "stage", "timed", "totals"]

ENV = "SPECREPLAY_TIMINGS"

_lock = threading.Lock()
_totals: dict[str, float] = {}


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Add the wall time of the ``with`` block to stage ``name``'s total."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        dt = time.perf_counter() - t0
        with _lock:
            _totals[name] = _totals.get(name, 0.0) + dt


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

"""A full disk or a file-size limit while writing: one line naming the path, or a cache note.

Terms:

- A **disk error** is ENOSPC (errno 28, no space left on device) or EFBIG (errno 27, file too
  large: the process's file-size limit, ``ulimit -f``, or the file system's largest file; Python
  ignores SIGXFSZ, so a write past the limit fails with EFBIG). Python and pyarrow raise it as an
  :class:`OSError` with that ``errno``; polars (Rust) raises a plain ``OSError`` without an
  ``errno`` (``No space left on device (os error 28)``, ``File too large (os error 27)``) from
  ``write_ipc``, ``sink_ipc`` and ``write_ndjson``, and a ``ComputeError`` from ``write_parquet``
  and ``sink_parquet`` (``parquet: File out of specification: underlying IO error: File too large
  (os error 27)``). :func:`disk_errno` recognises all of them (each seen by triggering it under a
  size limit and on a full tmpfs, polars 2.1, pyarrow 26), along the exception's cause chain.
- **Writing** a file (:func:`writing`): an output, a shard, a manifest. A disk error inside
  becomes :class:`DiskFull`, a :class:`~specreplay.errors.SpecReplayError` (one line, exit 2)
  that is also an :class:`OSError` with the errno, so code catching ``OSError`` still sees it.
  Every file specreplay writes goes to a temporary name first and is renamed in, so the message
  says the file is left as it was; :func:`~specreplay.results.output.output_dir` rewrites it to
  name the file under ``--out`` and to say the output folder is unchanged
  (:func:`output_message`).
- A **cache** write that fails (the per-shard cache of ``--cache``, the input-hash cache,
  Numba's kernel cache) is never a failure of the run: the cache records one note per cache
  (:func:`note_cache_failure`, first failure only), the run goes on, and the command line prints
  the notes on stderr when the command completes (not when it fails: the error is then the one
  line). Numba itself does not forgive a failed cache write on Linux: ``Cache.save_overload``
  guards only Windows' EACCES (``numba/core/caching.py``), so the OSError reaches the kernel's
  caller, after the compiled code was added to the dispatcher and the temporary file removed.
  :func:`guard_numba_cache` therefore lets specreplay's own kernels (only theirs) note the
  failure instead: their compiled code is used for the run and compiled again next run.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specreplay.errors import SpecReplayError

__all__ = [
    "DISK_ERRNOS",
    "NUMBA_CACHE",
    "CacheNote",
    "DiskFull",
    "cache_notes",
    "cause",
    "disk_errno",
    "guard_numba_cache",
    "note_cache_failure",
    "output_message",
    "reset_cache_notes",
    "what_to_do",
    "writing",
]

DISK_ERRNOS: dict[int, str] = {
    errno.ENOSPC: "no space left on device",
    errno.EFBIG: "file too large for the file-size limit (ulimit -f) or the file system",
}
"""The errors that mean the disk cannot take the file, with how the line says them."""
_WHAT_TO_DO: dict[int, str] = {
    errno.ENOSPC: "free space or choose another output folder",
    errno.EFBIG: "raise the limit (ulimit -f) or choose another output folder",
}
# polars (Rust) says "(os error N)", pyarrow's detail "[errno N]"
_OS_ERROR = re.compile(r"\((?:os error) (\d+)\)|\[errno (\d+)\]", re.IGNORECASE)


def disk_errno(exc: BaseException | None) -> int | None:
    """Return ENOSPC or EFBIG when ``exc`` (or an exception in its cause chain) is one, else None.

    An :class:`OSError` by its ``errno``; any other exception (polars' ``ComputeError``, an
    ``OSError`` raised without an errno) by an ``(os error N)`` or ``[errno N]`` in its text.

    >>> disk_errno(OSError(28, "No space left on device"))
    28
    >>> disk_errno(RuntimeError("parquet: underlying IO error: File too large (os error 27)"))
    27
    >>> disk_errno(OSError(13, "Permission denied")) is None
    True
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        code = exc.errno if isinstance(exc, OSError) else None
        if code in DISK_ERRNOS:
            return code
        if code is None:
            for found in _OS_ERROR.finditer(str(exc)):
                n = int(found.group(1) or found.group(2))
                if n in DISK_ERRNOS:
                    return n
        exc = exc.__cause__ or exc.__context__
    return None


def what_to_do(code: int) -> str:
    """Return what a line tells the user to do about ``code``: ``free space or choose …``."""
    return _WHAT_TO_DO[code]


def cause(code: int) -> str:
    """Return how a line says ``code``: ``no space left on device (errno 28)``."""
    return f"{DISK_ERRNOS[code]} (errno {code})"


class DiskFull(SpecReplayError, OSError):
    """A file could not be written: the disk is full or the file-size limit was reached.

    Attributes
    ----------
    path : Path
        The file being written (its final name, not the temporary one).
    errno, code : int
        ENOSPC or EFBIG (``code`` typed as such; ``errno`` is OSError's attribute).
    """

    def __init__(self, message: str, *, path: Path, code: int) -> None:
        SpecReplayError.__init__(self, message)
        self.path = Path(path)
        self.errno = self.code = code
        self.strerror = DISK_ERRNOS[code]
        self.filename = str(path)

    @classmethod
    def file(cls, path: Path, code: int) -> DiskFull:
        """Return the error for one file ``path`` that could not be written (whole or not at all).

        >>> print(DiskFull.file(Path("a/part-00000.parquet"), 27))  # doctest: +ELLIPSIS
        a/part-00000.parquet: file too large ... (errno 27) while writing; not written, ...
        """
        todo = _WHAT_TO_DO[code].replace("output folder", "place to write")
        message = f"{path}: {cause(code)} while writing; not written, any earlier one kept: {todo}"
        return cls(message, path=path, code=code)

    def moved(self, stage: Path, final: Path) -> DiskFull:
        """Return this file's error naming it under ``final`` instead of the staging ``stage``."""
        if not self.path.is_relative_to(stage):
            return self
        return DiskFull.file(final / self.path.relative_to(stage), self.code)


def output_message(path: Path, out: Path, code: int) -> str:
    """Return the line for a disk error while writing ``path`` into the output folder ``out``.

    ``path`` is the file under ``out`` (``out`` itself when the file is not known); the run wrote
    nothing and ``out`` is as it was (:func:`~specreplay.results.output.output_dir`).

    >>> output_message(Path("o/cells.parquet"), Path("o"), 28)  # doctest: +NORMALIZE_WHITESPACE
    'o/cells.parquet: no space left on device (errno 28) while writing; nothing written, o left
    as it was: free space or choose another output folder'
    """
    left = f"nothing written, {out} left as it was"
    return f"{path}: {cause(code)} while writing; {left}: {_WHAT_TO_DO[code]}"


@contextlib.contextmanager
def writing(path: Path, tmp: Path | None = None) -> Iterator[None]:
    """Write ``path`` in the block: a disk error becomes :class:`DiskFull` naming ``path``.

    ``tmp``, the temporary name the block writes before renaming it to ``path``, is removed when
    the block fails (with any exception); removing it never raises.

    Raises
    ------
    DiskFull
        The block raised an exception that :func:`disk_errno` recognises (from None: the line is
        the whole story).
    """
    try:
        yield
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        code = disk_errno(exc)
        if code is None or isinstance(exc, DiskFull):
            raise
        raise DiskFull.file(Path(path), code) from None


# -- caches ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheNote:
    """A cache that could not be written: which (``cache``), where, why, and what it costs."""

    cache: str
    folder: str
    why: str
    cost: str

    def line(self) -> str:
        """Return the stderr line: ``note: WHICH DIR not written: WHY; COST``."""
        return f"note: {self.cache} {self.folder} not written: {self.why}; {self.cost}"


_NOTES: dict[str, CacheNote] = {}


def note_cache_failure(cache: str, folder: Path | str, exc: BaseException, cost: str) -> None:
    """Record that ``cache`` (in ``folder``) could not be written; the first failure is kept."""
    if cache in _NOTES:
        return
    code = disk_errno(exc)
    if code is not None:
        why = cause(code)
    elif isinstance(exc, OSError) and exc.strerror:
        why = f"{exc.strerror.lower()}" + (f" (errno {exc.errno})" if exc.errno else "")
    else:
        why = str(exc) or type(exc).__name__
    _NOTES[cache] = CacheNote(cache, str(folder), why, cost)


def cache_notes() -> tuple[CacheNote, ...]:
    """Return the cache notes recorded since :func:`reset_cache_notes`, in order."""
    return tuple(_NOTES.values())


def reset_cache_notes() -> None:
    """Forget the cache notes (the command line calls it as a command starts)."""
    _NOTES.clear()


NUMBA_CACHE = "Numba's kernel cache"
_guarded = False


def guard_numba_cache() -> None:
    """Let a failed Numba cache write of specreplay's kernels be a note, not an error.

    Registers a listener of Numba's ``numba:compile`` event (once per process): when one of
    specreplay's own dispatchers compiles (a cache miss), its cache object becomes a
    :class:`numba.core.caching.FunctionCache` whose ``save_overload`` records an OSError as a
    cache note instead of raising it (module docstring). Other packages' kernels are untouched.
    """
    global _guarded
    if _guarded:
        return
    from numba.core import event
    from numba.core.caching import FunctionCache

    class _NotingCache(FunctionCache):
        def save_overload(self, sig: Any, data: Any) -> None:
            try:
                super().save_overload(sig, data)  # type: ignore[no-untyped-call]
            except OSError as exc:
                cost = "kernels compiled for this run only, compiled again next run"
                note_cache_failure(NUMBA_CACHE, self.cache_path, exc, cost)

    class _Guard(event.Listener):
        def on_start(self, ev: Any) -> None:
            dispatcher = (ev.data or {}).get("dispatcher")
            cache = getattr(dispatcher, "_cache", None)
            module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
            if type(cache) is FunctionCache and module.split(".")[0] == "specreplay":
                cache.__class__ = _NotingCache

        def on_end(self, ev: Any) -> None:
            pass

    event.register("numba:compile", _Guard())  # type: ignore[no-untyped-call]
    _guarded = True

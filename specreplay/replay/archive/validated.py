"""Validate once per content: a "validated" mark beside each input-hash cache entry.

A user reruns analyses on one capture all afternoon; every run used to check every row again.
A file that passed a full check under this validator is not checked row by row again while its
identity is unchanged (docs/scale.md, "Rows validated earlier").

Terms:

- The **validator hash** (:func:`validator_hash`) is the SHA-256 over the sorted paths and bytes
  of the modules whose code decides validity (:data:`VALIDATOR_MODULES`) and
  ``specreplay.__version__``, computed once per process as :func:`specreplay.kernel_sources_hash`
  is. Any change of that code makes every mark stale.
- A **mark** is a sealed entry (:mod:`~specreplay.replay.archive.sealed`, format
  :data:`FORMAT`) under ``cache_root()/validated/``, named by the same BLAKE2b of the file's
  stamp as its input-hash cache entry (:mod:`~specreplay.replay.archive.filehash`). Its payload
  holds the stamp, the file's SHA-256, the validator hash and the columns the full pass read. It
  is used only when the file's stamp now equals the mark's, the input-hash cache's entry of that
  stamp holds the same SHA-256 (a mark is tied to a digest, not to a stamp alone), the validator
  hash is this process's, and the run reads no column the full pass did not read (a projected
  run validated only what it read).
- A mark is **written** only for a file that this process checked in full, row by row, with no
  error, and only after :func:`~specreplay.replay.archive.filehash.recorded_digest` succeeded for
  it (:func:`commit`, called where results.json's ``inputs`` are made): the file's stamp was the
  run's first stamp of it from the listing to the end of the replay. It is keyed by that first
  stamp.
- A **skipped** file (a mark matches) is not checked for nulls, list lengths, the row kernel's
  rules or the repetition of its ``logging_arm`` value; every check that builds what later
  stages use or depends on the run's options stays: the request and family codes, the order
  rules and their carry across files, the names rule, ``--by`` columns, ``--logging-arm``
  against the column, the top-K of the logging arm against the candidate count, the columns
  every file must share. The replay's own guards (:mod:`~specreplay.replay.archive.guards`:
  nulls, non-finite values, a negative id, a drafted token outside the candidates, laws that do
  not sum) run on every row of a skipped file; a chunk where one fires is checked in full, so
  its error line is the full check's, word for word.

Where marks are honoured: the command line and the Python API call :func:`new_run` as a
command starts (``honour=False`` under ``--revalidate`` and for ``validate``, which always checks
every row and writes marks). Elsewhere (a library use of the reader, a Dask worker process)
nothing is honoured: the default state checks every row. A worker's full pass writes no mark
(marks are written by the process that records the digests). The per-shard cache of ``--cache``
does not key on marks: a run's figures do not depend on them.

A cache folder that another user could have written (owned by another uid, or writable by group
or others: the cache root, ``hashes/``, ``validated/``, the entry's folder or the entry) is not
trusted: its marks are ignored for the run and one note says so on stderr (digests keep issue 9's
rules). A mark that fails its seal (a changed byte, truncated) is ignored and rewritten.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import astuple, dataclass, field
from pathlib import Path

from specreplay import __version__, cache_root
from specreplay.diskfull import note_cache_failure
from specreplay.replay.archive import filehash
from specreplay.replay.archive.sealed import unseal, write_sealed

__all__ = [
    "FORMAT",
    "MARKS",
    "VALIDATOR_MODULES",
    "Passes",
    "Validation",
    "commit",
    "file_checked",
    "new_run",
    "skips",
    "summary",
    "validator_hash",
    "write_mark",
]

FORMAT = "specreplay-validated/1"
MARKS = "the validation marks"
VALIDATOR_MODULES: tuple[str, ...] = (
    "names.py",
    "replay/archive/batch.py",
    "replay/archive/guards.py",
    "replay/archive/ordercheck.py",
    "replay/archive/reader.py",
    "replay/archive/rowcheck.py",
    "replay/archive/rowrules.py",
    "replay/archive/schema.py",
    "replay/archive/sources.py",
    "replay/archive/validated.py",
)
"""The modules (under ``specreplay/``) whose code decides whether a row is valid."""

HONOURED = True
"""False: this process honours no mark (marks are still written). The test suite's default
(tests/conftest.py), so a test's second run of a shared archive checks every row as it did before
marks existed; the tests of marks set it back."""


@functools.cache
def validator_hash() -> str:
    """Return the SHA-256 of the validator's sources and the package version (once per process)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256(f"specreplay {__version__}\0".encode())
    for rel in sorted(VALIDATOR_MODULES):
        h.update(rel.encode() + b"\0")
        h.update((root / rel).read_bytes() + b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class Validation:
    """How a run's files were validated (results.json ``validation``).

    Attributes
    ----------
    files : int
        Archive files the run read.
    validated_earlier : int
        Those whose rows were not checked again (a mark matched).
    validator : str
        The validator hash (:func:`validator_hash`).
    """

    files: int
    validated_earlier: int
    validator: str


@dataclass
class _Run:
    honour: bool = False
    trusted: bool = True  # the cache folders passed their ownership check
    checked: dict[str, frozenset[str]] = field(default_factory=dict)  # real path -> columns
    skipped: set[str] = field(default_factory=set)
    seen: set[str] = field(default_factory=set)
    looked: dict[str, bool] = field(default_factory=dict)


_RUN = _Run()


def new_run(*, honour: bool) -> None:
    """Start a run: forget what was checked or skipped; honour marks only when ``honour``."""
    global _RUN
    _RUN = _Run(honour=honour and HONOURED)


def _mark_path(stamp: filehash.Stamp) -> Path:
    key = "\0".join(str(v) for v in astuple(stamp))
    name = hashlib.blake2b(key.encode(), digest_size=20).hexdigest()
    return Path(cache_root()) / "validated" / name[:2] / name


def _unsafe(paths: list[Path]) -> str | None:
    """Return why one of ``paths`` (that exists) could have been written by another user."""
    me = os.geteuid()
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        if st.st_uid != me:
            return f"{p} is owned by another user (uid {st.st_uid})"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{p} is writable by group or others"
    return None


def _folders_safe(mark: Path, stamp: filehash.Stamp) -> bool:
    """Check the folders a mark and its digest live in; one note for the run when one fails."""
    if not _RUN.trusted:
        return False
    root = Path(cache_root())
    digest_entry = filehash.entry_path(stamp)
    folders = [root, root / "hashes", root / "validated", mark.parent, digest_entry.parent]
    why = _unsafe([*folders, mark, digest_entry])
    if why is None:
        return True
    _RUN.trusted = False
    note_cache_failure(MARKS, root, PermissionError(why), "every row is checked this run")
    return False


def _matches(path: Path, columns: frozenset[str]) -> bool:
    """Return True when ``path`` has a mark this run may honour for ``columns`` (docstring)."""
    try:
        stamp = filehash.Stamp.of(path)
    except OSError:
        return False
    filehash.watch(path)
    if filehash.first_stamp(path) != stamp:
        return False
    mark = _mark_path(stamp)
    try:
        data = mark.read_bytes()
    except OSError:
        return False
    if not _folders_safe(mark, stamp):
        return False
    payload = unseal(FORMAT, data)
    try:
        doc = json.loads(payload) if payload is not None else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("stamp") != list(astuple(stamp)):
        return False
    if doc.get("validator") != validator_hash():
        return False
    marked = doc.get("columns")
    if not isinstance(marked, list) or not columns <= set(marked):
        return False
    digest = filehash.cached_digest(stamp)
    return digest is not None and doc.get("sha256") == digest


def skips(path: Path, columns: frozenset[str]) -> bool:
    """Return True when the rows of ``path`` need no full check this run (recorded for the run).

    Parameters
    ----------
    path : Path
        An archive file about to be read.
    columns : frozenset of str
        The columns the run reads from it.
    """
    real = os.path.realpath(path)
    _RUN.seen.add(real)
    if not _RUN.honour:
        return False
    key = f"{real}\0{','.join(sorted(columns))}"
    if key not in _RUN.looked:
        _RUN.looked[key] = _matches(Path(path), columns)
    if _RUN.looked[key]:
        _RUN.skipped.add(real)
    return _RUN.looked[key]


def file_checked(path: Path, columns: frozenset[str]) -> None:
    """Record that every row of ``path`` passed the full check, reading ``columns``."""
    real = os.path.realpath(path)
    _RUN.seen.add(real)
    _RUN.checked[real] = columns


class Passes:
    """One reader's passes over its files: which files it skipped, which it checked in full.

    A file is recorded as checked (:func:`file_checked`) when every chunk of it went through
    the full check and the reader met no error; a file with a skipped chunk is not (its mark
    stays what it was).
    """

    def __init__(self) -> None:
        self._skipped: set[str] = set()
        self._columns: dict[str, set[str]] = {}

    def skips(self, path: Path, columns: Sequence[str]) -> bool:
        """Return True when the chunk's rows need only the guards (:func:`skips`)."""
        if skips(path, frozenset(columns)):
            self._skipped.add(str(path))
            return True
        return False

    def full(self, path: Path, columns: Sequence[str]) -> None:
        """Record a chunk of ``path`` checked in full, reading ``columns``."""
        self._columns.setdefault(str(path), set()).update(columns)

    def done(self, path: Path, *, clean: bool) -> None:
        """Close the pass over ``path``: record it as checked when it was, in full and clean."""
        key = str(path)
        if clean and key not in self._skipped and key in self._columns:
            file_checked(path, frozenset(self._columns[key]))


def write_mark(stamp: filehash.Stamp, sha256: str, columns: frozenset[str]) -> None:
    """Write the mark of a file (temporary name, then rename); a failure is a cache note."""
    mark = _mark_path(stamp)
    payload = json.dumps(
        {
            "stamp": list(astuple(stamp)),
            "sha256": sha256,
            "validator": validator_hash(),
            "columns": sorted(columns),
        }
    ).encode()
    try:
        write_sealed(mark, FORMAT, payload)
    except OSError as exc:
        folder = Path(cache_root()) / "validated"
        note_cache_failure(MARKS, folder, exc, "its rows are checked again next run")


def commit(path: Path, sha256: str) -> None:
    """Write the mark of ``path`` if this run checked it in full (after its digest was recorded).

    Called right after :func:`~specreplay.replay.archive.filehash.recorded_digest` returned
    ``sha256`` for ``path``: the mark is keyed by the run's first stamp of the file, the one the
    digest belongs to.
    """
    columns = _RUN.checked.get(os.path.realpath(path))
    stamp = filehash.first_stamp(path)
    if columns is None or stamp is None:
        return
    write_mark(stamp, sha256, columns)


def summary(inputs: Sequence[Path]) -> Validation | None:
    """Return how this run validated ``inputs`` (its archive files); None when it read none.

    None when no reader ran in this process since :func:`new_run` (a command that reads no
    position archive).
    """
    if not _RUN.seen:
        return None
    real = {os.path.realpath(p) for p in inputs}
    return Validation(len(real), len(real & _RUN.skipped), validator_hash())


def dask_run() -> None:
    """Honour no mark this run: Dask workers check every row (module docstring).

    What a local reader skipped before (the first batch an archive is opened with) is read again
    by the workers, so it no longer counts as skipped.
    """
    _RUN.honour = False
    _RUN.skipped.clear()


def force_full() -> None:
    """Honour no mark this run (``--revalidate``, ``validate``): every row is checked."""
    _RUN.honour = False

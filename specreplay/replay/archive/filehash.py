"""SHA-256 of input files: cached so a second run does not read its inputs twice, and checked.

results.json names every input with its SHA-256. Hashing is a full read of each file on top of
the replay's own, so the digest is cached under the user cache folder
(:func:`specreplay.cache_root`, ``hashes/``), never beside the archive (inputs are read-only).

Terms:

- The **stamp** of a file is ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)``
  (:class:`Stamp`). The cache keys a digest by the whole stamp, and a cached digest is used only
  when all five fields match. No user can set the change time (ctime): every write, truncation,
  ``utime``, rename onto the path or re-creation moves it. So a file rewritten in place at the
  same size with its modification time put back (``os.utime``), or deleted and re-created with
  its modification time preserved (``cp -p``, ``rsync -t``, ``tar x``: the filesystem may hand
  out the same inode number at once) is hashed again.
- An **entry** is one small file named by the BLAKE2b of the stamp, sealed
  (:mod:`~specreplay.replay.archive.sealed`: a header holding the SHA-256 of the payload) and
  written by rename, so concurrent runs (or Dask workers) never see half an entry. The payload
  (the stamp and the digest, as JSON) is parsed only after the header checks; an entry that fails
  (a changed byte, truncated, header only, another format) is recomputed and counted
  (:attr:`HashStats.recomputed`, results.json ``cache.recomputed``). A cache folder that cannot be
  written (a full disk, a file-size limit, no permission) costs only the hashing, never the run:
  the first failure is a cache note (:mod:`specreplay.diskfull`), which the command line prints.
- The **run's ledger** holds the first stamp this run took of each file: when the replay lists
  or opens it (:func:`watch`) or when it is hashed. :func:`recorded_digest` is what a command
  writes as ``inputs[].sha256``: the digest of the whole file as it was during the run. It checks
  that the file's stamp when hashed, its first stamp in the run and its stamp after the replay
  are one stamp, and otherwise raises ``PATH: changed during the run`` (exit 2, nothing written).
  Hashing itself checks the stamp before and after the read. :func:`new_run` starts a run (the
  command line and the Python API call it before a command reads its inputs).

:func:`hash_stats` tells how many digests came from the cache and what computing the others cost,
which the command's summary reports.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import astuple, dataclass, field
from pathlib import Path

from specreplay import cache_root
from specreplay.diskfull import note_cache_failure
from specreplay.errors import SpecReplayError
from specreplay.replay.archive.sealed import unseal, write_sealed

__all__ = [
    "FORMAT",
    "HashStats",
    "RecordedDigest",
    "Stamp",
    "cached_digest",
    "entry_path",
    "file_sha256",
    "first_stamp",
    "hash_stats",
    "new_run",
    "recorded_digest",
    "reset_hash_stats",
    "watch",
]

FORMAT = "specreplay-hash-cache/2"
_BLOCK = 1 << 20


@dataclass(frozen=True)
class Stamp:
    """What changes when a file changes (module docstring): the input-hash cache's key."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, path: Path) -> Stamp:
        """Return the stamp of ``path`` now (``os.stat``: a symlink's target)."""
        st = os.stat(path)
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class RecordedDigest:
    """An input's digest as results.json records it: the whole file as it was during the run."""

    sha256: str
    bytes: int


@dataclass
class HashStats:
    """Digests served since the last :func:`reset_hash_stats`.

    Attributes
    ----------
    hits : int
        Digests read from the cache.
    computed : int
        Digests computed by reading the file.
    bytes_read : int
        Bytes read to compute them.
    seconds : float
        Wall time spent computing them.
    recomputed : list of str
        Files whose cache entry failed its check (then hashed again), in the order met.
    """

    hits: int = 0
    computed: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    recomputed: list[str] = field(default_factory=list)


_STATS = HashStats()
_LEDGER: dict[str, Stamp] = {}  # real path -> the first stamp this run took of the file


def hash_stats() -> HashStats:
    """Return the counts since the last :func:`reset_hash_stats` (a copy)."""
    s = _STATS
    return HashStats(s.hits, s.computed, s.bytes_read, s.seconds, list(s.recomputed))


def reset_hash_stats() -> None:
    """Zero the counts."""
    _STATS.hits = _STATS.computed = _STATS.bytes_read = 0
    _STATS.seconds = 0.0
    _STATS.recomputed.clear()


def new_run() -> None:
    """Start a run: zero the counts and empty the run's ledger of stamps."""
    reset_hash_stats()
    _LEDGER.clear()


def _first(path: Path, stamp: Stamp) -> Stamp:
    """Return the run's first stamp of ``path``, recording ``stamp`` when there is none."""
    return _LEDGER.setdefault(os.path.realpath(path), stamp)


def watch(path: Path) -> None:
    """Record the file's stamp as the replay lists or opens it (the first one of the run counts).

    A file that cannot be stat'ed is left to the reader, which names the problem.
    """
    with contextlib.suppress(OSError):
        _first(path, Stamp.of(path))


def first_stamp(path: Path) -> Stamp | None:
    """Return the run's first stamp of ``path`` (None: the run has not listed or hashed it)."""
    return _LEDGER.get(os.path.realpath(path))


def _changed(path: Path) -> SpecReplayError:
    return SpecReplayError(f"{path}: changed during the run")


def _entry(stamp: Stamp) -> Path:
    key = "\0".join(str(v) for v in astuple(stamp))
    name = hashlib.blake2b(key.encode(), digest_size=20).hexdigest()
    return Path(cache_root()) / "hashes" / name[:2] / name


def entry_path(stamp: Stamp) -> Path:
    """Return the path of the cache entry of ``stamp`` (it may not exist)."""
    return _entry(stamp)


def cached_digest(stamp: Stamp) -> str | None:
    """Return the digest the cache holds for ``stamp``, None when absent or failing its check.

    Reads nothing but the entry (the validation marks tie themselves to it:
    :mod:`~specreplay.replay.archive.validated`); counts nothing.
    """
    try:
        data = _entry(stamp).read_bytes()
    except OSError:
        return None
    return _cached(unseal(FORMAT, data), stamp)


def _compute(path: Path, stamp: Stamp) -> str:
    """Hash the file; raise when its stamp after the read is not ``stamp`` (taken before)."""
    h = hashlib.sha256()
    t0 = time.perf_counter()
    n = 0
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(_BLOCK), b""):
            h.update(block)
            n += len(block)
    if Stamp.of(path) != stamp:
        raise _changed(path)
    _STATS.computed += 1
    _STATS.bytes_read += n
    _STATS.seconds += time.perf_counter() - t0
    return h.hexdigest()


def _cached(payload: bytes | None, stamp: Stamp) -> str | None:
    """Return the digest of an unsealed payload, None unless it is this stamp's and well formed."""
    if payload is None:
        return None
    try:
        doc = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("stamp") != list(astuple(stamp)):
        return None
    digest = doc.get("sha256")
    if isinstance(digest, str) and len(digest) == 64 and set(digest) <= set("0123456789abcdef"):
        return digest
    return None


HASH_CACHE = "the input-hash cache"


def _store(entry: Path, stamp: Stamp, digest: str) -> None:
    """Write the entry (temporary name, then rename); a failure is a cache note, not an error.

    An unwritable cache (a full disk, a file-size limit, no permission) costs the hashing of the
    next run, never this run: the temporary file is removed and the first failure of the run is
    noted (:func:`specreplay.diskfull.note_cache_failure`; the command line prints it).
    """
    payload = json.dumps({"stamp": list(astuple(stamp)), "sha256": digest}).encode()
    try:
        write_sealed(entry, FORMAT, payload)
    except OSError as exc:
        folder = Path(cache_root()) / "hashes"
        note_cache_failure(HASH_CACHE, folder, exc, "its inputs are hashed again next run")


def _digest(path: Path, cache: bool) -> tuple[str, Stamp]:
    """Return the digest and the stamp it belongs to (recorded in the run's ledger)."""
    stamp = Stamp.of(path)
    _first(path, stamp)
    if not cache:
        return _compute(path, stamp), stamp
    entry = _entry(stamp)
    try:
        data: bytes | None = entry.read_bytes()
    except OSError:
        data = None  # absent (or unreadable): computed, not counted as recomputed
    if data is not None:
        digest = _cached(unseal(FORMAT, data), stamp)
        if digest is not None:
            _STATS.hits += 1
            return digest, stamp
        _STATS.recomputed.append(str(path))
    digest = _compute(path, stamp)
    _store(entry, stamp, digest)
    return digest, stamp


def file_sha256(path: Path, *, cache: bool = True) -> str:
    """Return the hex SHA-256 of ``path``, from the cache when the whole stamp matches.

    Parameters
    ----------
    path : Path
        A regular file.
    cache : bool
        Read and write the cache (False: always read the file, write nothing).

    Raises
    ------
    SpecReplayError
        ``PATH: changed during the run`` when the file changed while it was read.
    """
    return _digest(Path(path), cache)[0]


def recorded_digest(path: Path) -> RecordedDigest:
    """Return the digest results.json records for an input: the file as it was during the run.

    Called after the replay. The stamp the digest belongs to must be the run's first stamp of
    the file (taken when the replay listed or opened it, or when it was first hashed) and its
    stamp now.

    Raises
    ------
    SpecReplayError
        ``PATH: changed during the run`` otherwise.
    """
    path = Path(path)
    try:
        digest, stamp = _digest(path, cache=True)
        now = Stamp.of(path)
    except OSError:  # gone since the replay read it
        raise _changed(path) from None
    if _first(path, stamp) != stamp or now != stamp:
        raise _changed(path)
    return RecordedDigest(digest, stamp.size)

"""SHA-256 of input files, with a cache so a second run does not read its inputs twice.

results.json names every input with its SHA-256. Hashing is a full read of each file on top of
the replay's own, so the digest is cached under the user cache folder
(:func:`specreplay.cache_root`, ``hashes/``), never beside the archive (inputs are read-only),
keyed by what changes when a file changes: its real path, size, modification time in
nanoseconds and inode. A file rewritten in place changes its modification time; one replaced by
a rename changes its inode. An entry is one small file named by the BLAKE2b of the key and
written by rename, so concurrent runs (or Dask workers) never see half an entry; a cache folder
that cannot be written costs only the hashing, never the run.

:func:`hash_stats` tells how many digests came from the cache and what computing the others cost,
which the command's summary reports.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from specreplay import cache_root

__all__ = ["HashStats", "file_sha256", "hash_stats", "reset_hash_stats"]

_BLOCK = 1 << 20


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
    """

    hits: int = 0
    computed: int = 0
    bytes_read: int = 0
    seconds: float = 0.0


_STATS = HashStats()


def hash_stats() -> HashStats:
    """Return the counts since the last :func:`reset_hash_stats` (a copy)."""
    return HashStats(_STATS.hits, _STATS.computed, _STATS.bytes_read, _STATS.seconds)


def reset_hash_stats() -> None:
    """Zero the counts (a command calls it before it hashes its inputs)."""
    _STATS.hits = _STATS.computed = _STATS.bytes_read = 0
    _STATS.seconds = 0.0


def _entry(path: Path) -> Path:
    st = path.stat()
    key = f"{os.path.realpath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"
    name = hashlib.blake2b(key.encode(), digest_size=20).hexdigest()
    return Path(cache_root()) / "hashes" / name[:2] / name


def _compute(path: Path) -> str:
    h = hashlib.sha256()
    t0 = time.perf_counter()
    n = 0
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(_BLOCK), b""):
            h.update(block)
            n += len(block)
    _STATS.computed += 1
    _STATS.bytes_read += n
    _STATS.seconds += time.perf_counter() - t0
    return h.hexdigest()


def _valid(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def file_sha256(path: Path, *, cache: bool = True) -> str:
    """Return the hex SHA-256 of ``path``, from the cache when its key matches.

    Parameters
    ----------
    path : Path
        A regular file.
    cache : bool
        Read and write the cache (False: always read the file, write nothing).
    """
    path = Path(path)
    if not cache:
        return _compute(path)
    entry = _entry(path)
    try:
        text = entry.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    if _valid(text):
        _STATS.hits += 1
        return text
    digest = _compute(path)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=entry.parent)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(digest + "\n")
        os.replace(tmp, entry)
    except OSError:
        pass  # an unwritable cache costs the hashing, never the run
    return digest

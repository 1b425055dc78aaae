"""Sealed cache entries: a header holding the SHA-256 of the payload, checked before any use.

Every cache entry specreplay writes (the input-hash cache of
:mod:`~specreplay.replay.archive.filehash`, the per-shard cache of ``--cache DIR``) is one file:
a header line ``FORMAT SHA256`` (ASCII, ending in a newline), then the payload bytes. FORMAT
names the cache and its version; SHA256 is the hex SHA-256 of the payload bytes. :func:`unseal`
checks the header before the caller parses or unpickles the payload, so a payload changed by one
byte, a truncated entry, an entry holding only its header, or an entry of another format or
version is never used: the caller recomputes it (and counts it as recomputed).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

__all__ = ["seal", "unseal", "write_sealed"]


def seal(fmt: str, payload: bytes) -> bytes:
    """Return the entry for ``payload``: the header line ``FORMAT SHA256``, then the payload."""
    return f"{fmt} {hashlib.sha256(payload).hexdigest()}\n".encode("ascii") + payload


def unseal(fmt: str, data: bytes) -> bytes | None:
    """Return the payload of a sealed entry; None unless its header is ``fmt`` and its digest.

    Parameters
    ----------
    fmt : str
        The format the caller writes (an entry of another format or version is not used).
    data : bytes
        The whole entry as read.
    """
    head, sep, payload = data.partition(b"\n")
    if not sep:
        return None  # no header line: truncated inside the header
    expected = f"{fmt} {hashlib.sha256(payload).hexdigest()}".encode("ascii")
    return payload if head == expected else None


def write_sealed(entry: Path, fmt: str, payload: bytes) -> None:
    """Write the sealed entry of ``payload`` to ``entry``: a temporary name, then a rename.

    Concurrent runs never see half an entry. On an OSError (a full disk, a size limit, no
    permission) the temporary file is removed and the error raised: the caller notes it.
    """
    tmp: str | None = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=entry.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(seal(fmt, payload))
        os.replace(tmp, entry)
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise

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

import hashlib

__all__ = ["seal", "unseal"]


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

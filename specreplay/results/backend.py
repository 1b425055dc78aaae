"""The ``replay_backend`` entry of results.json, read back as text (REPORT.md and stderr).

A requalify or sweep run with ``--scheduler``, ``--workers`` or ``--cache`` records where its
shards were replayed and what the cache did (:mod:`specreplay.replay.backend` writes the entry;
its shape is documented there). :func:`backend_line` is the REPORT.md line
(:attr:`Result.backend_line <specreplay.results.model.Result.backend_line>`) and
:func:`backend_note` the stderr line the command line prints (``cache: 3 of 4 shards reused, 1
replayed (part-00003.parquet)``, then ``; 1 entry failed the check, recomputed
(part-00003.parquet)`` when one did). Both read a saved results.json as well as a fresh result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["backend_line", "backend_note"]


def backend_line(entry: Any) -> str | None:
    """Return one line saying where the shards were replayed and what the cache did (REPORT.md).

    None for a local run without a cache (no ``replay_backend`` entry).

    Examples
    --------
    >>> backend_line({"runner": "dask", "scheduler": "tcp://h:8786", "workers": 2, "tasks": 4})
    'Shards replayed on Dask (tcp://h:8786, 2 workers, 4 shard tasks); partial sums merged here in sorted path order'
    >>> backend_line(None) is None
    True
    """  # noqa: E501
    if not isinstance(entry, dict):
        return None
    if entry.get("runner") == "dask":
        workers = entry.get("workers")
        where = (
            f"on Dask ({entry.get('scheduler')}"
            + (f", {workers} workers" if workers else "")
            + f", {entry.get('tasks')} shard tasks); partial sums merged here in sorted path order"
        )
    else:
        where = "in this process"
    note = backend_note(entry)
    return f"Shards replayed {where}" + (f"; {note}" if note else "")


def backend_note(entry: Any) -> str | None:
    """Return the stderr line saying what the cache did (None without ``--cache``).

    Examples
    --------
    >>> backend_note({"runner": "local", "cache": {"shards": 4, "reused": 3, "replayed": 1,
    ...     "replayed_files": ["a/part-00003.parquet"]}})
    'cache: 3 of 4 shards reused, 1 replayed (part-00003.parquet)'
    """
    cache = entry.get("cache") if isinstance(entry, dict) else None
    if not isinstance(cache, dict):
        return None
    names = [Path(p).name for p in dict.fromkeys(cache["replayed_files"])]
    shown = ", ".join(names[:5]) + (f", … ({len(names) - 5} more)" if len(names) > 5 else "")
    failed: list[str] = cache.get("recomputed_files", cache.get("rejected_files")) or []
    bad = list(dict.fromkeys(Path(p).name for p in failed))
    line = (
        f"cache: {cache['reused']} of {cache['shards']} shards reused, {cache['replayed']} replayed"
    )
    if names:
        line += f" ({shown})"
    if failed:
        n = len(failed)
        line += (
            f"; {n} entr{'y' if n == 1 else 'ies'} failed the check, recomputed ({', '.join(bad)})"
        )
    return line

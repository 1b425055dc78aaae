"""One validating pass over an archive that accumulates its MEASURED figures (SPEC §2.1)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from specreplay.replay.archive.reader import ArchiveReader
from specreplay.replay.archive.sources import archive_rows
from specreplay.replay.measured import MeasuredAccumulator
from specreplay.stats.buckets import Buckets
from specreplay.stats.cells import measured_cells
from specreplay.stats.measured import MeasuredArchive

__all__ = ["ArchiveScan", "Progress", "no_progress", "scan_archive"]

Progress = Callable[[str, int | None], AbstractContextManager[Callable[[int], None]]]
"""``progress(what, total)``: a context manager yielding ``advance(n)`` (the CLI's progress bar)."""


def no_progress(what: str, total: int | None) -> AbstractContextManager[Callable[[int], None]]:
    """Return a progress context that does nothing."""
    return nullcontext(lambda n: None)


class ArchiveScan:
    """Result of reading a whole archive once: reader tables plus MEASURED accumulations."""

    def __init__(self, reader: ArchiveReader, measured: MeasuredArchive, has_accepted: bool):
        self.reader = reader
        self.measured = measured
        self.has_accepted = has_accepted

    @property
    def arm(self) -> str:
        """Name the MEASURED figures are reported under: the logging arm, else ``archive``."""
        return self.reader.logging_arm or "archive"

    def cells(self) -> list[dict[str, Any]]:
        """MEASURED cells pooled, per family, per bucket and per family × bucket."""
        return measured_cells(
            self.measured,
            arm=self.arm,
            families=self.reader.families,
            buckets=self.reader.buckets,
            has_accepted=self.has_accepted,
        )


def scan_archive(
    path: Path,
    *,
    buckets: str,
    logging_arm: str | None = None,
    max_errors: int | None = 1,
    progress: Progress = no_progress,
) -> ArchiveScan:
    """Read, validate and accumulate MEASURED figures of an archive in one streaming pass."""
    reader = ArchiveReader(
        path, buckets=Buckets.parse(buckets), logging_arm=logging_arm, max_errors=max_errors
    )
    acc = MeasuredAccumulator(len(reader.buckets.names))
    with progress(f"reading {path.name}", archive_rows(path)) as advance:
        for batch in reader:
            acc.add(batch)
            advance(batch.n_positions)
    return ArchiveScan(reader, acc.result(), "accepted" in reader.columns)

"""One validating pass over an archive that accumulates its MEASURED figures.

See docs/inputs.md#position-traces-schema-v1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from specreplay.replay.archive.batch import RoundBatch
from specreplay.replay.archive.reader import ArchiveReader, FileInfo
from specreplay.replay.archive.sources import IgnoredEntry, archive_rows
from specreplay.replay.engine import ReplayResult
from specreplay.replay.measured import MeasuredAccumulator
from specreplay.sim.arms import Arm
from specreplay.stats.buckets import Buckets
from specreplay.stats.cells import MeasuredCell, measured_cells
from specreplay.stats.measured import MeasuredArchive
from specreplay.timing import stage

__all__ = [
    "ArchiveScan",
    "KeptMassAccumulator",
    "MassStats",
    "Progress",
    "ShortRoundsAccumulator",
    "no_progress",
    "phase",
    "scan_archive",
]

Progress = Callable[[str, int | None], AbstractContextManager[Callable[[int], None]]]
"""``progress(what, total)``: a context manager yielding ``advance(n)`` (the CLI's progress bar)."""


def no_progress(what: str, total: int | None) -> AbstractContextManager[Callable[[int], None]]:
    """Return a progress context that does nothing."""
    return nullcontext(lambda n: None)


@contextmanager
def phase(
    progress: Progress | None, what: str, total: int | None = None
) -> Iterator[Callable[[int], None]]:
    """Run a phase: its line on the progress display (if any) and its stage timer.

    Yields ``advance(n)``; the stage ``what`` (:mod:`specreplay.timing`) gets the block's time.
    """
    ctx = progress(what, total) if progress is not None else no_progress(what, total)
    with stage(what), ctx as advance:
        yield advance


_MASS_BINS = 10_000  # kept-mass quantiles to 1e-4


@dataclass(frozen=True)
class MassStats:
    """The kept mass of one law over an archive's positions: Σ over each row's candidates."""

    positions: int
    min: float
    p01: float  # the 1% quantile (to 1e-4: a histogram of 10,000 bins)
    p10: float
    median: float
    below_099: int  # positions whose kept mass is below 0.99


class KeptMassAccumulator:
    """Accumulate the draft's and the target's kept mass per position over batches.

    The draft's is Σ ``emitted_q`` (the logging law; 1 by rule in schema v1, where the tail is not
    recorded), the target's Σ ``target_probs``. ``tails``: whether the archive records them
    (schema v2's ``draft_tail``/``target_tail``).
    """

    def __init__(self) -> None:
        self._hist = np.zeros((2, _MASS_BINS + 1), np.int64)
        self._min = np.full(2, np.inf)
        self._below = np.zeros(2, np.int64)
        self._n = np.zeros(2, np.int64)
        self.tails = False

    def add(self, batch: RoundBatch) -> None:
        """Add a batch's positions."""
        if batch.n_positions == 0:
            return
        self.tails = self.tails or batch.draft_tail.shape[0] > 0
        starts = batch.offsets[:-1]
        nonempty = np.diff(batch.offsets) > 0
        for i, flat in enumerate((batch.emitted_q, batch.target_probs)):
            if flat.shape[0] != batch.target_probs.shape[0] or not nonempty.any():
                continue
            kept = np.add.reduceat(flat, starts[nonempty])
            kept = np.clip(kept, 0.0, 1.0)
            self._hist[i] += np.bincount(
                np.floor(kept * _MASS_BINS).astype(np.int64), minlength=_MASS_BINS + 1
            )
            self._min[i] = min(self._min[i], float(kept.min()))
            self._below[i] += int((kept < 0.99).sum())
            self._n[i] += kept.shape[0]

    def result(self) -> tuple[MassStats | None, MassStats | None]:
        """Return (draft, target) statistics; None for a law the archive does not hold."""
        out: list[MassStats | None] = []
        for i in range(2):
            n = int(self._n[i])
            if n == 0:
                out.append(None)
                continue
            cum = np.cumsum(self._hist[i])

            def q(f: float, i: int = i, cum: NDArray[np.int64] = cum, n: int = n) -> float:
                k = int(np.searchsorted(cum, f * n, side="left"))
                return max(float(self._min[i]), min(1.0, k / _MASS_BINS))

            out.append(
                MassStats(n, float(self._min[i]), q(0.01), q(0.10), q(0.5), int(self._below[i]))
            )
        return out[0], out[1]


class ShortRoundsAccumulator:
    """Count, over batches, the rounds a default run would leave out or keep short (validate).

    A round is short when it records fewer positions than the deepest any round records (the
    depth a run of the logging arm asks). A default run (``--short-rounds capped``) leaves out
    the short rounds marked ``capped`` and, where the mark is unknown, a request's last round
    (each request's last round is known here at the end: the scan reads every row); the others
    stay and make the cells holding them null at depths past their length.
    """

    def __init__(self) -> None:
        self._depths = np.zeros(0, np.int64)  # rounds by recorded positions
        self._marked = np.zeros(0, np.int64)  # rounds marked capped, by depth
        self._last_round = np.zeros(0, np.int64)  # per request code
        self._last_depth = np.zeros(0, np.int64)
        self._last_mark = np.zeros(0, np.int8)

    @staticmethod
    def _grow(a: NDArray[Any], size: int, fill: int = 0) -> NDArray[Any]:
        if a.shape[0] >= size:
            return a
        out = np.full(size, fill, a.dtype)
        out[: a.shape[0]] = a
        return out

    def add(self, batch: RoundBatch) -> None:
        """Add a batch's rounds (in archive order)."""
        if batch.n_rounds == 0:
            return
        depth = batch.round_depth.astype(np.int64)
        top = int(depth.max()) + 1
        self._depths = self._grow(self._depths, top)
        self._depths[:top] += np.bincount(depth, minlength=top)
        mark = batch.round_capped if batch.round_capped.shape[0] else np.full(depth.shape[0], -1)
        self._marked = self._grow(self._marked, top)
        self._marked[:top] += np.bincount(depth[mark == 1], minlength=top)
        req = batch.round_request
        size = int(req.max()) + 1
        self._last_round = self._grow(self._last_round, size, -1)
        self._last_depth = self._grow(self._last_depth, size)
        self._last_mark = self._grow(self._last_mark, size, -1)
        # each request's last round in the batch (rounds of a request increase: validated)
        order = np.lexsort((batch.round_index, req))
        r_sorted = req[order]
        last = order[np.append(r_sorted[1:] != r_sorted[:-1], True)]
        later = batch.round_index[last] > self._last_round[req[last]]
        last = last[later]
        self._last_round[req[last]] = batch.round_index[last]
        self._last_depth[req[last]] = depth[last]
        self._last_mark[req[last]] = mark[last]

    def result(self) -> dict[str, int] | None:
        """Return the counts (None without rounds; see results.model.ShortRounds)."""
        total = int(self._depths.sum())
        if total == 0:
            return None
        deepest = int(np.flatnonzero(self._depths)[-1])
        short = int(self._depths[:deepest].sum())
        marked = int(self._marked[:deepest].sum())
        seen = self._last_round >= 0
        last = int(((self._last_depth < deepest) & (self._last_mark < 0) & seen).sum())
        shortest = int(np.flatnonzero(self._depths)[0])
        return {
            "depth": deepest,
            "rounds": total,
            "short": short,
            "capped_marked": marked,
            "last_unmarked": last,
            "kept_short": short - marked - last,
            "shortest": shortest,
        }


@dataclass(frozen=True)
class ArchiveScan:
    """An archive read once: its tables, shape and MEASURED accumulations.

    Built from the validating reader (:func:`scan_archive`) or from a replay pass, which
    accumulates the same MEASURED figures (:meth:`of_replay`), so a command that replays needs no
    separate scan.

    Attributes
    ----------
    path : Path
    measured : MeasuredArchive
    families : list of str
        Family names by family code.
    request_family : int array (n_requests,)
        Family code of each request.
    buckets : Buckets
    files : list of FileInfo
        Files read with their row counts.
    columns : frozenset of str
        Optional schema columns present.
    carried : tuple of str
        Carried-through (non-schema) columns.
    logging_arm : str or None
    errors : list of str
        Validation errors collected (``max_errors != 1``).
    truncated : bool
        Whether the error list stopped at ``max_errors``.
    ignored : tuple of IgnoredEntry
        Entries of the archive's folder skipped by ``--ignore``.
    """

    path: Path
    measured: MeasuredArchive
    families: list[str]
    request_family: NDArray[np.int64]
    buckets: Buckets
    files: list[FileInfo]
    columns: frozenset[str]
    carried: tuple[str, ...]
    logging_arm: str | None
    errors: list[str] = field(default_factory=list)
    truncated: bool = False
    ignored: tuple[IgnoredEntry, ...] = ()
    kept_draft: MassStats | None = None
    kept_target: MassStats | None = None
    tails_recorded: bool = False
    short_rounds: dict[str, int] | None = None

    @classmethod
    def of_reader(
        cls,
        reader: ArchiveReader,
        measured: MeasuredArchive,
        kept: KeptMassAccumulator | None = None,
        short: ShortRoundsAccumulator | None = None,
    ) -> ArchiveScan:
        """Return the scan of an archive the reader has read to the end."""
        draft, target = kept.result() if kept is not None else (None, None)
        return cls(
            path=reader.path,
            measured=measured,
            families=list(reader.families),
            request_family=np.asarray(reader.request_family, dtype=np.int64),
            buckets=reader.buckets,
            files=list(reader.files),
            columns=reader.columns,
            carried=tuple(reader.extra_columns),
            logging_arm=reader.logging_arm,
            errors=list(reader.errors),
            truncated=reader.truncated,
            ignored=reader.ignored,
            kept_draft=draft,
            kept_target=target,
            tails_recorded=kept.tails if kept is not None else False,
            short_rounds=short.result() if short is not None else None,
        )

    @classmethod
    def of_replay(cls, path: Path, res: ReplayResult) -> ArchiveScan:
        """Return the scan of an archive from a replay pass over it (no filter applied)."""
        return cls(
            path=path,
            measured=res.measured,
            families=list(res.families),
            request_family=np.asarray(res.request_family, dtype=np.int64),
            buckets=res.buckets,
            files=list(res.files),
            columns=res.columns,
            carried=res.carried,
            logging_arm=res.logging_arm,
            ignored=res.ignored,
        )

    @property
    def n_requests(self) -> int:
        """Number of requests."""
        return int(self.request_family.shape[0])

    @property
    def has_accepted(self) -> bool:
        """Whether the archive records the archived verifier's ``accepted`` decisions."""
        return "accepted" in self.columns

    @property
    def arm(self) -> str:
        """Name the MEASURED figures are reported under: the logging arm, else ``archive``."""
        return self.logging_arm or "archive"

    def cells(self) -> list[MeasuredCell]:
        """MEASURED cells pooled, per family, per bucket and per family × bucket."""
        return measured_cells(
            self.measured,
            arm=self.arm,
            families=self.families,
            buckets=self.buckets,
            has_accepted=self.has_accepted,
        )


def scan_archive(
    path: Path,
    *,
    buckets: Buckets | str,
    logging_arm: Arm | str | None = None,
    max_errors: int | None = 1,
    progress: Progress = no_progress,
    ignore: Sequence[str] = (),
) -> ArchiveScan:
    """Read, validate and accumulate MEASURED figures of an archive in one streaming pass.

    ``buckets``: parsed, or a specification; ``ignore``: ``--ignore`` globs, entries of a
    folder archive to skip (``ArchiveScan.ignored``).
    """
    reader = ArchiveReader(
        path,
        buckets=buckets if isinstance(buckets, Buckets) else Buckets.parse(buckets),
        logging_arm=logging_arm,
        max_errors=max_errors,
        ignore=ignore,
    )
    acc = MeasuredAccumulator(len(reader.buckets.names))
    kept = KeptMassAccumulator()
    short = ShortRoundsAccumulator()
    with progress(f"reading {path.name}", archive_rows(path, ignore)) as advance:
        for batch in reader:
            acc.add(batch)
            kept.add(batch)
            short.add(batch)
            advance(batch.n_positions)
    return ArchiveScan.of_reader(reader, acc.result(), kept, short)

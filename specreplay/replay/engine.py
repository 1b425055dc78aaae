"""Streaming replay of a position-trace archive under several arms.

See docs/methods.md#the-importance-estimator-and-its-weight, docs/scale.md and
docs/design.md#layout.

One pass over the data: each archive file is read once, in sorted path order, by a validating
:class:`~specreplay.replay.archive.reader.ArchiveReader` and replayed shard by shard
(:func:`~specreplay.replay.shard.replay_shard`): for each batch of whole rounds, each distinct
policy's law is computed once (:class:`~specreplay.sim.policy.LawCache`), every arm is replayed
for every depth 1..D by the estimator taken from
:data:`~specreplay.replay.estimators.ESTIMATORS` (the only place its name is looked up), and the
per-round values are added, in archive order, into per-(request, bucket) sums. The same pass
accumulates the MEASURED figures (the archive's ``accepted`` column) and keeps the law-test
position sample (:mod:`~specreplay.replay.lawsample`), so neither needs a second read. The shards'
partial sums are folded in sorted path order (:func:`~specreplay.replay.shard.fold_shards`) into a
:class:`ReplayResult` whose tables and rows are in canonical order (requests by stable key,
families by name): figures are bit-identical whatever the thread count, batch size or the way
whole requests are distributed over files.

Hashing the input files for results.json ``inputs`` (SHA-256) is a separate read made by the
report (:mod:`specreplay.results.output`), not by the replay; it is kept as is.

Short rounds (docs/inputs.md#position-traces-schema-v1): a round recording fewer positions than a
depth is counted in ``n`` but not summed at that depth (``ArmSums.short``, with the place of the
first such round in ``ArmSums.short_at``); :meth:`ReplayResult.short_reason` says why a cell holding
one is null at that depth, naming the file and row, and :meth:`ReplayResult.depth_problem` refuses
only a depth that no round records. ``exclude_below`` (``--short-rounds exclude``) leaves such
rounds out of the pass.

Estimators: the pass may replay several (``--estimator auto``: analytic and importance over the
same batches); their sums are one map keyed by estimator (``ReplayResult.replays``), and the
run's own is a key of it (:meth:`ReplayResult.with_estimator`). Arms of a pass share its request
table, so two are paired on its request codes (:meth:`ReplayResult.paired`). Under ``--by
COLUMN`` the pass codes requests by family × value and the result carries each request's value
(:meth:`ReplayResult.grouped`): the ``by`` cells come from the same pass.

Filters (``--families``, ``--sample-requests``) are applied after the pass
(:meth:`ReplayResult.select`): sums are per request, so selecting a request's sums afterwards
gives the figures of a pass over that request alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from numpy.typing import NDArray

from specreplay.errors import SpecReplayError
from specreplay.replay.accumulate import NO_ROUND, ArmSums
from specreplay.replay.archive.batch import at_parts
from specreplay.replay.archive.dropped import MAX_DROPPED, check_dropped
from specreplay.replay.archive.filehash import watch
from specreplay.replay.archive.reader import ArchiveReader, FileInfo
from specreplay.replay.archive.sources import (
    ArchiveFile,
    IgnoredEntry,
    archive_listing,
    format_location,
)
from specreplay.replay.distributed import Runner
from specreplay.replay.estimators import get_estimator
from specreplay.replay.lawsample import LawSample
from specreplay.replay.measured import coarsen_measured
from specreplay.replay.paired import ArmSide, RequestCodes, pair_sides
from specreplay.replay.shard import (
    EstimatorSums,
    ReplayOptions,
    ShardSums,
    fold_shards,
    replay_reader,
    replay_shard,
)
from specreplay.replay.tails import RatioTail
from specreplay.sim.arms import Arm
from specreplay.stats.armdata import ArmData
from specreplay.stats.bootstrap import PairedSums
from specreplay.stats.buckets import Buckets
from specreplay.stats.cells import Cell as StatsCell
from specreplay.stats.compare import CellSupport
from specreplay.stats.measured import MeasuredArchive, RequestSums

__all__ = ["Grouping", "OpenArchive", "ReplayResult", "replay_archive"]


@dataclass(frozen=True)
class Grouping:
    """``--by COLUMN``: what one pass recorded for the ``by`` and ``family×bucket×by`` cells.

    The pass coded requests by family × value (the finest cells); the result is on the family
    table, and :meth:`ReplayResult.grouped` moves it onto the values or the family × value
    names.

    Attributes
    ----------
    column : str
    values : list of str
        The column's values, sorted.
    crossed : list of str
        Family × value names (``family · value``), sorted.
    request_value, request_crossed : int32, (r,)
        Each request's index into ``values`` / ``crossed``.
    value_of_crossed : int64, (len(crossed),)
        The value of each family × value name (index into ``values``).
    tails : dict of str to dict of str to RatioTail
        Per estimator and arm, the ratio tails per family × value and bucket, of every request
        read (a level's tails are pooled from these, then restricted to the selected requests).
    measured : MeasuredArchive
        The MEASURED survival counts per family × value and bucket (every request read).
    """

    column: str
    values: list[str]
    crossed: list[str]
    request_value: NDArray[np.int32]
    request_crossed: NDArray[np.int32]
    value_of_crossed: NDArray[np.int64]
    tails: dict[str, dict[str, RatioTail]]
    measured: MeasuredArchive


@dataclass(frozen=True)
class ReplayResult:
    """Everything one replay pass produced, on canonical tables.

    Attributes
    ----------
    arms : list of Arm
        The replayed arms (canonical names are the keys of each estimator's sums).
    replays : dict of str to EstimatorSums
        One entry per estimator replayed in the pass (``estimator`` names the run's own; an
        ``--estimator auto`` pass holds ``analytic`` and, where the archive supports it,
        ``importance``): per arm, per-(request, bucket) sums for depths 1..max_depth (selected
        requests only), rows outside the logging law's support per request, and ratio tails
        (importance). Choosing an estimator is a lookup here (:meth:`with_estimator`).
    measured : MeasuredArchive
        MEASURED figures from ``accepted``; its per-(request, bucket) sums are those of the
        selected requests, its survival counts cover every request read.
    requests : list of str
        Request ids sorted by request key (``ArmSums.request`` indexes it).
    request_keys : uint64, (r,)
    request_family : int32, (r,)
        Index into ``families``.
    request_rows : int64, (r,)
        Position rows of each request.
    selected : bool, (r,)
        Requests kept by :meth:`select` (all after the pass).
    families : list of str
        Family names, sorted (``ArmSums.family`` indexes it).
    buckets : Buckets
    columns : frozenset of str
        Optional schema columns present in the archive.
    carried : tuple of str
        Carried-through (non-schema) columns of the archive.
    files : list of FileInfo
        The files read (path, rows).
    logging_arm : str or None
        The archive's logging arm (column, else ``--logging-arm``).
    flagged, no_support : dict of str to int64 (r,)
        Per arm, per request: position rows whose top-K exceeds the archived candidates / whose
        every draft log-probability is −inf.
    law_sample : LawSample
        Law-test positions chosen by hash during the pass.
    estimator : str
        The run's own estimator (a key of ``replays``).
    seed, max_depth
        How the replay ran.
    positions : int
        Position rows of the selected requests.
    excluded : list of dict
        Rows left out under an explicit option, per reason.
    estimator_reason : str or None
        Why ``estimator`` is the run's estimator (set by ``--estimator auto``; None when the
        user named it).
    unread : tuple of str
        Columns of the archive the pass did not read, hence did not validate (sorted).
    sources : tuple of ArchiveFile
        The files read, in sorted path order (``ArmSums.short_at`` indexes them).
    exclude_below : int
        ``--short-rounds exclude``: rounds recording fewer positions than this were left out
        of every sum (counted in ``ArmSums.excluded``); 0: every round kept.
    capped_only : bool
        ``--short-rounds capped``: of those, only the rounds the request's end or token limit
        cut short (:class:`~specreplay.replay.shard.ReplayOptions`).
    ignored : tuple of IgnoredEntry
        Entries of the archive's folder skipped by ``--ignore`` (they count nowhere).
    grouping : Grouping or None
        ``--by COLUMN``: each request's value and what the ``by`` and ``family×bucket×by``
        cells need (:meth:`grouped`); None without ``--by``.
    """

    arms: list[Arm]
    replays: dict[str, EstimatorSums]
    measured: MeasuredArchive
    requests: list[str]
    request_keys: NDArray[np.uint64]
    request_family: NDArray[np.int32]
    request_rows: NDArray[np.int64]
    selected: NDArray[np.bool_]
    families: list[str]
    buckets: Buckets
    columns: frozenset[str]
    carried: tuple[str, ...]
    files: list[FileInfo]
    logging_arm: str | None
    flagged: dict[str, NDArray[np.int64]]
    no_support: dict[str, NDArray[np.int64]]
    law_sample: LawSample
    estimator: str
    seed: int
    max_depth: int
    positions: int
    excluded: list[dict[str, Any]] = field(default_factory=list)
    estimator_reason: str | None = None
    unread: tuple[str, ...] = ()
    sources: tuple[ArchiveFile, ...] = ()
    exclude_below: int = 0
    capped_only: bool = False
    ignored: tuple[IgnoredEntry, ...] = ()
    grouping: Grouping | None = None

    @property
    def own(self) -> EstimatorSums:
        """The run's own estimator's replay (``replays[estimator]``)."""
        return self.replays[self.estimator]

    @property
    def sums(self) -> dict[str, ArmSums]:
        """Per arm, the run's own estimator's per-(request, bucket) sums."""
        return self.own.arms

    @property
    def unlogged(self) -> dict[str, NDArray[np.int64]]:
        """Per arm, per request: the run's own estimator's rows outside the logging support."""
        return self.own.unlogged

    @property
    def tails(self) -> dict[str, RatioTail]:
        """Per arm, the run's own estimator's largest policy ratios (importance; else empty)."""
        return self.own.tails

    @property
    def replicates(self) -> int:
        """Monte Carlo replicates per round of the run's own estimator (0 for an exact one)."""
        return self.own.replicates

    def with_estimator(self, estimator: str) -> ReplayResult:
        """Return this pass with ``estimator`` (replayed in it) as the run's own.

        Every estimator of the pass replayed the same batches and accumulated in the same
        order, so the result equals a pass run with that estimator as its own, bit for bit (the
        policy flags, law sample and MEASURED figures do not depend on the estimator).
        """
        if estimator not in self.replays:
            raise SpecReplayError(f"no {estimator} replay in this pass")
        return replace(self, estimator=estimator)

    def grouped(self, level: str) -> ReplayResult:
        """Return this pass with its requests in the ``--by`` groups of ``level``.

        ``level``: ``"by"`` (the column's values) or ``"family×by"`` (family × value names).
        The result is the pass a grouping by those columns alone would give: the run's own
        estimator only (the ``--by`` cells are built without the other estimator's diagnostic),
        the same sums, each request in its group, the ratio tails and MEASURED survival pooled
        per group (:class:`Grouping`), restricted to the selected requests.
        """
        g = self.grouping
        if g is None:
            raise SpecReplayError("this pass has no --by column")
        if level == "by":
            names, code, index = g.values, g.request_value, g.value_of_crossed
        elif level == "family×by":
            names, code, index = g.crossed, g.request_crossed, None
        else:
            raise ValueError(f"level must be 'by' or 'family×by', not {level!r}")
        request_code = code.astype(np.int64)
        own = replace(self.own, tails=g.tails[self.estimator])
        own = _regrouped(own, request_code, index, len(names))
        if not self.selected.all():
            keys = self.request_keys[self.selected]
            own = replace(own, tails={c: t.keep_requests(keys) for c, t in own.tails.items()})
        m = g.measured if index is None else coarsen_measured(g.measured, index, len(names))
        s = self.measured.sums
        sums = RequestSums(s.request, s.bucket, code[s.request].astype(np.int32), s.n, s.t)
        return replace(
            self,
            replays={self.estimator: own},
            families=list(names),
            request_family=code,
            measured=replace(m, sums=sums),
            estimator_reason=None,
            grouping=None,
        )

    @property
    def flagged_rows(self) -> dict[str, int]:
        """Per arm, position rows (selected requests) whose top-K exceeds the candidates."""
        return {c: int(v[self.selected].sum()) for c, v in self.flagged.items()}

    @property
    def unsupported_rows(self) -> dict[str, int]:
        """Per arm, position rows (selected requests) with nothing to draft."""
        return {c: int(v[self.selected].sum()) for c, v in self.no_support.items()}

    @property
    def unlogged_rows(self) -> dict[str, int]:
        """Per arm, position rows (selected requests) outside the logging law's support."""
        return {c: int(v[self.selected].sum()) for c, v in self.unlogged.items()}

    def _frame(self, request: Any, bucket: Any, n: Any, t: Any) -> pl.DataFrame:
        ids = np.asarray(self.requests, dtype=object)
        fams = np.asarray(self.families, dtype=object)
        return pl.DataFrame(
            {
                "request_id": ids[request].tolist(),
                "family": fams[self.request_family[request]].tolist(),
                "bucket": [self.buckets.names[int(b)] for b in bucket],
                "n": np.asarray(n, dtype=np.int64),
                "t": np.asarray(t, dtype=np.float64),
            },
            schema={
                "request_id": pl.String,
                "family": pl.String,
                "bucket": pl.String,
                "n": pl.Int64,
                "t": pl.Float64,
            },
        )

    def depth_problem(self, arm: Arm, depth: int | None = None) -> str | None:
        """Why ``arm`` at ``depth`` (default its own) has no figure in any cell, or None.

        Not replayed that deep, every round of the selected requests recording fewer positions
        (UNSUPPORTED: never extrapolated), or every round left out by ``--short-rounds exclude``.
        Where only some rounds are short, the cells holding them are null (:meth:`short_reason`) and
        the others are computed (docs/inputs.md#position-traces-schema-v1).
        """
        d = depth or arm.depth
        if d > self.max_depth:
            return f"{arm.canonical}: depth {d} was not replayed"
        s = self.sums[arm.canonical]
        rounds, short = int(s.n.sum()), int(s.short[:, d - 1].sum())
        if rounds == 0:
            left = int(s.excluded.sum())
            return (
                f"{arm.canonical}: --short-rounds exclude left no round: all {left} archived "
                f"rounds record fewer than {self.exclude_below} positions"
            )
        if short == rounds:
            return (
                f"{arm.canonical}: depth {d} is UNSUPPORTED: {short} archived rounds record fewer "
                f"than {d} positions (depths past the recorded ones are never extrapolated)"
            )
        return None

    def short_reason(
        self, arm: Arm, depth: int | None = None, mask: NDArray[np.bool_] | None = None
    ) -> str | None:
        """Why ``arm`` at ``depth`` is unsupported in the rows ``mask`` of its sums, or None.

        docs/inputs.md#position-traces-schema-v1: depth d is supported in a cell only when every
        round in it records ≥ d positions. The reason counts the short rounds and names the first of
        them in archive order (file and row or line).
        """
        d = depth or arm.depth
        s = self.sums[arm.canonical]
        sel = np.ones(s.n.shape[0], bool) if mask is None else mask
        short = int(s.short[sel, d - 1].sum())
        if short == 0:
            return None
        first = int(s.short_at[sel, d - 1].min())
        where = ""
        if first != NO_ROUND:
            f, loc = at_parts(first)
            where = f"; first at {format_location(self.sources[f], loc)}"
        rounds = "round records" if short == 1 else "rounds record"
        kind = " (not capped by the request's end or limit)" if self.capped_only else ""
        full = np.flatnonzero(s.short[sel].sum(axis=0) == 0)  # depths every round supports
        deepest = int(full.max()) + 1 if full.shape[0] and full[0] == 0 else 0
        ask = f"every round here supports depth {deepest} (ask @{deepest}), or " if deepest else ""
        return (
            f"{arm.canonical}: depth {d} is UNSUPPORTED in this cell: {short} {rounds} fewer "
            f"than {d} positions{kind}{where} (never extrapolated): {ask}--short-rounds "
            "exclude leaves such rounds out"
        )

    def unlogged_reason(self, arm: Arm, mask: NDArray[np.bool_] | None = None) -> str | None:
        """Why ``arm``'s figures in the rows ``mask`` of its sums are null (support), or None.

        Importance estimator (docs/methods.md#the-importance-estimator-and-its-weight): the
        requests of those rows hold position rows with a candidate the arm can accept but the
        logging law never drafts. The reason counts the rows and the requests (a request counts
        with all its rows, in whichever bucket).
        """
        per_request = self.unlogged.get(arm.canonical)
        if per_request is None:
            return None
        s = self.sums[arm.canonical]
        requests = np.unique(s.request if mask is None else s.request[mask])
        counts = per_request[requests]
        rows, held = int(counts.sum()), int((counts > 0).sum())
        if not rows:
            return None
        return (
            f"{rows} position {'row' if rows == 1 else 'rows'} (in {held} "
            f"{'request' if held == 1 else 'requests'}) {'holds' if rows == 1 else 'hold'} a "
            "candidate this arm can accept but the logging law never drafts: the importance "
            "estimate would be biased"
        )

    def cell_mask(self, arm: Arm, family: str | None, bucket: str | None) -> NDArray[np.bool_]:
        """Rows of ``arm``'s sums in the cell of ``family`` and ``bucket`` (None: all)."""
        s = self.sums[arm.canonical]
        m = np.ones(s.n.shape[0], bool)
        if family is not None:
            m &= s.family == self.families.index(family)
        if bucket is not None:
            m &= s.bucket == self.buckets.names.index(bucket)
        return m

    def support(self, a: tuple[Arm, int] | None, b: tuple[Arm, int] | None) -> CellSupport:
        """Return the :data:`~specreplay.stats.compare.CellSupport` of comparing arms a and b.

        ``a`` and ``b``: (arm, depth) of each side, None for a side with no depth to support
        (the archive's MEASURED figures). Per cell, each side's :meth:`short_reason`, else its
        :meth:`unlogged_reason` (an importance replay leaving the logging law's support).
        """

        def one(side: tuple[Arm, int] | None, cell: StatsCell) -> str | None:
            if side is None:
                return None
            arm, depth = side
            mask = self.cell_mask(arm, cell.family, cell.bucket)
            return self.short_reason(arm, depth, mask) or self.unlogged_reason(arm, mask)

        def reasons(cell: StatsCell) -> tuple[str | None, str | None]:
            return one(a, cell), one(b, cell)

        return reasons

    def side(
        self,
        arm: Arm,
        depth: int | None = None,
        *,
        estimator: str | None = None,
        name: str | None = None,
    ) -> ArmSide:
        """Return the SIMULATED per-(request, bucket) sums of ``arm`` at ``depth`` (or its own).

        ``estimator``: a key of ``replays`` (default the run's own); ``name`` defaults to the
        arm's. Raises when no cell can have figures (:meth:`depth_problem`). Where some rounds
        record fewer positions than the depth, their (request, bucket) sums count them in ``n``
        but not in ``t``: the cells holding them must be null (:meth:`short_reason`).
        """
        why = self.depth_problem(arm, depth)
        if why is not None:
            raise SpecReplayError(why)
        d = depth or arm.depth
        replay = self.replays.get(estimator or self.estimator)
        if replay is None:
            raise SpecReplayError(f"{arm.canonical}: no {estimator} replay in this result")
        s = replay.arms[arm.canonical]
        s = s.take(s.n > 0)  # a (request, bucket) whose rounds were all left out
        width = limit = None
        if s.width[:, d - 1].any():  # bounded over a truncated law (replay.truncation)
            width, limit = s.width[:, d - 1].copy(), s.width_limit[:, d - 1].copy()
        t = s.t[:, d - 1].copy()
        return ArmSide(name or arm.canonical, s.request, s.bucket, s.n, t, d, width, limit)

    def measured_side(self, name: str = "MEASURED") -> ArmSide:
        """Return the archive's MEASURED per-(request, bucket) sums (from ``accepted``)."""
        m = self.measured.sums
        recorded = int(self.measured.survival_hits.shape[2]) - 1  # positions a round can hold
        n = m.n.astype(np.float64)
        return ArmSide(name, m.request, m.bucket, n, m.t, recorded if recorded >= 1 else None)

    @functools.cached_property
    def _codes(self) -> RequestCodes:
        ranked = sorted(range(len(self.requests)), key=self.requests.__getitem__)
        rank = np.empty(len(self.requests), np.int64)
        rank[np.asarray(ranked, np.int64)] = np.arange(len(ranked))
        return RequestCodes(
            self.requests, self.request_keys, self.request_family, self.families, rank
        )

    def paired(self, a: ArmSide, b: ArmSide) -> PairedSums:
        """Pair two sides of this pass on its request codes (:mod:`~specreplay.replay.paired`)."""
        return pair_sides(a, b, self._codes, self.buckets)

    def arm_data(
        self,
        arm: Arm,
        depth: int | None = None,
        *,
        estimator: str | None = None,
        name: str | None = None,
    ) -> ArmData:
        """Return :meth:`side` as :class:`~specreplay.stats.armdata.ArmData` (request ids)."""
        s = self.side(arm, depth, estimator=estimator, name=name)
        return ArmData(
            name=s.name,
            kind="replay",
            sums=self._frame(s.request, s.bucket, s.n, s.t),
            label="SIMULATED",
            depth=s.depth,
        )

    def measured_data(self, name: str = "MEASURED") -> ArmData:
        """Return :meth:`measured_side` as :class:`~specreplay.stats.armdata.ArmData`."""
        s = self.measured_side(name)
        return ArmData(
            name=name,
            kind="archive",
            sums=self._frame(s.request, s.bucket, s.n, s.t),
            depth=s.depth,
        )

    def mcse(self, arm: Arm, keys_mask: NDArray[np.bool_] | None = None) -> float:
        """Monte Carlo standard error of R over the selected rows (delta method; 0 if exact)."""
        s = self.sums[arm.canonical]
        sel = np.ones(s.n.shape[0], bool) if keys_mask is None else keys_mask
        n = float(s.n[sel].sum())
        return float(np.sqrt(s.var[sel, arm.depth - 1].sum()) / n) if n else 0.0

    def select(
        self, families: set[str] | None = None, requests: set[str] | None = None
    ) -> ReplayResult:
        """Keep the requests of ``families`` and in ``requests``; count the rows left out.

        Raises SpecReplayError naming the archive's families when one in ``families`` is not
        among them.
        """
        fam_ok = np.ones(len(self.families), bool)
        if families is not None:
            unknown = sorted(families - set(self.families))
            if unknown:
                raise SpecReplayError(
                    f"--families: {', '.join(unknown)} not in the archive; its families are "
                    f"{', '.join(self.families)}"
                )
            fam_ok = np.array([f in families for f in self.families], bool)
        in_fam = self.selected & fam_ok[self.request_family]
        keep = in_fam.copy()
        if requests is not None:
            keep &= np.array([r in requests for r in self.requests], bool)
        excluded = list(self.excluded)
        dropped_fam = int(self.request_rows[self.selected & ~in_fam].sum())
        dropped_req = int(self.request_rows[in_fam & ~keep].sum())
        if dropped_fam:
            excluded.append({"reason": "family not in --families", "rows": dropped_fam})
        if dropped_req:
            excluded.append(
                {"reason": "request not in the --sample-requests sample", "rows": dropped_req}
            )
        positions = int(self.request_rows[keep].sum())
        if positions == 0:
            where = self.files[0].path if self.files else "archive"
            raise SpecReplayError(f"{where}: no round left to replay after the filters")
        m = self.measured.sums
        mk = keep[m.request]
        sums = RequestSums(m.request[mk], m.bucket[mk], m.family[mk], m.n[mk], m.t[mk])
        keys = self.request_keys[keep]
        replays = {
            e: replace(
                r,
                arms={c: s.take(keep[s.request]) for c, s in r.arms.items()},
                tails={c: t.keep_requests(keys) for c, t in r.tails.items()},
            )
            for e, r in self.replays.items()
        }
        return replace(
            self,
            replays=replays,
            measured=replace(self.measured, sums=sums),
            selected=keep,
            positions=positions,
            excluded=excluded,
        )


class OpenArchive:
    """An archive opened for one replay pass, its first file's first batch already read.

    Reading the first batch through the validating reader tells the archive's logging arm (its
    ``logging_arm`` column, else ``--logging-arm``) before the arms are chosen; :meth:`replay`
    then continues with that same reader, so nothing is read twice.

    Parameters
    ----------
    path : Path
        Position-trace archive (file or shard folder).
    buckets : Buckets, optional
        Context buckets (default: the default buckets, docs/commands.md#common-options).
    logging_arm : Arm or str, optional
        ``--logging-arm`` for archives without a logging_arm column: parsed (the options'), or
        text the reader parses once; the replay passes carry it parsed.
    batch_rows : int
        Position rows per batch.
    by : str, optional
        ``--by COLUMN``: the pass codes requests by family × the column's value (the reader
        refuses a value that changes within a request) and the result carries each request's
        value (``ReplayResult.grouping``): the ``by`` cells need no other pass.
    columns : frozenset of str, optional
        Read only these columns (:func:`~specreplay.replay.shard.needed_columns` of the passes to
        come); the others are neither decoded nor validated (``ReplayResult.unread``). None:
        every column.
    ignore : sequence of str
        ``--ignore`` globs: entries of a folder archive to skip (``ReplayResult.ignored``).
    max_dropped : float
        ``--max-dropped``: a capture whose recorders dropped a larger share of bad rounds is
        refused (:func:`~specreplay.replay.archive.dropped.check_dropped`).
    """

    def __init__(
        self,
        path: Path,
        *,
        buckets: Buckets | None = None,
        logging_arm: Arm | str | None = None,
        batch_rows: int = 262_144,
        by: str | None = None,
        columns: frozenset[str] | None = None,
        ignore: Sequence[str] = (),
        max_dropped: float = MAX_DROPPED,
    ) -> None:
        self.path = Path(path)
        self.columns = columns
        self.buckets = buckets if buckets is not None else Buckets.parse()
        self.batch_rows = batch_rows
        self.group = ("family",) if by is None else ("family", by)
        listing = archive_listing(self.path, ignore)
        check_dropped(self.path, max_dropped)  # a capture with many bad rounds: an engine bug
        self.sources = list(listing.files)
        self.ignored = listing.ignored
        for f in self.sources:  # before any read, here or on a Dask worker
            watch(f.path)
        self._reader: ArchiveReader | None = ArchiveReader(
            self.sources[0].path,
            buckets=self.buckets,
            batch_rows=batch_rows,
            logging_arm=logging_arm,
            shard=True,
            group=self.group,
            columns=columns,
        )
        self.logging_arm_option: Arm | None = self._reader.parsed_logging_arm  # none read yet
        self._batches = iter(self._reader)
        self._head = next(self._batches, None)

    @property
    def logging_arm(self) -> str | None:
        """The logging arm read from the first file (or given), None when unknown."""
        if self._reader is None:
            raise SpecReplayError("archive already replayed")
        return self._reader.logging_arm

    @property
    def parsed_logging_arm(self) -> Arm | None:
        """:attr:`logging_arm` parsed (once: the option upstream, the column by the reader)."""
        if self._reader is None:
            raise SpecReplayError("archive already replayed")
        return self._reader.parsed_logging_arm

    def replay(
        self,
        arms: Sequence[Arm],
        *,
        estimator: str = "analytic",
        replicates: int = 16,
        seed: int = 0,
        max_depth: int | None = None,
        law_positions: int = 0,
        progress: Callable[[int], None] | None = None,
        companion: str | None = None,
        runner: Runner | None = None,
        exclude_below: int = 0,
        auto: bool = False,
        capped_only: bool = False,
    ) -> ReplayResult:
        """Replay ``arms`` over every file, once; see :func:`replay_archive`.

        ``auto``: the caller settles the estimator after the pass (``--estimator auto``).
        """
        if self._reader is None:
            raise SpecReplayError("archive already replayed")
        get_estimator(estimator).replicates_used(replicates)
        opts = ReplayOptions(
            estimators=(estimator,) if companion is None else (estimator, companion),
            auto=auto,
            replicates=replicates,
            seed=seed,
            buckets=self.buckets,
            max_depth=max_depth or max((a.depth for a in arms), default=1),
            logging_arm=self.logging_arm_option,
            batch_rows=self.batch_rows,
            law_positions=law_positions,
            group=self.group,
            columns=self.columns,
            exclude_below=exclude_below,
            capped_only=capped_only,
        )
        reader, head, self._reader = self._reader, self._head, None
        first = self._batches if head is None else _chain(head, self._batches)

        def shards() -> Iterator[ShardSums]:
            yield replay_reader(reader, first, arms, opts, progress)
            for f in self.sources[1:]:
                yield replay_shard(f.path, arms, opts, progress)

        # a runner replays every file itself (the first batch read here is dropped)
        merged = fold_shards(
            shards() if runner is None else runner(self.sources, arms, opts, progress)
        )
        if not any(f.rows for f in merged.files):
            n = len(merged.files)
            raise SpecReplayError(
                f"{self.path}: the archive holds no row ({n} file{'s' if n != 1 else ''} read); "
                "there is nothing to replay"
            )
        return replace(_result(merged, list(arms), opts, self.buckets), ignored=self.ignored)


def _chain(head: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield head
    yield from rest


def _result(s: ShardSums, arms: list[Arm], opts: ReplayOptions, buckets: Buckets) -> ReplayResult:
    if s.positions == 0:
        raise SpecReplayError(f"{s.sources[0].path}: no round left to replay after the filters")
    n_req = len(s.requests.ids)
    res = ReplayResult(
        arms=arms,
        replays=dict(s.replays),
        measured=s.measured,
        requests=s.requests.ids,
        request_keys=s.requests.keys,
        request_family=s.requests.family,
        request_rows=s.requests.rows,
        selected=np.ones(n_req, bool),
        families=s.families,
        buckets=buckets,
        columns=s.columns or frozenset(),
        carried=s.carried,
        files=s.files,
        logging_arm=s.logging_arm,
        flagged=s.flagged,
        no_support=s.no_support,
        law_sample=s.law_sample,
        estimator=opts.estimator,
        seed=opts.seed,
        max_depth=opts.max_depth,
        positions=s.positions,
        unread=s.unread,
        sources=tuple(s.sources),
        exclude_below=opts.exclude_below,
        capped_only=opts.capped_only,
    )
    return res if len(s.group) == 1 else _by_families(res, s)


def _by_families(res: ReplayResult, s: ShardSums) -> ReplayResult:
    """Return the ``--by`` pass on its family table, the family × value one kept for the views.

    The pass coded requests by family × value (``s.families``); a request's sums do not depend
    on its code, and the per-family figures pool exactly: counts are added, the ratio tails are
    the top K of their parts' top K (:meth:`~specreplay.replay.tails.RatioTail.coarsened`). So
    this equals the pass coded by family alone, bit for bit, and :meth:`ReplayResult.grouped`
    builds the other levels from the same sums.
    """
    parts = [s.parts.get(f, (f,)) for f in s.families]
    fams = sorted({p[0] for p in parts})
    values = sorted({p[-1] for p in parts})
    to_fam = np.array([fams.index(p[0]) for p in parts], np.int64)
    to_value = np.array([values.index(p[-1]) for p in parts], np.int64)
    code = s.requests.family.astype(np.int64)
    grouping = Grouping(
        column=s.group[-1],
        values=values,
        crossed=list(s.families),
        request_value=to_value[code].astype(np.int32),
        request_crossed=s.requests.family,
        value_of_crossed=to_value,
        tails={e: r.tails for e, r in s.replays.items()},
        measured=s.measured,
    )
    return replace(
        res,
        families=fams,
        request_family=to_fam[code].astype(np.int32),
        replays={e: _regrouped(r, to_fam[code], to_fam, len(fams)) for e, r in res.replays.items()},
        measured=coarsen_measured(s.measured, to_fam, len(fams)),
        grouping=grouping,
    )


def _regrouped(
    r: EstimatorSums, request_code: NDArray[np.int64], index: NDArray[np.int64] | None, n: int
) -> EstimatorSums:
    """Return ``r`` with requests in the groups ``request_code`` (tails pooled by ``index``)."""
    arms = {
        c: a.with_tables(a.request, request_code[a.request].astype(np.int32))
        for c, a in r.arms.items()
    }
    tails = r.tails if index is None else {c: t.coarsened(index, n) for c, t in r.tails.items()}
    return replace(r, arms=arms, tails=tails)


def replay_archive(
    path: Path,
    arms: Sequence[Arm],
    *,
    estimator: str = "analytic",
    replicates: int = 16,
    seed: int = 0,
    buckets: Buckets | None = None,
    max_depth: int | None = None,
    batch_rows: int = 262_144,
    families: set[str] | None = None,
    requests: set[str] | None = None,
    logging_arm: Arm | str | None = None,
    law_positions: int = 0,
    progress: Callable[[int], None] | None = None,
    companion: str | None = None,
    runner: Runner | None = None,
    exclude_below: int = 0,
    ignore: Sequence[str] = (),
    auto: bool = False,
    capped_only: bool = False,
) -> ReplayResult:
    """Replay ``arms`` over the archive at ``path`` in one streaming pass.

    Parameters
    ----------
    path : Path
        Position-trace archive (file or shard folder).
    arms : sequence of Arm
        Distinct arms (by canonical form); any number share the one pass.
    estimator : str
        A key of :data:`~specreplay.replay.estimators.ESTIMATORS` (analytic, importance, …).
    replicates, seed : int
        Monte Carlo replicates M per round; the seed of every draw (common to all arms).
    buckets : Buckets, optional
        Context buckets (default: the default buckets, docs/commands.md#common-options).
    max_depth, batch_rows : int
        Depths 1..D replayed (default: the deepest arm); position rows per batch.
    families, requests : set of str, optional
        Keep only these families / request ids (:meth:`ReplayResult.select`).
    logging_arm : Arm or str, optional
        ``--logging-arm`` for archives without a logging_arm column (:class:`OpenArchive`).
    law_positions : int
        Law-test positions to sample by hash during the pass (0: none).
    progress : callable, optional
        Called with the number of positions of each batch.
    companion : str, optional
        A second estimator in the same pass (:func:`specreplay.replay.choice.auto_passes`).
    runner : Runner, optional
        Who replays the shards (a Dask cluster, the shard cache); default: this process.
    exclude_below, capped_only : int, bool
        ``--short-rounds exclude``: rounds recording fewer positions are left out (0: none);
        ``capped``: of those, only the ones the request's end or limit cut short.
    ignore : sequence of str
        ``--ignore`` globs: entries of a folder archive to skip (``ReplayResult.ignored``).
    auto : bool
        ``--estimator auto``: the caller settles the estimator after the pass.
    """
    get_estimator(estimator).replicates_used(replicates)  # bad options fail before any read
    opened = OpenArchive(  # no bad-round gate: validate's, requalify's and sweep's (docs/api.md)
        path, buckets=buckets, logging_arm=logging_arm, batch_rows=batch_rows, ignore=ignore,
        max_dropped=1.0,
    )  # fmt: skip
    res = opened.replay(
        arms,
        estimator=estimator,
        replicates=replicates,
        seed=seed,
        max_depth=max_depth,
        law_positions=law_positions,
        progress=progress,
        companion=companion,
        runner=runner,
        exclude_below=exclude_below,
        auto=auto,
        capped_only=capped_only,
    )
    if families is None and requests is None:
        return res
    return res.select(families, requests)

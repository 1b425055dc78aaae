"""Reading, validating and streaming a position-trace archive in batches of whole rounds.

:class:`ArchiveReader` walks the archive's files in sorted path order, chunk by chunk, checks every
rule of docs/inputs.md#position-traces-schema-v1 as it goes (row rules in
:mod:`~specreplay.replay.archive.rowcheck`, order rules in
:mod:`~specreplay.replay.archive.ordercheck`) and yields
:class:`~specreplay.replay.archive.batch.RoundBatch` objects of whole rounds: the incomplete last
round of a chunk is carried into the next one (docs/scale.md), so memory is bounded by the batch
size plus tables that grow with the number of requests.

Validated earlier: a file whose "validated" mark matches (:mod:`~specreplay.replay.archive.
validated`) goes through :meth:`ArchiveReader._skipped_chunk`: the replay's guards
(:mod:`~specreplay.replay.archive.guards`) in place of the null, list-length and row rules; every
other check stays. A chunk where a guard fires is checked in full.

Errors: with ``max_errors=1`` (every command but ``validate``) the first error raises
:class:`~specreplay.errors.SpecReplayError`; otherwise up to ``max_errors`` errors are collected in
``reader.errors`` (in archive order within each chunk) and no batch is yielded after the first one.
An archive that holds no row at all raises once it has been read (there is nothing to replay;
a shard reader, ``shard=True``, leaves that to the engine, which sees every shard); a
``logging_arm`` (column or option) must parse as an arm (:func:`specreplay.sim.arms.parse_arm`).

Grouping (``--by COLUMN``): with ``group=("worker",)`` or ``("family", "worker")`` the reader
codes requests by those columns' values (joined by :data:`GROUP_SEP`) where it would code them by
family, so the family tables, the "constant within a request" rule and every per-family figure
of the pass are per group instead. A carried grouping column must therefore be constant within a
request (the bootstrap resamples requests whole): a change is the one-line error that a family
change is, naming the grouping. Nulls are the value :data:`NULL_VALUE`.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from numpy.typing import NDArray

from specreplay.errors import SpecReplayError
from specreplay.names import name_problem
from specreplay.replay.archive import guards, ordercheck, rowcheck, validated
from specreplay.replay.archive.batch import AT_FILE_SHIFT, RoundBatch
from specreplay.replay.archive.schema import (
    LIST_COLUMNS,
    MARK_COLUMNS,
    OPTIONAL,
    REQUIRED,
    SCHEMA_V1,
    TAIL_COLUMNS,
)
from specreplay.replay.archive.sources import (
    ArchiveFile,
    IgnoredEntry,
    Issue,
    RawChunk,
    archive_listing,
    file_columns,
    format_location,
    last_rounds,
    read_chunks,
)
from specreplay.sim.arms import Arm, parse_arm
from specreplay.sim.rng import request_key
from specreplay.stats.buckets import Buckets
from specreplay.timing import stage, timed

__all__ = ["GROUP_SEP", "NULL_VALUE", "ArchiveReader", "FileInfo", "changed_part", "group_label"]

GROUP_SEP = " · "
"""Joins the values of the ``group`` columns into the name of a composite group."""
NULL_VALUE = "(null)"
"""The group value of a null in a carried grouping column (a value of its own, never dropped)."""


def group_label(group: tuple[str, ...]) -> str:
    """Name the grouping in messages: ``family``, ``worker``, ``family × worker``."""
    return " × ".join(group)


def changed_part(
    group: tuple[str, ...], old: tuple[str, ...], new: tuple[str, ...]
) -> tuple[str, str]:
    """Return (column, new value) of the first ``group`` column whose value differs.

    A request's family under ``--by COLUMN`` is coded by (family, value): a change names the
    column that changed (``changes family to …``, ``changes worker to …``), as a grouping by
    that column alone would.
    """
    for column, was, now in zip(group, old, new, strict=False):
        if was != now:
            return column, now
    return group_label(group), GROUP_SEP.join(new)


@dataclass(frozen=True)
class FileInfo:
    """An input file as results.json lists it (sha256 is filled in by the report)."""

    path: Path
    rows: int


@dataclass
class _Rows:
    """Validated position rows not yet emitted (flat arrays; lens gives the CSR row lengths)."""

    lens: NDArray[np.int64]
    cand: NDArray[np.int64]
    lp: NDArray[np.float64]
    tp: NDArray[np.float64]
    eq: NDArray[np.float64]
    tails: NDArray[np.float64]  # (2, n) draft_tail, target_tail (NaN: unknown); (2, 0) in v1
    pos: NDArray[np.int64]
    didx: NDArray[np.int32]
    acc: NDArray[np.int8]
    cap: NDArray[np.int8]  # capped: 1/0, −1 unknown (null, or no column)
    req: NDArray[np.int64]
    rnd: NDArray[np.int64]
    ctx: NDArray[np.int64]
    fam: NDArray[np.int64]
    at: NDArray[np.int64]
    extras: pl.DataFrame

    @property
    def n(self) -> int:
        return int(self.pos.shape[0])

    def split(self, k: int) -> tuple[_Rows, _Rows]:
        """Return rows [0, k) and [k, n)."""
        nnz = int(self.lens[:k].sum())
        flat = {"cand", "lp", "tp"} | ({"eq"} if self.eq.shape[0] else set())
        head: dict[str, object] = {}
        tail: dict[str, object] = {}
        for f in fields(_Rows):
            v = getattr(self, f.name)
            if f.name in flat:
                head[f.name], tail[f.name] = v[:nnz], v[nnz:]
            elif f.name == "eq":
                head[f.name], tail[f.name] = v, v
            elif f.name == "tails":
                head[f.name], tail[f.name] = v[:, :k], v[:, k:]
            elif f.name == "extras":
                head[f.name], tail[f.name] = v.slice(0, k), v.slice(k)
            else:
                head[f.name], tail[f.name] = v[:k], v[k:]
        return _Rows(**head), _Rows(**tail)  # type: ignore[arg-type]

    @staticmethod
    def concat(parts: list[_Rows]) -> _Rows:
        if len(parts) == 1:
            return parts[0]
        out: dict[str, object] = {}
        for f in fields(_Rows):
            vals = [getattr(p, f.name) for p in parts]
            if f.name == "extras":
                out[f.name] = pl.concat(vals, how="vertical")
            elif f.name == "tails":
                out[f.name] = np.concatenate(vals, axis=1)
            else:
                out[f.name] = np.concatenate(vals)
        return _Rows(**out)  # type: ignore[arg-type]


def _tails(frame: pl.DataFrame, columns: Collection[str]) -> NDArray[np.float64]:
    """Return (2, n) draft_tail and target_tail (NaN: null or a column the file lacks).

    (2, 0) when the archive has neither column (schema v1): nothing to carry.
    """
    if not any(c in columns for c in TAIL_COLUMNS):
        return np.zeros((2, 0), dtype=np.float64)
    out = np.full((2, frame.height), np.nan, dtype=np.float64)
    for i, name in enumerate(TAIL_COLUMNS):
        if name in frame.columns:
            out[i] = frame.get_column(name).cast(pl.Float64).fill_null(np.nan).to_numpy()
    return out


def _inner_nulls(col: pl.Series) -> int:
    """Nulls inside a list column's lists, from the Arrow arrays' null counts (no copy).

    Measured on a chunk of 100,000 rows of 32 candidates: 0.01 ms, where exploding the lists to
    count them took 2.5 ms per column.
    """
    return sum(part.to_arrow().flatten().null_count for part in col.get_chunks())


def _flat_int(col: pl.Series) -> NDArray[np.int64]:
    values = col.list.explode(keep_nulls=False, empty_as_null=False)
    return np.ascontiguousarray(values.to_numpy(), dtype=np.int64)


def _flat_float(col: pl.Series) -> NDArray[np.float64]:
    values = col.list.explode(keep_nulls=False, empty_as_null=False)
    return np.ascontiguousarray(values.to_numpy(), dtype=np.float64)


def _rule_issues(
    code: NDArray[np.int8],
    detail: NDArray[np.float64],
    drafted: NDArray[np.int64],
    locs: NDArray[np.int64],
) -> list[Issue]:
    """Return the row kernel's verdicts (:mod:`rowcheck` codes, one per row) as located issues."""
    issues: list[Issue] = []
    for i in np.flatnonzero(code):
        rule = int(code[i])
        msg = rowcheck.ROW_RULES[rule]
        if rule == rowcheck.NOT_IN_CANDS:
            msg += f" ({int(drafted[i])})"
        elif rule in rowcheck.NONFINITE or not np.isnan(detail[i]):
            msg += f" ({detail[i]:.10g})"
        issues.append(Issue(int(locs[i]), msg))
    return issues


class ArchiveReader:
    """Validate and stream a position-trace archive.

    See docs/inputs.md#position-traces-schema-v1 and docs/scale.md.

    Parameters
    ----------
    path : Path
        A Parquet file, a JSON Lines file, or a directory of shards.
    buckets : Buckets, optional
        Context buckets (default: SPEC's five).
    batch_rows : int
        Emit a batch once this many position rows of whole rounds are pending.
    chunk_rows : int
        Rows read from a file at a time.
    logging_arm : Arm or str, optional
        The arm that drafted the archive when it has no logging_arm column (``--logging-arm``),
        parsed (the option, parsed once upstream) or as text (parsed here, once).
    max_errors : int or None
        1: raise at the first error; k: collect up to k errors; None: collect all.
    columns : collection of str, optional
        Read only these columns (every required one and the ``group`` columns too); the others
        are neither decoded nor validated, and are listed in ``unread``. None: every column.
    shard : bool
        Read one shard of a larger archive: a request's first round in this reader may continue a
        round of an earlier file (start past position 1); instead of an error it is recorded in
        ``continued`` for the merge of shards to judge (docs/inputs.md#position-traces-schema-v1,
        its cross-file rules).
    ignore : sequence of str
        ``--ignore`` globs: entries of a folder archive to skip (listed in ``ignored``).

    Attributes
    ----------
    requests : list of str
        Request ids by request code (first appearance order).
    request_keys : list of numpy.uint64
        Stable request key of each request code.
    families : list of str
        Family names by family code (first appearance order).
    request_family : list of int
        Family code of each request code.
    family_parts : dict of str to tuple of str
        With a ``group`` of several columns, each family name's values of those columns
        (empty otherwise).
    errors : list of str
        Collected error lines (``max_errors != 1``).
    files : list of FileInfo
        Files read so far with their row counts.
    columns : frozenset of str
        Optional schema columns present in the archive.
    ignored : tuple of IgnoredEntry
        The folder's entries ``ignore`` skipped.
    """

    def __init__(
        self,
        path: Path,
        *,
        buckets: Buckets | None = None,
        batch_rows: int = 500_000,
        chunk_rows: int = 100_000,
        logging_arm: Arm | str | None = None,
        max_errors: int | None = 1,
        shard: bool = False,
        group: tuple[str, ...] = ("family",),
        columns: Collection[str] | None = None,
        ignore: Sequence[str] = (),
    ) -> None:
        self.path = Path(path)
        self.group = group
        self.read_columns = None if columns is None else frozenset(columns) | frozenset(group)
        self.unread: set[str] = set()
        """Columns of the files read that were not read (so not validated): see ``columns``."""
        self.buckets = buckets if buckets is not None else Buckets.parse()
        self.batch_rows = max(1, batch_rows)
        self.chunk_rows = max(1, chunk_rows)
        self.max_errors = max_errors
        self.shard = shard
        self.continued: list[tuple[int, int, int, int, int]] = []
        """(request code, round, position, file index, row/line) of rounds starting past 1."""
        self._first_at: dict[int, tuple[int, int]] = {}
        listing = archive_listing(self.path, ignore)
        self.archive_files: list[ArchiveFile] = list(listing.files)
        self.ignored: tuple[IgnoredEntry, ...] = listing.ignored
        self.requests: list[str] = []
        self.request_keys: list[np.uint64] = []
        self.request_family: list[int] = []
        self.families: list[str] = []
        self._named: set[tuple[str, str]] = set()  # (column, value) found to be names
        self.family_parts: dict[str, tuple[str, ...]] = {}
        self.errors: list[str] = []
        self.truncated = False
        self.files: list[FileInfo] = []
        self.columns: frozenset[str] = frozenset()
        self._last_rounds: dict[str, int] | None = None
        self.extra_columns: tuple[str, ...] = ()
        if isinstance(logging_arm, str):
            arm, problem = _parsed_arm(logging_arm)
            if arm is None:
                raise SpecReplayError(f"--logging-arm {logging_arm!r}: {problem}")
            logging_arm = arm
        self.parsed_logging_arm: Arm | None = logging_arm
        """The logging arm parsed (the option's, or the column's first value once read)."""
        self.logging_arm: str | None = logging_arm.spelled if logging_arm is not None else None
        """Its text: the option's spelling, or the column's first value."""
        self._arm_from_option = logging_arm is not None
        self._arm_first: str | None = None
        self._req_code: dict[str, int] = {}
        self._fam_code: dict[str, int] = {}
        self._carry = ordercheck.Carry()
        self._first_file: ArchiveFile | None = None
        self._last_loc: dict[int, int] = {}
        self._first_rows: list[NDArray[np.int64]] = []  # per chunk: (code, round, file, loc)
        self._arm_loc: tuple[ArchiveFile, int] | None = None
        self._passes = validated.Passes()  # rows validated earlier: skipped (validated.py)

    # -- public ----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[RoundBatch]:
        """Yield batches of whole rounds in archive order, validating as it goes."""
        pending: list[_Rows] = []
        n_pending = 0
        for file in self.archive_files:
            self._carry.new_file()
            rows_in_file = 0
            wanted = self.read_columns
            if wanted is not None:
                present = set(file_columns(file))
                if present & set(TAIL_COLUMNS):
                    # a truncated law's replay needs the logging law on the candidates (schema
                    # v2: specreplay.replay.truncation), whatever the estimator declares
                    wanted = wanted | (present & {"emitted_q"})
                self.unread.update(present - wanted - set(REQUIRED))
            chunks = read_chunks(file, self.chunk_rows, wanted)
            for chunk in timed("reading", chunks):
                rows_in_file += chunk.frame.height + len(chunk.issues)
                with stage("validating rows"):
                    rows = self._check_chunk(chunk)
                if self.errors or self.truncated:
                    continue
                if rows is None or rows.n == 0:
                    continue
                pending.append(rows)
                n_pending += rows.n
                if n_pending >= self.batch_rows or rows.n >= self.chunk_rows // 2:
                    cut = _last_round_start(rows)
                    if cut == 0:  # the newest rows are all one unfinished round
                        continue
                    whole, tail = rows.split(cut)
                    yield from self._emit([*pending[:-1], whole])
                    pending, n_pending = [tail], tail.n
            self.files.append(FileInfo(file.path, rows_in_file))
            self._passes.done(file.path, clean=not self.errors and not self.truncated)
            if self.truncated:
                break
        if pending and not self.errors:
            yield self._to_batch(_Rows.concat(pending))
        empty = not any(f.rows for f in self.files)
        if empty and not self.shard and not self.errors and not self.truncated:
            n = len(self.files)
            raise SpecReplayError(
                f"{self.path}: the archive holds no row ({n} file{'s' if n != 1 else ''} read); "
                "there is nothing to replay"
            )

    def _emit(self, parts: list[_Rows]) -> Iterator[RoundBatch]:
        """Yield whole rounds made of ``parts`` without copying the large last part.

        The earlier parts (an unfinished round carried from the previous chunk, small chunks)
        are joined with the last part's first round into one small batch; the rest of the last
        part is sliced, not copied.
        """
        last = parts[-1]
        if len(parts) > 1:
            first_end = _first_round_end(last)
            if first_end >= last.n:
                yield self._to_batch(_Rows.concat(parts))
                return
            head, last = last.split(first_end)
            yield self._to_batch(_Rows.concat([*parts[:-1], head]))
        yield self._to_batch(last)

    def last_round_of(self, codes: NDArray[np.int64]) -> NDArray[np.int64]:
        """Return each request code's largest round number in this reader's files.

        Scanned once, on first use (two columns per file: :func:`~specreplay.replay.archive.
        sources.last_rounds`); −1 for a request the scan did not see.
        """
        if self._last_rounds is None:
            last: dict[str, int] = {}
            for f in self.archive_files:
                for rid, rnd in last_rounds(f).items():
                    last[rid] = max(rnd, last.get(rid, rnd))
            self._last_rounds = last
        table = self._last_rounds
        return np.array([table.get(self.requests[int(c)], -1) for c in codes], np.int64)

    def request_bounds(self) -> dict[str, NDArray[np.int64]]:
        """Where each request code's rows were read so far, for checks that span readers.

        Returns int64 arrays indexed by request code: ``first_round``, ``first_file``,
        ``first_loc`` (its first row), ``last_round``, ``last_file``, ``last_loc`` (first row of
        its last round) and ``family_file``, ``family_loc`` (the row that fixed its family);
        file indices are this reader's, locations are rows (Parquet) or lines (JSONL).
        """
        n = len(self.requests)
        first = np.concatenate(self._first_rows) if self._first_rows else np.zeros((0, 4), np.int64)
        tab = self._carry.req[:n]
        o = ordercheck
        return {
            "first_round": first[:n, 1].copy(),
            "first_file": first[:n, 2].copy(),
            "first_loc": first[:n, 3].copy(),
            "last_round": tab[:, o.R_LAST_ROUND].copy(),
            "last_file": tab[:, o.R_LAST_FILE].copy(),
            "last_loc": tab[:, o.R_LAST_LOC].copy(),
            "family_file": tab[:, o.R_FAM_FILE].copy(),
            "family_loc": tab[:, o.R_FAM_LOC].copy(),
        }

    @property
    def logging_arm_at(self) -> tuple[ArchiveFile, int] | None:
        """The file and row/line of the first logging_arm value read (None without the column)."""
        return self._arm_loc

    def validate(self) -> list[str]:
        """Read the whole archive; return the collected errors (empty when it is valid)."""
        for _ in self:
            pass
        return self.errors

    # -- checks ----------------------------------------------------------------------------

    def _report(self, file: ArchiveFile, issues: list[Issue]) -> None:
        for issue in sorted(issues, key=lambda x: x.loc):
            line = f"{format_location(file, issue.loc)}: {issue.message}"
            if self.max_errors == 1:
                raise SpecReplayError(line)
            if self.max_errors is not None and len(self.errors) >= self.max_errors:
                self.truncated = True
                return
            self.errors.append(line)

    def _check_columns(self, chunk: RawChunk) -> None:
        if chunk.frame.height == 0:
            return
        present = frozenset(c for c in OPTIONAL if c in chunk.frame.columns)
        extras = tuple(c for c in chunk.frame.columns if c not in SCHEMA_V1)
        if self._first_file is None:
            self._first_file = chunk.file
            self.columns = present
            self.extra_columns = extras
            self._check_group(chunk, extras)
            if "logging_arm" in present and self._arm_from_option:
                raise SpecReplayError(
                    f"{chunk.file.path}: --logging-arm given but the archive has a logging_arm "
                    "column; drop one of them"
                )
            return
        if chunk.frame.height == 0:
            return
        if present != self.columns:
            diff = sorted(present ^ self.columns)
            raise SpecReplayError(
                f"{chunk.file.path}: optional columns {diff} differ from "
                f"{self._first_file.path} (every file must have the same columns)"
            )

    def _check_chunk(self, chunk: RawChunk) -> _Rows | None:
        self._check_columns(chunk)
        if not chunk.issues and self._passes.skips(chunk.file.path, chunk.frame.columns):
            skipped = self._skipped_chunk(chunk)
            if skipped is not None:
                return skipped
        self._passes.full(chunk.file.path, chunk.frame.columns)
        issues = list(chunk.issues)
        frame, locs = chunk.frame, chunk.locs
        reported = {i.loc for i in issues}
        # a null tail is an unknown tail (schema v2), and a null mark an unknown mark: not
        # missing values
        present = [
            c
            for c in frame.columns
            if c in SCHEMA_V1 and c not in TAIL_COLUMNS and c not in MARK_COLUMNS
        ]
        bad = np.zeros(frame.height, dtype=bool)
        if frame.height:
            # nulls (and nulls inside lists) drop the row
            for c in present:
                col = frame.get_column(c)
                inner = _inner_nulls(col) if c in LIST_COLUMNS else 0
                if col.null_count() == 0 and inner == 0:
                    continue  # the common case, told by the Arrow null counts alone
                mask = col.is_null().to_numpy()
                if inner:
                    within = col.list.eval(pl.element().is_null().any()).list.first()
                    mask = mask | within.fill_null(False).to_numpy()
                for i in np.flatnonzero(mask & ~bad):
                    if int(locs[i]) not in reported:
                        issues.append(Issue(int(locs[i]), f"missing or non-numeric value in {c!r}"))
                bad |= mask
            # list lengths must agree within a row
            list_cols = [c for c in LIST_COLUMNS if c in frame.columns]
            lens = {c: frame.get_column(c).list.len().to_numpy() for c in list_cols}
            for c in list_cols[1:]:
                differ = (lens[c] != lens["cand_ids"]) & ~bad
                for i in np.flatnonzero(differ):
                    issues.append(
                        Issue(
                            int(locs[i]),
                            f"list lengths differ: cand_ids has {lens['cand_ids'][i]}, "
                            f"{c} has {lens[c][i]}",
                        )
                    )
                bad |= differ
        dropped = np.sort(
            np.array([i.loc for i in chunk.issues] + [int(x) for x in locs[bad]], dtype=np.int64)
        )
        if bad.any():
            frame, locs = frame.filter(~bad), locs[~bad]
        # a row dropped between two kept rows (or before the first) disables continuity checks
        last = self._last_loc.get(chunk.file.index, -1)
        prev = np.concatenate([[last], locs[:-1]]).astype(np.int64)
        after_drop = (
            np.searchsorted(dropped, locs, side="left")
            - np.searchsorted(dropped, prev, side="right")
        ) > 0
        if locs.shape[0]:
            self._last_loc[chunk.file.index] = int(locs[-1])
        rows, more = self._check_rows(chunk.file, frame, locs, after_drop)
        issues.extend(more)
        self._report(chunk.file, issues)
        return rows

    def _skipped_chunk(self, chunk: RawChunk) -> _Rows | None:
        """Check a chunk of a file validated earlier: the guards only (None: one fired).

        See :mod:`~specreplay.replay.archive.validated`: no row of such a file was dropped, so no
        continuity check is disabled.
        """
        frame, locs = chunk.frame, chunk.locs
        present = [c for c in frame.columns if c in SCHEMA_V1 and c not in TAIL_COLUMNS]
        if frame.height == 0 or guards.nulls(frame, [c for c in present if c not in MARK_COLUMNS]):
            return None
        after_drop = np.zeros(frame.height, dtype=np.bool_)
        rows, issues = self._check_rows(chunk.file, frame, locs, after_drop, skipped=True)
        if rows is None:
            return None
        self._last_loc[chunk.file.index] = int(locs[-1])
        self._report(chunk.file, issues)
        return rows

    def _check_rows(
        self,
        file: ArchiveFile,
        frame: pl.DataFrame,
        locs: NDArray[np.int64],
        after_drop: NDArray[np.bool_],
        *,
        skipped: bool = False,
    ) -> tuple[_Rows | None, list[Issue]]:
        issues: list[Issue] = []
        n = frame.height
        if n == 0:
            return None, issues
        has_eq = "emitted_q" in self.columns
        has_drafted = "drafted_id" in self.columns
        has_acc = "accepted" in self.columns
        lens0 = frame.get_column("cand_ids").list.len().to_numpy().astype(np.int64)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens0, out=offsets[1:])
        cand = _flat_int(frame.get_column("cand_ids"))
        lp = _flat_float(frame.get_column("draft_logprobs"))
        tp = _flat_float(frame.get_column("target_probs"))
        eq = _flat_float(frame.get_column("emitted_q")) if has_eq else np.zeros(0, dtype=np.float64)
        drafted = (
            frame.get_column("drafted_id").to_numpy().astype(np.int64)
            if has_drafted
            else np.zeros(0, dtype=np.int64)
        )
        code = np.empty(n, dtype=np.int8)
        detail = np.empty(n, dtype=np.float64)
        didx = np.empty(n, dtype=np.int32)
        tails = _tails(frame, self.columns)
        if skipped:  # validated earlier: the guards, then the full check where one fires
            if guards.fired(offsets, cand, lp, tp, eq, drafted, has_eq, has_drafted, didx, tails):
                return None, issues
            code[:] = rowcheck.OK
        else:
            rowcheck.validate_rows(
                offsets, cand, lp, tp, eq, drafted, has_eq, has_drafted, code, detail, didx, tails
            )
        if not has_eq and "emitted_q" in self.unread:  # emitted_q is the logging law, unread
            code[code == rowcheck.LP_ZERO] = rowcheck.OK  # here: the rule does not apply
        issues.extend(_rule_issues(code, detail, drafted, locs))
        # codes for requests and families, in first-appearance order
        req = self._codes(frame.get_column("request_id"), self._req_code, self.requests)
        issues.extend(self._check_names(frame, locs))
        fam = self._codes(self._group_column(frame), self._fam_code, self.families)
        self._note_parts(frame)
        while len(self.request_keys) < len(self.requests):
            self.request_keys.append(request_key(self.requests[len(self.request_keys)]))
        self._carry.ensure(len(self.requests))
        rnd = frame.get_column("round").to_numpy().astype(np.int64)
        pos = frame.get_column("position").to_numpy().astype(np.int64)
        ctx = frame.get_column("context_tokens").to_numpy().astype(np.int64)
        self._note_first_rows(req, rnd, locs, file.index)
        acc = (
            frame.get_column("accepted").cast(pl.Int8).to_numpy().astype(np.int8)
            if has_acc
            else np.full(n, -1, dtype=np.int8)
        )
        cap = (
            frame.get_column("capped").cast(pl.Int8).fill_null(-1).to_numpy().astype(np.int8)
            if "capped" in frame.columns
            else np.full(n, -1, dtype=np.int8)
        )
        issues.extend(
            self._order_issues(file, frame, (req, rnd, pos, ctx, fam, acc), locs, after_drop)
        )
        if "logging_arm" in self.columns:
            arms, at = frame.get_column("logging_arm"), locs
            if skipped:  # one value in the file (validated): its first against the archive's
                arms, at = arms[:1], locs[:1]
            issues.extend(self._check_logging_arm(file, arms, at))
        issues.extend(self._check_logging_k(lens0, code, locs, tails))
        extras = frame.select([c for c in frame.columns if c not in SCHEMA_V1])
        place = (np.int64(file.index) << np.int64(AT_FILE_SHIFT)) | locs.astype(np.int64)
        rows = _Rows(
            lens0, cand, lp, tp, eq, tails, pos, didx, acc, cap, req, rnd, ctx, fam, place, extras
        )
        return rows, issues

    def _order_issues(
        self,
        file: ArchiveFile,
        frame: pl.DataFrame,
        cols: tuple[NDArray[Any], ...],
        locs: NDArray[np.int64],
        after_drop: NDArray[np.bool_],
    ) -> list[Issue]:
        """Check row order across batches and files (ordercheck); note each request's family."""
        req, rnd, pos, ctx, fam, acc = cols
        n = frame.height
        issues: list[Issue] = []
        ocode = np.empty(n, dtype=np.int8)
        cfile = np.empty(n, dtype=np.int64)
        cloc = np.empty(n, dtype=np.int64)
        cr = self._carry
        ordercheck.check_order(
            req,
            rnd,
            pos,
            ctx,
            fam,
            acc,
            locs,
            after_drop,
            file.index,
            cr.scalars,
            cr.pos_file,
            cr.pos_loc,
            cr.req,
            ocode,
            cfile,
            cloc,
        )
        for i in np.flatnonzero(ocode):
            at = (file.index, int(locs[i]))
            if self.shard and ocode[i] == ordercheck.POS_START and self._first_at[req[i]] == at:
                self.continued.append((int(req[i]), int(rnd[i]), int(pos[i]), *at))
                continue
            msg = self._order_message(int(i), int(ocode[i]), cfile, cloc, frame, file)
            issues.append(Issue(int(locs[i]), msg))
        for k in np.flatnonzero(cr.req[:, ordercheck.R_FAM] >= 0):
            if self.request_family[int(k)] < 0:
                self.request_family[int(k)] = int(cr.req[k, ordercheck.R_FAM])
        return issues

    def _check_logging_arm(
        self, file: ArchiveFile, arms: pl.Series, locs: NDArray[np.int64]
    ) -> list[Issue]:
        """Check that the first logging_arm is an arm and that every later one equals it."""
        issues: list[Issue] = []
        if self._arm_first is None:
            self._arm_first = str(arms[0])
            self.logging_arm = self._arm_first
            self._arm_loc = (file, int(locs[0]))
            self.parsed_logging_arm, problem = _parsed_arm(self._arm_first)
            if problem is not None:
                issues.append(Issue(int(locs[0]), f"logging_arm: {problem}"))
        assert self._arm_loc is not None  # set with _arm_first
        f0, l0 = self._arm_loc
        for i in np.flatnonzero((arms != self._arm_first).to_numpy()):
            issues.append(
                Issue(
                    int(locs[i]),
                    f"logging_arm {arms[int(i)]!r} differs from {self._arm_first!r}; "
                    f"first at {self._cite(f0.index, l0, file)}",
                )
            )
        return issues

    def _check_logging_k(
        self,
        lens: NDArray[np.int64],
        code: NDArray[np.int8],
        locs: NDArray[np.int64],
        tails: NDArray[np.float64],
    ) -> list[Issue]:
        """Rows with fewer candidates than the logging arm's top-K (rows passing the row check).

        The logging arm drafted from its K candidates, so each row archives at least K; on a
        row with fewer, its law (the importance estimator's logging law, the path-bias arm)
        could only be formed by clamping K, which docs/commands.md#arms forbids. A schema-v2 row
        that records its draft tail kept fewer on purpose: the rest of the law is in the tail,
        and the replay computes only what the kept candidates determine
        (:mod:`specreplay.replay.truncation`).
        """
        arm = self.parsed_logging_arm
        if arm is None:
            return []
        k = arm.policy.top_k
        if arm.policy.greedy or k is None:
            return []
        recorded = ~np.isnan(tails[0]) if tails.shape[1] else np.zeros(lens.shape[0], dtype=bool)
        few = np.flatnonzero((lens < k) & (code == rowcheck.OK) & ~recorded)
        return [
            Issue(
                int(locs[i]),
                f"{int(lens[i])} candidate{'s' if lens[i] != 1 else ''}, fewer "
                f"than the top-{k} of the logging arm {arm.canonical} (K is "
                "never clamped)",
            )
            for i in few
        ]

    def _note_first_rows(
        self,
        req: NDArray[np.int64],
        rnd: NDArray[np.int64],
        locs: NDArray[np.int64],
        file_index: int,
    ) -> None:
        """Record the first row of each request code first seen in this chunk."""
        known = sum(int(a.shape[0]) for a in self._first_rows)
        new = req >= known
        if not new.any():
            return
        codes, idx = np.unique(req[new], return_index=True)  # new codes are known, known + 1, …
        rows = np.empty((codes.shape[0], 4), np.int64)
        rows[:, 0] = codes
        rows[:, 1] = rnd[new][idx]
        rows[:, 2] = file_index
        rows[:, 3] = locs[new][idx]
        for c, loc in zip(codes.tolist(), rows[:, 3].tolist(), strict=True):
            self._first_at[c] = (file_index, loc)
        self._first_rows.append(rows)

    def _check_group(self, chunk: RawChunk, extras: tuple[str, ...]) -> None:
        """Raise when a ``--by`` grouping column is not a carried column of the archive."""
        for c in self.group:
            if c != "family" and c not in extras:
                carried = [n for n in file_columns(chunk.file) if n not in SCHEMA_V1]
                raise SpecReplayError(
                    f"--by {c!r}: {chunk.file.path} has no such carried column (carried: "
                    f"{', '.join(carried) or 'none'})"
                )

    def _check_names(self, frame: pl.DataFrame, locs: NDArray[np.int64]) -> list[Issue]:
        """Refuse a family (or ``--by`` value) that is no name (:mod:`specreplay.names`).

        It would label a cell of results.json, which ``report`` refuses to read; one issue per
        value, at its first row.
        """
        issues: list[Issue] = []
        for column in self.group:
            values = frame.get_column(column).cast(pl.String).fill_null(NULL_VALUE)
            first = values.arg_unique()
            for i, value in zip(first.to_list(), values.gather(first).to_list(), strict=True):
                if (column, value) in self._named:
                    continue
                problem = name_problem(value)
                if problem is None:
                    self._named.add((column, value))
                else:
                    issues.append(Issue(int(locs[i]), f"{column} {value!r}: {problem}"))
        return issues

    def _group_column(self, frame: pl.DataFrame) -> pl.Series:
        """Return the column that plays the family: ``family``, or the ``group`` columns joined."""
        if self.group == ("family",):
            return frame.get_column("family")
        parts = [pl.col(c).cast(pl.String).fill_null(NULL_VALUE) for c in self.group]
        return frame.select(pl.concat_str(parts, separator=GROUP_SEP).alias("family")).to_series()

    def _note_parts(self, frame: pl.DataFrame) -> None:
        """Record the ``group`` columns' values of each new family name (several columns)."""
        if len(self.group) < 2:
            return
        parts = [pl.col(c).cast(pl.String).fill_null(NULL_VALUE) for c in self.group]
        names = frame.select(
            pl.concat_str(parts, separator=GROUP_SEP).alias("_name"),
            *(p.alias(f"_part{i}") for i, p in enumerate(parts)),
        ).unique(subset="_name", maintain_order=True)
        for name, *values in names.iter_rows():
            self.family_parts.setdefault(name, tuple(values))

    def _codes(self, col: pl.Series, table: dict[str, int], names: list[str]) -> NDArray[np.int64]:
        """Integer codes of a string column, new names numbered in first-appearance order.

        Rows of a request (and of a family) come in runs, so the names are looked up once per
        run: a chunk of 100,000 rows holds a few hundred (measured: 0.85 against 3.5 ms for
        request ids, with the column's unique values mapped back). A column that changes value
        at most rows is coded through its unique values instead.
        """
        col = col.cast(pl.String)
        n = col.len()
        starts = np.flatnonzero((col != col.shift(1)).fill_null(True).to_numpy())
        if starts.shape[0] > n // 8:
            return self._codes_by_value(col, table, names)
        codes = np.empty(starts.shape[0], np.int64)
        for k, name in enumerate(col.gather(starts).to_list()):
            codes[k] = self._code_of(name, table, names)
        return np.repeat(codes, np.diff(np.append(starts, n)))

    def _code_of(self, name: str, table: dict[str, int], names: list[str]) -> int:
        """Return ``name``'s code, numbering it next when new."""
        code = table.get(name)
        if code is None:
            code = table[name] = len(names)
            names.append(name)
            if table is self._req_code:
                self.request_family.append(-1)
        return code

    def _codes_by_value(
        self, col: pl.Series, table: dict[str, int], names: list[str]
    ) -> NDArray[np.int64]:
        """:meth:`_codes` through the column's unique values (for columns of short runs)."""
        uniq = col.unique(maintain_order=True).to_list()
        local = pl.Series("code", [self._code_of(u, table, names) for u in uniq], dtype=pl.Int64)
        mapped = col.replace_strict(pl.Series(uniq, dtype=pl.String), local)
        return np.ascontiguousarray(mapped.to_numpy(), dtype=np.int64)

    def _order_message(
        self,
        i: int,
        code: int,
        cfile: NDArray[np.int64],
        cloc: NDArray[np.int64],
        frame: pl.DataFrame,
        file: ArchiveFile,
    ) -> str:
        rid = frame.get_column("request_id")[i]
        rnd = frame.get_column("round")[i]
        pos = frame.get_column("position")[i]
        where = ""
        if cfile[i] >= 0:
            where = f"; first at {self._cite(int(cfile[i]), int(cloc[i]), file)}"
        if code == ordercheck.POS_DUP:
            return f"duplicate (request_id={rid!r}, round={rnd}, position={pos}){where}"
        if code == ordercheck.POS_GAP:
            return f"gap in positions of round {rnd} of request {rid!r}: {pos} follows {cloc[i]}"
        if code == ordercheck.POS_START:
            return f"round {rnd} of request {rid!r} starts at position {pos}, not 1"
        if code == ordercheck.CTX_VARIES:
            ctx = frame.get_column("context_tokens")[i]
            return f"context_tokens {ctx} varies within round {rnd} of request {rid!r}{where}"
        if code == ordercheck.FAM_CHANGES:
            fam = str(self._group_column(frame)[i])
            was = self.families[int(self._carry.req[self._req_code[rid], ordercheck.R_FAM])]
            parts = self.family_parts
            what, value = changed_part(self.group, parts.get(was, (was,)), parts.get(fam, (fam,)))
            return f"request {rid!r} changes {what} to {value!r}{where}"
        if code == ordercheck.ACC_AFTER_FALSE:
            return f"accepted True after a False in round {rnd} of request {rid!r}{where}"
        if code == ordercheck.ROUND_ORDER:
            return f"round {rnd} of request {rid!r} comes after a later round{where}"
        if code == ordercheck.ROUND_SPLIT:
            return f"rows of round {rnd} of request {rid!r} are not contiguous{where}"
        if code == ordercheck.ROUND_SPLIT_FILES:
            return f"round {rnd} of request {rid!r} is split across files{where}"
        return f"{ordercheck.ORDER_RULES[code]} (request {rid!r}, round {rnd}, position {pos})"

    def _cite(self, file_index: int, loc: int, current: ArchiveFile) -> str:
        f = self.archive_files[file_index]
        if f.index == current.index:
            return f"line {loc}" if f.kind == "jsonl" else f"row {loc}"
        return format_location(f, loc)

    # -- batches ---------------------------------------------------------------------------

    @stage("building batches")
    def _to_batch(self, rows: _Rows) -> RoundBatch:
        n = rows.n
        new = np.ones(n, dtype=bool)
        new[1:] = (rows.req[1:] != rows.req[:-1]) | (rows.rnd[1:] != rows.rnd[:-1])
        starts = np.flatnonzero(new)
        round_offsets = np.append(starts, n).astype(np.int64)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(rows.lens, out=offsets[1:])
        req = rows.req[starts]
        keys = np.asarray(self.request_keys, dtype=np.uint64)[req]
        ctx = rows.ctx[starts]
        if rows.acc.shape[0] and rows.acc[0] >= 0:
            measured = np.add.reduceat((rows.acc == 1).astype(np.int32), starts).astype(np.int32)
        else:
            measured = np.full(starts.shape[0], -1, dtype=np.int32)
        return RoundBatch(
            offsets=offsets,
            cand_ids=rows.cand,
            draft_logprobs=rows.lp,
            target_probs=rows.tp,
            emitted_q=rows.eq,
            draft_tail=rows.tails[0],
            target_tail=rows.tails[1],
            position=rows.pos,
            drafted_idx=rows.didx,
            accepted=rows.acc,
            round_offsets=round_offsets,
            round_request=req,
            round_key=keys,
            round_index=rows.rnd[starts],
            round_family=rows.fam[starts].astype(np.int32),
            round_bucket=self.buckets.assign(ctx),
            round_context=ctx,
            round_depth=np.diff(round_offsets).astype(np.int32),
            measured_accepted=measured,
            round_capped=rows.cap[starts],
            extras=rows.extras,
            row_at=rows.at,
            round_at=rows.at[starts],
        )


@functools.lru_cache(maxsize=64)
def _parsed_arm(text: str) -> tuple[Arm | None, str | None]:
    """Return ``(arm, None)``, or ``(None, the parser's message)`` when ``text`` is not an arm.

    See docs/commands.md#arms. Cached by text: a logging_arm column holds one value, read again
    by every shard's reader in a process, so each distinct value is parsed once.
    """
    try:
        return parse_arm(text), None
    except SpecReplayError as err:
        return None, err.message


def _first_round_end(rows: _Rows) -> int:
    """Index one past the last row of the first round in ``rows``."""
    same = (rows.req == rows.req[0]) & (rows.rnd == rows.rnd[0])
    return int(np.argmin(same)) if not same.all() else rows.n


def _last_round_start(rows: _Rows) -> int:
    """Index of the first row of the last round in ``rows`` (rows before it are whole rounds)."""
    n = rows.n
    k = n - 1
    while k > 0 and rows.req[k - 1] == rows.req[n - 1] and rows.rnd[k - 1] == rows.rnd[n - 1]:
        k -= 1
    return k

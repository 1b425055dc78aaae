"""Shard-level replay: partial sums of one archive file, and their order-preserving merge.

:func:`replay_shard` replays one file of an archive (a shard, docs/scale.md) in one streaming pass
and returns :class:`ShardSums`: per arm, per-(request, bucket) sums (:class:`ArmSums`), the MEASURED
figures, the law-test position sample, and the request table, all keyed by the **stable request
key** (:func:`~specreplay.sim.rng.request_key`), never by file order. Request and family tables are
in canonical order (requests by key, families by name), and so are the sums' rows.

:func:`merge_shards` combines the sums of consecutive shards, ``a`` before ``b`` in sorted path
order: rows of distinct requests are interleaved in canonical order, a (request, bucket) present
in both is ``a + b``, and the checks that span files run here, with the reader's messages: a
request's rounds out of order across files, a round split across files (a duplicate (request,
round) in two shards), a request whose family changes, optional columns or logging_arm that differ.
The fold over shards in sorted path order (:func:`fold_shards`) is what the local engine and a
distributed backend (one task per shard) both run.

Bit-identity: the per-round values of a round depend on that round alone, and a request's rounds
are added in archive order, so a request whose rows all lie in one shard has the same sums (to the
bit) however the archive is cut into files, and every later aggregation follows the canonical
order. A request **split across shards** is summed per shard and the partial sums are added at the
merge, so its sums can differ from a one-file replay in the last bits (float addition is not
associative); keep requests whole within a shard for bit-identical figures.

Error order: a file's own errors (row rules, order within the file) are raised while it is read,
before the merge checks it against the earlier files. When one file holds both kinds, the error
reported can be a later row than the one the whole-archive reader reports first; ``specreplay
validate`` reads the archive as a whole and lists every error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from specreplay.errors import SpecReplayError
from specreplay.replay.accumulate import NO_ROUND, ArmSums, ReplayAccumulator
from specreplay.replay.archive import rowcheck
from specreplay.replay.archive.batch import AT_FILE_SHIFT, RoundBatch, at_parts, take_rounds
from specreplay.replay.archive.reader import ArchiveReader, FileInfo, changed_part
from specreplay.replay.archive.sources import ArchiveFile, format_location
from specreplay.replay.estimators import get_estimator
from specreplay.replay.estimators.allarms import all_arms_rounds
from specreplay.replay.estimators.base import RoundValues
from specreplay.replay.estimators.importance import logging_law
from specreplay.replay.estimators.policies import remember_fixed
from specreplay.replay.lawsample import LawSample
from specreplay.replay.measured import MeasuredAccumulator, merge_measured, reindex_measured
from specreplay.replay.tails import RatioTail, TailAccumulator
from specreplay.replay.truncation import tail_problem, tail_rows
from specreplay.sim.arms import Arm
from specreplay.sim.policy import (
    FLAG_K_EXCEEDS,
    FLAG_LOGGING_SUPPORT,
    FLAG_NO_SUPPORT,
    LawCache,
    Workspace,
)
from specreplay.stats.buckets import Buckets
from specreplay.stats.measured import MeasuredArchive
from specreplay.timing import stage

__all__ = [
    "PASS_COLUMNS",
    "ReplayOptions",
    "RequestTable",
    "ShardSums",
    "companion_possible",
    "fold_shards",
    "merge_shards",
    "needed_columns",
    "replay_reader",
    "replay_shard",
]

_BOUNDS = (
    "first_round",
    "first_file",
    "first_loc",
    "last_round",
    "last_file",
    "last_loc",
    "family_file",
    "family_loc",
)
FUSED_ARMS = True
"""Replay the fixed-depth arms of an analytic pass in one kernel (:func:`_all_arms`); False:
arm by arm, each estimator's own kernel (the same values to the bit: tests and benches)."""

# row flags of the run's own estimator counted per arm and request: flagged, no_support (the
# third, outside the logging law's support, is counted per estimator: EstimatorSums.unlogged)
_FLAG_BITS = (FLAG_K_EXCEEDS, FLAG_NO_SUPPORT)


@dataclass(frozen=True)
class ReplayOptions:
    """How a replay pass runs (the same for every shard of an archive).

    Attributes
    ----------
    estimators : tuple of str
        Keys of :data:`~specreplay.replay.estimators.ESTIMATORS`: the run's own first, then the
        estimators replayed beside it over the same batches when the archive has what they need
        (:func:`companion_possible`; ``ShardSums.replays`` drops one as soon as a batch lacks
        it). The order is part of the options (and of the shard cache's key): the first must
        replay every batch, the others may be dropped.
    replicates : int
        Monte Carlo replicates M requested (the estimator decides how many it uses).
    seed : int
        Seed of every draw, common to all arms, and of the law-test position hash.
    buckets : Buckets
        Context buckets.
    max_depth : int
        Depths 1..D replayed.
    logging_arm : Arm or None
        ``--logging-arm`` for archives without a logging_arm column, parsed once (a frozen
        dataclass: it pickles to Dask workers; the shard cache keys it by its canonical form).
    batch_rows : int
        Position rows per batch.
    law_positions : int
        Law-test positions to sample (0: none).
    group : tuple of str
        The columns that code a request's "family": ``("family",)``, or ``("family", COLUMN)``
        under ``--by COLUMN`` (the finest cells are then family × value; the engine derives the
        family and value tables from them: :class:`~specreplay.replay.engine.ReplayResult`).
    columns : frozenset of str or None
        Columns to read (:func:`needed_columns`); the others are neither decoded nor
        validated (``ShardSums.unread``). None: every column.
    exclude_below : int
        ``--short-rounds exclude``: rounds recording fewer positions than this (the run's
        deepest arm) enter no sum, MEASURED ones included; they are counted per (request,
        bucket) in ``ArmSums.excluded``. 0 (``--short-rounds null``): every round is kept.
    capped_only : bool
        ``--short-rounds capped`` (the default): of those rounds, only the ones the request's
        end or token limit cut short are left out: marked ``capped`` (schema v2), or, where the
        mark is unknown, a request's last round (:meth:`~specreplay.replay.archive.reader.
        ArchiveReader.last_round_of`); the other short rounds stay (their cells are null).
    """

    estimators: tuple[str, ...] = ("analytic",)
    auto: bool = False  # --estimator auto: the pass settles its estimator after it (choice.py)
    replicates: int = 16
    seed: int = 0
    buckets: Buckets | None = None
    max_depth: int = 5
    logging_arm: Arm | None = None
    batch_rows: int = 262_144
    law_positions: int = 0
    group: tuple[str, ...] = ("family",)
    columns: frozenset[str] | None = None
    exclude_below: int = 0
    capped_only: bool = False

    @property
    def estimator(self) -> str:
        """The run's own estimator (the first of ``estimators``)."""
        return self.estimators[0]


PASS_COLUMNS: frozenset[str] = frozenset(
    {"drafted_id", "accepted", "logging_arm", "draft_tail", "target_tail", "capped"}
)
"""Optional columns every replay pass reads: the drafted index, the MEASURED figures, the
logging arm, and schema v2's tails (a replay must know what mass its laws leave out) and marks
(``capped``: which short rounds the default leaves out)."""


def needed_columns(
    estimator: str, companion: str | None = None, group: tuple[str, ...] = ("family",)
) -> frozenset[str] | None:
    """Return the columns a pass of ``estimator`` (and ``companion``) reads; None: every one.

    The required columns, :data:`PASS_COLUMNS`, the ``group`` columns and what each estimator
    declares (:attr:`~specreplay.replay.estimators.base.Estimator.columns`): ``emitted_q`` only
    for the importance estimator; carried columns only when they code the groups (``--by``).
    """
    cols = set(PASS_COLUMNS) | set(group)
    for name in (estimator, companion):
        if name is None:
            continue
        own = get_estimator(name).columns
        if own is None:
            return None
        cols |= own
    return frozenset(cols)


def companion_possible(batch: RoundBatch, logging: Arm | None) -> bool:
    """Whether ``batch`` has drafted_id and a logging law (emitted_q or a logging arm)."""
    if batch.drafted_idx.shape[0] and int(batch.drafted_idx.min()) < 0:
        return False
    return batch.emitted_q.shape[0] == batch.target_probs.shape[0] or logging is not None


@dataclass(frozen=True)
class RequestTable:
    """Requests in canonical order (by request key), with what cross-file checks need.

    Attributes
    ----------
    ids : list of str
    keys : uint64, (r,)
        Stable request keys, strictly increasing.
    family : int32, (r,)
        Index into the owner's family table.
    rows : int64, (r,)
        Position rows read.
    bounds : dict of str to int64 (r,)
        ``first_round``, ``first_file``, ``first_loc``, ``last_round``, ``last_file``,
        ``last_loc``, ``family_file``, ``family_loc`` (file indices into the owner's sources).
    """

    ids: list[str]
    keys: NDArray[np.uint64]
    family: NDArray[np.int32]
    rows: NDArray[np.int64]
    bounds: dict[str, NDArray[np.int64]]


@dataclass(frozen=True)
class EstimatorSums:
    """What one estimator produced in a pass, per arm (an entry of ``ShardSums.replays``).

    Attributes
    ----------
    arms : dict of str to ArmSums
        Per arm (canonical name), per-(request, bucket) sums indexed into the owner's request
        and family tables.
    unlogged : dict of str to int64 (r,)
        Per arm, per request: position rows where the arm can accept a candidate that the
        logging law gives probability 0 (importance estimator only; zeros otherwise).
    tails : dict of str to RatioTail
        Per arm, the largest policy ratios per finest cell and depth (importance estimator;
        empty for the others), family indices into the owner's family table.
    replicates : int
        Monte Carlo replicates per round as used (0 for an exact estimator).
    """

    arms: dict[str, ArmSums]
    unlogged: dict[str, NDArray[np.int64]]
    tails: dict[str, RatioTail]
    replicates: int = 0


@dataclass(frozen=True)
class ShardSums:
    """Partial sums of one or more consecutive archive files (see the module docstring).

    Attributes
    ----------
    sources : list of ArchiveFile
        The files, in sorted path order (indices used by ``requests.bounds``).
    files : list of FileInfo
        The files with their row counts.
    columns : frozenset of str or None
        Optional schema columns present (None when no row was read).
    carried : tuple of str
        Carried-through (non-schema) columns of the first file that had rows.
    logging_arm : str or None
        The archive's logging arm (column, else ``--logging-arm``).
    logging_arm_at : tuple of (int, int) or None
        (file index, row/line) of the first logging_arm value from the column.
    families : list of str
        Family names, sorted (under ``--by``, family × value names: ``parts``).
    requests : RequestTable
    replays : dict of str to EstimatorSums
        Per estimator of ``ReplayOptions.estimators``, its sums: the run's own first, then each
        other one whose needs every batch met (an estimator a batch cannot support is dropped,
        in that shard and so in every merge holding it).
    flagged, no_support : dict of str to int64 (r,)
        Per arm, per request: position rows whose top-K exceeds the candidates / with no
        finite draft log-probability.
    measured : MeasuredArchive
        MEASURED figures (request and family indices into the tables above).
    law_sample : LawSample
        The law-test positions with the smallest hashes.
    law_positions : int
        How many the sample keeps (k).
    positions : int
        Position rows replayed.
    continued : list of (int, int, int, int, int)
        (request index, round, position, file index, row/line) of a request's first round in a
        file that starts past position 1: an error unless the previous file ends in that round
        (then the round is split across files, also an error, with the reader's message).
    group : tuple of str
        The columns that coded ``families`` (``ReplayOptions.group``), for messages.
    parts : dict of str to tuple of str
        Under ``--by`` (``group`` of several columns), each family name's values of the
        ``group`` columns; empty otherwise (a family is its own single part).
    unread : tuple of str
        Columns of the files that were not read (``ReplayOptions.columns``), sorted.
    opens : bool
        The first file is the archive's first (set by :func:`fold_shards`): a round of a later
        file that starts past position 1 and whose request this holds no row of is an error.
    """

    sources: list[ArchiveFile]
    files: list[FileInfo]
    columns: frozenset[str] | None
    carried: tuple[str, ...]
    logging_arm: str | None
    logging_arm_at: tuple[int, int] | None
    families: list[str]
    requests: RequestTable
    replays: dict[str, EstimatorSums]
    flagged: dict[str, NDArray[np.int64]]
    no_support: dict[str, NDArray[np.int64]]
    measured: MeasuredArchive
    law_sample: LawSample
    law_positions: int
    positions: int
    continued: list[tuple[int, int, int, int, int]]
    group: tuple[str, ...] = ("family",)
    parts: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    unread: tuple[str, ...] = ()
    opens: bool = False

    @property
    def estimator(self) -> str:
        """The run's own estimator (the first of ``replays``)."""
        return next(iter(self.replays))

    @property
    def arms(self) -> dict[str, ArmSums]:
        """Per arm, the run's own estimator's sums."""
        return self.replays[self.estimator].arms


@dataclass(frozen=True)
class _BatchContext:
    """What every estimator's replay of one batch shares."""

    options: ReplayOptions
    cache: LawCache
    logging: Arm | None
    keys: NDArray[np.int64]  # request code × n_buckets + bucket, per round
    row_request: NDArray[np.int64]  # request code per position row


class _EstimatorRun:
    """One estimator's accumulations over a reader's batches (``ReplayOptions.estimators``).

    ``required``: the run's own estimator replays every batch; another one stops (``ok``
    False, nothing kept) at the first batch that lacks what it needs (:func:`companion_possible`).
    """

    def __init__(
        self, name: str, options: ReplayOptions, names: list[str], n_buckets: int, required: bool
    ) -> None:
        self.name = name
        self.est = get_estimator(name)
        self.reps = self.est.replicates_used(options.replicates)
        self.required = required
        self.ok = True
        self.accs = {c: ReplayAccumulator(options.max_depth) for c in names}
        self.tails = {c: TailAccumulator(n_buckets, options.max_depth) for c in names}
        self.unlogged = dict.fromkeys(names, np.zeros(0, np.int64))

    def admits(self, batch: RoundBatch, logging: Arm | None) -> bool:
        """Whether this estimator replays ``batch`` (always, for the run's own)."""
        if not self.required:
            self.ok = self.ok and companion_possible(batch, logging)
        return self.ok

    def add(
        self, batch: RoundBatch, arm: Arm, ctx: _BatchContext, v: RoundValues | None = None
    ) -> RoundValues:
        """Replay ``arm`` on ``batch`` (unless ``v``, from the fused pass) and add its rounds.

        Returns the per-round values.
        """
        c = arm.canonical
        opts = ctx.options
        if v is None:
            with stage(f"arms ({self.name})"):
                v = self.est.rounds(
                    batch,
                    arm,
                    ctx.cache,
                    seed=opts.seed,
                    replicates=self.reps,
                    max_depth=opts.max_depth,
                    logging=ctx.logging,
                )
        remember_fixed(ctx.cache, self.name, arm, ctx.logging, v)
        keys, row_request = ctx.keys, ctx.row_request
        with stage("accumulating"):
            if v.flag.any():
                hit = ((v.flag & FLAG_LOGGING_SUPPORT) != 0).astype(np.int64)
                self.unlogged[c] = _per_request(self.unlogged[c], row_request, hit)
            self.accs[c].add(keys, v, batch.round_at)
        if v.ratio is not None:
            with stage("ratio tails"):
                self.tails[c].add(
                    batch.round_family, batch.round_bucket, batch.round_key, v.depth, v.ratio
                )
        return v


def _all_arms(
    batch: RoundBatch, arms: Sequence[Arm], runs: list[_EstimatorRun], ctx: _BatchContext
) -> dict[tuple[str, str], RoundValues]:
    """Return the fused pass's values by (estimator, arm): what the per-arm kernels would give.

    Runs when the pass's own estimator is analytic (``auto`` included) and the batch has no
    truncated rows (schema v2 tails, replayed over bounds arm by arm): every arm without a
    drafting rule in one kernel (:mod:`~specreplay.replay.estimators.allarms`), the importance
    companion's values too when it replays this batch. Empty otherwise: each run replays its
    arms as before (Monte Carlo, importance as the run's own, drafting policies).
    """
    fixed = [a for a in arms if a.rule is None]
    if not FUSED_ARMS or runs[0].name != "analytic" or not fixed or tail_rows(batch).size:
        return {}
    imp = next((r for r in runs[1:] if r.name == "importance"), None)
    with_imp = imp is not None and imp.admits(batch, ctx.logging)
    with stage("arms (all)"):
        got = all_arms_rounds(
            arms=fixed,
            offsets=batch.offsets,
            draft_logprobs=batch.draft_logprobs,
            target_probs=batch.target_probs,
            drafted_idx=batch.drafted_idx,
            round_offsets=batch.round_offsets,
            max_depth=ctx.options.max_depth,
            q_logging=logging_law(batch, ctx.cache, ctx.logging) if with_imp else None,
        )
    out = {("analytic", a.canonical): v for a, v in zip(fixed, got.analytic, strict=True)}
    if got.importance is not None:
        out |= {("importance", a.canonical): v for a, v in zip(fixed, got.importance, strict=True)}
    return out


def replay_shard(
    file: Path,
    arms: Sequence[Arm],
    options: ReplayOptions,
    progress: Callable[[int], None] | None = None,
) -> ShardSums:
    """Replay ``arms`` over one archive file in one streaming, validating pass.

    Parameters
    ----------
    file : Path
        One Parquet or JSON Lines file (a shard of an archive, or a whole one-file archive).
    arms : sequence of Arm
        Distinct arms (by canonical form).
    options : ReplayOptions
    progress : callable, optional
        Called with the number of positions of each batch.
    """
    reader = ArchiveReader(
        file,
        buckets=options.buckets,
        batch_rows=options.batch_rows,
        logging_arm=options.logging_arm,
        shard=True,
        group=options.group,
        columns=options.columns,
    )
    return replay_reader(reader, iter(reader), arms, options, progress)


def _per_request(
    acc: NDArray[np.int64], codes: NDArray[np.int64], w: NDArray[np.int64]
) -> NDArray[np.int64]:
    """Return ``acc`` (grown as needed) plus the per-code sums of ``w``."""
    add = np.bincount(codes, weights=w, minlength=acc.shape[0]).astype(np.int64)
    if add.shape[0] > acc.shape[0]:
        acc = np.concatenate([acc, np.zeros(add.shape[0] - acc.shape[0], np.int64)])
    return acc + add


def _check_tails(
    reader: ArchiveReader,
    batch: RoundBatch,
    arms: Sequence[Arm],
    runs: list[_EstimatorRun],
    logging: Arm | None,
    options: ReplayOptions,
) -> None:
    """Refuse what a batch's tails (schema v2) make unknowable; drop a companion that cannot.

    The run's own estimator must compute every arm exactly (:func:`tail_problem`): else one
    line naming the row, the arm and why. A companion estimator (the path-bias diagnostics) that
    cannot stops for the rest of the pass, as when a batch lacks what it needs.
    """
    rows = tail_rows(batch)
    if rows.size == 0:
        return
    width = int(np.diff(batch.offsets)[rows].min())
    problems = {
        run.name: next(
            (p for a in arms if (p := tail_problem(a, run.name, logging, width, batch))), None
        )
        for run in runs
        if run.ok
    }
    own = runs[0]
    # the auto pass (own analytic, importance beside it: specreplay.replay.choice) settles on
    # importance wherever the archive has a logging law: its analytic run is a diagnostic, and
    # it stops like a companion when the importance run can replay every arm exactly
    auto = options.auto and problems.get("importance", "absent") is None
    for run in runs:
        problem = problems.get(run.name)
        if problem is None:
            continue
        if run is not own or auto:
            run.ok = False
            continue
        if options.auto and problems.get("importance"):
            problem = problems["importance"]  # auto would answer by importance: what blocks it
        i = int(rows[0])
        where = str(reader.path)
        if batch.row_at.shape[0]:
            file_i, loc = at_parts(int(batch.row_at[i]))
            where = format_location(reader.archive_files[file_i], loc)
        dt, tt = _tail_at(batch.draft_tail, i), _tail_at(batch.target_tail, i)
        raise SpecReplayError(
            f"{where}: draft_tail {dt}, target_tail {tt}: {problem}; the replay cannot "
            "bound this figure over the mass outside the candidates (schema v2): re-capture "
            "keeping the whole vocabulary (SPECREPLAY_CAPTURE_TOP_K, the recorder's top_k) to "
            "replay it"
        )


def _tail_at(tail: NDArray[np.float64], i: int) -> str:
    return f"{float(tail[i]):.3g}" if tail.shape[0] else "—"


def _drop_short(
    batch: RoundBatch,
    options: ReplayOptions,
    reader: ArchiveReader,
    n_buckets: int,
    accs: list[ReplayAccumulator],
) -> RoundBatch:
    """Leave out the rounds recording fewer than ``below`` positions; count them in ``accs``.

    ``--short-rounds exclude`` (``ReplayOptions.exclude_below``; 0: keep every round): the rounds
    left out enter no sum, MEASURED ones included, so every arm, and the archive's MEASURED
    figures, are computed on the same rounds; each accumulator counts them per (request, bucket).
    ``--short-rounds capped`` (``capped_only``): of those, only the rounds marked capped or,
    where the mark is unknown, a request's last round.
    """
    below = options.exclude_below
    if below <= 0:
        return batch
    drop = batch.round_depth < below
    if not drop.any():
        return batch
    if options.capped_only:
        drop = drop & _capped(batch, drop, reader)
        if not drop.any():
            return batch
    keys = batch.round_request[drop] * n_buckets + batch.round_bucket[drop]
    measured = batch.measured_accepted[drop]
    retained = (1.0 + measured).astype(np.float64) if (measured >= 0).all() else None
    for acc in accs:
        acc.exclude(keys, retained)
    return take_rounds(batch, ~drop)


def _capped(
    batch: RoundBatch, short: NDArray[np.bool_], reader: ArchiveReader
) -> NDArray[np.bool_]:
    """Which rounds the request's end or token limit cut short (of the ``short`` ones).

    Marked ``capped`` (1), or, where the mark is unknown (−1, or no column), the request's last
    round in the reader's files.
    """
    cap = batch.round_capped if batch.round_capped.shape[0] else np.full(batch.n_rounds, -1)
    out: NDArray[np.bool_] = short & (cap == 1)
    unknown = np.flatnonzero(short & (cap < 0))
    if unknown.shape[0]:
        last = reader.last_round_of(batch.round_request[unknown])
        out[unknown] = batch.round_index[unknown] == last
    return out


def replay_reader(
    reader: ArchiveReader,
    batches: Iterator[RoundBatch],
    arms: Sequence[Arm],
    options: ReplayOptions,
    progress: Callable[[int], None] | None = None,
) -> ShardSums:
    """Replay the batches ``reader`` yields through ``batches`` (an iterator over ``reader``).

    :func:`replay_shard` without opening the reader: the caller may already have taken the
    first batch (to learn the logging arm) and passes it back at the head of ``batches``.
    """
    nb = len(reader.buckets.names)
    names = [a.canonical for a in arms]
    runs = [
        _EstimatorRun(e, options, names, nb, required=i == 0)
        for i, e in enumerate(options.estimators)
    ]
    own = runs[0]
    none = np.zeros(0, np.int64)
    counts = {bit: dict.fromkeys(names, none) for bit in _FLAG_BITS}  # per flag, arm, request
    rows = none
    measured = MeasuredAccumulator(nb)
    sample = LawSample.empty()
    workspace = Workspace()  # law buffers reused batch after batch
    every_acc = [acc for run in runs for acc in run.accs.values()]
    for batch in batches:
        if batch.n_rounds == 0:
            continue
        _check_tails(reader, batch, arms, runs, reader.parsed_logging_arm, options)
        rows = _per_request(rows, batch.round_request, batch.round_depth.astype(np.int64))
        if options.law_positions > 0:
            here = LawSample.from_batch(batch, options.law_positions, options.seed)
            sample = LawSample.merge(sample, here, options.law_positions)
        batch = _drop_short(batch, options, reader, nb, every_acc)
        if batch.n_rounds == 0:
            continue
        measured.add(batch)
        # the column's value, known (and parsed) once the reader has read this batch; else
        # --logging-arm
        logging = reader.parsed_logging_arm
        ctx = _BatchContext(
            options=options,
            cache=LawCache(batch.offsets, batch.draft_logprobs, workspace),
            logging=logging,
            keys=batch.round_request * nb + batch.round_bucket,
            row_request=np.repeat(batch.round_request, batch.round_depth.astype(np.int64)),
        )
        done = 0  # positions reported: a share after each arm, so one batch moves the bar too
        cut = tail_rows(batch)  # schema v2: a top-K above a row's kept candidates is expected
        fused = _all_arms(batch, arms, runs, ctx)
        for i, arm in enumerate(arms):
            c = arm.canonical
            v = own.add(batch, arm, ctx, fused.get((own.name, c)))
            flag = v.flag
            if cut.size and flag.any():
                flag = flag.copy()
                flag[cut] &= np.int8(~FLAG_K_EXCEEDS)
            if flag.any():
                _no_draft(reader, batch, flag)
                for bit, per_arm in counts.items():
                    hit = ((flag & bit) != 0).astype(np.int64)
                    per_arm[c] = _per_request(per_arm[c], ctx.row_request, hit)
            if progress is not None:
                share = batch.n_positions * (i + 1) // (len(arms) + 1) - done
                progress(share)
                done += share
        for run in runs[1:]:
            if run.admits(batch, logging):
                for arm in arms:
                    run.add(batch, arm, ctx, fused.get((run.name, arm.canonical)))
        if progress is not None:
            progress(batch.n_positions - done)
    return _finish(reader, runs, counts, rows, measured, sample, options)


def _no_draft(reader: ArchiveReader, batch: RoundBatch, flag: NDArray[np.int8]) -> None:
    """Raise, naming the file and row, when a row has no draft law (every log-probability −inf).

    The reader's row check refuses such rows (:data:`~specreplay.replay.archive.rowcheck.NO_DRAFT`)
    before any replay; this is the replay's own guard, so that no such row is ever replayed as
    the placeholder law the policy kernel writes for it, nor reported without its location.
    """
    hit = np.flatnonzero((flag & FLAG_NO_SUPPORT) != 0)
    if hit.shape[0] == 0:
        return
    i = int(hit[0])
    what = rowcheck.ROW_RULES[rowcheck.NO_DRAFT]
    if batch.row_at.shape[0] != batch.n_positions:  # pragma: no cover - the reader's batches
        raise SpecReplayError(f"{reader.path}: a position row: {what}")
    index, loc = at_parts(int(batch.row_at[i]))
    raise SpecReplayError(f"{format_location(reader.archive_files[index], loc)}: {what}")


@stage("shard totals (tails cut)")
def _finish(
    reader: ArchiveReader,
    runs: list[_EstimatorRun],
    counts: dict[int, dict[str, NDArray[np.int64]]],
    rows: NDArray[np.int64],
    measured: MeasuredAccumulator,
    sample: LawSample,
    options: ReplayOptions,
) -> ShardSums:
    """Put one reader's accumulations on canonical tables (requests by key, families by name)."""
    n_req = len(reader.requests)
    keys = np.asarray(reader.request_keys, np.uint64).reshape(n_req)
    order = np.argsort(keys, kind="stable")
    _check_keys(keys[order], [reader.requests[int(i)] for i in order])
    index = np.empty(n_req, np.int64)
    index[order] = np.arange(n_req)
    fam_sorted = sorted(reader.families)
    fam_index = np.array([fam_sorted.index(f) for f in reader.families], np.int64)
    code_family = fam_index[np.asarray(reader.request_family, np.int64)].astype(np.int32)
    bounds = reader.request_bounds()

    def by_index(x: NDArray[np.int64]) -> NDArray[np.int64]:
        out = np.zeros(n_req, np.int64)
        out[: x.shape[0]] = x
        return out[order]

    table = RequestTable(
        ids=[reader.requests[int(i)] for i in order],
        keys=keys[order],
        family=code_family[order],
        rows=by_index(rows),
        bounds={k: v[order] for k, v in bounds.items()},
    )
    nb = len(reader.buckets.names)
    arm_at = reader.logging_arm_at
    replays = {
        run.name: EstimatorSums(
            arms={c: a.result(nb, keys, code_family, index) for c, a in run.accs.items()},
            unlogged={c: by_index(v) for c, v in run.unlogged.items()},
            tails={
                c: t.tail.with_families(fam_index, len(fam_sorted)) for c, t in run.tails.items()
            },
            replicates=run.reps,
        )
        for run in runs
        if run.ok
    }
    return ShardSums(
        sources=[f for f in reader.archive_files],
        files=list(reader.files),
        columns=reader.columns if int(rows.sum()) > 0 else None,
        carried=tuple(reader.extra_columns),
        unread=tuple(sorted(reader.unread)),
        logging_arm=reader.logging_arm,
        logging_arm_at=(arm_at[0].index, arm_at[1]) if arm_at else None,
        families=fam_sorted,
        requests=table,
        replays=replays,
        flagged={c: by_index(v) for c, v in counts[FLAG_K_EXCEEDS].items()},
        no_support={c: by_index(v) for c, v in counts[FLAG_NO_SUPPORT].items()},
        measured=reindex_measured(measured.result(), index, fam_index, len(fam_sorted)),
        law_sample=sample,
        law_positions=options.law_positions,
        positions=int(rows.sum()),
        continued=[(int(index[c]), r, p, f, loc) for c, r, p, f, loc in reader.continued],
        group=options.group,
        parts=dict(reader.family_parts) if len(options.group) > 1 else {},
    )


def _check_keys(keys: NDArray[np.uint64], ids: list[str]) -> None:
    """Raise when two distinct request ids share a request key (sorted keys)."""
    same = np.flatnonzero(keys[1:] == keys[:-1])
    if same.shape[0]:
        i = int(same[0])
        raise SpecReplayError(
            f"request ids {ids[i]!r} and {ids[i + 1]!r} share the 64-bit request key "
            f"{int(keys[i])}: rename one of them"
        )


def fold_shards(shards: Iterator[ShardSums]) -> ShardSums:
    """Merge shards given in sorted path order, as a balanced tree built while they arrive.

    A binary counter: each new shard is pushed, and while the two newest runs cover the same
    number of shards they are merged (earlier first). A merge costs about the size of its
    parts, so folding S shards costs O(total · log S), not the O(total · S) of merging every
    shard into one growing result (128 shards of 10 M positions: 7 levels instead of 127 copies
    of the whole sums). The tree's shape depends only on the number of shards, so the same
    shards always give the same figures (to the bit) whoever runs the fold: the local engine,
    Dask or the shard cache. The ratio tails merge by selection (top K per group, each group in
    no particular order: :meth:`~specreplay.replay.tails.RatioTail.merge`).
    """
    runs: list[tuple[int, ShardSums]] = []  # (shards covered, sums), oldest first
    for s in shards:
        if not runs:
            _check_continued(s, None, {})
            s = replace(s, opens=True, continued=[])
        runs.append((1, s))
        while len(runs) > 1 and runs[-2][0] == runs[-1][0]:
            (n, a), (_, b) = runs[-2], runs[-1]
            runs[-2:] = [(2 * n, merge_shards(a, b))]
    if not runs:
        raise SpecReplayError("no shard to merge")
    while len(runs) > 1:
        (n, a), (m, b) = runs[-2], runs[-1]
        runs[-2:] = [(n + m, merge_shards(a, b))]
    return runs[0][1]


def _where(s: ShardSums, file: int, loc: int) -> str:
    return format_location(s.sources[int(file)], int(loc))


def _check_files(a: ShardSums, b: ShardSums) -> None:
    """Check that optional columns and logging_arm agree across files (the reader's messages)."""
    if a.columns is not None and b.columns is not None and a.columns != b.columns:
        first_a = next(f for f, i in zip(a.sources, a.files, strict=True) if i.rows)
        first_b = next(f for f, i in zip(b.sources, b.files, strict=True) if i.rows)
        raise SpecReplayError(
            f"{first_b.path}: optional columns {sorted(a.columns ^ b.columns)} differ from "
            f"{first_a.path} (every file must have the same columns)"
        )
    if a.logging_arm_at and b.logging_arm_at and a.logging_arm != b.logging_arm:
        raise SpecReplayError(
            f"{_where(b, *b.logging_arm_at)}: logging_arm {b.logging_arm!r} differs from "
            f"{a.logging_arm!r}; first at {_where(a, *a.logging_arm_at)}"
        )


def _check_continued(
    b: ShardSums, a: ShardSums | None, in_a: dict[int, int]
) -> list[tuple[int, int, int, int, int]]:
    """Raise for a round of ``b`` starting past position 1 that does not continue ``a``.

    Such a round gets the reader's "starts at position" message, unless ``a``'s last round of
    its request is that round or a later one (:func:`_check_requests` reports those: split
    across files, out of order); ``in_a`` maps b's request indices to a's. A round whose
    request ``a`` does not hold, while ``a`` does not start the archive, may continue an earlier
    file: it is returned, to be judged by a later merge (the fold is a tree, not left to right).
    """
    carried = []
    opens = a is None or a.opens
    for req, rnd, pos, file, loc in sorted(b.continued, key=lambda c: (c[3], c[4])):
        ra = in_a.get(req)
        if a is not None and ra is not None and a.requests.bounds["last_round"][ra] >= rnd:
            continue
        if ra is None and not opens:
            carried.append((req, rnd, pos, file, loc))
            continue
        rid = b.requests.ids[req]
        raise SpecReplayError(
            f"{_where(b, file, loc)}: round {rnd} of request {rid!r} starts at position {pos}, "
            "not 1"
        )
    return carried


def _check_requests(
    a: ShardSums, b: ShardSums, ia: NDArray[np.int64], ib: NDArray[np.int64]
) -> None:
    """Raise the first cross-file order or family error of the requests in both (``ia``, ``ib``).

    "First" is in archive order: the earliest row of ``b`` that the whole-archive reader would
    have reported (a request's first row in ``b``).
    """
    ba, bb = a.requests.bounds, b.requests.bounds
    last, first = ba["last_round"][ia], bb["first_round"][ib]
    fam_a = np.array(a.families, dtype=object)[a.requests.family[ia]]
    fam_b = np.array(b.families, dtype=object)[b.requests.family[ib]]
    bad = np.flatnonzero((first <= last) | (fam_a != fam_b))
    if bad.shape[0] == 0:
        return
    i = int(bad[np.lexsort((bb["first_loc"][ib][bad], bb["first_file"][ib][bad]))[0]])
    ra, rb = int(ia[i]), int(ib[i])
    rid = b.requests.ids[rb]
    here = _where(b, bb["first_file"][rb], bb["first_loc"][rb])
    last_at = _where(a, ba["last_file"][ra], ba["last_loc"][ra])
    if first[i] < last[i]:
        msg = f"round {first[i]} of request {rid!r} comes after a later round; first at {last_at}"
    elif first[i] == last[i]:
        msg = f"round {first[i]} of request {rid!r} is split across files; first at {last_at}"
    else:
        fam_at = _where(a, ba["family_file"][ra], ba["family_loc"][ra])
        what, value = changed_part(b.group, _parts(a, fam_a[i]), _parts(b, fam_b[i]))
        msg = f"request {rid!r} changes {what} to {value!r}; first at {fam_at}"
    raise SpecReplayError(f"{here}: {msg}")


def _parts(s: ShardSums, family: str) -> tuple[str, ...]:
    """Return the values of the ``group`` columns that make the family name ``family``."""
    return s.parts.get(family, (family,))


def _merged_requests(
    a: ShardSums, b: ShardSums, families: list[str]
) -> tuple[RequestTable, NDArray[np.int64], NDArray[np.int64]]:
    """Return the union of both request tables (by key) and where a's and b's requests went."""
    keys = np.union1d(a.requests.keys, b.requests.keys)
    to_a = np.searchsorted(keys, a.requests.keys).astype(np.int64)
    to_b = np.searchsorted(keys, b.requests.keys).astype(np.int64)
    ids: list[str] = [""] * keys.shape[0]
    for src, to in ((a, to_a), (b, to_b)):
        for i, j in enumerate(to.tolist()):
            ids[j] = src.requests.ids[i]
    fa = np.array([families.index(f) for f in a.families], np.int32)[a.requests.family]
    fb = np.array([families.index(f) for f in b.families], np.int32)[b.requests.family]
    family = np.zeros(keys.shape[0], np.int32)
    family[to_b] = fb
    family[to_a] = fa
    rows = np.zeros(keys.shape[0], np.int64)
    rows[to_a] += a.requests.rows
    rows[to_b] += b.requests.rows
    shift = len(a.sources)
    bounds: dict[str, NDArray[np.int64]] = {}
    for name in _BOUNDS:
        v = np.zeros(keys.shape[0], np.int64)
        vb = b.requests.bounds[name] + (shift if name.endswith("_file") else 0)
        va = a.requests.bounds[name]
        if name.startswith("last"):  # the later shard's last round wins
            v[to_a], v[to_b] = va, vb
        else:  # the earlier shard's first row and family row win
            v[to_b], v[to_a] = vb, va
        bounds[name] = v
    return RequestTable(ids, keys, family, rows, bounds), to_a, to_b


def _remap(x: NDArray[np.int64], to: NDArray[np.int64], n: int) -> NDArray[np.int64]:
    out = np.zeros(n, np.int64)
    out[to] = x
    return out


def _merge_counts(
    a: dict[str, NDArray[np.int64]],
    b: dict[str, NDArray[np.int64]],
    to_a: NDArray[np.int64],
    to_b: NDArray[np.int64],
    n: int,
) -> dict[str, NDArray[np.int64]]:
    """Per-arm, per-request counts of two shards on the merged request table (summed)."""
    return {c: _remap(a[c], to_a, n) + _remap(b[c], to_b, n) for c in a}


@stage("fold")
def merge_shards(a: ShardSums, b: ShardSums) -> ShardSums:
    """Merge the partial sums of consecutive shards, ``a`` before ``b`` (module docstring).

    An estimator is kept only where both shards hold it (one a shard dropped is dropped).

    Raises
    ------
    SpecReplayError
        When the shards break a rule that spans files (the whole-archive reader's messages).
    """
    _check_files(a, b)
    _, ia, ib = np.intersect1d(a.requests.keys, b.requests.keys, return_indices=True)
    for i, j in zip(ia.tolist(), ib.tolist(), strict=True):
        if a.requests.ids[i] != b.requests.ids[j]:
            _check_keys(np.array([0, 0], np.uint64), [a.requests.ids[i], b.requests.ids[j]])
    _check_requests(a, b, ia.astype(np.int64), ib.astype(np.int64))
    carried = _check_continued(b, a, dict(zip(ib.tolist(), ia.tolist(), strict=True)))
    families = sorted(set(a.families) | set(b.families))
    table, to_a, to_b = _merged_requests(a, b, families)
    n = len(table.ids)
    fam_a = np.array([families.index(f) for f in a.families], np.int64)
    fam_b = np.array([families.index(f) for f in b.families], np.int64)
    replays = {
        e: EstimatorSums(
            arms={c: _merge_sums(x.arms[c], y.arms[c], table, len(a.sources)) for c in x.arms},
            unlogged=_merge_counts(x.unlogged, y.unlogged, to_a, to_b, n),
            tails=_merge_tails(x.tails, y.tails, fam_a, fam_b, len(families)),
            replicates=x.replicates,
        )
        for e, x in a.replays.items()
        if (y := b.replays.get(e)) is not None
    }
    measured = merge_measured(
        reindex_measured(a.measured, to_a, fam_a, len(families)),
        reindex_measured(b.measured, to_b, fam_b, len(families)),
    )
    shift = len(a.sources)
    arm_at = a.logging_arm_at or (
        (b.logging_arm_at[0] + shift, b.logging_arm_at[1]) if b.logging_arm_at else None
    )
    return ShardSums(
        sources=a.sources + b.sources,
        files=a.files + b.files,
        columns=a.columns if a.columns is not None else b.columns,
        carried=a.carried if a.columns is not None else b.carried,
        logging_arm=a.logging_arm if a.logging_arm is not None else b.logging_arm,
        logging_arm_at=arm_at,
        families=families,
        requests=table,
        replays=replays,
        flagged=_merge_counts(a.flagged, b.flagged, to_a, to_b, n),
        no_support=_merge_counts(a.no_support, b.no_support, to_a, to_b, n),
        measured=measured,
        law_sample=LawSample.merge(a.law_sample, b.law_sample, a.law_positions),
        law_positions=a.law_positions,
        positions=a.positions + b.positions,
        continued=[(int(to_a[r]), rnd, p, f, loc) for r, rnd, p, f, loc in a.continued]
        + [(int(to_b[r]), rnd, p, f + shift, loc) for r, rnd, p, f, loc in carried],
        group=a.group,
        parts={**b.parts, **a.parts},
        unread=tuple(sorted(set(a.unread) | set(b.unread))),
        opens=a.opens,
    )


@stage("fold: tails")
def _merge_tails(
    a: dict[str, RatioTail],
    b: dict[str, RatioTail],
    fam_a: NDArray[np.int64],
    fam_b: NDArray[np.int64],
    n_families: int,
) -> dict[str, RatioTail]:
    """Per arm, the merged tails of two shards on the merged family table."""
    return {
        c: RatioTail.merge(
            a[c].with_families(fam_a, n_families), b[c].with_families(fam_b, n_families)
        )
        for c in a
    }


def _merge_sums(a: ArmSums, b: ArmSums, table: RequestTable, shift: int) -> ArmSums:
    """Merge ``a`` and ``b`` (b's files shifted by ``shift``) onto the merged request table."""
    at = b.short_at
    moved = np.where(at == NO_ROUND, at, at + (np.int64(shift) << np.int64(AT_FILE_SHIFT)))
    m = ArmSums.merge(a, dataclasses.replace(b, short_at=moved))
    req = np.searchsorted(table.keys, m.request_key).astype(np.int64)
    return m.with_tables(req, table.family[req])

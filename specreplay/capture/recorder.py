"""Recorder: log position traces (schema v1) from a serving engine, one round at a time.

See docs/api.md#recorder. An engine adapter hands the recorder each verification round of a request
(:meth:`Recorder.round`); the recorder writes schema-v1 rows
(docs/inputs.md#position-traces-schema-v1) through
:class:`~specreplay.replay.archive.writer.TraceWriter` on a background thread.

Terms
-----
round
    One verification of n drafted tokens of one request: the drafted ids, the target's
    probabilities at positions 1..n, and how many leading drafts the engine accepted.
logits mode
    The adapter passes the drafter's full-vocabulary logits at temperature 1 (``draft_logits``,
    (n, V)). The recorder keeps the ``top_k`` ids per position (ties to the lower id), appends the
    drafted id when it is not among them, writes the float64 log-softmax at those candidates as
    ``draft_logprobs``, and computes ``emitted_q`` with the package's own policy and quantizer of
    ``logging_arm`` (its sampler, the QUANT before ``/``: :class:`~specreplay.sim.policy.LawCache`),
    so the archived law equals the replay's law of the logging arm bit for bit.
exact-q mode
    The adapter passes the engine's exact law (``emitted_q``, (n, K)) with its candidate ids
    (``cand_ids``) and optionally ``draft_logprobs`` (default ``log(emitted_q)``): rows are written
    as given. The drafted id must be among the candidates. A point-mass drafter (n-gram,
    EAGLE-style argmax) is the exact-q case ``cand_ids=[[d]]``, ``emitted_q=[[1.0]]``,
    ``draft_logprobs=[[0.0]]`` with ``logging_arm="greedy@K"``.
incomplete request
    A recorded request that lost a round because the queue was full or the round was bad: its
    earlier rounds stay in the archive, its later rounds are not recorded.
bad round
    A round whose call :meth:`Recorder.round` refused (shapes, ids, round order, arrays that
    cannot be copied: :data:`BAD_CALL`), or whose rows break a rule of ``validate``
    (:mod:`specreplay.replay.archive.rowrules`: finite values, laws whose kept mass plus tail is
    1 within 1e-6, ids in range, the drafted id among the candidates), or whose ids cannot be
    written (a token id beyond int64).

Decisions (where issue 12 is silent)
------------------------------------
- **Calling thread**: :meth:`Recorder.round` only checks the sample decision, checks the shapes
  (and, in exact-q mode, that each drafted id is among its candidates), copies the arrays and
  calls ``queue.put_nowait``; top-k, log-softmax, the policy law and the polars frames are built on
  the background thread (a daemon thread named ``specreplay-recorder``).
- **Queue full**: the queue holds at most ``queue_rounds`` rounds and ``queue_bytes`` bytes of
  copied arrays (logits mode copies two (n, V) arrays a round). The round that does not fit stops
  its request: the request's earlier rounds are kept, it is listed as incomplete in the manifest,
  and ``round`` returns False for every later round of it (never blocks). Dropping the whole
  request instead would need the rows held back until the request ends, which the recorder
  cannot know.
- **Sampling** is by request id, the same in every process and rank: a request is kept iff
  ``int.from_bytes(blake2b(request_id.encode("utf-8"), digest_size=8).digest(), "big") <
  round(sample * 2**64)`` (:func:`sample_keeps`). A kept request is recorded whole (unless the
  queue stops it). The decision is cached per request id: one dict entry per request seen
  (about 100 bytes), so a capture of millions of requests should be split over recorders.
- **Manifest**: ``close`` puts a ``"capture"`` object in this writer's record of ``CAPTURE.json``:
  the logging arm, top_k, sample, drafter, engine and the :class:`CaptureCounts`. So the
  recorder writes folders only (``parquet-dir``, ``ipc-dir``, ``jsonl-dir``); a recorder that
  recorded nothing commits a folder holding only that manifest (validate: no shard).
- **Logits mode's kernels**: its first batch calls the policy kernels of
  :mod:`specreplay.sim.policy` on the background thread: loaded from Numba's cache in about
  0.3 s, compiled in about 30 s on a fresh install (``specreplay warmup`` fills the cache).
- **One Numba thread**: before its first logits-mode batch, the background thread calls
  ``numba.set_num_threads(1)``, so the parallel (``prange``) policy kernels it runs take one core,
  not the engine's. Numba keeps that count per calling thread (a thread-local mask in each
  threading layer): the engine's threads keep theirs. Exact-q mode never calls it, so it never
  starts Numba's threading layer in the engine's process (with the GNU OpenMP layer, Numba's
  choice on Linux without TBB, a child forked after that must not run a parallel kernel). The
  call failing is a failure of the background thread (below).
- **Bad rounds** (issue 17): ``round`` never raises into the engine. A bad call returns False;
  every other round is queued (True) and checked on the background thread with validate's own
  row rules, run in the interpreter (:func:`~specreplay.replay.archive.rowrules.
  check_rows_python`: no Numba in exact-q mode; about 0.3 ms a round of 4 rows of 32
  candidates). A bad round is dropped **with the later rounds of its request**, the queue-full
  rule: the request keeps its earlier rounds (already written, perhaps committed), is listed
  as incomplete, and records no later round (a later round would follow a gap the replay
  cannot see). The manifest counts the bad rounds by reason (:class:`CaptureCounts`), and the
  first one is logged once, a WARNING on ``logger`` (:data:`LOGGER` by default; the vLLM plugin
  passes its ``vllm.specreplay`` logger, whose lines vLLM's handler prints, while a
  ``specreplay`` logger would reach only Python's last-resort handler in vLLM's processes:
  vllm/logger.py configures the ``vllm`` logger alone). The replay then sees each request up to
  its first bad round: a selection, which :mod:`specreplay.replay.archive.dropped` bounds
  (``validate`` refuses a capture with more than 1 % of bad rounds).
- **Failures** (a full disk, a file-size limit, any error on the background thread): recording
  stops at once. The staged run is removed on the background thread (on a full disk that frees
  its space), ``CAPTURE.json`` marks this writer ``"state": "failed: …"`` when the manifest can
  be written (a run that lost rows must not pass for a whole one; ``validate`` says so; its
  counts stay those of the last commit, matching the committed rows), and one ERROR line on
  ``logger`` says the path, the cause (ENOSPC and EFBIG named, also from polars' ``os error
  28/27``), that recording stopped and what to do. What earlier periodic commits put in ``path``
  stays (whole rounds). The engine is not slowed or stopped: ``round`` returns False at once,
  ``with`` and the process's exit close without raising (the failure is in the log and in
  :attr:`Recorder.failure`); an explicit ``close`` raises a SpecReplayError naming it.
- **Periodic commits** (issue 15): the background thread commits the rounds written so far,
  with the manifest, every ``commit_rounds`` rounds (:data:`COMMIT_ROUNDS`, 10,000) or
  ``commit_seconds`` seconds (:data:`COMMIT_SECONDS`, 60), whichever comes first
  (:meth:`~specreplay.replay.archive.writer.TraceWriter.commit`: whole shards renamed in and
  ``CAPTURE.json`` rewritten under the folder's lock; the writer's record says ``"state":
  "open"`` until ``close``). A reader sees the committed rounds only.
- **Exit**: ``close`` is registered (quietly: a failure is not raised at the engine's shutdown)
  with :mod:`atexit` and as a :mod:`multiprocessing` finalizer (a child started by fork ends in
  ``os._exit``, and Python 3.12 runs only multiprocessing's finalizers there), so a process that
  exits normally commits what it recorded; ``with Recorder(...)`` closes on exit, also when an
  exception leaves the block (what was recorded is committed, and the exception propagates,
  with the recorder's failure as a note). A killed process
  (SIGKILL, out of memory) leaves ``path`` as its last periodic commit left it (every round up
  to that commit, the writer's state ``"open"``), and the TraceWriter's staged
  ``.NAME.tmp-PID`` folder beside it (shards written since, no manifest; readers refuse it).
- ``round`` is meant to be called from one thread (the engine's step loop); counters are plain
  integers updated without a lock.
- **fork**: in a child forked from a process holding a recorder, that recorder is closed:
  ``round`` returns False and ``close`` (also at the child's exit) writes nothing, since the
  background thread and the staged run belong to the parent. A process that records creates its
  own Recorder (``mode="append"``, one ``writer_id`` per process).

This module depends on NumPy, polars, pyarrow, :mod:`specreplay.replay.archive.writer` and
:mod:`specreplay.sim.arms`; Numba and :mod:`specreplay.sim.policy` (the sampler's law) are
imported on the background thread at the first logits-mode batch, never in exact-q mode: the vLLM
plugin records in exact-q mode, so a capture never loads Numba (or llvmlite) into vLLM's
processes (docs/record-vllm.md).

Examples
--------
>>> import tempfile, pathlib
>>> import numpy as np
>>> d = pathlib.Path(tempfile.mkdtemp()) / "capture"
>>> with Recorder(d, logging_arm="top2:t0.7@2", top_k=2) as rec:
...     rec.round("r1", 0, drafted_ids=[0, 1], accepted=1, family="chat", context_tokens=7,
...               target_probs=np.full((2, 4), 0.25), draft_logits=np.log(np.full((2, 4), 0.25)))
True
>>> rec.counts.rows, sorted(p.name for p in d.iterdir())
(2, ['CAPTURE.json', 'part-00000.parquet'])
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib
import logging
import math
import multiprocessing.util
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

import numpy as np
import polars as pl
from numpy.typing import NDArray

from specreplay.diskfull import disk_errno
from specreplay.errors import SpecReplayError
from specreplay.replay.archive import rowrules
from specreplay.replay.archive.writer import FORMATS, TraceWriter
from specreplay.sim.arms import Arm, parse_arm

__all__ = [
    "BAD_CALL",
    "COMMIT_IDLE_SECONDS",
    "COMMIT_ROUNDS",
    "COMMIT_SECONDS",
    "INCOMPLETE_IDS_LISTED",
    "LOGGER",
    "CaptureCounts",
    "Recorder",
    "sample_keeps",
    "sample_threshold",
    "top_candidates",
]

INCOMPLETE_IDS_LISTED = 1000
"""How many incomplete request ids the manifest lists (the count is always exact)."""
BAD_CALL = "refused call (shapes, ids, round order: the round could not be read)"
"""The reason counted for a round whose call :meth:`Recorder.round` refused (calling thread)."""
LOGGER = "specreplay.capture"
"""The logger of a recorder's lines by default (``Recorder(logger=)``: vLLM's plugin sets it)."""
_BATCH_ROUNDS = 512  # rounds the background thread turns into one frame at most
_SHARD_ROWS = 50_000  # rows per shard: bounds the memory a long capture buffers (~60 MB at K=32)
_STOP = object()
COMMIT_ROUNDS = 10_000
"""Default ``commit_rounds``: rounds between periodic commits (about 40,000 rows at depth 4)."""
COMMIT_SECONDS = 60.0
"""Default ``commit_seconds``: seconds between periodic commits."""
COMMIT_IDLE_SECONDS = 2.0
"""Default ``commit_idle_seconds``: an engine idle this long has its rounds committed."""
_SHARD_BYTES = 64 * 2**20  # a shard is cut at 64 MiB of buffered rows, whatever their width
_LIVE: weakref.WeakSet[Recorder] = weakref.WeakSet()  # recorders of this process (fork hook)
_FORK_HOOK: list[bool] = []  # the at-fork hook is registered on the first Recorder, not at import


def _after_fork_in_child() -> None:
    """In a forked child, every inherited recorder is closed: the parent's run stays its own."""
    for rec in list(_LIVE):
        rec._disown()


def sample_threshold(sample: float) -> int:
    """Return the 64-bit threshold of a sampling fraction: ``round(sample * 2**64)``.

    >>> sample_threshold(1.0) == 2**64, sample_threshold(0.5) == 2**63
    (True, True)
    """
    return round(sample * 2**64)


def sample_keeps(request_id: str, sample: float) -> bool:
    """Tell whether a request id is in the ``sample`` fraction (the same in every process).

    A request is kept iff the big-endian integer of its 8-byte BLAKE2b digest is below
    :func:`sample_threshold`.

    >>> sample_keeps("any id", 1.0)
    True
    """
    digest = hashlib.blake2b(request_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") < sample_threshold(sample)


@dataclass(frozen=True)
class CaptureCounts:
    """What a recorder saw and wrote (the manifest's ``capture.counts``).

    Attributes
    ----------
    requests_seen : int
        Distinct request ids passed to :meth:`Recorder.sampled` or :meth:`Recorder.round`.
    requests_sampled : int
        Those the hash sample keeps.
    requests_incomplete : int
        Sampled requests stopped by a full queue or a bad round (their earlier rounds are kept).
    incomplete_ids : tuple of str
        The first :data:`INCOMPLETE_IDS_LISTED` of them (about: the two threads append).
    rounds_offered : int
        Rounds of sampled requests handed to :meth:`Recorder.round`.
    rounds_recorded : int
        Rounds turned into rows (all of them written once the recorder is closed).
    rounds_dropped_queue_full : int
        Rounds of sampled requests not recorded because the queue was full (the round that found
        it full and every later round of its request).
    rows : int
        Position rows recorded.
    rounds_dropped_bad : int
        Bad rounds dropped: a call :meth:`Recorder.round` refused (:data:`BAD_CALL`), or a round
        whose rows break a rule of validate (:mod:`specreplay.replay.archive.rowrules`).
    rounds_dropped_after_bad : int
        Later rounds of the requests a bad round stopped (not recorded).
    dropped_reasons : tuple of (str, int)
        ``rounds_dropped_bad`` by reason: validate's rule text (``ROW_RULES``) or
        :data:`BAD_CALL`, sorted by reason (a dict in the manifest).
    first_bad : str
        The first bad round: request, round, position and rule ('' when none).
    """

    requests_seen: int = 0
    requests_sampled: int = 0
    requests_incomplete: int = 0
    incomplete_ids: tuple[str, ...] = ()
    rounds_offered: int = 0
    rounds_recorded: int = 0
    rounds_dropped_queue_full: int = 0
    rows: int = 0
    rounds_dropped_bad: int = 0
    rounds_dropped_after_bad: int = 0
    dropped_reasons: tuple[tuple[str, int], ...] = ()
    first_bad: str = ""

    def as_json(self) -> dict[str, Any]:
        """Return the counts as the manifest writes them (lists and a dict of reasons)."""
        out = asdict(self)
        out["incomplete_ids"] = list(self.incomplete_ids)
        out["dropped_reasons"] = dict(self.dropped_reasons)
        return out


class _Round(NamedTuple):
    """One queued round: copies of the caller's arrays (converted on the background thread).

    A NamedTuple, not a frozen dataclass: it is built on the calling thread, and a tuple is
    built in a tenth of the time.
    """

    request_id: str
    round: int
    family: str
    context_tokens: int
    drafted: NDArray[Any]  # (n,) int
    target: NDArray[Any]  # (n, V) or (n, K) float
    accepted: int  # leading drafts accepted, 0..n
    logits: NDArray[Any] | None  # (n, V) float (logits mode)
    cand_ids: NDArray[Any] | None  # (n, K) int (exact-q mode)
    emitted_q: NDArray[Any] | None  # (n, K) float (exact-q mode)
    draft_logprobs: NDArray[Any] | None  # (n, K) float (exact-q mode, optional)
    nbytes: int  # the copies' bytes (the queue's memory bound)
    tails: NDArray[np.float64] | None = None  # (2, n) draft_tail, target_tail (NaN: unknown)
    capped: bool | None = None  # the request's end or token limit capped the draft (None: unknown)


_Head = tuple[str, int, str, int, NDArray[Any], NDArray[Any], int]
"""A checked round's first seven :class:`_Round` fields (request_id … accepted), either mode."""


@dataclass(frozen=True)
class _Rows:
    """One round's rows as CSR arrays: row i's candidates are ``[offsets[i], offsets[i + 1])``."""

    lengths: NDArray[np.int64]  # (n,)
    cand_ids: NDArray[np.int64]  # (nnz,)
    draft_logprobs: NDArray[np.float64]  # (nnz,)
    target_probs: NDArray[np.float64]  # (nnz,)
    emitted_q: NDArray[np.float64] | None  # (nnz,); None in logits mode (computed per batch)


class Recorder:
    """Record verification rounds as a schema-v1 position-trace archive (module docstring).

    Parameters
    ----------
    path : str or Path
        The archive: a folder for the ``*-dir`` formats (TraceWriter's target).
    logging_arm : str
        The arm the engine drafts with (docs/commands.md#arms), e.g. ``"top32:t0.7@5"``,
        ``"greedy@3"``; written canonically in every row. Its depth bounds n per round.
    top_k : int
        Candidates kept per position in logits mode (the drafted id is added when outside them).
    sample : float
        Fraction of requests recorded, in (0, 1], by request-id hash (:func:`sample_keeps`).
    queue_rounds : int
        Capacity of the queue, in rounds (≥ 1).
    queue_bytes : int
        Capacity of the queue in bytes of the copied arrays (default 256 MiB): a round that
        would pass it finds the queue full. It bounds the memory of logits mode, whose rounds
        hold two (n, V) arrays (1.3 MB at n = 5, V = 32,000 in float32).
    mode : {"new", "replace", "append"}
        TraceWriter mode; ``"append"`` with one ``writer_id`` per process or rank.
    writer_id : str, optional
        TraceWriter writer id (append).
    format : str
        TraceWriter format (``"parquet-dir"`` by default).
    drafter, engine : str, optional
        Notes for the manifest, e.g. ``"point-mass (ngram)"``, ``"transformers 5.24.0"``.
    tails : bool
        Write schema v2's ``draft_tail`` and ``target_tail`` columns (docs/inputs.md): the
        engine's mass outside each position's candidates, given per round in exact-q mode
        (``round(..., draft_tail=, target_tail=)``: ``emitted_q`` is then the engine's law on the
        candidates, not renormalised), null where not given. False (the default) writes schema v1.
    manifest_extra : callable, optional
        Returns more keys for the manifest's ``capture`` object, called at each commit (on the
        background thread): an adapter's own counts (the vLLM plugin's draft mass outside the
        candidates).
    compression : str, optional
        TraceWriter compression (Parquet: lz4 by default).
    shard_rows : int
        Rows per shard (cut at a round boundary); the background thread buffers up to one shard.
    commit_rounds, commit_seconds, commit_idle_seconds : int or None, float or None
        Periodic commits: the background thread puts the rounds written so far in place, with
        the manifest, every ``commit_rounds`` rounds or ``commit_seconds`` seconds, or once no
        round has come for ``commit_idle_seconds``, whichever comes first (defaults
        :data:`COMMIT_ROUNDS`, :data:`COMMIT_SECONDS`, :data:`COMMIT_IDLE_SECONDS`; None turns
        that trigger off, all None commits at close only). A killed process loses at most the
        rounds since the last commit; an engine that finished its work and idles has committed
        everything before it is stopped. Not with ``mode="replace"`` (it commits at close).
    logger : logging.Logger, optional
        Where the first bad round's WARNING and a failure's ERROR line go (the engine's log):
        the ``specreplay.capture`` logger (:data:`LOGGER`) by default.

    Attributes
    ----------
    arm : Arm
        The parsed logging arm (adapters read its depth and policy).
    top_k, sample, path, drafter, engine
        The arguments, as given (``path`` a Path).

    Raises
    ------
    SpecReplayError
        On a bad argument (one line naming it), or when the path refuses the mode.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        logging_arm: str,
        top_k: int = 32,
        sample: float = 1.0,
        queue_rounds: int = 4096,
        queue_bytes: int = 256 * 2**20,
        mode: str = "new",
        writer_id: str | None = None,
        format: str = "parquet-dir",
        drafter: str | None = None,
        engine: str | None = None,
        compression: str | None = None,
        shard_rows: int = _SHARD_ROWS,
        commit_rounds: int | None = COMMIT_ROUNDS,
        commit_seconds: float | None = COMMIT_SECONDS,
        commit_idle_seconds: float | None = COMMIT_IDLE_SECONDS,
        manifest_extra: Callable[[], dict[str, Any]] | None = None,
        tails: bool = False,
        logger: logging.Logger | None = None,
    ) -> None:
        self.arm: Arm = parse_arm(logging_arm)
        _check_int("top_k", top_k, 1)
        _check_int("queue_rounds", queue_rounds, 1)
        _check_int("queue_bytes", queue_bytes, 1)
        _check_int("shard_rows", shard_rows, 1)
        self.commit_rounds, self.commit_seconds, self.commit_idle_seconds = _commit_settings(
            commit_rounds, commit_seconds, commit_idle_seconds
        )
        self.manifest_extra = manifest_extra
        self.tails = bool(tails)
        self.logger = logger if logger is not None else logging.getLogger(LOGGER)
        _check_sample(sample)
        _check_top_k(self.arm, top_k)
        if format in FORMATS and not format.endswith("-dir"):
            raise SpecReplayError(
                f"Recorder: format={format!r} is a single file; a recorder writes a folder "
                "(parquet-dir, ipc-dir or jsonl-dir) whose CAPTURE.json carries its counts"
            )
        self.path = Path(path)
        self.top_k = int(top_k)
        self.sample = float(sample)
        self.drafter = drafter
        self.engine = engine
        self._threshold = sample_threshold(self.sample)
        self._writer = TraceWriter(
            self.path,
            format=format,
            mode=mode,
            writer_id=writer_id,
            compression=compression,
            shard_rows=shard_rows,
            shard_bytes=_SHARD_BYTES,
        )
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_rounds)
        self._queue_bytes = int(queue_bytes)
        # bytes queued = _bytes_in (written by the calling thread only) - _bytes_out (by the
        # background thread only): two single-writer counters need no lock
        self._bytes_in = 0
        self._bytes_out = 0
        self._init_state()
        self._start()

    def _init_state(self) -> None:
        """Set the counters and sets of both threads (each written by one thread only)."""
        self._keep: dict[str, bool] = {}  # request id -> sampled (the cached hash decision)
        self._last: dict[str, int] = {}  # sampled request id -> its last round offered
        self._stopped: set[str] = set()  # stopped by a full queue (calling thread)
        self._stopped_bad: set[str] = set()  # stopped by a refused call (calling thread)
        self._bad_stopped: set[str] = set()  # stopped by a round breaking a rule (background)
        self._incomplete: list[str] = []
        # bad rounds: each counter has one writing thread (the calling one, or the background one)
        self._bad_calls = 0
        self._after_bad_calls = 0
        self._bad_rows = 0
        self._after_bad_rows = 0
        self._bad_incomplete = 0
        self._row_reasons: dict[str, int] = {}
        self._first_bad = ""
        self._bad_lock = threading.Lock()  # the first bad round is logged once, by either thread
        self._n_sampled = 0
        self._offered = 0
        self._dropped = 0
        self._recorded = 0
        self._rows = 0
        self._error: BaseException | None = None
        self._closed = False
        self._close_lock = threading.Lock()
        self._one_numba_thread = False  # set_num_threads(1) called on the background thread
        self._since_commit = 0  # rounds written since the last commit (background thread)
        self._last_commit = time.monotonic()
        self._last_write = self._last_commit  # when the last batch was written

    def _start(self) -> None:
        """Start the background thread; close at the process's end; disown in a fork child."""
        self._thread = threading.Thread(target=self._run, name="specreplay-recorder", daemon=True)
        self._thread.start()
        atexit.register(self._close_quietly)  # the engine's shutdown never sees a failure raised
        # a child that multiprocessing started by fork ends in os._exit: Python 3.12 runs no
        # atexit handler there, only multiprocessing's finalizers (util._exit_function)
        multiprocessing.util.Finalize(self, self._close_quietly, exitpriority=10)
        _LIVE.add(self)
        if not _FORK_HOOK:
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _FORK_HOOK.append(True)

    def _close_quietly(self) -> None:
        """Close at a process's end or a ``with`` block's (a failure was logged as it happened)."""
        with contextlib.suppress(Exception):
            self.close()

    def _disown(self) -> None:
        """Close without writing (in a forked child: the thread and staged run are the parent's)."""
        self._closed = True
        self._close_lock = threading.Lock()  # the parent's thread may have held it at the fork

    # -- the calling thread ----------------------------------------------------------------

    def sampled(self, request_id: str) -> bool:
        """Tell whether this request is recorded (hash sample, not stopped by a full queue).

        False also once the recorder is closed or has failed.

        Cheap (one dict lookup once the id was seen): adapters call it first and skip building
        tensors when it is False.
        """
        try:
            keep = self._keep[request_id]
        except (KeyError, TypeError):  # a new id (or an unhashable one: refused by _decide)
            keep = self._decide(request_id)
        return (
            keep
            and request_id not in self._stopped
            and request_id not in self._stopped_bad
            and request_id not in self._bad_stopped
            and not self._closed
            and self._error is None
        )

    def _decide(self, request_id: str) -> bool:
        if not isinstance(request_id, str):
            raise SpecReplayError(f"Recorder: request_id {request_id!r} should be a str")
        keep = self._threshold > 2**64 - 1 or sample_keeps(request_id, self.sample)
        self._keep[request_id] = keep
        if keep:
            self._n_sampled += 1
        return keep

    def round(
        self,
        request_id: str,
        round: int,
        drafted_ids: Any,
        target_probs: Any,
        accepted: Any,
        *,
        family: str = "",
        context_tokens: int = 0,
        draft_logits: Any = None,
        cand_ids: Any = None,
        emitted_q: Any = None,
        draft_logprobs: Any = None,
        draft_tail: Any = None,
        target_tail: Any = None,
        capped: bool | None = None,
    ) -> bool:
        """Queue one verification round; return False when it is not recorded.

        Parameters
        ----------
        request_id : str
            The request (the archive's cluster).
        round : int
            0, 1, 2 … per request, increasing.
        drafted_ids : int array-like, (n,)
            Tokens drafted this round, 1 ≤ n ≤ the logging arm's depth.
        target_probs : float array-like, (n, V) or (n, K)
            Target probabilities at positions 1..n: the full vocabulary, or (exact-q mode) aligned
            with ``cand_ids`` (taken as aligned whenever its width is K).
        accepted : int or bool array-like (n,)
            Leading drafts accepted (0..n), or the per-position decisions (a True after a False
            is an error).
        family : str
            Prompt family (constant within a request).
        context_tokens : int
            Target context length at the start of the round.
        draft_logits : float array-like, (n, V), optional
            Logits mode: the drafter's full-vocabulary logits at temperature 1.
        cand_ids : int array-like, (n, K), optional
            Exact-q mode: the candidate ids (the drafted id among them).
        emitted_q : float array-like, (n, K), optional
            Exact-q mode: the law the engine sampled from.
        draft_logprobs : float array-like, (n, K), optional
            Exact-q mode: full-vocabulary log-probabilities at temperature 1 of ``cand_ids``;
            ``log(emitted_q)`` when omitted.
        draft_tail, target_tail : float array-like, (n,), optional
            Schema v2 (``tails=True``): the laws' mass outside ``cand_ids``.
        capped : bool, optional
            Schema v2's mark (issue 16): the request's end or token limit capped this round's
            draft length (True), or not (False); None: unknown (see :func:`_with_mark`).

        Returns
        -------
        bool
            True: queued (the background thread may still drop it as a bad round: module
            docstring). False: not sampled, stopped by a full queue or a bad round (this round
            may be the one), a refused call, closed, or stopped on a background failure.

        Never raises: a bad call (shapes, ids, round order, arrays that cannot be copied) is a
        bad round (:data:`BAD_CALL`, module docstring).
        """
        offered = False
        try:
            if not (offered := self._offer(request_id)):
                return False
            where, head = self._head(
                request_id, round, drafted_ids, target_probs, accepted, family, context_tokens
            )
            if draft_logits is not None:
                item = _logits_round(where, head, draft_logits, cand_ids, emitted_q, draft_logprobs)
            else:
                item = _exact_round(where, head, cand_ids, emitted_q, draft_logprobs)
            item = _with_mark(self._with_tails(item, where, draft_tail, target_tail), where, capped)
        except Exception as exc:  # the engine first: a bad call is counted, never raised
            self._offered += not offered  # an id that is not a str: counted, nothing to stop
            self._bad_call(request_id if offered else None, exc)
            return False
        return self._enqueue(item)

    def _bad_call(self, request_id: str | None, exc: BaseException) -> None:
        """Count a refused call as a bad round; stop its request (calling thread)."""
        self._bad_calls += 1
        if request_id is not None and request_id not in self._stopped_bad:
            self._stopped_bad.add(request_id)
            if len(self._incomplete) < INCOMPLETE_IDS_LISTED:
                self._incomplete.append(request_id)
        self._note_bad(_one_line(exc))

    def _note_bad(self, what: str) -> None:
        """Keep the first bad round and log it, once (either thread)."""
        with self._bad_lock:
            if self._first_bad:
                return
            self._first_bad = what
        with contextlib.suppress(Exception):  # a logging failure is not the engine's
            self.logger.warning(
                "specreplay recorder %s: dropped a bad round, recording goes on: %s. Its "
                "request keeps its earlier rounds and records no later one; later bad rounds "
                "are counted by reason in CAPTURE.json (not logged); specreplay validate "
                "refuses a capture with more than 1%% of bad rounds (an engine bug?)",
                self.path,
                what,
            )

    def _offer(self, request_id: str) -> bool:
        """Count a round of a sampled, open request as offered; False: not recorded."""
        try:
            keep = self._keep[request_id]
        except (KeyError, TypeError):  # a new id (or an unhashable one: refused by _decide)
            keep = self._decide(request_id)
        if not keep or self._closed or self._error is not None:
            return False
        self._offered += 1
        if request_id in self._stopped:
            self._dropped += 1
            return False
        if request_id in self._stopped_bad or request_id in self._bad_stopped:
            self._after_bad_calls += 1
            return False
        return True

    def _with_tails(self, item: _Round, where: str, draft_tail: Any, target_tail: Any) -> _Round:
        """Return ``item`` with its tails checked and copied: (2, n) in [0, 1], NaN: not given."""
        if draft_tail is None and target_tail is None:
            return item
        if not self.tails:
            raise SpecReplayError(
                f"{where}: draft_tail/target_tail given to a recorder made without tails=True "
                "(schema v1)"
            )
        n = item.drafted.shape[0]
        out = np.full((2, n), np.nan)
        given = (("draft_tail", draft_tail), ("target_tail", target_tail))
        for i, (name, value) in enumerate(given):
            if value is None:
                continue
            t = _copy(value, name, where).astype(np.float64, copy=False)
            if t.shape != (n,) or not (np.isfinite(t).all() and (t >= 0).all() and (t <= 1).all()):
                raise SpecReplayError(f"{where}: {name} should be {n} numbers in [0, 1]")
            out[i] = t
        return item._replace(tails=out)

    def _head(
        self,
        request_id: str,
        round: Any,
        drafted_ids: Any,
        target_probs: Any,
        accepted: Any,
        family: str,
        context_tokens: int,
    ) -> tuple[str, _Head]:
        """Check the round number and the arguments of either mode; copy the arrays.

        Returns ``where`` (the messages' prefix) and the round's first seven fields (a plain
        tuple: the calling thread's cost).
        """
        last = self._last.get(request_id, -1)
        if isinstance(round, bool) or not isinstance(round, (int, np.integer)) or round <= last:
            raise SpecReplayError(
                f"Recorder: request {request_id!r}: round {round!r} after round {last} (rounds "
                "are integers 0, 1, 2 ... increasing per request)"
            )
        rnd = int(round)
        where = f"Recorder: request {request_id!r} round {rnd}"
        drafted = _copy(drafted_ids, "drafted_ids", where)
        n = drafted.shape[0] if drafted.ndim == 1 else 0
        if drafted.ndim != 1 or n < 1 or drafted.dtype.kind not in "iu":
            raise SpecReplayError(
                f"{where}: drafted_ids should be integers of shape (n,) with n >= 1, got "
                f"{drafted.dtype} {drafted.shape}"
            )
        if n > self.arm.depth:
            raise SpecReplayError(
                f"{where}: {n} drafted tokens, more than the logging arm's depth "
                f"({self.arm.canonical})"
            )
        if not isinstance(family, str):
            raise SpecReplayError(f"{where}: family {family!r} should be a str")
        if isinstance(context_tokens, bool) or not isinstance(context_tokens, (int, np.integer)):
            raise SpecReplayError(f"{where}: context_tokens {context_tokens!r} should be an int")
        n_acc = _accepted(accepted, n, where)
        target = _copy(target_probs, "target_probs", where)
        if target.ndim != 2 or target.shape[0] != n or target.dtype.kind != "f":
            raise SpecReplayError(
                f"{where}: target_probs should be floats of shape (n={n}, V or K), got "
                f"{target.dtype} {target.shape}"
            )
        return where, (request_id, rnd, family, int(context_tokens), drafted, target, n_acc)

    def _enqueue(self, item: _Round) -> bool:
        """Queue a checked round; a full queue stops its request (returns False, never blocks)."""
        self._last[item.request_id] = item.round
        try:
            if self._bytes_in - self._bytes_out + item.nbytes > self._queue_bytes:
                raise queue.Full
            self._queue.put_nowait(item)
        except queue.Full:
            self._stopped.add(item.request_id)
            if len(self._incomplete) < INCOMPLETE_IDS_LISTED:
                self._incomplete.append(item.request_id)
            self._dropped += 1
            return False
        self._bytes_in += item.nbytes
        return True

    # -- counts, close ---------------------------------------------------------------------

    @property
    def counts(self) -> CaptureCounts:
        """The live counters (rounds queued but not yet turned into rows are not recorded yet)."""
        return CaptureCounts(
            requests_seen=len(self._keep),
            requests_sampled=self._n_sampled,
            requests_incomplete=len(self._stopped) + len(self._stopped_bad) + self._bad_incomplete,
            incomplete_ids=tuple(self._incomplete[:INCOMPLETE_IDS_LISTED]),
            rounds_offered=self._offered,
            rounds_recorded=self._recorded,
            rounds_dropped_queue_full=self._dropped,
            rows=self._rows,
            rounds_dropped_bad=self._bad_calls + self._bad_rows,
            rounds_dropped_after_bad=self._after_bad_calls + self._after_bad_rows,
            dropped_reasons=tuple(sorted(self._reasons().items())),
            first_bad=self._first_bad,
        )

    def _reasons(self) -> dict[str, int]:
        """Bad rounds by reason (a copy: the background thread adds to its dict)."""
        out = dict(self._row_reasons)
        if self._bad_calls:
            out[BAD_CALL] = out.get(BAD_CALL, 0) + self._bad_calls
        return out

    @property
    def failure(self) -> str | None:
        """Why recording stopped (a write that failed: a full disk …), or None."""
        err = self._error
        return None if err is None else f"{type(err).__name__}: {_one_line(err)}"

    def manifest(self) -> dict[str, Any]:
        """Return the ``capture`` object of this writer's record in ``CAPTURE.json``."""
        return {
            "logging_arm": self.arm.canonical,
            "top_k": self.top_k,
            "sample": self.sample,
            "sample_rule": "blake2b-64(request_id) < round(sample * 2**64)",
            "drafter": self.drafter,
            "engine": self.engine,
            "counts": self.counts.as_json(),
            **(self.manifest_extra() if self.manifest_extra is not None else {}),
        }

    def close(self) -> CaptureCounts:
        """Drain the queue, write the rows and commit the archive; return the counts.

        Idempotent (a second call returns the counts, or raises the same error again). The
        process's exit and a ``with`` block's end call it without raising (the failure was
        logged when it happened, and :attr:`failure` holds it).

        Raises
        ------
        SpecReplayError
            When recording failed (a write that failed, a background failure): what earlier
            commits put in ``path`` stays, nothing more is written.
        """
        with self._close_lock:
            if not self._closed:
                self._closed = True
                atexit.unregister(self._close_quietly)
                self._queue.put(_STOP)  # the thread keeps draining, even after a failure
                self._thread.join()
                if self._error is None:
                    before = self._writer.capture
                    self._writer.capture = self.manifest()
                    try:
                        if self.commits:  # a failing write leaves the last commit's counts
                            self._writer.commit()
                        self._writer.close()
                    except Exception as exc:  # reported as the recorder's error
                        self._writer.capture = before
                        self._fail(exc)
                else:
                    self._writer.abort(f"{type(self._error).__name__}: {_one_line(self._error)}")
        if self._error is not None:
            kept = (
                "wrote nothing"
                if self.commits == 0
                else f"kept only its {self.commits} earlier commits ("
                + (
                    "CAPTURE.json marks the writer failed)"
                    if self._writer.marked_failed
                    else "CAPTURE.json could not be updated: it still says the writer is open)"
                )
            )
            raise SpecReplayError(
                f"{self.path}: the recorder failed on its background thread and {kept}: "
                f"{type(self._error).__name__}: {_one_line(self._error)}"
            ) from self._error
        return self.counts

    def __enter__(self) -> Recorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:  # a failure was logged when it happened: the engine's code goes on
            self._close_quietly()
            return
        try:  # the engine's failure is not the archive's: commit what was recorded, re-raise
            self.close()
        except SpecReplayError as err:
            exc.add_note(str(err))

    # -- the background thread -------------------------------------------------------------

    def _run(self) -> None:
        """Turn queued rounds into frames and hand them to the TraceWriter until ``_STOP``.

        Commits periodically (``commit_rounds``, ``commit_seconds``): a wait for the queue
        ends at the next commit time, so an idle engine's rounds are committed too.
        """
        q = self._queue
        while True:
            batch: list[_Round] = []
            try:
                item = q.get(timeout=self._until_commit())
            except queue.Empty:
                self._maybe_commit()
                continue
            stop = item is _STOP
            if not stop:
                batch.append(item)
                while len(batch) < _BATCH_ROUNDS:
                    try:
                        item = q.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stop = True
                        break
                    batch.append(item)
            if batch and self._error is None:
                try:
                    self._write(batch)
                except BaseException as exc:  # logged now, raised by close()
                    self._fail(exc)
            # the copies are freed with the batch; only this thread writes _bytes_out
            self._bytes_out += sum(r.nbytes for r in batch)
            if stop:
                return
            self._maybe_commit()

    def _until_commit(self) -> float | None:
        """Seconds until the next timed or idle commit (None: wait for the next round)."""
        if self._since_commit == 0 or self._error is not None:
            return None
        due = [
            start + wait
            for start, wait in (
                (self._last_commit, self.commit_seconds),
                (self._last_write, self.commit_idle_seconds),
            )
            if wait is not None
        ]
        return max(0.0, min(due) - time.monotonic()) if due else None

    def _maybe_commit(self) -> None:
        """Commit when ``commit_rounds`` rounds or ``commit_seconds`` seconds have passed."""
        if self._since_commit == 0 or self._error is not None:
            return
        due_rounds = self.commit_rounds is not None and self._since_commit >= self.commit_rounds
        now = time.monotonic()
        due_time = (
            self.commit_seconds is not None and now - self._last_commit >= self.commit_seconds
        )
        due_idle = (
            self.commit_idle_seconds is not None
            and now - self._last_write >= self.commit_idle_seconds
        )
        if not (due_rounds or due_time or due_idle):
            return
        before = self._writer.capture  # the counts of what the last commit put in place
        try:
            self._writer.capture = self.manifest()
            self._writer.commit()
        except BaseException as exc:  # logged now, raised by close()
            self._writer.capture = before  # the manifest keeps counting the committed rounds
            self._fail(exc)
        self._since_commit = 0
        self._last_commit = time.monotonic()

    @property
    def commits(self) -> int:
        """Commits made so far (periodic ones, and the final one once closed)."""
        return self._writer.commits

    def _fail(self, exc: BaseException) -> None:
        """Stop recording on a failure: drop the staged run now, say so at once (background).

        The staged shards are removed at once (on a full disk that frees their space, so the
        manifest can be marked failed); what earlier commits put in ``path`` stays.
        """
        if self._error is not None:
            return
        self._error = exc
        with contextlib.suppress(Exception):  # the failure being reported comes first
            self._writer.abort(f"{type(exc).__name__}: {_one_line(exc)}")
        with contextlib.suppress(Exception):
            self.logger.error("%s", self._failure_line(exc))

    def _failure_line(self, exc: BaseException) -> str:
        """Return the one line said in the engine's log when recording stops."""
        n = self.commits
        if n == 0:
            kept = "nothing of this writer's run was committed"
        elif self._writer.marked_failed:
            kept = f"its {n} commits stay readable (CAPTURE.json marks this writer failed)"
        else:
            kept = (
                f"its {n} commits stay readable (CAPTURE.json could not be updated: it still "
                "says this writer is open)"
            )
        errno = disk_errno(exc)
        what = (
            "free space, or raise the file-size limit (ulimit -f), then record into a new folder"
            if errno in (28, 27)
            else "fix the cause, then record into a new folder"
        )
        return (
            f"specreplay recorder {self.path}: recording stopped (the engine goes on): "
            f"{_cause(exc)}; {kept}; {what} (or append with a new writer_id); specreplay "
            "validate reads the committed rounds"
        )

    def _write(self, batch: list[_Round]) -> None:
        """Check a batch's rounds, drop the bad ones, write the rest (background thread)."""
        kept = []
        for r in batch:  # the later rounds of a request a bad round stopped are not recorded
            if r.request_id in self._bad_stopped:
                self._after_bad_rows += 1
            else:
                kept.append(r)
        if not kept:
            return
        frame = self._frame(kept)
        if frame is None:
            return
        rounds = int((frame["position"] == 1).sum())  # one row at position 1 per round
        self._writer.append_frame(frame)
        self._recorded += rounds
        self._rows += frame.height
        self._since_commit += rounds
        self._last_write = time.monotonic()

    def _frame(self, batch: list[_Round]) -> pl.DataFrame | None:
        """Build the rows of a batch of rounds as one frame, without its bad rounds.

        Each round's rows are checked with validate's row rules
        (:func:`~specreplay.replay.archive.rowrules.check_rows_python`); a round that breaks
        one, or whose ids cannot be written (a token id beyond int64, cand_ids outside
        target_probs' columns), is dropped with the later rounds of its request (counted by
        reason). None when no round is left.
        """
        try:
            cols = self._columns(batch)
        except SpecReplayError:  # a round's ids cannot be written: find it, one at a time
            cut: dict[str, int] = {}
            for r in batch:
                if r.round >= cut.get(r.request_id, r.round + 1):
                    continue
                try:
                    self._columns([r])
                except SpecReplayError as exc:
                    cut[r.request_id] = r.round
                    self._drop(r, _IDS, f": {_one_line(exc)}")
            return self._kept_frame(batch, cut)
        code, detail = rowrules.check_rows_python(
            cols.offsets, cols.cand, cols.lp, cols.tp, cols.q, cols.drafted, True, True,
            cols.tails,
        )  # fmt: skip
        if not code.any():
            return _frame_of(self.arm, cols)
        cut = {}
        row = 0
        for r in cols.batch:
            n = r.drafted.shape[0]
            bad = np.flatnonzero(code[row : row + n])
            if bad.size and r.round < cut.get(r.request_id, r.round + 1):
                j = int(bad[0])
                c = int(code[row + j])
                value = "" if math.isnan(detail[row + j]) else f" ({detail[row + j]:.6g})"
                cut[r.request_id] = r.round
                self._drop(r, rowrules.ROW_RULES[c], f" position {j + 1}{value}")
            row += n
        return self._kept_frame(batch, cut)

    def _kept_frame(self, batch: list[_Round], cut: dict[str, int]) -> pl.DataFrame | None:
        """Return the frame of ``batch`` without each request's rounds from its bad one on."""
        kept = []
        for r in batch:
            at = cut.get(r.request_id)
            if at is None or r.round < at:
                kept.append(r)
            elif r.round > at:
                self._after_bad_rows += 1
        return self._frame(kept) if kept else None

    def _drop(self, r: _Round, reason: str, detail: str) -> None:
        """Count a bad round by reason; stop its request (background thread)."""
        self._bad_rows += 1
        self._row_reasons[reason] = self._row_reasons.get(reason, 0) + 1
        rid = r.request_id
        if rid not in self._bad_stopped:
            self._bad_stopped.add(rid)
            if rid not in self._stopped and rid not in self._stopped_bad:
                self._bad_incomplete += 1
                if len(self._incomplete) < INCOMPLETE_IDS_LISTED:
                    self._incomplete.append(rid)
        self._note_bad(f"request {rid!r} round {r.round}{detail}: {reason}")

    def _columns(self, batch: list[_Round]) -> _Cols:
        """Compute a batch's flat columns: candidates, laws, tails (the logging arm's law)."""
        if all(r.logits is None for r in batch):  # exact-q: one concatenation per column
            rows = [_exact_rows(batch)]
        else:
            if not self._one_numba_thread:  # this thread's count only (module docstring)
                import numba  # logits mode only, on this thread (module docstring)

                numba.set_num_threads(1)
                self._one_numba_thread = True
            rows = [
                _logits_rows(r, self.top_k) if r.logits is not None else _exact_rows([r])
                for r in batch
            ]
        lengths = np.concatenate([r.lengths for r in rows])
        offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        cand = np.concatenate([r.cand_ids for r in rows])
        lp = np.concatenate([r.draft_logprobs for r in rows])
        tp = np.concatenate([r.target_probs for r in rows])
        with np.errstate(invalid="ignore"):  # a NaN law stays NaN: the row check drops it
            q = _emitted(self.arm, rows, offsets, lp)
            if self.tails:  # logits mode knows both laws over the whole vocabulary
                batch = _logits_tails(self.arm, batch, rows, offsets, q)
        tails = (
            np.concatenate(
                [
                    r.tails if r.tails is not None else np.full((2, r.drafted.shape[0]), np.nan)
                    for r in batch
                ],
                axis=1,
            )
            if self.tails
            else np.zeros((2, 0))
        )
        drafted = _flat_ints([r.drafted for r in batch])
        return _Cols(batch, lengths, offsets, cand, lp, tp, q, tails, drafted)


class _Cols(NamedTuple):
    """A batch's flat columns (:meth:`Recorder._columns`): CSR lists and per-row values."""

    batch: list[_Round]  # the rounds (logits rounds with their tails)
    lengths: NDArray[np.int64]  # (rows,) candidates per row
    offsets: NDArray[np.int64]  # (rows + 1,)
    cand: NDArray[np.int64]  # (nnz,)
    lp: NDArray[np.float64]  # (nnz,) draft_logprobs
    tp: NDArray[np.float64]  # (nnz,) target_probs
    q: NDArray[np.float64]  # (nnz,) emitted_q
    tails: NDArray[np.float64]  # (2, rows) draft_tail, target_tail (NaN: unknown); (2, 0): v1
    drafted: NDArray[np.int64]  # (rows,)


_IDS = "ids out of range (a token id beyond int64, or cand_ids outside target_probs' columns)"
"""The reason counted for a round whose ids cannot be written."""


def _frame_of(arm: Arm, cols: _Cols) -> pl.DataFrame:
    """Build the rows of checked columns as one columnar frame."""
    batch, lengths, offsets = cols.batch, cols.lengths, cols.offsets
    ns = np.array([r.drafted.shape[0] for r in batch], dtype=np.int64)
    n_acc = np.array([r.accepted for r in batch], dtype=np.int64)
    start = np.repeat(np.cumsum(ns) - ns, ns)
    position = np.arange(lengths.shape[0], dtype=np.int64) - start + 1
    tails = cols.tails.shape[1] > 0
    return pl.DataFrame(
        {
            "request_id": pl.Series([r.request_id for r in batch]).gather(_repeat_idx(ns)),
            "family": pl.Series([r.family for r in batch]).gather(_repeat_idx(ns)),
            "context_tokens": np.repeat([r.context_tokens for r in batch], ns).astype(np.int64),
            "round": np.repeat([r.round for r in batch], ns).astype(np.int64),
            "position": position,
            "cand_ids": _list_series(cols.cand, offsets),
            "draft_logprobs": _list_series(cols.lp, offsets),
            "target_probs": _list_series(cols.tp, offsets),
            "drafted_id": cols.drafted,
            "accepted": position <= np.repeat(n_acc, ns),
            "logging_arm": pl.Series([arm.canonical]).gather(
                np.zeros(lengths.shape[0], dtype=np.int64)
            ),
            "emitted_q": _list_series(cols.q, offsets),
            **(_tail_columns(batch) if tails else {}),
            "capped": pl.Series("capped", [r.capped for r in batch], dtype=pl.Boolean).gather(
                _repeat_idx(ns)
            ),
        }
    )


def _cause(exc: BaseException) -> str:
    """Say a failure's cause in words (a full disk, a size limit, else the exception)."""
    errno = disk_errno(exc)
    if errno == 28:
        return "no space left on device (ENOSPC, errno 28)"
    if errno == 27:
        return "file too large: the file-size limit was reached (EFBIG, errno 27)"
    return f"{type(exc).__name__}: {_one_line(exc)}"


def _with_mark(item: _Round, where: str, capped: Any) -> _Round:
    """Return ``item`` with its ``capped`` mark (issue 16; None: unknown, the default).

    True: the request's end or its token limit capped the round's draft length (fewer drafts
    than the depth for that reason alone); False: the drafter drafted what it chose. The default
    replay leaves capped rounds out (``--short-rounds capped``).
    """
    if capped is None:
        return item
    if not isinstance(capped, bool | np.bool_):
        raise SpecReplayError(f"{where}: capped={capped!r}: True, False or None")
    return item._replace(capped=bool(capped))


# ------------------------------------------------------------------------------------------------
# background work: candidates, laws, columns
# ------------------------------------------------------------------------------------------------


def _exact_rows(batch: list[_Round]) -> _Rows:
    """Exact-q mode: the given rows of a batch, flattened (one concatenation per column).

    A target spanning the vocabulary (width ≠ K) is gathered at ``cand_ids``.
    """
    cands = [r.cand_ids for r in batch if r.cand_ids is not None]
    qs = [r.emitted_q for r in batch if r.emitted_q is not None]
    assert len(cands) == len(qs) == len(batch)
    lengths = np.repeat([c.shape[1] for c in cands], [c.shape[0] for c in cands])
    cand = _flat_ints(cands)
    q = np.concatenate([x.ravel() for x in qs]).astype(np.float64, copy=False)
    if all(r.draft_logprobs is None for r in batch):
        with np.errstate(divide="ignore"):
            lp = np.log(q)
    else:
        with np.errstate(divide="ignore"):
            lps = [
                np.log(x.astype(np.float64)) if r.draft_logprobs is None else r.draft_logprobs
                for r, x in zip(batch, qs, strict=True)
            ]
        lp = np.concatenate([x.ravel() for x in lps]).astype(np.float64, copy=False)
    targets = []
    for r, c in zip(batch, cands, strict=True):
        t = r.target
        if t.shape[1] != c.shape[1]:
            if int(c.min()) < 0 or int(c.max()) >= t.shape[1]:
                raise SpecReplayError(
                    f"request {r.request_id!r} round {r.round}: cand_ids outside target_probs' "
                    f"{t.shape[1]} columns"
                )
            t = np.take_along_axis(t, c.astype(np.int64), axis=1)
        targets.append(t.ravel())
    tp = np.concatenate(targets).astype(np.float64, copy=False)
    return _Rows(lengths.astype(np.int64), cand, lp, tp, q)


def _flat_ints(arrays: list[NDArray[Any]]) -> NDArray[np.int64]:
    """Concatenate integer arrays as int64 (a uint64 id must fit: no silent wrap-around)."""
    out = np.concatenate([a.ravel() for a in arrays])
    if (out.dtype.kind == "u" and out.dtype.itemsize == 8) or out.dtype.kind not in "iu":
        # uint64 (or uint64 mixed with signed ids, which numpy promotes to float64)
        parts = [a.ravel() for a in arrays]
        for a in parts:
            if a.dtype.kind == "u" and a.size and int(a.max()) > np.iinfo(np.int64).max:
                raise SpecReplayError(f"token id {int(a.max())} does not fit an int64")
        out = np.concatenate([a.astype(np.int64) for a in parts])
    return out.astype(np.int64, copy=False)


def top_candidates(logits: NDArray[np.floating[Any]], k: int) -> NDArray[np.int64]:
    """Return the ``k`` ids of largest logit, by decreasing logit, ties to the lower id.

    >>> top_candidates(np.array([0.0, 2.0, 1.0, 2.0]), 3).tolist()
    [1, 3, 2]
    """
    v = logits.shape[0]
    if k >= v:
        return np.lexsort((np.arange(v), -logits)).astype(np.int64)
    part = np.argpartition(logits, v - k)[v - k :]  # the k largest, unordered
    threshold = logits[part].min()
    above = np.flatnonzero(logits > threshold)
    ties = np.flatnonzero(logits == threshold)[: k - above.shape[0]]  # ties to the lower id
    ids = np.concatenate([above, ties])
    return ids[np.lexsort((ids, -logits[ids]))].astype(np.int64)


def _logits_rows(r: _Round, top_k: int) -> _Rows:
    """Logits mode: top-k candidates (+ the drafted id), log-softmax at them, target gathered.

    The logits keep their dtype for the top-k (widening to float64 is exact and keeps the order
    and the ties); the log-sum-exp is float64, one row at a time (no float64 copy of (n, V)).
    """
    assert r.logits is not None
    logits, target = r.logits, r.target
    n = logits.shape[0]
    cands, lps, tps, lengths = [], [], [], np.empty(n, dtype=np.int64)
    for j in range(n):
        row = logits[j]
        mx = float(row.max())
        lse = mx + math.log(float(np.exp(np.subtract(row, mx, dtype=np.float64)).sum()))
        ids = top_candidates(row, top_k)
        d = int(r.drafted[j])
        if not (ids == d).any():
            ids = np.append(ids, np.int64(d))
        cands.append(ids)
        lps.append(row[ids].astype(np.float64) - lse)
        tps.append(target[j, ids].astype(np.float64))
        lengths[j] = ids.shape[0]
    return _Rows(lengths, np.concatenate(cands), np.concatenate(lps), np.concatenate(tps), None)


def _emitted(
    arm: Arm,
    rows: list[_Rows],
    offsets: NDArray[np.int64],
    lp: NDArray[np.float64],
) -> NDArray[np.float64]:
    """``emitted_q`` of a batch: given rows as given, logits-mode rows the arm's sampler law."""
    if all(r.emitted_q is not None for r in rows):
        return np.concatenate([r.emitted_q for r in rows if r.emitted_q is not None])
    # the replay's own law of the logging arm (docs/methods.md#arms-policy-and-quantizers):
    # policy_row per row, then the sampler's quantizer, so the archive's q^L is the replay's
    from specreplay.sim.policy import LawCache  # Numba: logits mode only, on this thread

    law = LawCache(offsets, lp).laws(arm).q_sampler.copy()
    start = 0
    for r in rows:
        m = int(r.lengths.sum())
        if r.emitted_q is not None:
            law[start : start + m] = r.emitted_q
        start += m
    return law


def _logits_tails(
    arm: Arm,
    batch: list[_Round],
    rows: list[_Rows],
    offsets: NDArray[np.int64],
    q: NDArray[np.float64],
) -> list[_Round]:
    """Return the logits rounds with their tails (schema v2); write their law on the candidates.

    The target's tail is 1 − Σ target_probs at the candidates. A truncated logging arm (greedy,
    or a top-k the candidates hold) has all its law on them: draft tail 0, ``q`` unchanged. An
    untruncated one's law is the whole vocabulary's: computed over every id (the package's law
    on the full row, one row at a time), ``q`` overwritten with it at the candidates (not
    renormalised) and the draft tail its rest. Exact-q rounds keep what they were given.
    """
    if all(r.logits is None for r in batch):  # exact-q only: rows is one block, tails as given
        return batch
    p = arm.policy
    truncated = p.greedy or p.top_k is not None
    out, at = [], 0
    for r, rw in zip(batch, rows, strict=True):
        n = r.drafted.shape[0]
        if r.logits is None:
            out.append(r)
            at += n
            continue
        tails = np.zeros((2, n))
        for j in range(n):
            a, b = int(offsets[at + j]), int(offsets[at + j + 1])
            cand = _row_cands(rw, j)
            tails[1, j] = max(0.0, 1.0 - float(r.target[j, cand].astype(np.float64).sum()))
            if not truncated:
                full = _full_law(arm, r.logits[j])
                q[a:b] = full[cand]
                tails[0, j] = max(0.0, 1.0 - float(full[cand].sum()))
        out.append(r._replace(tails=tails))
        at += n
    return out


def _row_cands(rw: _Rows, j: int) -> NDArray[np.int64]:
    """Return row ``j``'s candidate ids within one round's _Rows."""
    start = int(rw.lengths[:j].sum())
    return rw.cand_ids[start : start + int(rw.lengths[j])]


def _full_law(arm: Arm, logits: NDArray[Any]) -> NDArray[np.float64]:
    """Return the logging arm's sampler law over the whole vocabulary of one position."""
    from specreplay.sim.policy import LawCache  # Numba: logits mode only, on this thread

    row = logits.astype(np.float64)
    lp = row - (row.max() + np.log(np.exp(row - row.max()).sum()))
    offsets = np.array([0, row.shape[0]], dtype=np.int64)
    return np.asarray(LawCache(offsets, lp).laws(arm).q_sampler, dtype=np.float64).copy()


def _tail_columns(batch: list[_Round]) -> dict[str, pl.Series]:
    """Return the batch's draft_tail and target_tail columns (null where a round gave none)."""
    parts = [
        r.tails if r.tails is not None else np.full((2, r.drafted.shape[0]), np.nan) for r in batch
    ]
    both = np.concatenate(parts, axis=1)
    return {
        name: pl.Series(name, both[i], dtype=pl.Float64).fill_nan(None)
        for i, name in enumerate(("draft_tail", "target_tail"))
    }


def _repeat_idx(ns: NDArray[np.int64]) -> NDArray[np.int64]:
    return np.repeat(np.arange(ns.shape[0], dtype=np.int64), ns)


def _list_series(values: NDArray[Any], offsets: NDArray[np.int64]) -> pl.Series:
    """Build a polars List column from CSR arrays (no per-row Python objects)."""
    pa = importlib.import_module("pyarrow")  # untyped: imported as a module object
    return pl.Series(pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values)))


# ------------------------------------------------------------------------------------------------
# the calling thread's checks (Recorder.round)
# ------------------------------------------------------------------------------------------------


def _logits_round(
    where: str,
    head: _Head,
    draft_logits: Any,
    cand_ids: Any,
    emitted_q: Any,
    draft_logprobs: Any,
) -> _Round:
    """Logits mode: check the drafter's (n, V) logits against the round's head; copy them."""
    if cand_ids is not None or emitted_q is not None or draft_logprobs is not None:
        raise SpecReplayError(
            f"{where}: pass draft_logits (logits mode) or cand_ids + emitted_q (exact-q "
            "mode), not both"
        )
    request_id, rnd, family, context_tokens, drafted, target, n_acc = head
    n = drafted.shape[0]
    logits = _copy(draft_logits, "draft_logits", where)
    if logits.ndim != 2 or logits.shape[0] != n or logits.dtype.kind != "f":
        raise SpecReplayError(
            f"{where}: draft_logits should be floats of shape (n={n}, V), got "
            f"{logits.dtype} {logits.shape}"
        )
    if target.shape[1] != logits.shape[1]:
        raise SpecReplayError(
            f"{where}: target_probs has {target.shape[1]} columns, draft_logits "
            f"{logits.shape[1]} (logits mode needs both over the full vocabulary)"
        )
    if int(drafted.min()) < 0 or int(drafted.max()) >= logits.shape[1]:
        raise SpecReplayError(
            f"{where}: a drafted id is outside the vocabulary 0..{logits.shape[1] - 1}"
        )
    return _Round(
        request_id,
        rnd,
        family,
        context_tokens,
        drafted,
        target,
        n_acc,
        logits=logits,
        cand_ids=None,
        emitted_q=None,
        draft_logprobs=None,
        nbytes=drafted.nbytes + target.nbytes + logits.nbytes,
    )


def _exact_round(
    where: str,
    head: _Head,
    cand_ids: Any,
    emitted_q: Any,
    draft_logprobs: Any,
) -> _Round:
    """Exact-q mode: check the candidates, their law and log-probabilities; copy them.

    Each drafted id must be among its position's candidates.
    """
    if cand_ids is None or emitted_q is None:
        raise SpecReplayError(
            f"{where}: pass draft_logits (logits mode) or both cand_ids and emitted_q "
            "(exact-q mode)"
        )
    request_id, rnd, family, context_tokens, drafted, target, n_acc = head
    n = drafted.shape[0]
    cand = _copy(cand_ids, "cand_ids", where)
    if cand.ndim != 2 or cand.shape[0] != n or cand.shape[1] < 1 or cand.dtype.kind not in "iu":
        raise SpecReplayError(
            f"{where}: cand_ids should be integers of shape (n={n}, K >= 1), got "
            f"{cand.dtype} {cand.shape}"
        )
    q = _copy(emitted_q, "emitted_q", where)
    if q.shape != cand.shape or q.dtype.kind != "f":
        raise SpecReplayError(
            f"{where}: emitted_q should be floats of cand_ids' shape {cand.shape}, got "
            f"{q.dtype} {q.shape}"
        )
    lp = None
    if draft_logprobs is not None:
        lp = _copy(draft_logprobs, "draft_logprobs", where)
        if lp.shape != cand.shape or lp.dtype.kind != "f":
            raise SpecReplayError(
                f"{where}: draft_logprobs should be floats of cand_ids' shape {cand.shape}, "
                f"got {lp.dtype} {lp.shape}"
            )
    hit = cand == drafted[:, None]
    if not hit.any(axis=1).all():
        j = int(np.flatnonzero(~hit.any(axis=1))[0])
        raise SpecReplayError(
            f"{where}: drafted id {int(drafted[j])} at position {j + 1} is not among its cand_ids"
        )
    nbytes = drafted.nbytes + target.nbytes + cand.nbytes + q.nbytes
    return _Round(
        request_id,
        rnd,
        family,
        context_tokens,
        drafted,
        target,
        n_acc,
        logits=None,
        cand_ids=cand,
        emitted_q=q,
        draft_logprobs=lp,
        nbytes=nbytes + (lp.nbytes if lp is not None else 0),
    )


def _accepted(accepted: Any, n: int, where: str) -> int:
    """Return the number of leading accepted drafts (an int 0..n, or a bool (n,) prefix)."""
    if isinstance(accepted, (int, np.integer)) and not isinstance(accepted, (bool, np.bool_)):
        if not 0 <= accepted <= n:
            raise SpecReplayError(f"{where}: accepted={accepted} should be in 0..{n}")
        return int(accepted)
    a = np.asarray(accepted)
    if a.shape != (n,) or a.dtype != np.bool_:
        raise SpecReplayError(
            f"{where}: accepted should be an int 0..{n} or bools of shape ({n},), got "
            f"{a.dtype} {a.shape}"
        )
    n_acc = int(np.argmin(a)) if not a.all() else n
    if a[n_acc:].any():
        raise SpecReplayError(
            f"{where}: accepted {a.astype(int).tolist()} has a True after a False (the verifier "
            "stops at the first rejection)"
        )
    return n_acc


def _copy(value: Any, name: str, where: str) -> NDArray[Any]:
    """Copy an array argument into a new numpy array (a CPU tensor converts; a GPU one cannot)."""
    try:
        return np.array(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise SpecReplayError(
            f"{where}: {name} cannot be read as a numpy array ({_one_line(exc)}); move it to the "
            "CPU as float32/float64 (ids as integers) first"
        ) from None


def _check_top_k(arm: Arm, top_k: int) -> None:
    policy_k = arm.policy.top_k
    if policy_k is not None and policy_k > top_k:
        raise SpecReplayError(
            f"Recorder: logging arm {arm.canonical} keeps {policy_k} candidates, more than "
            f"top_k={top_k}: its law could not be written (raise top_k)"
        )


def _check_sample(sample: Any) -> None:
    if isinstance(sample, bool) or not isinstance(sample, (int, float)):
        raise SpecReplayError(f"Recorder: sample={sample!r} should be a number in (0, 1]")
    if not (math.isfinite(sample) and 0.0 < sample <= 1.0):
        raise SpecReplayError(f"Recorder: sample={sample!r} should be in (0, 1]")


def _commit_settings(
    rounds: int | None, seconds: float | None, idle: float | None
) -> tuple[int | None, float | None, float | None]:
    """Check the periodic-commit settings; return them (floats as float)."""
    if rounds is not None:
        _check_int("commit_rounds", rounds, 1)
    for name, value in (("commit_seconds", seconds), ("commit_idle_seconds", idle)):
        if value is not None and not (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value > 0
        ):
            raise SpecReplayError(f"Recorder: {name}={value!r} should be a number > 0 (or None)")
    return (
        rounds,
        None if seconds is None else float(seconds),
        None if idle is None else float(idle),
    )


def _check_int(name: str, value: Any, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise SpecReplayError(f"Recorder: {name}={value!r} should be an integer >= {lo}")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] if text else "(no message)"

"""Shard runners: who replays the shards of an archive (this process, or a Dask cluster).

A **runner** maps (the archive's files in sorted path order, the arms, the
:class:`~specreplay.replay.shard.ReplayOptions`, a progress callback) to an iterator of
:class:`~specreplay.replay.shard.ShardSums`, one per file, **in sorted path order**;
:meth:`OpenArchive.replay <specreplay.replay.engine.OpenArchive.replay>` folds them
(:func:`~specreplay.replay.shard.fold_shards`) and everything after the fold (the bootstrap,
intervals, law tests, plots) stays in this process. Figures are bit-identical whichever runner
replays the shards, because each shard's sums depend on that shard alone and the fold always runs
in sorted path order.

Design decisions:

- :func:`local_runner` replays the files one after the other, here. ``OpenArchive.replay``
  without a runner keeps its own loop (it goes on from the reader that read the first batch).
- :class:`DaskRunner` submits **one task per shard** (:func:`replay_task`, ``pure=False``, a key
  naming the file) as soon as it is called, then yields the results in sorted order as they
  complete: the fold starts with the first shard, and memory holds only the shards that came
  back early. The progress bar moves by each shard's positions when it comes back.
- A row error inside a worker is returned, not raised (:class:`ShardFailure`): the message is the
  same one line the local run gives, and it is raised when the fold reaches that shard, so the
  first failing shard in sorted order wins, as in a local run, and the tasks still running are
  cancelled. (Returning it also spares the worker's log a traceback for a user's bad row.)
- A worker that dies is the cluster's business: distributed reschedules its tasks on another
  worker (up to ``distributed.scheduler.allowed-failures`` deaths of the same task, 3 by default;
  then :class:`distributed.KilledWorker`, reported as a one-line error naming the shard).
- ``dask`` and ``distributed`` are imported only inside :func:`open_dask` (an optional extra:
  ``pip install 'specreplay[dask]'``); the local path and ``import specreplay`` never import them.
- ``--workers N`` starts a ``LocalCluster`` of N one-thread worker processes (spawned) with
  ``NUMBA_NUM_THREADS=1`` (numba ignores the nanny's ``OMP_NUM_THREADS``) and this process's
  Numba cache folder, and closes it after the run. Its dashboard listens on a port the system
  chooses (``dashboard_address=":0"``: ``None`` still binds the default 8787, and a busy 8787
  turns into an error), so two runs on one host never collide.
- ``--scheduler ADDRESS`` connects to a running cluster within :data:`CONNECT_TIMEOUT` seconds;
  its workers need specreplay installed (the same version: the cache key and the figures depend
  on it) and the archive at the same path.
- **Something that is not a Dask scheduler at ADDRESS** (an HTTP server, a port that accepts and
  never answers, one that answers garbage) must fail within that bound too, with one line.
  ``distributed.Client`` cannot promise it: its comm handshake (``distributed.comm.core.connect``)
  writes its greeting and then reads the peer's with no deadline (an HTTP server waits for a
  request line forever), and it reads the peer's 8-byte frame length and allocates that many bytes
  before reading them (garbage asks for exabytes: ``ArrayMemoryError``). So a ``tcp://`` address
  is first probed here (:func:`probe_scheduler`): a plain socket with a deadline reads the
  greeting a Dask scheduler sends first on every connection, at most
  :data:`HANDSHAKE_MAX_BYTES`, and decodes it; only a peer that sent one is handed to
  ``Client`` (with the time left). Other schemes (``tls://``, ``ucx://``, …) go to ``Client``
  directly.
"""

from __future__ import annotations

import importlib
import logging
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.sources import ArchiveFile
from specreplay.replay.shard import ReplayOptions, ShardSums, replay_shard
from specreplay.sim.arms import Arm

__all__ = [
    "CONNECT_TIMEOUT",
    "HANDSHAKE_MAX_BYTES",
    "DaskRunner",
    "Runner",
    "ShardFailure",
    "local_runner",
    "open_dask",
    "probe_scheduler",
    "replay_task",
]

CONNECT_TIMEOUT = 10.0
"""Seconds ``--scheduler ADDRESS`` waits for the scheduler to answer (probe and connection)."""

HANDSHAKE_MAX_BYTES = 1 << 16
"""The largest greeting the probe reads: a scheduler's is about 100 bytes (compression, Python
version, pickle protocol); a peer announcing more is not a Dask scheduler."""

INSTALL_HINT = "pip install 'specreplay[dask]'"


class Runner(Protocol):
    """Replays the shards of an archive; yields their sums in sorted path order."""

    def __call__(
        self,
        files: Sequence[ArchiveFile],
        arms: Sequence[Arm],
        options: ReplayOptions,
        progress: Callable[[int], None] | None,
    ) -> Iterator[ShardSums]:
        """Replay ``files`` (sorted path order); yield one ShardSums per file in that order."""
        ...


def local_runner(
    files: Sequence[ArchiveFile],
    arms: Sequence[Arm],
    options: ReplayOptions,
    progress: Callable[[int], None] | None,
) -> Iterator[ShardSums]:
    """Replay ``files`` here, one after the other (the progress bar moves batch by batch)."""
    for f in files:
        yield replay_shard(f.path, arms, options, progress)


@dataclass(frozen=True)
class ShardFailure:
    """A shard's bad input, as a task returns it: the one-line message of its SpecReplayError."""

    message: str


def replay_task(
    path: Path, arms: Sequence[Arm], options: ReplayOptions
) -> ShardSums | ShardFailure:
    """One Dask task: :func:`replay_shard` of one file; a SpecReplayError comes back as a value."""
    try:
        return replay_shard(path, arms, options)
    except SpecReplayError as err:
        return ShardFailure(err.message)


Task = Callable[[Path, Sequence[Arm], ReplayOptions], "ShardSums | ShardFailure"]


class DaskRunner:
    """One Dask task per shard, results yielded in sorted path order as they complete.

    Parameters
    ----------
    client : distributed.Client
        A connected client.
    task : callable, optional
        The function each task runs (default :func:`replay_task`; tests wrap it to inject
        faults). It must be importable by the workers.
    """

    def __init__(self, client: Any, task: Task = replay_task) -> None:
        self.client = client
        self.task = task
        self.tasks = 0

    @property
    def workers(self) -> int:
        """Workers the scheduler knows now."""
        return len(self.client.scheduler_info(n_workers=-1).get("workers", {}))

    def __call__(
        self,
        files: Sequence[ArchiveFile],
        arms: Sequence[Arm],
        options: ReplayOptions,
        progress: Callable[[int], None] | None,
    ) -> Iterator[ShardSums]:
        """Submit every shard now; return the iterator over their sums in sorted order."""
        run = uuid.uuid4().hex[:12]
        futures = [
            self.client.submit(
                self.task,
                f.path,
                list(arms),
                options,
                pure=False,
                key=f"specreplay-shard-{run}-{i:06d}-{f.path.name}",
            )
            for i, f in enumerate(files)
        ]
        self.tasks += len(futures)
        return self._in_order(files, futures, progress)

    def _in_order(
        self,
        files: Sequence[ArchiveFile],
        futures: list[Any],
        progress: Callable[[int], None] | None,
    ) -> Iterator[ShardSums]:
        as_completed = _distributed().as_completed
        index = {f.key: i for i, f in enumerate(futures)}
        done: dict[int, ShardSums | ShardFailure | BaseException] = {}
        nxt = 0
        try:
            for fut in as_completed(futures):
                i = index[fut.key]
                done[i] = _outcome(fut, files[i])
                futures[i] = None  # the result lives in ``done`` until folded
                got = done[i]
                if progress is not None and isinstance(got, ShardSums):
                    progress(got.positions)
                while nxt in done:
                    yield _value(done.pop(nxt))
                    nxt += 1
        finally:
            pending = [f for f in futures if f is not None]
            if pending:
                self.client.cancel(pending)


def _outcome(fut: Any, file: ArchiveFile) -> ShardSums | ShardFailure | BaseException:
    """Return a finished task's value, or the error to raise when the fold reaches it."""
    try:
        value = fut.result()
    except Exception as exc:  # a lost worker or a bug, named with the shard
        return SpecReplayError(
            f"{file.path}: the Dask task replaying this shard failed: "
            f"{type(exc).__name__}: {_one_line(exc)}"
        )
    if isinstance(value, ShardSums | ShardFailure):
        return value
    return SpecReplayError(f"{file.path}: the Dask task returned {type(value).__name__}")


def _value(got: ShardSums | ShardFailure | BaseException) -> ShardSums:
    if isinstance(got, ShardFailure):
        raise SpecReplayError(got.message)
    if isinstance(got, BaseException):
        raise got
    return got


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else ""


@contextmanager
def open_dask(scheduler: str | None, workers: int | None) -> Iterator[DaskRunner]:
    """Connect to ``scheduler`` or start a local cluster of ``workers`` processes; yield a runner.

    Raises
    ------
    SpecReplayError
        When dask is not installed, or the scheduler does not answer in time.
    """
    try:
        distributed = _distributed()
    except ImportError:
        opt = "--scheduler" if scheduler is not None else "--workers"
        raise SpecReplayError(f"{opt} needs Dask, which is not installed: {INSTALL_HINT}") from None
    if scheduler is not None:
        client = _connect(distributed, scheduler)
        try:
            yield DaskRunner(client)
        finally:
            with _quiet_dask():  # only the client closes: the cluster is the user's
                client.close()
        return
    with _quiet_dask(), _local_cluster(distributed, workers or 1) as cluster:
        client = distributed.Client(cluster)
        try:
            yield DaskRunner(client)
        finally:
            client.close()


def _distributed() -> Any:
    """Import ``distributed`` (lazily: an optional extra), untyped."""
    return importlib.import_module("distributed")


def _connect(distributed: Any, scheduler: str) -> Any:
    """Return a Client of ``scheduler``, or raise one line within :data:`CONNECT_TIMEOUT` s."""
    deadline = time.monotonic() + CONNECT_TIMEOUT
    try:
        probe_scheduler(scheduler, deadline)
        left = max(deadline - time.monotonic(), 0.5)
        return distributed.Client(scheduler, timeout=left)
    except SpecReplayError as err:
        raise SpecReplayError(f"--scheduler {scheduler}: {err.message}") from None
    except Exception as exc:  # OSError, TimeoutError, ValueError, or whatever the comm raises
        raise SpecReplayError(
            f"--scheduler {scheduler}: no Dask scheduler answered within {CONNECT_TIMEOUT:g} s "
            f"({type(exc).__name__}: {_one_line(exc)})"
        ) from None


def probe_scheduler(address: str, deadline: float) -> None:
    """Check that a Dask scheduler speaks at ``address`` (``tcp://``) before ``deadline``.

    Connects with a plain socket, reads the greeting a scheduler writes first on every new
    connection (an 8-byte frame-block length, then the msgpack frames of
    ``{"compression": …, "python": …, "pickle-protocol": …}``; see
    ``distributed.comm.core.Listener.on_connection``), at most :data:`HANDSHAKE_MAX_BYTES`, and
    closes. Other schemes are not probed.

    Parameters
    ----------
    address : str
        ``tcp://HOST:PORT``, ``HOST:PORT`` (tcp), or another scheme (returned at once).
    deadline : float
        ``time.monotonic()`` value by which the greeting must have come.

    Raises
    ------
    SpecReplayError
        Naming why (refused, timed out, closed, not the Dask protocol); the message starts
        "no Dask scheduler answered within N s" and does not name the option.
    """
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, loc = parse_address(address)
        if scheme != "tcp":
            return
        host, port = parse_host_port(loc, 8786)
    except ValueError as exc:
        raise SpecReplayError(f"not a Dask address ({_one_line(exc)})") from None
    why = f"no Dask scheduler answered within {CONNECT_TIMEOUT:g} s"

    def left() -> float:
        rest = deadline - time.monotonic()
        if rest <= 0:
            raise SpecReplayError(f"{why} (connected, but no Dask greeting came: not a scheduler?)")
        return rest

    try:
        sock = socket.create_connection(
            (host, port), timeout=max(deadline - time.monotonic(), 0.01)
        )
    except TimeoutError:
        raise SpecReplayError(f"{why} (the connection was not accepted in time)") from None
    except OSError as exc:
        raise SpecReplayError(f"{why} ({type(exc).__name__}: {_one_line(exc)})") from None
    with sock:
        frames = _read_greeting(sock, left, why)
    try:
        loads = importlib.import_module("distributed.protocol.core").loads

        greeting = loads(frames, deserialize=False)
    except Exception:
        greeting = None
    if not (isinstance(greeting, dict) and "python" in greeting):
        raise SpecReplayError(f"{why} (it answered, but not in the Dask protocol)")


def _read_greeting(sock: socket.socket, left: Callable[[], float], why: str) -> list[Any]:
    """Read one Dask message's frames from ``sock``, bounded in size and time."""
    from distributed.protocol.utils import unpack_frames

    def read(n: int) -> bytes:
        got = bytearray()
        while len(got) < n:
            sock.settimeout(left())
            try:
                chunk = sock.recv(n - len(got))
            except TimeoutError:
                left()  # raises once the deadline has passed
                continue
            except OSError as exc:
                raise SpecReplayError(f"{why} ({type(exc).__name__}: {_one_line(exc)})") from None
            if not chunk:
                raise SpecReplayError(f"{why} (it closed the connection without a Dask greeting)")
            got += chunk
        return bytes(got)

    def bounded(n: int) -> int:
        if n > HANDSHAKE_MAX_BYTES:
            raise SpecReplayError(
                f"{why} (it answered, but not in the Dask protocol: a first message of {n} bytes)"
            )
        return n

    (size,) = struct.unpack("Q", read(8))
    block = read(bounded(size))
    try:
        frames, missing = unpack_frames(block, partial=True)
    except Exception:
        raise SpecReplayError(f"{why} (it answered, but not in the Dask protocol)") from None
    bounded(size + sum(missing))
    return [*frames, *(read(n) for n in missing)]


@contextmanager
def _local_cluster(distributed: Any, n: int) -> Iterator[Any]:
    from specreplay import numba_cache_dir

    cluster = distributed.LocalCluster(
        n_workers=n,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        env={"NUMBA_NUM_THREADS": "1", "NUMBA_CACHE_DIR": numba_cache_dir()},
        # the workers' own loggers (other processes): their teardown chatter after a failing row
        # (cancelled tasks, heartbeats to a closing scheduler) is not the user's error line
        silence_logs=logging.CRITICAL,
    )
    try:
        yield cluster
    finally:
        cluster.close()


@contextmanager
def _quiet_dask() -> Iterator[None]:
    """Keep the local cluster's INFO/WARNING chatter (start, stop, restarts) off stderr."""
    log = logging.getLogger("distributed")
    before = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(before)

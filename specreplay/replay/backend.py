"""Who replays the shards of a command's passes: this process, a Dask cluster, and the cache.

:class:`Backend` holds ``--scheduler ADDRESS`` / ``--workers N`` (Dask; one of them) and
``--cache DIR`` of requalify and sweep (and the same keywords of the Python API);
:func:`backend_runner` starts what it asks for and yields a :class:`BackendRun`, whose
``runner`` goes to :meth:`OpenArchive.replay <specreplay.replay.engine.OpenArchive.replay>` for
the command's pass (a ``--by`` run has one too) and whose :meth:`BackendRun.to_json` becomes the
``replay_backend`` entry of results.json. The default backend (this process, no cache) has no
runner and adds no entry, so a local run's results.json is unchanged.

results.json ``replay_backend`` (only with ``--scheduler``, ``--workers`` or ``--cache``)::

    {"runner": "dask" | "local", "scheduler": ADDRESS | "local cluster" | null,
     "workers": N | null, "tasks": shard tasks submitted | null,
     "cache": null | {"folder": DIR, "shards": n, "reused": n, "replayed": n,
                      "replayed_files": [paths], "recomputed": n,
                      "recomputed_files": [paths of shards whose entry failed its check]}}

The cache counts every shard of every pass of the run. :mod:`specreplay.results.backend` reads
the entry back as text: the REPORT.md line and the stderr line of the command line.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.validated import dask_run
from specreplay.replay.distributed import DaskRunner, Runner, local_runner, open_dask
from specreplay.replay.shardcache import ShardCache, cached_runner, check_cache_folder

__all__ = ["Backend", "BackendRun", "backend_runner"]


@dataclass(frozen=True)
class Backend:
    """``--scheduler ADDRESS`` or ``--workers N`` (Dask), and ``--cache DIR``; checked when made.

    All None: this process, no cache (the default).
    """

    scheduler: str | None = None
    workers: int | None = None
    cache: Path | None = None

    def __post_init__(self) -> None:
        if self.scheduler is not None and self.workers is not None:
            raise SpecReplayError(
                f"--scheduler {self.scheduler} and --workers {self.workers}: give one of them "
                "(an existing cluster, or a local one of N workers)"
            )
        if self.scheduler is not None and not self.scheduler.strip():
            raise SpecReplayError(
                "--scheduler '': give the scheduler's address, e.g. tcp://10.0.0.5:8786"
            )
        if self.workers is not None and self.workers < 1:
            raise SpecReplayError(f"--workers {self.workers}: should be at least 1")

    def check(self, inputs: Sequence[Path]) -> None:
        """Refuse a bad ``--cache`` folder before any work (:func:`check_cache_folder`)."""
        if self.cache is not None:
            check_cache_folder(self.cache, inputs)

    @property
    def default(self) -> bool:
        """Whether this is the default backend (nothing to start, nothing to report)."""
        return self.scheduler is None and self.workers is None and self.cache is None


@dataclass
class BackendRun:
    """The runner of one command's replay passes, and what it did."""

    backend: Backend
    runner: Runner | None = None
    dask: DaskRunner | None = None
    cache: ShardCache | None = None
    workers: int | None = None

    def to_json(self) -> dict[str, Any] | None:
        """Return the ``replay_backend`` entry of results.json (module docstring), or None."""
        b = self.backend
        if b.default:
            return None
        where = b.scheduler if b.scheduler is not None else "local cluster"
        return {
            "runner": "dask" if self.dask is not None else "local",
            "scheduler": where if self.dask is not None else None,
            "workers": self.workers,
            "tasks": self.dask.tasks if self.dask is not None else None,
            "cache": self.cache.report.to_json() if self.cache is not None else None,
        }


@contextmanager
def backend_runner(
    backend: Backend | None, filters: dict[str, Any], inputs: Sequence[Path] = ()
) -> Iterator[BackendRun]:
    """Start what ``backend`` asks for (a Dask client, the cache); yield the run; close it.

    ``filters`` (``--families``, ``--sample-requests`` as JSON values) join the cache key;
    ``inputs`` are the run's inputs, which the cache folder may not be, hold or lie inside.
    """
    b = backend or Backend()
    run = BackendRun(b)
    with ExitStack() as stack:
        inner: Runner | None = None
        if b.cache is not None:  # a bad folder fails before a cluster starts
            run.cache = ShardCache(b.cache, filters, inputs)
        if b.scheduler is not None or b.workers is not None:
            run.dask = stack.enter_context(open_dask(b.scheduler, b.workers))
            dask_run()  # the workers check every row: no mark is honoured (validated.py)
            run.workers = run.dask.workers
            inner = run.dask
        if run.cache is not None:
            inner = cached_runner(run.cache, inner or local_runner)
        run.runner = inner
        yield run

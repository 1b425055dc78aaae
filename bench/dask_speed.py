"""Dask speed: requalify locally vs on a local Dask cluster of 2 workers, and per-worker throughput.

One archive (``--positions``, default 2M: ``specreplay synth`` with 64 rounds × 5 positions per
request and 8 shards, about 0.8 GiB per 1M positions, written into a temporary folder deleted at
the end) is requalified with 3 arms (baseline top32:t0.7@5, candidate top32:t0.7:dyadic24@5,
reference greedy@5), ``--estimator analytic``, ``--n-boot 2000``, through the Python API:

- **local**: ``api.requalify(archive, …)`` (this process; Numba threads as configured);
- **dask**: ``api.requalify(archive, …, workers=2)``: starts a ``LocalCluster`` of 2 one-thread
  worker processes, one task per shard, closes it; the time includes the cluster's start and stop
  and each worker's first load of the kernels from the Numba cache.

Each is the best of ``--repeats`` (default 2) after a warm-up run on a tiny archive (kernels
compiled or loaded; the archive was just written, so it is in the page cache). Then the replay
pass alone is timed on a running 2-worker cluster (``replay_archive(..., runner=DaskRunner)``,
best of ``--repeats``; beside it the same pass in this process): positions / time / 2 is the
**per-worker throughput** a larger cluster scales by (the bootstrap after the fold does not grow
with the positions: it grows with the requests). Prints both end-to-end times, their ratio, the
per-worker throughput and what 10^9 positions cost at it.

    python bench/dask_speed.py [--positions 2000000] [--repeats 2]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ARMS = ("top32:t0.7@5", "top32:t0.7:dyadic24@5", "greedy@5")
POSITIONS_PER_REQUEST = 64 * 5
SHARDS = 8


def _best(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _requalify(archive: Path, **kw: object) -> object:
    from specreplay import api

    return api.requalify(archive, baseline=ARMS[0], candidate=ARMS[1], reference=ARMS[2],
                         estimator="analytic", n_boot=2000, **kw)  # type: ignore[arg-type]  # fmt: skip


def _replay_throughput(archive: Path, repeats: int) -> tuple[float, int]:
    """Best time of the replay pass alone on a running 2-worker cluster; positions replayed."""
    import distributed

    from specreplay import numba_cache_dir
    from specreplay.replay.distributed import DaskRunner
    from specreplay.replay.engine import replay_archive
    from specreplay.sim.arms import parse_arm

    arms = [parse_arm(a) for a in ARMS]
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
        env={"NUMBA_NUM_THREADS": "1", "NUMBA_CACHE_DIR": numba_cache_dir()},
    )  # fmt: skip
    with distributed.Client(cluster) as client:
        runner = DaskRunner(client)
        res = replay_archive(archive, arms, estimator="analytic", runner=runner)  # warm workers
        t = _best(lambda: replay_archive(archive, arms, estimator="analytic", runner=runner),
                  repeats)  # fmt: skip
    cluster.close()
    return t, res.positions


def _replay_here(archive: Path) -> object:
    from specreplay.replay.engine import replay_archive
    from specreplay.sim.arms import parse_arm

    return replay_archive(archive, [parse_arm(a) for a in ARMS], estimator="analytic")


def main() -> None:
    """Synthesize, time local vs Dask, print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--positions", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    from specreplay import api

    requests = max(SHARDS, args.positions // POSITIONS_PER_REQUEST)
    tmp = Path(tempfile.mkdtemp(prefix="specreplay-dask-bench-"))
    try:
        t0 = time.perf_counter()
        # 5 positions per round, as measured in docs/scale.md (synth's default is 8)
        arch = api.synth(
            tmp / "archive", requests=requests, shard_requests=-(-requests // SHARDS), depth=5
        )
        print(f"archive: {arch.rows:,} positions in {len(arch.shards)} shards "
              f"(synth {time.perf_counter() - t0:.1f} s)")  # fmt: skip
        tiny = api.synth(tmp / "tiny", requests=40, rounds=8, depth=5)
        _requalify(tiny.path)  # kernels compiled or loaded
        local = _best(lambda: _requalify(arch.path), args.repeats)
        dask = _best(lambda: _requalify(arch.path, workers=2), args.repeats)
        replay, positions = _replay_throughput(arch.path, args.repeats)
        here = _best(lambda: _replay_here(arch.path), args.repeats)
        per_worker = positions / replay / 2
        print(f"requalify, 3 arms, analytic, n_boot 2000, best of {args.repeats}:")
        print(f"  local (this process):         {local:7.2f} s")
        ratio = dask / local
        print(f"  --workers 2 (LocalCluster):   {dask:7.2f} s   (dask / local = {ratio:.2f})")
        print(f"  replay pass here:             {here:7.2f} s   "
              f"{positions / here / 1e6:.2f} M positions/s")  # fmt: skip
        print(f"  replay pass on 2 workers:     {replay:7.2f} s   "
              f"{per_worker / 1e6:.2f} M positions/s per worker")  # fmt: skip
        print(f"  10^9 positions at that rate:  {1e9 / per_worker / 3600:.2f} worker-hours")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":  # LocalCluster spawns its workers: the guard is required
    main()

"""Scale-out: the per-shard cost and the Dask scheduler's overhead per task, at 1,000 small shards.

What it measures (issue 13 item 8; docs/scale.md "Scale-out"), each in a fresh process:

1. **local**: ``specreplay requalify`` of an archive of ``--shards`` small shards (2 requests ×
   64 rounds × 5 positions: 640 positions each), every option at its default, in this process
   (no Dask). Its ``replaying`` stage / shards = the **per-shard cost** (read, validate, replay
   three arms and the importance companion, the shard's totals, its share of the fold);
2. **dask**: the same command with ``--workers W`` (a ``LocalCluster`` of W one-thread worker
   processes). The cluster's start is timed apart (``LocalCluster`` + ``Client`` ready);
3. **no-op tasks**: W workers started the way ``--workers`` starts them, then ``--shards`` tasks
   that return at once (``client.submit``, ``pure=False``, one key each, results gathered in
   order as the runner does): wall / tasks = the **scheduler's overhead per task** when the
   work is nothing. The real run's overhead per task is also derived:
   ``(dask replay wall × W − local replay wall) / shards`` (negative: the workers' parallelism
   paid more than the overhead cost).

Every figure is MEASURED on this machine, best of ``--repeats``. The projection to 10^9 and 10^10
positions is written in docs/scale.md from these figures and ``bench/scale.py``'s.

Run: ``python bench/dask_overhead.py [--shards 1000] [--workers 2]`` (needs the ``dask`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
ARMS = [
    "--baseline",
    "top32:t0.7@5",
    "--candidate",
    "top32:t0.7:dyadic24@5",
    "--reference",
    "greedy@5",
]
REQUESTS_PER_SHARD = 2
ROUNDS = 64


def cli(*args: str) -> list[str]:
    """The command line of ``specreplay ARGS`` run from this checkout."""
    return [sys.executable, "-c", "from specreplay.cli import app; app()", *args]


def timed_run(args: list[str], timings: Path) -> tuple[float, dict[str, float]]:
    """Run ``args`` in a fresh process; return its wall time and its stage timers."""
    timings.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=str(HERE), SPECREPLAY_TIMINGS=str(timings))
    t0 = time.perf_counter()
    subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    lines = timings.read_text().splitlines() if timings.exists() else []
    return wall, json.loads(lines[-1]) if lines else {}


NOOP_CHILD = """
import json, sys, time
from specreplay.replay.distributed import open_dask

def noop(i):
    return i

n, workers = int(sys.argv[1]), int(sys.argv[2])
t0 = time.perf_counter()
with open_dask(None, workers) as runner:
    start = time.perf_counter() - t0
    client = runner.client
    client.submit(noop, -1, pure=False).result()  # the function shipped once, workers warm
    t1 = time.perf_counter()
    futures = [client.submit(noop, i, pure=False, key=f"noop-{i:06d}") for i in range(n)]
    got = [f.result() for f in futures]  # in order, as the runner reads its shards
    wall = time.perf_counter() - t1
    assert got == list(range(n))
print(json.dumps({"start": start, "wall": wall}))
"""


def noop_tasks(n: int, workers: int) -> dict[str, float]:
    """Start W workers and run ``n`` no-op tasks in a fresh process; return its timings."""
    env = dict(os.environ, PYTHONPATH=str(HERE))
    out = subprocess.run(
        [sys.executable, "-c", NOOP_CHILD, str(n), str(workers)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="specreplay-dask-bench-") as tmp:
        root = Path(tmp)
        archive = root / "archive"
        requests = args.shards * REQUESTS_PER_SHARD
        subprocess.run(
            cli(
                "synth",
                str(archive),
                "--requests",
                str(requests),
                "--rounds",
                str(ROUNDS),
                "--shard-requests",
                str(REQUESTS_PER_SHARD),
                "--depth",  # 5 positions per round, as measured in docs/ (synth's default is 8)
                "5",
                "-q",
            ),
            env=dict(os.environ, PYTHONPATH=str(HERE)),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        positions = requests * ROUNDS * 5
        base = [*cli("requalify", str(archive), *ARMS, "-q", "--force"), "--out"]
        local_args = [*base, str(root / "local")]
        dask_args = [*base, str(root / "dask"), "--workers", str(args.workers)]
        timed_run(local_args, root / "t.jsonl")  # warm: page cache, Numba cache
        best: dict[str, tuple[float, dict[str, float]]] = {}
        noop: dict[str, float] = {}
        for _ in range(args.repeats):
            for name, a in (("local", local_args), ("dask", dask_args)):
                got = timed_run(a, root / "t.jsonl")
                if name not in best or got[0] < best[name][0]:
                    best[name] = got
            n = noop_tasks(args.shards, args.workers)
            if not noop or n["wall"] < noop["wall"]:
                noop = n
    report(args.shards, args.workers, positions, best, noop)


def report(
    shards: int,
    workers: int,
    positions: int,
    best: dict[str, tuple[float, dict[str, float]]],
    noop: dict[str, float],
) -> None:
    """Print the figures (MEASURED, best of the repeats) and the derived overheads."""
    (lw, lt), (dw, dt) = best["local"], best["dask"]
    lrep, drep = lt.get("replaying", float("nan")), dt.get("replaying", float("nan"))
    print(
        f"archive: {shards:,} shards × {REQUESTS_PER_SHARD} requests × {ROUNDS} rounds × 5 "
        f"positions = {positions:,} positions; {workers} workers"
    )
    print(
        f"MEASURED local requalify: {lw:.2f} s wall, replaying {lrep:.2f} s "
        f"→ per-shard cost {1e3 * lrep / shards:.2f} ms "
        f"({positions / lrep / 1e6:.2f} M positions/s)"
    )
    print(
        f"MEASURED dask requalify (--workers {workers}): {dw:.2f} s wall, replaying "
        f"{drep:.2f} s (cluster start inside the wall, outside replaying)"
    )
    print(f"MEASURED LocalCluster start ({workers} workers, spawned): {noop['start']:.2f} s")
    print(
        f"MEASURED {shards:,} no-op tasks: {noop['wall']:.2f} s → scheduler overhead "
        f"{1e3 * noop['wall'] / shards:.2f} ms per task"
    )
    over = (drep * workers - lrep) / shards
    print(
        f"ESTIMATED overhead per replay task: (replaying dask × {workers} − replaying local) / "
        f"shards = {1e3 * over:.2f} ms"
    )
    for k in ("fold", "fold: tails", "resampling", "comparisons and law tests", "plots and files"):
        a, b = lt.get(k, float("nan")), dt.get(k, float("nan"))
        print(f"  stage {k}: local {a:.2f} s, dask {b:.2f} s")


if __name__ == "__main__":
    main()

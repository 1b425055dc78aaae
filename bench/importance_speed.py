"""Importance replay speed against the analytic stage on the same positions (issue 5 acceptance).

Target: the importance stage within 1.5× of the analytic stage.

- **Stage** (the target): the archive's batches are read once into memory; then, per batch and
  for each of three arms (the demo's logging arm ``top32:t0.7@5``, its dyadic24 candidate and
  ``greedy@5``), what the replay pass does after reading: the policy law (shared by arms of one
  policy, :class:`~specreplay.sim.policy.LawCache`), the estimator's kernel and the per-(request,
  bucket) accumulation; for importance also the policy-ratio sums and the streaming ratio tails
  (the Pareto k̂ input), accumulated across batches as in a pass.
- **End to end**: ``replay_archive`` over the same archive (read and validation included) with
  analytic alone, importance alone and ``auto``'s pass (analytic with importance beside), so the
  cost of the default is visible too.

Every timing is the best of ``--repeats`` after a warm-up run (Numba kernels loaded or compiled).
Input: ``specreplay synth`` of ``--requests`` requests (64 rounds × 5 positions each) written to a
temporary folder, deleted at the end.

    python bench/importance_speed.py [--requests 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from specreplay.pipelines.builders import write_synth_archive
from specreplay.replay.accumulate import ReplayAccumulator
from specreplay.replay.archive.batch import RoundBatch
from specreplay.replay.archive.reader import ArchiveReader
from specreplay.replay.archive.sources import list_archive
from specreplay.replay.engine import replay_archive
from specreplay.replay.estimators import get_estimator
from specreplay.replay.scan import no_progress
from specreplay.replay.tails import TailAccumulator
from specreplay.sim.arms import parse_arm
from specreplay.sim.policy import LawCache, Workspace

ARMS = ["top32:t0.7@5", "top32:t0.7:dyadic24@5", "greedy@5"]
LOGGING = "top32:t0.7@5"


def best_of(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: kernels loaded or compiled, pages cached
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def stage(batches: list[RoundBatch], estimator: str) -> None:
    """The replay pass's work after reading, for ARMS over ``batches``."""
    est = get_estimator(estimator)
    arms = [parse_arm(a) for a in ARMS]
    log = parse_arm(LOGGING)
    nb = 5
    accs = {a.canonical: ReplayAccumulator(5) for a in arms}
    tails = {a.canonical: TailAccumulator(nb, 5) for a in arms}
    ws = Workspace()
    for b in batches:
        cache = LawCache(b.offsets, b.draft_logprobs, ws)
        keys = b.round_request * nb + b.round_bucket
        for a in arms:
            v = est.rounds(b, a, cache, seed=0, replicates=0, max_depth=5, logging=log)
            accs[a.canonical].add(keys, v)
            if v.ratio is not None:
                tails[a.canonical].add(b.round_family, b.round_bucket, b.round_key, v.depth,
                                       v.ratio)  # fmt: skip
    for t in tails.values():
        _ = t.tail


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="imp-bench-"))
    try:
        archive = tmp / "archive"
        write_synth_archive(archive, args.requests, 64, 250, 0, no_progress, depth=5)
        batches = [b for f in list_archive(archive) for b in ArchiveReader(f.path, shard=True)]
        positions = sum(b.n_positions for b in batches)
        print(f"archive: {args.requests:,} requests, {positions:,} positions, arms {ARMS}")
        print(f"best of {args.repeats} after a warm-up\n")
        an = best_of(lambda: stage(batches, "analytic"), args.repeats)
        imp = best_of(lambda: stage(batches, "importance"), args.repeats)
        print("stage (batches in memory: policy law, kernel, sums; importance also ratio tails)")
        for name, t in (("analytic", an), ("importance", imp)):
            rate = positions * len(ARMS) / t / 1e6
            print(f"  {name:10s} {t:7.3f} s  {rate:6.1f} M arm-positions/s")
        print(f"  ratio importance / analytic: {imp / an:.2f} (target ≤ 1.5)\n")
        arms = [parse_arm(a) for a in ARMS]
        runs = {
            "analytic": {"estimator": "analytic"},
            "importance": {"estimator": "importance"},
            "auto (analytic + importance)": {"estimator": "analytic", "companion": "importance"},
        }
        times = {
            name: best_of(lambda kw=kw: replay_archive(archive, arms, **kw), args.repeats)  # type: ignore[misc]
            for name, kw in runs.items()
        }
        print("end to end (replay_archive: read, validate, replay, sums)")
        for name, t in times.items():
            print(f"  {name:30s} {t:7.3f} s  ×{t / times['analytic']:.2f} of analytic")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Every arm in one pass against arm by arm, on the same batches in one process (issue 18, item 2).

What the replay pass computes per batch for its arms, after reading and validating:

- **per arm** (before issue 18): each distinct policy's law over the whole batch
  (:class:`~specreplay.sim.policy.LawCache`), then for each arm the analytic kernel and the
  importance companion's kernel (:meth:`AnalyticEstimator.rounds`, :meth:`ImportanceEstimator.
  rounds`), the stages ``arms (analytic)`` + ``arms (importance)``;
- **fused**: :func:`~specreplay.replay.estimators.allarms.all_arms_rounds`, the stage
  ``arms (all)``.

The arms are the issue's run: ``top32:t0.7@5`` (baseline and logging arm),
``top32:t0.7:dyadic24@5`` and ``greedy@5``. The archive's batches (``--batch-rows`` positions
each, the replay's default 500,000) are read once into memory; each side runs ``--repeats``
times alternately, and the best wall time and CPU time (user + system of this process, both
threads) of each are printed with their ratio, and the two sides' outputs are compared with
``np.array_equal``. Numba kernels are warmed first.

    python bench/arms_pass.py [ARCHIVE] [--batches 2] [--repeats 3]

ARCHIVE defaults to /work/benchdata/ipc2m (any archive with drafted_id and emitted_q works).
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from specreplay.replay.archive.batch import RoundBatch
from specreplay.replay.archive.reader import ArchiveReader
from specreplay.replay.estimators import get_estimator
from specreplay.replay.estimators.allarms import all_arms_rounds
from specreplay.replay.estimators.base import RoundValues
from specreplay.replay.estimators.importance import logging_law
from specreplay.sim.arms import Arm, parse_arm
from specreplay.sim.policy import LawCache, Workspace

ARMS = ("top32:t0.7@5", "top32:t0.7:dyadic24@5", "greedy@5")


def per_arm(batches: list[RoundBatch], arms: list[Arm], ws: Workspace) -> list[RoundValues]:
    """The pass before: batch-wide policy laws, then each estimator's kernel per arm."""
    an, im = get_estimator("analytic"), get_estimator("importance")
    out = []
    for b in batches:
        cache = LawCache(b.offsets, b.draft_logprobs, ws)
        kw = {"seed": 0, "replicates": 0, "max_depth": 5}
        for a in arms:
            v = an.rounds(b, a, cache, **kw)
            out.append(dataclasses.replace(v, flag=v.flag.copy()))  # the workspace's buffer
        out += [im.rounds(b, a, cache, **kw) for a in arms]
    return out


def fused(batches: list[RoundBatch], arms: list[Arm], ws: Workspace) -> list[RoundValues]:
    """The fused pass (the workspace is unused: the laws stay in per-thread scratch)."""
    out: list[RoundValues] = []
    for b in batches:
        got = all_arms_rounds(
            arms=arms,
            offsets=b.offsets,
            draft_logprobs=b.draft_logprobs,
            target_probs=b.target_probs,
            drafted_idx=b.drafted_idx,
            round_offsets=b.round_offsets,
            max_depth=5,
            q_logging=logging_law(b, LawCache(b.offsets, b.draft_logprobs), None),
        )
        assert got.importance is not None
        out += [*got.analytic, *got.importance]
    return out


def timed(fn: Callable[[], object]) -> tuple[float, float, object]:
    """Return (wall s, CPU s of this process, result) of one call."""
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    got = fn()
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return wall, cpu, got


def same(a: list[RoundValues], b: list[RoundValues]) -> bool:
    """Every array of every value equal (NaN where NaN)."""
    for x, y in zip(a, b, strict=True):
        for f in dataclasses.fields(RoundValues):
            u, v = getattr(x, f.name), getattr(y, f.name)
            if (u is None) != (v is None):
                return False
            if u is not None and not np.array_equal(u, v, equal_nan=True):
                return False
    return True


def main() -> None:
    """Print the two sides' best wall and CPU times and their ratios."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("archive", nargs="?", type=Path, default=Path("/work/benchdata/ipc2m"))
    ap.add_argument("--batches", type=int, default=2)
    ap.add_argument("--batch-rows", type=int, default=500_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    reader = ArchiveReader(args.archive, batch_rows=args.batch_rows)
    batches = []
    for b in reader:
        batches.append(b)
        if len(batches) == args.batches:
            break
    positions = sum(b.n_positions for b in batches)
    arms = [parse_arm(a) for a in ARMS]
    ws = Workspace()
    sides = {"per arm": per_arm, "fused": fused}
    outs = {name: fn(batches[:1], arms, ws) for name, fn in sides.items()}  # warm-up
    best = {name: [np.inf, np.inf] for name in sides}
    for _ in range(args.repeats):
        for name, fn in sides.items():
            wall, cpu, outs[name] = timed(lambda fn=fn: fn(batches, arms, ws))  # type: ignore[misc]
            best[name] = [min(best[name][0], wall), min(best[name][1], cpu)]
    print(f"{positions:,} positions, {len(arms)} arms ({', '.join(ARMS)}), best of {args.repeats}")
    print("| side | wall s | CPU s | M positions/s (wall) |")
    print("|---|---:|---:|---:|")
    for name in sides:
        w, c = best[name]
        print(f"| {name} | {w:.3f} | {c:.3f} | {positions / w / 1e6:.2f} |")
    (w0, c0), (w1, c1) = best["per arm"], best["fused"]
    print(f"ratio per arm / fused: wall {w0 / w1:.2f}×, CPU {c0 / c1:.2f}×")
    print("outputs identical:", same(outs["per arm"], outs["fused"]))


if __name__ == "__main__":
    main()

"""This tree's replay kernels against another revision's, in one run: speed, and the figures' drift.

Issue 13 (item 4) replaced the kernels' running sums with lane-order sums
(``specreplay/sim/lanes.py``); this bench measures what that bought and what it moved, against the
kernels of a git revision (default ``main``) exported into a temporary folder:

- **speed**: each stage below is timed in a fresh process per tree (``PYTHONPATH`` picks the tree,
  each tree its own Numba cache folder, warmed first), the two trees alternated ``--rounds``
  times, best of ``--repeats`` calls inside each process and best over the rounds. The inputs
  are ``bench/replay_speed.py``'s seeded rows (``--positions`` × 32 candidates, rounds of 5).
  Stages: the analytic replay of a given law through a dyadic24 arm (the fast path, issue 3's
  "analytic stage") and through a float64 arm (the generic path), the policy law
  ``top32:t0.7``, the two together (what ``--estimator analytic`` runs per arm and batch), the
  importance replay of a given law and logging law through both arms, and Monte Carlo (M = 16).
- **drift** (``--drift-positions`` > 0): a ``specreplay synth`` archive of that many positions,
  replayed by both trees with the analytic and importance estimators over the default arms
  (baseline ``top32:t0.7@5``, candidate ``top32:t0.7:dyadic24@5``, reference ``greedy@5``) and
  Monte Carlo (M = 4) over the candidate; the largest relative change |new − old| / max(|old|,
  |new|) per output, and over all.

    python bench/kernels_vs_rev.py [REV] [--positions 1000000] [--rounds 3] [--repeats 3]
        [--threads 1] [--clock wall|cpu] [--drift-positions 1000000]

``--clock cpu`` times the process's CPU time (with one thread, what a loaded machine distorts
least); wall time otherwise. The archive of the drift part is written to a temporary folder and
deleted (about 0.8 GiB per 1M positions).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
TREE = BENCH.parent
POSITIONS_PER_REQUEST = 320  # specreplay synth --depth 5: 64 rounds of 5 positions

CHILD_SPEED = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import numba
from replay_speed import ARM, D, T, make_inputs, np_softmax
from specreplay.replay.estimators.analytic import analytic_rounds
from specreplay.replay.estimators.importance import importance_rounds
from specreplay.replay.estimators.montecarlo import replay_rounds
from specreplay.sim.arms import parse_arm
from specreplay.sim.policy import LawCache, Workspace, policy_law_of

n, repeats, clock = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
tick = time.process_time if clock == "cpu" else time.perf_counter
inp = make_inputs(n)
dy, fl = parse_arm(ARM), parse_arm("top32:t0.7@5")
off, lp, p = inp["offsets"], inp["lp"].ravel(), inp["p"].ravel()
q = np_softmax(inp["lp"], T).ravel()
common = dict(offsets=off, target_probs=p, drafted_idx=inp["drafted"],
              round_offsets=inp["round_offsets"], max_depth=D)
ws = Workspace()
laws = LawCache(off, lp).laws(dy)
def law():
    return policy_law_of(dy.policy, off, lp, ws)
stages = {
    "analytic dyadic24": lambda: analytic_rounds(q_policy=q, sampler=dy.sampler,
                                                 verifier=dy.verifier, **common),
    "analytic float64": lambda: analytic_rounds(q_policy=q, sampler=fl.sampler,
                                                verifier=fl.verifier, **common),
    "policy law top32:t0.7": law,
    "policy + analytic dyadic24": lambda: analytic_rounds(q_policy=law().q, sampler=dy.sampler,
                                                          verifier=dy.verifier, **common),
    "importance dyadic24": lambda: importance_rounds(q_policy=q, sampler=dy.sampler,
                                                     verifier=dy.verifier, q_logging=q, **common),
    "importance float64": lambda: importance_rounds(q_policy=q, sampler=fl.sampler,
                                                    verifier=fl.verifier, q_logging=q, **common),
    "Monte Carlo M=16": lambda: replay_rounds(
        q_sampler=laws.q_sampler, m_sampler=laws.m_sampler, bits=laws.sampler_bits,
        q_verifier=laws.q_verifier, round_key=inp["round_key"], round_index=inp["round_index"],
        seed=0, replicates=16, **common),
}
rates = {}
for name, fn in stages.items():
    fn()  # warm-up (and, the first time, load or compile)
    best = float("inf")
    for _ in range(repeats):
        t0 = tick()
        fn()
        best = min(best, tick() - t0)
    rates[name] = n / best
import specreplay
print(json.dumps({"threads": numba.get_num_threads(), "rates": rates,
                  "package": specreplay.__file__}))
"""

CHILD_DRIFT = """
import sys
from pathlib import Path
import numpy as np
from specreplay.replay.archive.reader import ArchiveReader
from specreplay.replay.estimators import get_estimator
from specreplay.sim.arms import parse_arm
from specreplay.sim.policy import LawCache

ARMS = ("top32:t0.7@5", "top32:t0.7:dyadic24@5", "greedy@5")
RUNS = [("analytic", a, 0) for a in ARMS] + [("importance", a, 0) for a in ARMS]
RUNS.append(("montecarlo", ARMS[1], 4))
FIELDS = ("t", "var", "surv", "offpath", "ratio", "bound", "moment")
parts = {}
for batch in ArchiveReader(Path(sys.argv[1])):
    cache = LawCache(batch.offsets, batch.draft_logprobs)
    for est, arm, reps in RUNS:
        v = get_estimator(est).rounds(batch, parse_arm(arm), cache, seed=0, replicates=reps,
                                      max_depth=5, logging=None)
        for f in FIELDS:
            x = getattr(v, f)
            if x is not None:
                parts.setdefault(f"{est} {arm} {f}", []).append(np.asarray(x).ravel())
np.savez(sys.argv[2], **{k: np.concatenate(v) for k, v in parts.items()})
import specreplay
print(specreplay.__file__)
"""


def export(rev: str, dest: Path) -> Path:
    """Write ``rev``'s specreplay package under ``dest`` (git archive); return the tree root."""
    archive = subprocess.run(
        ["git", "-C", str(TREE), "archive", rev, "specreplay"], check=True, capture_output=True
    ).stdout
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def child(tree: Path, cache: Path, threads: int, code: str, *argv: str) -> str:
    """Run ``code`` in a fresh process on ``tree``'s package with its own Numba cache.

    The process starts in ``tree``: ``python -c`` puts its working folder first on the path,
    ahead of ``PYTHONPATH``, so started elsewhere it could import another tree's package.
    """
    env = {**os.environ, "PYTHONPATH": str(tree), "NUMBA_CACHE_DIR": str(cache)}
    if threads:
        env["NUMBA_NUM_THREADS"] = str(threads)
    out = subprocess.run(
        [sys.executable, "-c", code, *argv],
        env=env, cwd=tree, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return out.stdout.strip().splitlines()[-1]


def speed(trees: dict[str, Path], caches: dict[str, Path], args: argparse.Namespace) -> None:
    """Alternate the trees in fresh processes; print each stage's best rate and the ratio."""
    argv = (str(BENCH), str(args.positions), str(args.repeats), args.clock)
    for name in trees:  # warm each tree's cache (compiles on a first run)
        child(trees[name], caches[name], args.threads, CHILD_SPEED, str(BENCH), "5000", "1", "wall")
    best: dict[str, dict[str, float]] = {name: {} for name in trees}
    threads = 0
    for _ in range(args.rounds):
        for name in trees:
            res = json.loads(child(trees[name], caches[name], args.threads, CHILD_SPEED, *argv))
            if not res["package"].startswith(str(trees[name])):
                sys.exit(f"{name}: the child imported {res['package']}, not {trees[name]}")
            threads = res["threads"]
            for stage, rate in res["rates"].items():
                best[name][stage] = max(best[name].get(stage, 0.0), rate)
    old, new = best
    print(
        f"\nspeed: {args.positions:,} positions x 32 candidates, {threads} Numba thread(s), "
        f"{args.clock} clock, best of {args.repeats} x {args.rounds} alternated processes"
    )
    print(f"{'stage':30s} {old:>14s} {new:>14s}  ratio")
    for stage in best[old]:
        r_old, r_new = best[old][stage], best[new][stage]
        print(f"{stage:30s} {r_old / 1e6:9.2f} M/s {r_new / 1e6:9.2f} M/s  {r_new / r_old:5.2f}x")


def _rel(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    """Largest |b − a| / max(|a|, |b|) over entries that differ (NaN = NaN), and their count."""
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    if same.all():
        return 0.0, 0
    a, b = a[~same], b[~same]
    return float((np.abs(b - a) / np.maximum(np.abs(a), np.abs(b))).max()), int(a.size)


def drift(trees: dict[str, Path], caches: dict[str, Path], args: argparse.Namespace) -> None:
    """Replay one synth archive with both trees; print the largest relative change per output."""
    work = Path(tempfile.mkdtemp(prefix="specreplay-drift-"))
    try:
        requests = max(1, args.drift_positions // POSITIONS_PER_REQUEST)
        subprocess.run(
            [sys.executable, "-m", "specreplay.cli", "synth", str(work / "archive"), "--requests",
             str(requests), "--shard-requests", "1000", "--depth", "5", "-q"],
            check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(TREE)},
        )  # fmt: skip
        outs = {}
        for name in trees:
            outs[name] = work / f"{name}.npz"
            child(trees[name], caches[name], args.threads, CHILD_DRIFT, str(work / "archive"),
                  str(outs[name]))  # fmt: skip
        old, new = (np.load(outs[name]) for name in trees)
        print(f"\ndrift: {requests * POSITIONS_PER_REQUEST:,}-position synth archive, "
              f"{' vs '.join(trees)} (largest relative change, values that differ)")  # fmt: skip
        worst = 0.0
        for key in old.files:
            rel, n = _rel(old[key].astype(float), new[key].astype(float))
            worst = max(worst, rel)
            print(f"  {key:45s} {rel:9.2e}  {n:>9,} of {old[key].size:,}")
        print(f"  largest relative change over all outputs: {worst:.2e}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("rev", nargs="?", default="main", help="the revision to compare against")
    ap.add_argument("--positions", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the two trees")
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per stage and process")
    ap.add_argument("--threads", type=int, default=0, help="NUMBA_NUM_THREADS (0: Numba's own)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--drift-positions", type=int, default=1_000_000, help="0 skips the drift")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="specreplay-vs-rev-"))
    try:
        trees = {args.rev: export(args.rev, tmp / "rev"), "this tree": TREE}
        caches = {args.rev: tmp / "cache-rev", "this tree": tmp / "cache-tree"}
        speed(trees, caches, args)
        if args.drift_positions > 0:
            drift(trees, caches, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Ratio tails, before and after issue 13 item 2: per-shard building and a 128-shard fold.

The before is :mod:`specreplay.replay.tails` at ``--old-rev`` (default ``777728b``, the commit
before the sort-free tails: a canonical sort per shard and a two-way merge of sorted tails),
read with ``git show`` and loaded as a module; the after is this checkout's. Both run on the
same tails in the same run, in fresh processes that alternate (old, new, new, old, ...), best
of ``--repeats`` each, after an untimed warm-up in each process (Numba kernels compiled or
loaded from the cache), so drift on a shared machine falls on both; the figures to trust are
the ratios.

The input is the shape of the 10 M-position run (docs/scale.md): 10,240,000 positions in 128
shards, 250 requests × 64 rounds × 5 positions per shard, 7 families × 4 buckets (per
request), D = 5, K = 4,096, and the three arms' ratios: the logging arm's (all exactly 1: every
value ties, the key decides), a near candidate's (products of lognormal(0, 0.5) factors) and a
far one's (lognormal(0, 1.5) factors, 30 % of rounds zero from a random depth on).

- **shard**: per shard and arm, ``TailAccumulator.add`` of the shard's rounds (one batch, as a
  shard of 80,000 positions is read) and ``.tail``, summed over the 384 (shard, arm) pairs
  (the data are generated outside the timer);
- **fold**: the shards' tails folded as ``fold_shards`` folds them (a balanced tree built as a
  binary counter, ``with_families`` on both sides of each merge, as ``merge_shards`` does),
  per arm. The old fold's tails come in canonical order, the new ones grouped but unordered
  within a group (nothing reads that order); the time ``ordered()`` would take on them is
  printed apart.

Each process prints a SHA-256 of the folded tails in canonical order (kept arrays and dropped):
the old and new must agree, or the bench exits 1.

    python bench/tails_speed.py [--shards 128] [--repeats 3] [--old-rev 777728b]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FAMILIES, BUCKETS, DEPTH = 7, 4, 5
REQUESTS, ROUNDS = 250, 64  # per shard
ARMS = 3


def load(which: str, rev: str) -> ModuleType:
    """The tails module: this checkout's (``new``) or the one at ``rev`` (``old``)."""
    if which == "new":
        import specreplay.replay.tails as mod

        return mod
    src = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:specreplay/replay/tails.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # a stable path: Numba's cache of the old kernels is then reused by the next process
    path = Path(tempfile.gettempdir()) / "specreplay-bench-tails" / f"tails_old_{rev}.py"
    path.parent.mkdir(exist_ok=True)
    if not path.exists() or path.read_text() != src:
        path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"tails_old_{rev}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def shard_rounds(shard: int, arm: int) -> tuple[np.ndarray, ...]:
    """One shard's rounds for one arm: family, bucket, key, depth (n,) and ratio (n, D)."""
    rng = np.random.default_rng([shard, 1])  # requests: the same for every arm
    keys = rng.integers(0, 2**63, REQUESTS, dtype=np.uint64)
    fam = rng.integers(0, FAMILIES, REQUESTS).astype(np.int32)
    bkt = rng.integers(0, BUCKETS, REQUESTS).astype(np.int32)
    n = REQUESTS * ROUNDS
    req = np.repeat(np.arange(REQUESTS), ROUNDS)
    depth = np.where(rng.random(n) < 0.9, DEPTH, rng.integers(1, DEPTH, n)).astype(np.int32)
    r = np.random.default_rng([shard, 2, arm])
    if arm == 0:
        ratio = np.ones((n, DEPTH))
    else:
        ratio = np.cumprod(r.lognormal(0.0, 0.5 if arm == 1 else 1.5, (n, DEPTH)), axis=1)
        if arm == 2:
            zero = r.random(n) < 0.3
            from_depth = r.integers(0, DEPTH, n)
            ratio[zero[:, None] & (np.arange(DEPTH)[None, :] >= from_depth[:, None])] = 0.0
    ratio[np.arange(DEPTH)[None, :] >= depth[:, None]] = np.nan  # as the estimator leaves it
    return fam[req], bkt[req], keys[req], depth, ratio


def build(mod: ModuleType, shards: int) -> tuple[float, list[list[Any]]]:
    """Per-shard tails of every arm; the time of add + tail summed (generation excluded)."""
    took = 0.0
    tails: list[list[Any]] = [[] for _ in range(ARMS)]
    for s in range(shards):
        for a in range(ARMS):
            data = shard_rounds(s, a)
            t0 = time.perf_counter()
            acc = mod.TailAccumulator(BUCKETS, DEPTH)
            acc.add(*data)
            tail = acc.tail
            took += time.perf_counter() - t0
            tails[a].append(tail)
    return took, tails


def fold(mod: ModuleType, tails: list[Any]) -> Any:
    """``fold_shards``' tree over one arm's shard tails (``merge_shards``' family remaps)."""
    ident = np.arange(FAMILIES, dtype=np.int64)

    def merge(a: Any, b: Any) -> Any:
        return mod.RatioTail.merge(
            a.with_families(ident, FAMILIES), b.with_families(ident, FAMILIES)
        )

    runs: list[tuple[int, Any]] = []
    for t in tails:
        runs.append((1, t))
        while len(runs) > 1 and runs[-2][0] == runs[-1][0]:
            (n, a), (_, b) = runs[-2], runs[-1]
            runs[-2:] = [(2 * n, merge(a, b))]
    while len(runs) > 1:
        (n, a), (m, b) = runs[-2], runs[-1]
        runs[-2:] = [(n + m, merge(a, b))]
    return runs[0][1]


def digest(tails: list[Any]) -> str:
    h = hashlib.sha256()
    for t in tails:
        for name in ("family", "bucket", "depth", "request_key", "value", "dropped"):
            h.update(np.ascontiguousarray(getattr(t, name)).tobytes())
    return h.hexdigest()


def worker(which: str, rev: str, shards: int) -> None:
    """One timed process: warm up, build, fold; print the figures as JSON."""
    mod = load(which, rev)
    _, warm = build(mod, 2)  # compile or load every kernel
    for arm in warm:
        t = fold(mod, arm)
        if which == "new":
            t.ordered()
    shard_s, tails = build(mod, shards)
    t0 = time.perf_counter()
    folded = [fold(mod, arm) for arm in tails]
    t1 = time.perf_counter()
    if which == "new":  # the old fold's tails are in canonical order, the new ones are not
        folded = [t.ordered() for t in folded]
    t2 = time.perf_counter()
    print(
        json.dumps(
            {
                "shard": shard_s,
                "fold": t1 - t0,
                "order": t2 - t1,
                "entries": [int(t.value.shape[0]) for t in folded],
                "digest": digest(folded),
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--old-rev", default="777728b")
    ap.add_argument("--worker", choices=["old", "new"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.old_rev, args.shards)
        return
    positions = args.shards * REQUESTS * ROUNDS * DEPTH
    print(
        f"{positions:,} positions in {args.shards} shards, {ARMS} arms, {FAMILIES} families × "
        f"{BUCKETS} buckets × D = {DEPTH}; old = {args.old_rev}, new = this checkout; fresh "
        f"process each, alternating, best of {args.repeats}"
    )
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    for i in range(args.repeats):
        for which in ("old", "new") if i % 2 == 0 else ("new", "old"):
            out = subprocess.run(
                [sys.executable, __file__, "--worker", which, "--old-rev", args.old_rev,
                 "--shards", str(args.shards)],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            runs[which].append(json.loads(out.splitlines()[-1]))
    digests = {r["digest"] for rs in runs.values() for r in rs}
    stages = ("shard", "fold", "order")
    best = {w: {k: min(r[k] for r in rs) for k in stages} for w, rs in runs.items()}
    print(f"kept entries per arm after the fold: {runs['new'][0]['entries']}")
    for stage, label in (("shard", "per-shard tails (add + tail)"), ("fold", "fold of the shards")):
        o, n = best["old"][stage], best["new"][stage]
        print(f"  {label:34s} old {o:7.3f} s   new {n:7.3f} s   old/new {o / n:5.2f}×")
    o = best["old"]["shard"] + best["old"]["fold"]
    n = best["new"]["shard"] + best["new"]["fold"]
    print(f"  {'both':34s} old {o:7.3f} s   new {n:7.3f} s   old/new {o / n:5.2f}×")
    print(
        f"  (not in the run: putting the new fold's tails in canonical order, as the old ones "
        f"came, would take {best['new']['order']:.3f} s more)"
    )
    if len(digests) != 1:
        print("MISMATCH: the old and new tails differ", file=sys.stderr)
        sys.exit(1)
    print("old and new folded tails identical (SHA-256 of every array)")


if __name__ == "__main__":
    main()

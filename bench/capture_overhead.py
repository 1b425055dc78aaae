"""The recorder's cost to the engine: calling-thread µs per round, and bytes per position on disk.

Issue 12's target: ≤ 50 µs of the calling thread per round at 5 positions, top-32.

- **Baseline (the floor)**: what any recorder must do on the calling thread: copy the round's
  arrays (drafted ids (5,), target probabilities, candidate ids and q, each (5, 32)) and
  ``queue.put_nowait`` them. Every other figure is printed as a ratio to it.
- **exact-q, background gated**: :meth:`Recorder.round` with the background thread held on an
  Event, so the figure is the calling thread's own work (sample check, shape checks, the drafted
  id among the candidates, copies, ``put_nowait``).
- **exact-q, background running**: the same rounds while the background thread builds frames
  and writes, paced as an engine's steps (64 rounds, then 5 ms of GPU work outside the GIL:
  12,800 rounds/s); the 99th percentile of one call and the rounds dropped by a full queue are
  printed. The two threads share the GIL, so the background's Python work can delay a call.
- **background**: the background thread's time per round (frames, the policy law in logits
  mode, and the Parquet write at close), measured by draining the gated queue through ``close``.
- **logits mode, V = 32,000**: draft logits and target probabilities (5, 32,000) float32 per
  round; the calling thread copies both (1.3 MB), which dominates its time.
- **bytes per position**: the same rounds recorded as a Parquet folder with lz4 (the default) and
  with zstd: the shards' bytes over the rows. Twice: with the toy's float64 values (every
  significand bit used: the worst case for compression), and with the float columns passed as
  float32 tensors, as an engine holds them (written as float64, their low 29 bits zero).

Input: the toy pair's rounds (``specreplay.sim.synth.simulate_shard``, the demo's logging arm
``top32:t0.7@5``) of ``--requests`` requests × 64 rounds, replayed into the recorder in exact-q
mode (their ``cand_ids``, ``emitted_q``, ``draft_logprobs``, ``target_probs``). Timings are the
best of ``--repeats``; folders are temporary and deleted at the end.

    python bench/capture_overhead.py [--requests 320] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from specreplay.capture import Recorder
from specreplay.sim.synth import SynthConfig, SynthShard, request_ids, simulate_shard

ARM = "top32:t0.7@5"
DEPTH, K, V_LOGITS = 5, 32, 32_000
FLOATS = ("target_probs", "emitted_q", "draft_logprobs")
STEP_ROUNDS, STEP_PAUSE = 64, 0.005  # the paced engine: 64 rounds a step, 5 ms of GPU work


def rounds_of(shard: SynthShard, n_rounds: int) -> list[tuple[str, int, dict[str, Any]]]:
    """The shard's rounds as Recorder.round arguments (exact-q mode)."""
    out = []
    for rr in range(shard.round_context.shape[0]):
        lo, hi = rr * DEPTH, (rr + 1) * DEPTH
        acc = shard.accepted[lo:hi]
        out.append(
            (
                shard.request_ids[rr // n_rounds],
                rr % n_rounds,
                {
                    "drafted_ids": shard.drafted_id[lo:hi],
                    "target_probs": shard.target_probs[lo:hi],
                    "accepted": int(np.argmin(acc)) if not acc.all() else DEPTH,
                    "family": "chat",
                    "context_tokens": int(shard.round_context[rr]),
                    "cand_ids": shard.cand_ids[lo:hi],
                    "emitted_q": shard.emitted_q[lo:hi],
                    "draft_logprobs": shard.draft_logprobs[lo:hi],
                },
            )
        )
    return out


def floor(rounds: list[tuple[str, int, dict[str, Any]]]) -> float:
    """Seconds for copy + put_nowait of every round's four arrays (the baseline)."""
    q: queue.Queue[Any] = queue.Queue(maxsize=len(rounds) + 1)
    t0 = time.perf_counter()
    for _rid, _r, a in rounds:
        q.put_nowait(
            (
                np.array(a["drafted_ids"]),
                np.array(a["target_probs"]),
                np.array(a["cand_ids"]),
                np.array(a["emitted_q"]),
            )
        )
    return time.perf_counter() - t0


def gated(folder: Path, rounds: list[tuple[str, int, dict[str, Any]]]) -> list[float]:
    """[calling-thread seconds with the background held, background seconds to drain + close]."""
    release = threading.Event()
    big = len(rounds) + 1
    rec = Recorder(folder, logging_arm=ARM, queue_rounds=big, queue_bytes=2**40)
    frame = rec._frame

    def held(batch: list[Any]) -> Any:
        release.wait()
        return frame(batch)

    rec._frame = held  # type: ignore[method-assign]
    t0 = time.perf_counter()
    for rid, r, a in rounds:
        rec.round(rid, r, **a)
    t1 = time.perf_counter()
    release.set()
    counts = rec.close()
    t2 = time.perf_counter()
    assert counts.rounds_recorded == len(rounds), counts
    return [t1 - t0, t2 - t1]


def concurrent(folder: Path, rounds: list[tuple[str, int, dict[str, Any]]]) -> list[float]:
    """[calling-thread seconds with the background running, p99 of one call, rounds dropped].

    The engine's steps: STEP_ROUNDS rounds (a batch of requests), then STEP_PAUSE seconds of
    GPU work during which the calling thread does not hold the GIL.
    """
    rec = Recorder(folder, logging_arm=ARM)
    each = np.empty(len(rounds))
    for i, (rid, r, a) in enumerate(rounds):
        s = time.perf_counter()
        rec.round(rid, r, **a)
        each[i] = time.perf_counter() - s
        if i % STEP_ROUNDS == STEP_ROUNDS - 1:
            time.sleep(STEP_PAUSE)
    counts = rec.close()
    return [float(each.sum()), float(np.quantile(each, 0.99)), counts.rounds_dropped_queue_full]


def best(fn: Callable[[], list[float]], repeats: int) -> list[float]:
    """Elementwise minimum over repeats (after one warm-up run)."""
    fn()
    runs = [fn() for _ in range(repeats)]
    return [min(r[i] for r in runs) for i in range(len(runs[0]))]


def logits_rounds(n: int, seed: int) -> list[tuple[str, int, dict[str, Any]]]:
    """``n`` logits-mode rounds at V = 32,000 (8 distinct tensors, reused)."""
    rng = np.random.default_rng(seed)
    pool = []
    for _ in range(8):
        logits = rng.normal(0.0, 3.0, size=(DEPTH, V_LOGITS)).astype(np.float32)
        target = rng.dirichlet(np.full(V_LOGITS, 0.05), size=DEPTH).astype(np.float32)
        pool.append((logits, target, np.argmax(logits, axis=1)))
    out = []
    for i in range(n):
        logits, target, drafted = pool[i % 8]
        kw = {"drafted_ids": drafted, "target_probs": target, "accepted": i % 6}
        out.append((f"req-{i // 16}", i % 16, {**kw, "draft_logits": logits}))
    return out


def shard_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("part-*"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=320)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cfg = SynthConfig(n_requests=args.requests, rounds=64, depth=DEPTH)
    shard = simulate_shard(cfg, 7, request_ids(args.requests))
    rounds = rounds_of(shard, 64)
    n = len(rounds)
    tmp = Path(tempfile.mkdtemp(prefix="capture-bench-"))
    k = [0]

    def fresh() -> Path:
        k[0] += 1
        return tmp / f"run{k[0]}"

    try:
        print(f"{n:,} rounds × {DEPTH} positions, top-{K} ({ARM}); load {os.getloadavg()[0]:.1f}")
        base = best(lambda: [floor(rounds)], args.repeats)[0] / n * 1e6
        g = best(lambda: gated(fresh(), rounds), args.repeats)
        c = best(lambda: concurrent(fresh(), rounds), args.repeats)
        cal, bg = g[0] / n * 1e6, g[1] / n * 1e6
        print(f"  baseline: copy + put_nowait        {base:7.1f} µs/round   1.00×")
        print(f"  exact-q, background gated         {cal:7.1f} µs/round   {cal / base:.2f}×")
        conc = c[0] / n * 1e6
        print(
            f"  exact-q, background running       {conc:7.1f} µs/round   {conc / base:.2f}×"
            f"   (p99 of one call {c[1] * 1e6:.0f} µs; dropped {int(c[2]):,} rounds)"
        )
        print(f"  background (frames + write)       {bg:7.1f} µs/round   {bg / base:.2f}×")
        n_l = 600
        lrounds = logits_rounds(n_l, 1)
        lg = best(lambda: gated(fresh(), lrounds), args.repeats)
        print(
            f"  logits mode V={V_LOGITS:,}, gated     {lg[0] / n_l * 1e6:7.1f} µs/round   "
            f"{lg[0] / n_l * 1e6 / base:.2f}×   (background {lg[1] / n_l * 1e6:.0f} µs/round)"
        )
        f32 = [
            (rid, r, {**a, **{c: a[c].astype(np.float32) for c in FLOATS}}) for rid, r, a in rounds
        ]
        for label, data in (("float64 values", rounds), ("float32 tensors", f32)):
            for codec in ("lz4", "zstd"):
                folder = fresh()
                rec = Recorder(folder, logging_arm=ARM, compression=codec, queue_rounds=n + 1)
                for rid, r, a in data:
                    rec.round(rid, r, **a)
                counts = rec.close()
                assert counts.rounds_recorded == n, counts
                size = shard_bytes(folder)
                print(
                    f"  Parquet {codec:4}, {label:15}: {size / counts.rows:6.1f} bytes/position "
                    f"({size:,} bytes)"
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Importance P(A ≥ k) of the logging arm against the MEASURED frequency, over many seeds.

For the logging arm the importance weight w_k = Π_{j≤k} min(1, p/q^L)(x_j) and the archived
indicator 1{A ≥ k} have the same expectation given the drafted tokens, so per seed
z_k = δ_k / SE_k (δ_k the mean paired difference over rounds, SE_k clustered by request, as in
``tests/test_importance.py``) should be standard normal at every depth k. This prints, for the
built-in world at ``--depth`` positions, each seed's z and per k their mean, SD and the share
beyond ±1.96 (docs/calibration.md, "Is the replay right? Live ground truth").

    PYTHONPATH=. python bench/measured_survival_z.py [--depth 8] [--requests 2000] [--seeds 0:31]
"""

from __future__ import annotations

import argparse
import math
import statistics

import numpy as np

from specreplay.replay.estimators import get_estimator
from specreplay.sim.arms import parse_arm
from specreplay.sim.policy import LawCache
from specreplay.sim.synth import SynthConfig
from specreplay_testing.livetruth import round_batch, sample_starts


def z_scores(depth: int, n_requests: int, seed: int) -> list[float]:
    """Return z_k, k = 1..depth, for one seed of the built-in world (every round of it)."""
    cfg = SynthConfig(n_requests=n_requests, rounds=64, depth=depth)
    starts = sample_starts(cfg, seed, n_starts=n_requests * 64, rounds_per_request=64)
    b = round_batch(starts, cfg)
    arm = parse_arm(f"top32:t0.7@{depth}")
    cache = LawCache(b.offsets, b.draft_logprobs)
    v = get_estimator("importance").rounds(
        b, arm, cache, seed=0, replicates=0, max_depth=depth, logging=None
    )
    n_req = int(b.round_request.max()) + 1
    n = np.bincount(b.round_request, minlength=n_req).astype(float)
    out = []
    for k in range(1, depth + 1):
        diff = v.surv[:, k - 1] - (b.measured_accepted >= k)
        d = np.bincount(b.round_request, weights=diff, minlength=n_req)
        delta = d.sum() / n.sum()
        se = math.sqrt(n_req / (n_req - 1) * ((d - delta * n) ** 2).sum()) / n.sum()
        out.append(float(delta / se))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--seeds", default="0:31", help="first:end (end excluded)")
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.seeds.split(":"))
    rows = []
    for seed in range(lo, hi):
        z = z_scores(args.depth, args.requests, seed)
        rows.append(z)
        print(f"seed {seed:3d}: " + " ".join(f"{x:+.2f}" for x in z), flush=True)
    print("k   mean     SD   |z|>1.96")
    for k in range(args.depth):
        zs = [r[k] for r in rows]
        beyond = sum(abs(x) > 1.96 for x in zs) / len(zs)
        print(f"{k + 1:<3d} {statistics.mean(zs):+.2f}  {statistics.pstdev(zs):5.2f}  {beyond:.3f}")
    every = [x for r in rows for x in r]
    print(
        f"all {statistics.mean(every):+.2f}  {statistics.pstdev(every):5.2f}  "
        f"{sum(abs(x) > 1.96 for x in every) / len(every):.3f} ({len(every)} z, {len(rows)} seeds)"
    )


if __name__ == "__main__":
    main()

"""Paired bootstrap speed at 100,000 requests against scipy.stats.bootstrap (issue 2).

Baseline, measured in the same run: ``scipy.stats.bootstrap`` on the same paired statistic
(Δ = Σt_b/Σn_b − Σt_a/Σn_a over requests), the same n_boot, method percentile, the faster of
batch 20 and batch 100. specreplay: ``bootstrap_sums`` (the kernel, ``--stratify none``, one cell)
and ``compare`` (the whole pooled comparison: percentile, BCa with its O(n) jackknife, TOST).
Best of 3 for every timing; the first (compiling) call is excluded.

    python bench/bootstrap_speed.py [--requests 100000] [--quick]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np


def best_of(fn: Callable[[], object], k: int = 3) -> float:
    times = []
    for _ in range(k):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    from scipy import stats

    from specreplay.stats.bootstrap import PairedSums, bootstrap_sums
    from specreplay.stats.compare import compare

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true", help="one scipy batch size, best of 1")
    args = ap.parse_args()
    n = args.requests
    rng = np.random.default_rng(0)
    na = rng.integers(8, 80, n).astype(float)
    p = rng.beta(6, 3, n)
    ta = na + rng.binomial((5 * na).astype(int), p)
    tb = na + rng.binomial((5 * na).astype(int), np.clip(p + 0.01, 0, 1))
    ps = PairedSums(
        tuple(f"r{i}" for i in range(n)),
        rng.integers(0, 2**63, n).astype(np.uint64),
        np.zeros(n, np.int32),
        np.arange(n),
        np.zeros(n, np.int32),
        na, ta, na.copy(), tb,
        ("all",), ("all",),
    )  # fmt: skip

    def stat(a_n, a_t, b_n, b_t, axis=-1):  # type: ignore[no-untyped-def]
        return b_t.sum(axis) / b_n.sum(axis) - a_t.sum(axis) / a_n.sum(axis)

    k = 1 if args.quick else 3
    bootstrap_sums(ps, n_boot=10, seed=0, stratify="none")  # compile / load cache
    compare(ps, arm_a="a", arm_b="b", n_boot=100, stratify="none")
    print(f"paired ratio-of-sums bootstrap, {n:,} requests, best of {k}")
    b = 2000
    scipy_t = {}
    for batch in (20,) if args.quick else (20, 100):
        scipy_t[batch] = best_of(
            lambda batch=batch: stats.bootstrap(
                (na, ta, na, tb), stat, paired=True, vectorized=True, n_resamples=b,
                batch=batch, method="percentile", rng=np.random.default_rng(1),
            ),
            k,
        )  # fmt: skip
        print(f"  scipy percentile, n_boot {b}, batch {batch}: {scipy_t[batch]:.2f} s")
    base = min(scipy_t.values())
    ours = best_of(lambda: bootstrap_sums(ps, n_boot=b, seed=0, stratify="none"), k)
    print(f"  specreplay kernel, n_boot {b}: {ours:.3f} s  ->  {base / ours:.1f}x scipy "
          "(target >= 12x)")  # fmt: skip
    for nb, target in ((2000, 2.0), (10_000, 3.0)):
        t = best_of(lambda nb=nb: compare(ps, arm_a="a", arm_b="b", n_boot=nb, stratify="none"), k)
        print(f"  specreplay compare (studentized + BCa + TOST), n_boot {nb}: {t:.2f} s "
              f"(target < {target:.0f} s)")  # fmt: skip


if __name__ == "__main__":
    main()

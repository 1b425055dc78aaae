"""Paired bootstrap speed at 100,000 requests against scipy.stats.bootstrap (issue 2).

Baseline, measured in the same run: ``scipy.stats.bootstrap`` on the same paired statistic
(Δ = Σt_b/Σn_b − Σt_a/Σn_a over requests), the same n_boot, method percentile, the faster of
batch 20 and batch 100. specreplay: ``bootstrap_sums`` (the kernel, ``--stratify none``, one cell)
and ``compare`` (the whole pooled comparison: percentile, BCa with its O(n) jackknife, TOST).
Best of 3 for every timing; the first (compiling) call is excluded.

    python bench/bootstrap_speed.py [--requests 100000] [--quick]
    python bench/bootstrap_speed.py --candidates [--requests 100000]

``--candidates`` (issue 10) times each candidate interval of the hard-case study
(``bench/hardcases.py``) for one cell, per interval at 50 requests and at ``--requests``, with
n_boot 999 and 10,000 for the resampling ones: the package's studentized (``bootstrap_sums`` +
``bootstrap_moments`` + ``cell_standard_errors``) and BCa (``bca_interval`` with its O(n)
jackknife), single-cell numba kernels for the pairs bootstrap-t with Hall's cubic transform
and the log-ratio (one pass for the sums, one for the residual moments of each replicate) and
for the wild cluster bootstrap-t (one weight per request, the seven replicate sums of
``hardcases``), and the package's CR2-eff (:func:`specreplay.stats.cr2.paired_tests`; CR2-BM
costs the same O(n)).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from numba import njit, uint64
from numpy.typing import NDArray

from specreplay.sim.rng import STREAM_BOOTSTRAP, stream_bits, uniform_bits


@njit(cache=True)
def pairs_hall(
    d: NDArray[np.float64], x: NDArray[np.float64], n_boot: int, seed: np.uint64
) -> NDArray[np.float64]:
    """Replicates (θ*, SE*, g(T*)) of θ = Σd/Σx: one pass for the sums, one for the moments."""
    m = d.shape[0]
    mu = uint64(m)
    th = d.sum() / x.sum()
    idx = np.empty(m, np.int64)
    out = np.empty((3, n_boot))
    for b in range(n_boot):
        base = uniform_bits(seed, uint64(b), 0, 0, STREAM_BOOTSTRAP)
        sd = 0.0
        sx = 0.0
        for i in range(m):
            j = np.int64(((stream_bits(base, i) >> uint64(32)) * mu) >> uint64(32))
            idx[i] = j
            sd += d[j]
            sx += x[j]
        ts = sd / sx
        m2 = 0.0
        m3 = 0.0
        for i in range(m):
            e = d[idx[i]] - ts * x[idx[i]]
            m2 += e * e
            m3 += e * e * e
        se = np.sqrt(m / (m - 1.0) * m2) / sx
        t = (ts - th) / se if se > 0 else 0.0
        g = (m3 / m) / (m2 / m) ** 1.5 if m2 > 0 else 0.0
        a = g / (3 * np.sqrt(m))
        out[0, b] = ts
        out[1, b] = se
        out[2, b] = t + a * t * t + a * a * t**3 / 3 + g / (6 * np.sqrt(m))
    return out


@njit(cache=True)
def wild_t(
    d: NDArray[np.float64], x: NDArray[np.float64], n_boot: int, seed: np.uint64, theta0: float
) -> NDArray[np.float64]:
    """Wild cluster bootstrap-t (Mammen weights, one per request) of θ = Σd/Σx under θ₀."""
    m = d.shape[0]
    xs = x.sum()
    sxx = (x * x).sum()
    lo = -(np.sqrt(5.0) - 1) / 2
    hi = (np.sqrt(5.0) + 1) / 2
    pl = (np.sqrt(5.0) + 1) / (2 * np.sqrt(5.0))
    out = np.empty(n_boot)
    for b in range(n_boot):
        base = uniform_bits(seed, uint64(b), 1, 0, STREAM_BOOTSTRAP)
        q = np.zeros(7)
        for i in range(m):
            u = float(stream_bits(base, i) >> uint64(11)) * (1.0 / 9007199254740992.0)
            v = lo if u < pl else hi
            e = d[i] - theta0 * x[i]
            q[0] += e * v
            q[2] += e * e * v * v
            q[5] += e * x[i] * v
        r = q[0] / xs
        ss = m / (m - 1.0) * (q[2] - 2 * r * q[5] + r * r * sxx) / (xs * xs)
        out[b] = r / np.sqrt(ss) if ss > 0 else 0.0
    return out


def _time_cell(m: int, nb: int, rng: np.random.Generator) -> None:
    """Time every candidate on one cell of m requests with nb replicates."""
    from specreplay.stats.bootstrap import (
        PairedSums,
        bootstrap_moments,
        bootstrap_sums,
        point_sums,
    )
    from specreplay.stats.cr2 import paired_tests
    from specreplay.stats.intervals import bca_interval
    from specreplay.stats.studentized import Studentized, cell_standard_errors

    na = rng.integers(5, 61, m).astype(float)
    p = 0.25 + 0.5 * rng.beta(2, 2, m)
    ta = na + rng.binomial((5 * na).astype(int), p)
    tb = ta + rng.binomial((5 * na).astype(int) - (ta - na).astype(int), 0.01)
    d = tb - ta
    ps = PairedSums(
        tuple(f"r{i}" for i in range(m)), np.arange(m, dtype=np.uint64),
        np.zeros(m, np.int32), np.arange(m), np.zeros(m, np.int32),
        na, ta, na.copy(), tb, ("all",), ("all",),
    )  # fmt: skip
    sums = np.stack([na, ta, na, tb], axis=1)

    def studentized() -> object:
        s = bootstrap_sums(ps, n_boot=nb, seed=0)[:, 0, 0]
        mom = bootstrap_moments(ps, n_boot=nb, seed=0)
        pt = point_sums(ps)[0, 0]
        (se, ser), *_ = cell_standard_errors(mom, (0,), (0,), pt, s)
        reps = s[:, 3] / s[:, 2] - s[:, 1] / s[:, 0]
        th = pt[3] / pt[2] - pt[1] / pt[0]
        return Studentized.of(th, se, reps, ser).interval(0.95)

    def bca() -> object:
        s = bootstrap_sums(ps, n_boot=nb, seed=0)[:, 0, 0]
        reps = s[:, 3] / s[:, 2] - s[:, 1] / s[:, 0]
        jack = (d.sum() - d) / (na.sum() - na)
        return bca_interval(reps, d.sum() / na.sum(), jack, 0.95)

    def hall() -> object:
        return np.quantile(pairs_hall(d, na, nb, np.uint64(0))[2], [0.025, 0.975])

    def wild() -> object:
        t = wild_t(d, na, nb, np.uint64(0), d.sum() / na.sum())
        return np.quantile(t, [0.025, 0.975])

    runs = (
        ("studentized (package)", studentized),
        ("bca (package)", bca),
        ("hall / log bootstrap-t", hall),
        ("wild-mammen WCU", wild),
    )
    for name, fn in runs:
        fn()
        t = best_of(fn)
        print(f"  {m:>7,} requests, n_boot {nb:>6,}: {name:<24} {t * 1e3:10.2f} ms", flush=True)
    paired_tests(sums)
    t = best_of(lambda: paired_tests(sums), 5)
    print(f"  {m:>7,} requests: {'cr2-eff (package), no resampling':<40} {t * 1e3:10.3f} ms")


def candidates(n_big: int) -> None:
    """Time every candidate of the hard-case study for one cell (see the module docstring)."""
    rng = np.random.default_rng(0)
    print("candidate intervals of one cell (Δ), best of 3, first call excluded")
    for m in (50, n_big):
        for nb in (999, 10_000):
            _time_cell(m, nb, rng)


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
    ap.add_argument("--candidates", action="store_true", help="issue 10's candidate intervals")
    args = ap.parse_args()
    n = args.requests
    if args.candidates:
        candidates(n)
        return
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
        print(f"  specreplay compare (cr2-eff-hall default + BCa + TOST), n_boot {nb}: "
              f"{t:.2f} s (target < {target:.0f} s)")  # fmt: skip


if __name__ == "__main__":
    main()

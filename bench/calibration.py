"""Calibration study of the paired-bootstrap intervals (issue 5, item 5).

See docs/methods.md#the-verdict-rule.

Coverage of the two-sided 95% interval of Δ = R_b − R_a (and of Δ/R_a for the chosen method) at
cell sizes of 10, 20, 50, 100 and 500 requests, in two settings:

* ``archive``: requests drawn with replacement from the built-in archive as it was before issue
  14 (``specreplay demo``'s 2,000 requests, seed 0, at 5 positions: ``synth --depth 5``), replayed
  as ``top32:t0.7@5`` (a, float64 sampling) and ``top32:t0.7:dyadic8@5`` (b); the truth is the
  whole-archive Δ (ratio of sums over the 2,000 requests), so the sampling law is the archive's
  empirical law and the truth is exact.
* ``skewed``: a parametric model with heterogeneous, right-skewed per-request effects: rounds
  n_i uniform on 5..60, t_a = n + Binomial(4n, p_i) with p_i ~ Beta(6, 3),
  t_b = t_a + Poisson(n_i g_i) with g_i ~ 0.05·lognormal(−σ²/2, σ), σ = 0.5.
  Δ = E[n g]/E[n] = E[g] = 0.05 exactly (g independent of n), Δ/R_a = 0.05 / (1 + 4·2/3).
* ``heavy``: as ``skewed`` with n_i = ⌈lognormal(log 30, 0.8)⌉ and σ = 1 (a stress case).

Methods, all from the same B request-resampled replicates θ* of each dataset:

* ``percentile``: the α/2 and 1 − α/2 quantiles of θ* (issue 2's default);
* ``bca``: Efron's BCa with the leave-one-request-out jackknife acceleration;
* ``expanded``: Hesterberg's (2015) expanded percentile: the quantiles at Φ(±√(n/(n−1))·t_{n−1,
  α/2}) instead of α/2 (corrects the narrowness bias of the bootstrap at small n);
* ``t-boot``: θ̂ ± √(n/(n−1))·t_{n−1,1−α/2}·sd(θ*);
* ``studentized``: bootstrap-t with the delta-method (linearised) SE of each replicate:
  influence of request i on R = T/N is (t_i − R n_i)/N̄, so se² = Σ u_i² / n².

Every coverage figure carries its Monte Carlo error ±1.96·√(c(1 − c)/N). Datasets are drawn
with numpy (seeded); bootstrap draws use the package's counter-based generator
(:mod:`specreplay.sim.rng`, keyed by seed, replicate and dataset) and the multiply-shift map of
:func:`specreplay.stats.bootstrap.bootstrap_sums`.

A second part (``--production``) checks the acceptance row through the package itself: family
cells of 20 requests (each dataset one family of one :class:`PairedSums`, stratified), replicates
from :func:`bootstrap_sums` and the default interval of :mod:`specreplay.stats.intervals`.

A third part (``--study``, issue 10) is the hard-case study of :mod:`hardcases` (heavy-tailed
rounds, request-level random effects, skewed and sparse per-request effects, families that
differ, every candidate interval side by side); its options follow ``--study``.

Usage::

    PYTHONPATH=. python bench/calibration.py [--datasets 5000] [--n-boot 1000]
        [--sizes 10,20,50,100,500] [--settings archive,skewed] [--b-check] [--production]
        [--sums-cache PATH.npz]
    PYTHONPATH=. python bench/calibration.py --study [--datasets 1000] [--n-boot 999]
        [--sizes 10,20,50] [--grid rounds:effects:truths] [--seed 20261201] [--out PATH.json]
        [--md PATH.md] [--only cr2-eff]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
from numba import njit, prange, uint64
from numpy.typing import NDArray
from scipy import stats

from specreplay.sim.rng import STREAM_BOOTSTRAP, stream_bits, uniform_bits

METHODS = ("percentile", "bca", "expanded", "t-boot", "studentized")
# parametric settings: (σ of log request length, 0 for uniform 5..60 rounds; σ of log effect)
PARAMETRIC = {"skewed": (0.0, 0.5), "heavy": (0.8, 1.0)}
DELTA_SKEWED = 0.05
RA_SKEWED = 1.0 + 4.0 * 6.0 / 9.0


@njit(parallel=True, cache=True)
def _boot(
    data: NDArray[np.float64], n_boot: int, seed: np.uint64, out: NDArray[np.float64]
) -> None:
    """Bootstrap replicates of each dataset.

    Parameters
    ----------
    data : float64, (N, n, 4)
        n_a, t_a, n_b, t_b of each request of each of N datasets.
    out : float64, (4, N, B)
        Δ*, Δ*/R_a*, and the linearised SE of each (per replicate).
    """
    n_sets, n = data.shape[0], data.shape[1]
    mu = uint64(n)
    for s in prange(n_sets):
        idx = np.empty(n, np.int64)
        for b in range(n_boot):
            base = uniform_bits(seed, uint64(b), s, 0, STREAM_BOOTSTRAP)
            for i in range(n):
                bits = stream_bits(base, i)
                idx[i] = np.int64(((bits >> uint64(32)) * mu) >> uint64(32))
            na = ta = nb = tb = 0.0
            for i in range(n):
                na += data[s, idx[i], 0]
                ta += data[s, idx[i], 1]
                nb += data[s, idx[i], 2]
                tb += data[s, idx[i], 3]
            ra, rb = ta / na, tb / nb
            mna, mnb = na / n, nb / n
            su = sv = 0.0
            for i in range(n):
                ea = (data[s, idx[i], 1] - ra * data[s, idx[i], 0]) / mna
                eb = (data[s, idx[i], 3] - rb * data[s, idx[i], 2]) / mnb
                u = eb - ea
                v = (rb / ra) * (eb / rb - ea / ra)
                su += u * u
                sv += v * v
            out[0, s, b] = rb - ra
            out[1, s, b] = rb / ra - 1.0
            out[2, s, b] = math.sqrt(su) / n
            out[3, s, b] = math.sqrt(sv) / n


def _stat(data: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Δ and Δ/R_a of each dataset (N, n, 4) → (N,), (N,)."""
    s = data.sum(axis=1)
    ra, rb = s[:, 1] / s[:, 0], s[:, 3] / s[:, 2]
    return rb - ra, rb / ra - 1.0


def _lin_se(data: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Linearised (delta-method) SE of Δ and Δ/R_a of each dataset."""
    n = data.shape[1]
    s = data.sum(axis=1)
    ra, rb = (s[:, 1] / s[:, 0])[:, None], (s[:, 3] / s[:, 2])[:, None]
    ea = (data[:, :, 1] - ra * data[:, :, 0]) / (s[:, 0:1] / n)
    eb = (data[:, :, 3] - rb * data[:, :, 2]) / (s[:, 2:3] / n)
    u = eb - ea
    v = (rb / ra) * (eb / rb - ea / ra)
    return np.sqrt((u**2).sum(1)) / n, np.sqrt((v**2).sum(1)) / n


def _jack(data: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Leave-one-request-out Δ and Δ/R_a, (N, n) each."""
    loo = data.sum(axis=1)[:, None, :] - data
    ra, rb = loo[..., 1] / loo[..., 0], loo[..., 3] / loo[..., 2]
    return rb - ra, rb / ra - 1.0


def _quantiles(sorted_reps: NDArray[np.float64], p: NDArray[np.float64]) -> NDArray[np.float64]:
    """Linear-interpolated quantiles (numpy's default) of each row at per-row probabilities."""
    b = sorted_reps.shape[1]
    h = np.clip(p, 0.0, 1.0) * (b - 1)
    k = np.clip(np.floor(h).astype(np.int64), 0, b - 2)
    w = h - k
    rows = np.arange(sorted_reps.shape[0])
    out: NDArray[np.float64] = (1 - w) * sorted_reps[rows, k] + w * sorted_reps[rows, k + 1]
    return out


def intervals(
    reps: NDArray[np.float64],
    ses: NDArray[np.float64],
    point: NDArray[np.float64],
    se_hat: NDArray[np.float64],
    jack: NDArray[np.float64],
    n: int,
    level: float,
) -> dict[str, tuple[NDArray[np.float64], NDArray[np.float64]]]:
    """Each method's (lo, hi) per dataset from replicates (N, B) and their SEs."""
    alpha = 1.0 - level
    nsets, b = reps.shape
    srt = np.sort(reps, axis=1)
    one = np.ones(nsets)
    out = {}
    out["percentile"] = (_quantiles(srt, alpha / 2 * one), _quantiles(srt, (1 - alpha / 2) * one))
    # BCa (Efron & Tibshirani 1993, Eq. 14.14-14.15), as specreplay.stats.intervals.bca_interval
    frac = ((reps < point[:, None]).sum(1) + (reps <= point[:, None]).sum(1)) / (2.0 * b)
    z0 = stats.norm.ppf(np.clip(frac, 0.5 / b, 1 - 0.5 / b))
    d = jack.mean(1, keepdims=True) - jack
    acc = (d**3).sum(1) / (6.0 * ((d**2).sum(1)) ** 1.5)
    bca = []
    for z in (stats.norm.ppf(alpha / 2), stats.norm.ppf(1 - alpha / 2)):
        num = z0 + z
        bca.append(_quantiles(srt, stats.norm.cdf(z0 + num / (1 - acc * num))))
    out["bca"] = (bca[0], bca[1])
    # expanded percentile (Hesterberg 2015, §"Expanded percentile interval")
    pe = stats.norm.cdf(math.sqrt(n / (n - 1)) * stats.t.ppf(alpha / 2, n - 1))
    out["expanded"] = (_quantiles(srt, pe * one), _quantiles(srt, (1 - pe) * one))
    half = math.sqrt(n / (n - 1)) * stats.t.ppf(1 - alpha / 2, n - 1) * reps.std(1, ddof=1)
    out["t-boot"] = (point - half, point + half)
    with np.errstate(divide="ignore", invalid="ignore"):
        tstar = np.sort((reps - point[:, None]) / ses, axis=1)
    tstar = np.where(np.isfinite(tstar), tstar, np.nan)
    qlo = np.nanquantile(tstar, alpha / 2, axis=1)
    qhi = np.nanquantile(tstar, 1 - alpha / 2, axis=1)
    out["studentized"] = (point - qhi * se_hat, point - qlo * se_hat)
    return out


def archive_population(cache: Path | None) -> NDArray[np.float64]:
    """Per-request (n_a, t_a, n_b, t_b) of the demo archive's float64 and dyadic8 replays."""
    if cache is not None and cache.exists():
        pop: NDArray[np.float64] = np.load(cache)
        return pop
    import tempfile

    from specreplay.pipelines.builders import write_synth_archive
    from specreplay.replay.engine import replay_archive
    from specreplay.replay.scan import no_progress
    from specreplay.sim.arms import parse_arm
    from specreplay.stats.buckets import DEFAULT_BUCKETS, Buckets
    from specreplay.stats.pairing import pair_arms

    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "archive"
        # the 5-position archive the study in docs/calibration.md was run on (the built-in
        # archive records 8 positions since issue 14)
        write_synth_archive(archive, 2000, 64, 250, 0, no_progress, depth=5)
        bk = Buckets.parse(DEFAULT_BUCKETS)
        arms = [parse_arm("top32:t0.7@5"), parse_arm("top32:t0.7:dyadic8@5")]
        res = replay_archive(archive, arms, seed=0, buckets=bk)
        ps, _ = pair_arms(res.arm_data(arms[0]), res.arm_data(arms[1]), buckets=bk)
    cols = [np.bincount(ps.piece_request, weights=v, minlength=ps.n_requests)
            for v in (ps.n_a, ps.t_a, ps.n_b, ps.t_b)]  # fmt: skip
    pop = np.stack(cols, axis=1)
    if cache is not None:
        np.save(cache, pop)
    return pop


def datasets(
    setting: str, pop: NDArray[np.float64] | None, n_sets: int, n: int, rng: np.random.Generator
) -> NDArray[np.float64]:
    """N datasets of n requests each, (N, n, 4)."""
    if setting == "archive":
        assert pop is not None
        return pop[rng.integers(0, pop.shape[0], (n_sets, n))]
    len_sigma, sigma = PARAMETRIC[setting]
    if len_sigma == 0.0:
        rounds = rng.integers(5, 61, (n_sets, n)).astype(np.float64)
    else:
        rounds = np.ceil(rng.lognormal(math.log(30.0), len_sigma, (n_sets, n)))
    p = rng.beta(6, 3, (n_sets, n))
    ta = rounds + rng.binomial((4 * rounds).astype(np.int64), p)
    g = DELTA_SKEWED * rng.lognormal(-(sigma**2) / 2, sigma, (n_sets, n))
    tb = ta + rng.poisson(rounds * g)
    return np.stack([rounds, ta, rounds.copy(), tb], axis=2).astype(np.float64)


def truth(setting: str, pop: NDArray[np.float64] | None) -> tuple[float, float]:
    """True Δ and Δ/R_a of the setting."""
    if setting == "archive":
        assert pop is not None
        s = pop.sum(0)
        ra, rb = s[1] / s[0], s[3] / s[2]
        return float(rb - ra), float(rb / ra - 1)
    return DELTA_SKEWED, DELTA_SKEWED / RA_SKEWED


def study(
    setting: str,
    pop: NDArray[np.float64] | None,
    n: int,
    n_sets: int,
    n_boot: int,
    seed: int,
    levels: tuple[float, ...] = (0.95, 0.90),
    chunk: int = 500,
) -> dict[tuple[str, str, float], dict[str, float]]:
    """Coverage, one-sided misses and median width of every method, by (method, scale, level)."""
    true_d, true_r = truth(setting, pop)
    rng = np.random.default_rng([seed, n, ["archive", *PARAMETRIC].index(setting)])
    acc: dict[tuple[str, str, float], dict[str, list[NDArray[np.float64]]]] = {}
    for start in range(0, n_sets, chunk):
        m = min(chunk, n_sets - start)
        data = datasets(setting, pop, m, n, rng)
        out = np.empty((4, m, n_boot))
        _boot(data, n_boot, np.uint64(seed * 1_000_003 + start), out)
        pd, pr = _stat(data)
        sd, sr = _lin_se(data)
        jd, jr = _jack(data)
        for scale, reps, ses, pt, se, jk, tv in (
            ("delta", out[0], out[2], pd, sd, jd, true_d),
            ("rel", out[1], out[3], pr, sr, jr, true_r),
        ):
            for level in levels:
                for meth, (lo, hi) in intervals(reps, ses, pt, se, jk, n, level).items():
                    a = acc.setdefault((meth, scale, level), {"lo": [], "hi": [], "w": []})
                    a["lo"].append(tv < lo)
                    a["hi"].append(tv > hi)
                    a["w"].append(hi - lo)
    res = {}
    for key, a in acc.items():
        below, above = np.concatenate(a["lo"]), np.concatenate(a["hi"])
        c = 1.0 - (below.mean() + above.mean())
        res[key] = {
            "coverage": float(c),
            "mc": 1.96 * math.sqrt(c * (1 - c) / below.shape[0]),
            "miss_lo": float(below.mean()),
            "miss_hi": float(above.mean()),
            "width": float(np.median(np.concatenate(a["w"]))),
            "N": below.shape[0],
        }
    return res


def production_check(
    n: int, n_sets: int, n_boot: int, seed: int, setting: str = "skewed"
) -> tuple[float, float, int]:
    """Coverage of the package's default 95% interval of family cells of n requests.

    Each dataset is one family of a single :class:`PairedSums` (stratified by family, so every
    family is resampled on its own, as a family cell is); the replicates, their moments and the
    studentized interval come from the package (:func:`bootstrap_sums`,
    :func:`bootstrap_moments`, :func:`specreplay.stats.studentized.cell_standard_errors`), as
    ``compare`` computes a family cell's ``lo``/``hi``.
    """
    from specreplay.stats.bootstrap import PairedSums, bootstrap_moments, bootstrap_sums
    from specreplay.stats.studentized import Studentized, cell_standard_errors

    rng = np.random.default_rng([seed, n, 2])
    hits = total = 0
    chunk = 1000
    for start in range(0, n_sets, chunk):
        m = min(chunk, n_sets - start)
        data = datasets(setting, None, m, n, rng).reshape(m * n, 4)
        k = m * n
        ps = PairedSums(
            request_ids=tuple(f"r{i}" for i in range(k)),
            request_keys=np.arange(k, dtype=np.uint64),
            family=np.repeat(np.arange(m, dtype=np.int32), n), piece_request=np.arange(k),
            piece_bucket=np.zeros(k, np.int32), n_a=data[:, 0], t_a=data[:, 1],
            n_b=data[:, 2], t_b=data[:, 3], families=tuple(f"f{i}" for i in range(m)),
            buckets=("all",),
        )  # fmt: skip
        s = bootstrap_sums(ps, n_boot=n_boot, seed=seed + start, stratify="family")[:, :, 0]
        mom = bootstrap_moments(ps, n_boot=n_boot, seed=seed + start, stratify="family")
        reps = s[..., 3] / s[..., 2] - s[..., 1] / s[..., 0]  # (B, m)
        pts = data.reshape(m, n, 4).sum(axis=1)
        for f in range(m):
            (se, se_reps), *_ = cell_standard_errors(mom, (f,), (0,), pts[f], s[:, f])
            theta = pts[f, 3] / pts[f, 2] - pts[f, 1] / pts[f, 0]
            lo, hi = Studentized.of(theta, se, reps[:, f], se_reps).interval(0.95)
            hits += lo <= DELTA_SKEWED <= hi
            total += 1
    c = hits / total
    return c, 1.96 * math.sqrt(c * (1 - c) / total), total


def main() -> None:
    import sys

    if "--study" in sys.argv[1:]:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from hardcases import main as study_main

        study_main([a for a in sys.argv[1:] if a != "--study"])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--datasets", type=int, default=5000)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--sizes", default="10,20,50,100,500")
    ap.add_argument("--settings", default="archive,skewed,heavy")
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--b-check", action="store_true", help="n = 20 again with B = 10,000")
    ap.add_argument("--production", action="store_true", help="acceptance row via the package")
    ap.add_argument("--no-study", action="store_true")
    ap.add_argument("--sums-cache", type=Path, default=None)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    settings = args.settings.split(",")
    pop = archive_population(args.sums_cache) if "archive" in settings else None
    if pop is not None:
        td, tr = truth("archive", pop)
        print(f"archive: {pop.shape[0]} requests, true Δ = {td:.5f}, Δ/R_a = {100 * tr:.3f}%")
    print(f"skewed: true Δ = {DELTA_SKEWED}, Δ/R_a = {100 * DELTA_SKEWED / RA_SKEWED:.3f}%")
    runs = [] if args.no_study else [(s, n, args.n_boot) for s in settings for n in sizes]
    if args.b_check:
        runs += [(s, 20, b) for s in settings for b in (args.n_boot, 10_000)]
    print(f"{args.datasets} datasets per row; coverage ± 1.96·MC SE; (miss below / above)")
    for setting, n, b in runs:
        t0 = time.perf_counter()
        res = study(setting, pop, n, args.datasets, b, args.seed)
        dt = time.perf_counter() - t0
        for level in (0.95, 0.90):
            for scale in ("delta", "rel"):
                cells = []
                for meth in METHODS:
                    r = res[(meth, scale, level)]
                    miss = f"({r['miss_lo']:.3f}/{r['miss_hi']:.3f})"
                    cells.append(
                        f"{meth} {r['coverage']:.3f}±{r['mc']:.3f} {miss} w{r['width']:.4g}"
                    )
                print(f"| {setting} | n={n} | B={b} | {level} | {scale} | " + " | ".join(cells)
                      + f" | {dt:.0f}s")  # fmt: skip
    if args.production:
        for setting in ("skewed", "heavy"):
            for n in sizes:
                c, mc, total = production_check(n, args.datasets, args.n_boot, args.seed, setting)
                print(f"production: {setting} family cells of {n} requests, default 95% interval,"
                      f" B={args.n_boot}: coverage {c:.4f} ± {mc:.4f} over {total} intervals",
                      flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

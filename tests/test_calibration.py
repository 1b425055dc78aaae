"""Coverage tests of the intervals with stated false-failure rates and power: the studentized
bootstrap-t (the default until issue 10, still a candidate of the study) and BCa on the
issue-5 model, and the default CR2 interval (:mod:`specreplay.stats.cr2`) on a hard case of
issue 10's study.

Each test counts hits over K simulated datasets and passes when the count clears a threshold c.
Its design states two binomial figures, both checked in ``test_designs``:

* false failure: P(Bin(K, p_ok) < c), p_ok a lower bound of the correct method's coverage in
  this setting (from ``bench/calibration.py``, quoted per test), at most 0.01;
* power: P(Bin(K, p_bad) < c) against a named wrong interval whose coverage is at most p_bad,
  at least 0.99.

Datasets are resampled by the package's kernel (:func:`bootstrap_sums`): each dataset is one
family of one :class:`PairedSums`, stratified by family, so each is bootstrapped on its own as a
family cell is. The model is the calibration study's ``skewed`` setting: rounds n_i uniform on
5..60, t_a = n + Binomial(4n, p_i), p_i ~ Beta(6, 3), t_b = t_a + Poisson(n_i g_i) with skewed
heterogeneous per-request effects g_i ~ Δ·lognormal(−σ²/2, σ), σ = 0.5, so the true
Δ = E[g] = 0.05 and Δ/R_a = 0.05 / (1 + 4·2/3). Each request's rounds are split between two
context buckets (a share u_i ~ U(0.2, 0.8) in bucket 0), so the bucket cell is a domain estimate
with the request as the resampling unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy import stats

from specreplay.stats.bootstrap import PairedSums, bootstrap_moments, bootstrap_sums, point_sums
from specreplay.stats.intervals import bca_interval
from specreplay.stats.studentized import Studentized, cell_standard_errors

DELTA = 0.05
REL = DELTA / (1.0 + 4.0 * 6.0 / 9.0)


@dataclass(frozen=True)
class Design:
    """K datasets, pass when hits ≥ c (or misses ≤ c when ``upper``); coverage bounds."""

    k: int
    c: int
    p_ok: float  # lower bound of the correct method's hit rate
    p_bad: float  # upper bound of the wrong method's hit rate
    wrong: str
    upper: bool = False  # the count must stay at most c (false-EQUIVALENT rate)

    def false_failure(self) -> float:
        """P(the correct method fails)."""
        if self.upper:
            return float(stats.binom.sf(self.c, self.k, self.p_ok))
        return float(stats.binom.cdf(self.c - 1, self.k, self.p_ok))

    def power(self) -> float:
        """P(the wrong method fails); with ``upper``, p_bad is a lower bound of its rate."""
        if self.upper:
            return float(stats.binom.sf(self.c, self.k, self.p_bad))
        return float(stats.binom.cdf(self.c - 1, self.k, self.p_bad))


# bench/calibration.py, skewed setting, n = 100, B = 1,000 (5,000 datasets each): studentized
# 95% Δ 0.948 ± 0.006 (expanded percentile 0.945, BCa Δ/R_a 0.942); 90% coverage of these
# methods at n = 50 ≤ 0.90 + MC → bounds 0.935 (correct, with B = 500 here) and 0.905 (90%
# labelled 95%). Measured on these datasets (studentized): 2,819 and 2,818 of 3,000 (Δ, Δ/R_a);
# the 90% interval 2,681; bucket cell 2,851 (90%: 2,673); TOST false EQUIVALENT 155 (0.052)
COVER = Design(3000, 2762, 0.935, 0.905, "a 90% interval labelled 95%")
# bucket cells: the same bound (the bucket cell is a domain estimate of about 50% of the rounds)
BUCKET = Design(3000, 2762, 0.935, 0.905, "a 90% interval labelled 95%")
# 30 requests of 8 chunks each; resampling chunks (rounds) ignores the per-request effects:
# measured 0.94 (requests) and 0.73 (chunks) on these 400 datasets → bounds 0.92 and 0.80
CLUSTER = Design(400, 344, 0.92, 0.80, "chunks (rounds) resampled instead of requests")
# 4 families × 50 requests: Bonferroni (each at 1 − 0.05/4) family-wise ≥ 0.90 (measured 0.928
# here); unadjusted 95% intervals ≈ 0.94⁴ ≤ 0.82 (measured 0.79)
FAMILYWISE = Design(600, 516, 0.90, 0.82, "unadjusted 95% intervals in a family of 4")
# false EQUIVALENT at a true Δ = m: the upper 5% tail of the default 90% interval misses a
# right-skewed Δ more often than 5% (bench: 0.067 ± 0.007 at n = 50; ≤ 0.07 at n = 100); the
# TOST at the 80% interval (α = 0.10 labelled 0.05) declares EQUIVALENT ≥ 0.11 of the time
TOST = Design(3000, 248, 0.07, 0.10, "TOST at the 80% interval (α 0.10 as 0.05)", upper=True)
# BCa of Δ/R_a at n = 100 undercovers a little more (bench: 0.942 ± 0.006 at n = 100, B = 1,000;
# 0.930 here with B = 500) and its 90% interval covers ≤ 0.89 (0.877 ± 0.009 at n = 50)
BCA = Design(3000, 2719, 0.92, 0.89, "a 90% BCa interval labelled 95%")


def test_designs() -> None:
    for d in (COVER, BUCKET, CLUSTER, FAMILYWISE, TOST, BCA):
        assert d.false_failure() <= 0.01, d
        assert d.power() >= 0.99, d


def _requests(rng: np.random.Generator, shape: tuple[int, ...], sigma: float = 0.5,
              delta: float = DELTA) -> dict[str, NDArray[np.float64]]:  # fmt: skip
    n = rng.integers(5, 61, shape).astype(np.float64)
    p = rng.beta(6, 3, shape)
    ta = n + rng.binomial((4 * n).astype(np.int64), p)
    g = delta * rng.lognormal(-(sigma**2) / 2, sigma, shape)
    tb = ta + rng.poisson(n * g)
    return {"n": n, "ta": ta, "tb": tb, "p": p, "g": g}


def _paired(
    fam: NDArray[np.int64],
    req: NDArray[np.int64],
    bucket: NDArray[np.int32],
    vals: tuple[NDArray[np.float64], ...],
    n_fam: int,
    n_buckets: int,
) -> PairedSums:
    n_req = int(req.max()) + 1
    return PairedSums(
        request_ids=tuple(f"r{i}" for i in range(n_req)),
        request_keys=np.arange(n_req, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(1),
        family=np.asarray(fam, np.int32), piece_request=np.asarray(req, np.int64),
        piece_bucket=np.asarray(bucket, np.int32), n_a=vals[0], t_a=vals[1], n_b=vals[2],
        t_b=vals[3], families=tuple(f"f{i}" for i in range(n_fam)),
        buckets=tuple(f"b{i}" for i in range(n_buckets)),
    )  # fmt: skip


Pair = tuple[Studentized, Studentized]


def _studentized(
    ps: PairedSums, n_boot: int, seed: int, cells: list[tuple[tuple[int, ...], tuple[int, ...]]]
) -> list[Pair]:
    """The studentized replicates of Δ and Δ/R_a of each (families, buckets) cell (the package's
    :mod:`specreplay.stats.studentized`, the study's candidate)."""
    s = bootstrap_sums(ps, n_boot=n_boot, seed=seed)
    mom = bootstrap_moments(ps, n_boot=n_boot, seed=seed)
    pts = point_sums(ps)
    out = []
    for fi, bi in cells:
        point = pts[list(fi)][:, list(bi)].reshape(-1, 4).sum(axis=0)
        reps = s[:, list(fi)][:, :, list(bi)].reshape(n_boot, -1, 4).sum(axis=1)
        (se_d, sd), (se_r, sr), *_ = cell_standard_errors(mom, fi, bi, point, reps)
        ra, rb = point[1] / point[0], point[3] / point[2]
        ra_s, rb_s = reps[:, 1] / reps[:, 0], reps[:, 3] / reps[:, 2]
        out.append((Studentized.of(rb - ra, se_d, rb_s - ra_s, sd),
                    Studentized.of(rb / ra - 1.0, se_r, rb_s / ra_s - 1.0, sr)))  # fmt: skip
    return out


def _hits(tests: list[Studentized], level: float, truth: float) -> int:
    """How many of the default intervals at ``level`` cover the truth."""
    return sum(lo <= truth <= hi for lo, hi in (t.interval(level) for t in tests))


@pytest.fixture(scope="module")
def bucketed() -> dict[str, Any]:
    """COVER.k datasets of 100 requests, rounds split over two buckets; 500 replicates."""
    k, n = COVER.k, 100
    rng = np.random.default_rng(20261130)
    r = _requests(rng, (k, n))
    share = rng.uniform(0.2, 0.8, (k, n))
    n0 = np.maximum(1.0, np.round(r["n"] * share))
    n1 = r["n"] - n0
    # bucket 0 keeps its share of the request's rounds and a binomial share of its gains
    ta0 = n0 + rng.binomial((4 * n0).astype(np.int64), r["p"])
    ta1 = n1 + rng.binomial((4 * n1).astype(np.int64), r["p"])
    tb0 = ta0 + rng.poisson(n0 * r["g"])
    tb1 = ta1 + rng.poisson(n1 * r["g"])
    keep1 = (n1 > 0).ravel()
    req = np.arange(k * n)
    fam = np.repeat(np.arange(k), n)
    pieces_req = np.concatenate([req, req[keep1]])
    buckets = np.concatenate([np.zeros(k * n, np.int32), np.ones(int(keep1.sum()), np.int32)])
    vals = tuple(np.concatenate([a.ravel(), b.ravel()[keep1]])
                 for a, b in ((n0, n1), (ta0, ta1), (n0, n1), (tb0, tb1)))  # fmt: skip
    ps = _paired(fam, pieces_req, buckets, vals, k, 2)
    s = bootstrap_sums(ps, n_boot=500, seed=7)  # (B, k, 2, 4)
    fams = _studentized(ps, 500, 7, [((f,), (0, 1)) for f in range(k)])
    b0_st = _studentized(ps, 500, 7, [((f,), (0,)) for f in range(k)])
    tot = s.sum(axis=2)
    ra, rb = tot[..., 1] / tot[..., 0], tot[..., 3] / tot[..., 2]
    jack = []
    for f in range(k):  # leave-one-request-out Δ/R_a of each dataset (family cell)
        nr = n0[f] + n1[f]
        ta, tb = ta0[f] + ta1[f], tb0[f] + tb1[f]
        la = (ta.sum() - ta) / (nr.sum() - nr)
        lb = (tb.sum() - tb) / (nr.sum() - nr)
        jack.append((lb / la - 1.0, ta.sum() / nr.sum(), tb.sum() / nr.sum()))
    return {
        "n": n,
        "rel": rb / ra - 1.0,
        "st_delta": [d for d, _ in fams],
        "st_rel": [r for _, r in fams],
        "st_bucket0": [d for d, _ in b0_st],
        "jack": jack,
    }


def test_default_interval_covers_at_95_and_a_90_interval_would_not(
    bucketed: dict[str, Any],
) -> None:
    """Δ and Δ/R_a of family cells of 100 requests: hits ≥ COVER.c (false failure ≤ 1%); a
    90% interval labelled 95% fails with probability ≥ 0.99 (``test_designs``)."""
    assert _hits(bucketed["st_delta"], 0.95, DELTA) >= COVER.c
    assert _hits(bucketed["st_rel"], 0.95, REL) >= COVER.c
    # the planted wrong interval, on the same replicates, fails here (power shown, not assumed)
    assert _hits(bucketed["st_delta"], 0.90, DELTA) < COVER.c


def test_bca_on_the_relative_scale_covers(bucketed: dict[str, Any]) -> None:
    """BCa of Δ/R_a (jackknife acceleration): hits ≥ BCA.c; its 90% interval would fail."""
    hits = hits90 = 0
    for f, (jack, ra, rb) in enumerate(bucketed["jack"]):
        reps = bucketed["rel"][:, f]
        b95 = bca_interval(reps, rb / ra - 1.0, jack, 0.95)
        b90 = bca_interval(reps, rb / ra - 1.0, jack, 0.90)
        assert b95.lo is not None and b95.hi is not None
        assert b90.lo is not None and b90.hi is not None
        hits += b95.lo <= REL <= b95.hi
        hits90 += b90.lo <= REL <= b90.hi
    assert hits >= BCA.c
    assert hits90 < BCA.c


def test_bucket_cell_covers(bucketed: dict[str, Any]) -> None:
    """The bucket-0 cell (a domain estimate, the request resampled whole): hits ≥ BUCKET.c."""
    assert _hits(bucketed["st_bucket0"], 0.95, DELTA) >= BUCKET.c
    assert _hits(bucketed["st_bucket0"], 0.90, DELTA) < BUCKET.c


def test_tost_false_equivalent_rate_at_the_margin(bucketed: dict[str, Any]) -> None:
    """True Δ = m = 0.05: TOST at α = 0.05 says EQUIVALENT at most TOST.c times in 3,000
    (rate ≤ 0.083; false failure ≤ 1% if the rate is ≤ 0.07); the TOST of the 80% interval
    (α = 0.10 labelled 0.05) exceeds it with probability ≥ 0.99."""
    p = np.array([t.p_equivalence(DELTA) for t in bucketed["st_delta"]])
    assert np.count_nonzero(p < 0.05) <= TOST.c
    assert np.count_nonzero(p < 0.10) > TOST.c


def test_clustering_ignored_undercovers() -> None:
    """30 requests × 8 chunks of rounds with per-request effects: the request bootstrap covers
    (hits ≥ CLUSTER.c), the chunk bootstrap (clustering ignored) does not."""
    k, n, chunks = CLUSTER.k, 30, 8
    rng = np.random.default_rng(11)
    g = 0.3 * rng.lognormal(-0.125, 0.5, (k, n, 1))
    p = rng.beta(6, 3, (k, n, 1))
    c = rng.integers(3, 9, (k, n, chunks)).astype(np.float64)
    ta = c + rng.binomial((4 * c).astype(np.int64), np.broadcast_to(p, c.shape))
    tb = ta + rng.poisson(c * g)
    truth = 0.3  # E[g], g independent of the rounds
    fam = np.repeat(np.arange(k), n)
    req_vals = tuple(x.sum(axis=2).ravel() for x in (c, ta, c, tb))
    cells = [((f,), (0,)) for f in range(k)]
    by_req = _studentized(_paired(fam, np.arange(k * n), np.zeros(k * n, np.int32), req_vals,
                                  k, 1), 500, 3, cells)  # fmt: skip
    chunk_vals = tuple(x.ravel() for x in (c, ta, c, tb))
    m = k * n * chunks
    chunked = _paired(np.repeat(np.arange(k), n * chunks), np.arange(m), np.zeros(m, np.int32),
                      chunk_vals, k, 1)  # fmt: skip
    by_chunk = _studentized(chunked, 500, 3, cells)
    assert _hits([d for d, _ in by_req], 0.95, truth) >= CLUSTER.c
    assert _hits([d for d, _ in by_chunk], 0.95, truth) < CLUSTER.c


def test_bonferroni_familywise_coverage() -> None:
    """4 families × 50 requests per experiment: all four Bonferroni (1 − 0.05/4) intervals
    cover together in ≥ FAMILYWISE.c of 600 experiments; unadjusted 95% ones would not."""
    k, fams, n = FAMILYWISE.k, 4, 50
    rng = np.random.default_rng(5)
    r = _requests(rng, (k * fams, n))
    m = k * fams * n
    ps = _paired(np.repeat(np.arange(k * fams), n), np.arange(m), np.zeros(m, np.int32),
                 (r["n"].ravel(), r["ta"].ravel(), r["n"].ravel(), r["tb"].ravel()),
                 k * fams, 1)  # fmt: skip
    tests = [d for d, _ in _studentized(ps, 1000, 9, [((f,), (0,)) for f in range(k * fams)])]

    def familywise(level: float) -> int:
        cover = np.array([lo <= DELTA <= hi for lo, hi in (t.interval(level) for t in tests)])
        return int(np.count_nonzero(cover.reshape(k, fams).all(axis=1)))

    assert familywise(1.0 - 0.05 / fams) >= FAMILYWISE.c
    assert familywise(0.95) < FAMILYWISE.c


# ---------------------------------------------------------------- the CR2-eff default (issue 10)
#
# The model is the hard-case study's ``mild/sparse-mixed/free`` setting (bench/hardcases.py),
# re-implemented here: 4 families × 50 requests; rounds n_i uniform on 5..60; per round, arm a
# accepts A ~ Binomial(5, p_i) draft tokens (t_a = n + ΣA), p_i = 0.25 + 0.5·Beta(a_f, b_f);
# arm b by common random numbers: δ_i ≥ 0 adds Binomial(5 − A, δ_i/(1 − p_i)) per round,
# δ_i < 0 removes Binomial(A, −δ_i/p_i); δ_i = 0 with probability 0.85, else
# clip(±γ_f·lognormal(0, 1), −p_i, 1 − p_i) (+ with probability 0.8). Truth: Δ_f = 5·E_f[δ]
# (by quadrature below), R_a,f = 1 + 5·E_f[p]; the pooled truth weights families equally (every
# family has E[n] = 32.5). Requests are the clusters: most differ by nothing, a few by a lot, so
# the effective degrees of freedom are small and a z or (n − 1)-df interval undercovers.

HC_AB = ((2.0, 2.0), (4.0, 2.0), (2.0, 4.0), (1.0, 1.0))
HC_GAMMA = (0.05, 0.08, 0.12, 0.16)


def _hc_truth() -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Exact Δ and Δ/R_a of the 4 families and the pooled cell (index 4)."""
    from scipy import integrate

    def min_mean(g: float, c: float) -> float:  # E[min(g·L, c)], L lognormal(0, 1)
        lk = math.log(c / g)
        return g * (math.exp(0.5) * stats.norm.cdf(lk - 1) + (c / g) * stats.norm.sf(lk))

    delta, ra = [], []
    for (a, b), g in zip(HC_AB, HC_GAMMA, strict=True):

        def f(u: float, a: float = a, b: float = b, g: float = g) -> float:
            p = 0.25 + 0.5 * u
            return float(
                (0.8 * min_mean(g, 1 - p) - 0.2 * min_mean(g, p)) * stats.beta.pdf(u, a, b)
            )

        delta.append(5 * 0.15 * integrate.quad(f, 0, 1, epsabs=1e-14, limit=200)[0])
        ra.append(1 + 5 * (0.25 + 0.5 * a / (a + b)))
    d, r = np.array(delta), np.array(ra)
    d = np.append(d, d.mean())
    r = np.append(r, r.mean())
    return d, d / r


def _hc_rounds(
    rng: np.random.Generator, n_sets: int, n: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per-round rows (request index, n = 1, t_a, t_b) and per-request totals (n, t_a, t_b).

    Requests are numbered dataset-major, then family, then request (n per family).
    """
    shape = (n_sets, 4, n)
    rounds = rng.integers(5, 61, shape)
    a = np.broadcast_to(np.array([x for x, _ in HC_AB])[None, :, None], shape)
    b = np.broadcast_to(np.array([y for _, y in HC_AB])[None, :, None], shape)
    p = 0.25 + 0.5 * rng.beta(a, b)
    g = np.array(HC_GAMMA)[None, :, None]
    sign = np.where(rng.random(shape) < 0.8, 1.0, -1.0)
    delta = np.clip(sign * g * rng.lognormal(0.0, 1.0, shape), -p, 1 - p)
    delta = np.where(rng.random(shape) < 0.85, 0.0, delta).ravel()
    p = p.ravel()
    req = np.repeat(np.arange(p.size), rounds.ravel())
    acc = rng.binomial(5, p[req])
    up = rng.binomial(5 - acc, np.clip(delta[req] / (1 - p[req]), 0, 1))
    down = rng.binomial(acc, np.clip(-delta[req] / p[req], 0, 1))
    ta = 1.0 + acc
    tb = ta + np.where(delta[req] >= 0, up, -down)
    per_round = np.stack([req.astype(np.float64), np.ones_like(ta), ta, tb], axis=1)
    tot = np.stack([np.bincount(req, weights=w, minlength=p.size) for w in (
        np.ones_like(ta), ta, tb)], axis=1)  # fmt: skip
    return per_round, tot


# bench/hardcases.py, mild/sparse-mixed/free, n = 50, 4,000 datasets (``--only-cr2 --datasets
# 4000 --seed 20261202``): the default (cr2-eff-hall, with its forced rule) covers 0.9625 ±
# 0.0030 in its worst family cell (mean 0.968; Δ/R_a 0.963) and 0.965 ± 0.003 pooled; a z
# interval covers 0.881 (family) and 0.929 (pooled), a t interval with n − 1 df 0.887 and 0.930
# (cr2-eff's SE, same study). False failure at the study's figure, power against the wrong
# interval at a bound above its figure: test_cr2_designs.
CR2_FAMILY = Design(2400, 2280, 0.9625, 0.907, "z or (n − 1)-df interval (family cells of 50)")
CR2_POOLED = Design(1000, 946, 0.965, 0.930, "z or (n − 1)-df interval (pooled cells of 200)")
# rounds as the clusters instead of requests: measured on these cells 687 of 2,400 (0.29, with
# cr2-eff), far below the 0.96 with requests as the clusters; bound 0.85
CR2_ROUNDS = Design(2400, 2280, 0.9625, 0.85, "residuals per round instead of per request")


def test_cr2_designs() -> None:
    """False failure ≤ 0.002 each; power ≥ 0.97 (the pooled design's is 0.976: 1,000 pooled
    cells separate 0.965 from 0.930 no better within the test's time)."""
    for d in (CR2_FAMILY, CR2_POOLED, CR2_ROUNDS):
        assert d.false_failure() <= 0.002, d
        assert d.power() >= 0.97, d


@pytest.fixture(scope="module")
def hard_cells() -> dict[str, Any]:
    """CR2_POOLED.k datasets of 4 families × 50 requests: per-request totals and per-round rows."""
    rng = np.random.default_rng(20261201)
    per_round, tot = _hc_rounds(rng, CR2_POOLED.k, 50)
    return {"rounds": per_round, "tot": tot, "n": 50}


def _tests_of(rows: NDArray[np.float64]) -> Any:
    from specreplay.stats.cr2 import paired_tests

    sums = np.stack([rows[:, 0], rows[:, 1], rows[:, 0], rows[:, 2]], axis=1)
    return paired_tests(sums, depths=(5, 5))


def test_cr2_family_cells_cover_and_z_or_n_minus_1_df_would_not(
    hard_cells: dict[str, Any],
) -> None:
    """Family cells of 50 requests (2,400 = 600 datasets × 4 families), sparse heterogeneous
    effects: the package's default 95% intervals of Δ and of Δ/R_a cover the exact truths at
    least CR2_FAMILY.c times (false failure 0.0009 at the study's worst family, 0.9625); on the
    same cells the z interval and the (n − 1)-df t interval (same SE, no skewness correction)
    fall below c (power ≥ 0.99 at ≤ 0.907)."""
    truth_d, truth_r = _hc_truth()
    tot, n = hard_cells["tot"], hard_cells["n"]
    hits = np.zeros(2, np.int64)
    wrong = np.zeros((2, 2), np.int64)
    z, t49 = stats.norm.ppf(0.975), stats.t.ppf(0.975, n - 1)
    for cell in range(CR2_FAMILY.k):
        f = cell % 4
        for j, (tt, truth) in enumerate(zip(_tests_of(tot[cell * n : (cell + 1) * n]),
                                            (truth_d[f], truth_r[f]), strict=True)):  # fmt: skip
            lo, hi = tt.interval(0.95)
            hits[j] += lo <= truth <= hi
            if tt.forced is None:
                for w, q in enumerate((z, t49)):
                    wrong[j, w] += abs(tt.theta - truth) <= q * tt.se
            else:  # the forced interval is the same for every variant
                wrong[j] += lo <= truth <= hi
    assert hits.min() >= CR2_FAMILY.c, hits
    assert wrong.max() < CR2_FAMILY.c, wrong


def test_cr2_pooled_cells_cover(hard_cells: dict[str, Any]) -> None:
    """Pooled cells of 200 requests (4 families, 1,000 datasets): CR2-eff covers the exact pooled
    Δ and Δ/R_a at least CR2_POOLED.c times (false failure 0.0009 at the study's 0.965); the z
    interval on the same cells does not (power 0.976 at ≤ 0.93)."""
    truth_d, truth_r = _hc_truth()
    tot, n = hard_cells["tot"], 4 * hard_cells["n"]
    hits = np.zeros(2, np.int64)
    z_hits = np.zeros(2, np.int64)
    for s in range(CR2_POOLED.k):
        for j, (tt, truth) in enumerate(zip(_tests_of(tot[s * n : (s + 1) * n]),
                                            (truth_d[4], truth_r[4]), strict=True)):  # fmt: skip
            lo, hi = tt.interval(0.95)
            hits[j] += lo <= truth <= hi
            z_hits[j] += abs(tt.theta - truth) <= 1.959964 * tt.se
    assert hits.min() >= CR2_POOLED.c, hits
    assert z_hits.max() < CR2_POOLED.c, z_hits


def test_cr2_clusters_are_requests_not_rounds(hard_cells: dict[str, Any]) -> None:
    """The same family cells, fed to the package as per-request totals, cover (≥ CR2_ROUNDS.c);
    fed as per-round rows (the clusters wrong: the request-level effect is ignored) they cover
    far less (measured 687 of 2,400) and fall below c (power ≥ 0.99 at ≤ 0.85)."""
    truth_d, _ = _hc_truth()
    rows, tot, n = hard_cells["rounds"], hard_cells["tot"], hard_cells["n"]
    req = rows[:, 0].astype(np.int64)
    starts = np.searchsorted(req, np.arange(0, CR2_ROUNDS.k * n + 1, n))
    hits = per_round = 0
    for cell in range(CR2_ROUNDS.k):
        truth = truth_d[cell % 4]
        lo, hi = _tests_of(tot[cell * n : (cell + 1) * n])[0].interval(0.95)
        hits += lo <= truth <= hi
        lo, hi = _tests_of(rows[starts[cell] : starts[cell + 1], 1:])[0].interval(0.95)
        per_round += lo <= truth <= hi
    assert hits >= CR2_ROUNDS.c
    assert per_round < CR2_ROUNDS.c


def test_compare_glue_feeds_request_totals_to_cr2(hard_cells: dict[str, Any]) -> None:
    """Through :func:`specreplay.stats.compare.compare` on a PairedSums whose requests are split
    over two context buckets: every family and pooled cell's default interval equals the one
    :func:`specreplay.stats.cr2.paired_tests` gives the cell's per-request totals (computed here
    with numpy), and differs from the per-piece (request × bucket) feed."""
    from specreplay.stats import compare as cmp
    from specreplay.stats.cr2 import METHOD, paired_tests

    rows, n = hard_cells["rounds"], hard_cells["n"]
    req = rows[:, 0].astype(np.int64)
    m = 4 * n
    sel = req < m  # the first dataset
    r, vals = req[sel], rows[sel, 1:]
    bucket = (np.arange(r.size) % 3 == 0).astype(np.int32)  # rounds split over 2 buckets
    key = r * 2 + bucket
    uniq, piece = np.unique(key, return_inverse=True)
    sums = np.stack([np.bincount(piece, weights=vals[:, j], minlength=uniq.size)
                     for j in range(3)], axis=1)  # fmt: skip
    preq = uniq // 2
    ps = _paired(np.repeat(np.arange(4), n), preq, (uniq % 2).astype(np.int32),
                 (sums[:, 0], sums[:, 1], sums[:, 0].copy(), sums[:, 2]), 4, 2)  # fmt: skip
    res = cmp.compare(ps, arm_a="a", arm_b="b", n_boot=200, seed=1)
    checked = 0
    for cell, spec in zip(res.cells, res.layout, strict=True):
        if len(spec.bucket_idx) != 2:
            continue
        delta = cell["deltas"][0]
        if delta["method"] != METHOD:
            pytest.skip(f"compare's default is {delta['method']!r}, not yet {METHOD!r}")
        fams = np.isin(np.repeat(np.arange(4), n)[preq], spec.fam_idx)
        tot = np.stack([np.bincount(preq[fams], weights=sums[fams, j], minlength=m)
                        for j in (0, 1, 0, 2)], axis=1)  # fmt: skip
        tot = tot[np.isin(np.repeat(np.arange(4), n), spec.fam_idx)]
        tt = paired_tests(tot, depths=None)[0]
        lo, hi = tt.interval(delta["level"])
        assert delta["lo"] == pytest.approx(lo, rel=1e-12, abs=1e-15)
        assert delta["hi"] == pytest.approx(hi, rel=1e-12, abs=1e-15)
        pieces = np.stack([sums[fams, j] for j in (0, 1, 0, 2)], axis=1)
        wrong = paired_tests(pieces, depths=None)[0].interval(delta["level"])
        assert abs(wrong[1] - hi) > 1e-9
        checked += 1
    assert checked == 5

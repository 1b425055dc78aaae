"""Paired bootstrap, intervals and verdicts (issue 2): references, calibration, determinism."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pytest
from cr2_ref import hand_cr2, t_interval, t_p_values
from scipy import stats
from typer.testing import CliRunner

from specreplay.cli import app
from specreplay.replay.archive.importers import read_arm
from specreplay.results.io import parse_result
from specreplay.stats.bootstrap import PairedSums, bootstrap_sums
from specreplay.stats.buckets import Buckets
from specreplay.stats.compare import compare, parse_margin
from specreplay.stats.intervals import holm, requests_for_margin, verdict
from specreplay.stats.pairing import pair_arms
from specreplay.stats.studentized import Studentized
from specreplay.stats.tdist import t_ppf

DATA = Path(__file__).parent / "data"
MEDUSA = DATA / "medusa-mtbench"
M7 = (
    MEDUSA
    / "medusa-vicuna-7b-v1.3-temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"
)
M7b = (
    MEDUSA
    / "medusa-vicuna-7b-v1.3-1-temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"
)
M13 = (
    MEDUSA
    / "medusa-vicuna-13b-v1.3-temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"
)
QUESTIONS = MEDUSA / "question.jsonl"


def _sums(n: int, seed: int, delta_p: float = 0.02, families: int = 1) -> PairedSums:
    """Paired requests: rounds n_i, retained t = n + Binomial(5n, p_i) (+delta_p in arm b)."""
    rng = np.random.default_rng(seed)
    na = rng.integers(5, 60, n).astype(float)
    p = rng.beta(6, 3, n)
    ta = na + rng.binomial((5 * na).astype(int), p)
    tb = na + rng.binomial((5 * na).astype(int), np.clip(p + delta_p, 0, 1))
    return PairedSums(
        request_ids=tuple(f"r{i}" for i in range(n)),
        request_keys=rng.integers(0, 2**63, n).astype(np.uint64),
        family=(np.arange(n) % families).astype(np.int32),
        piece_request=np.arange(n),
        piece_bucket=np.zeros(n, np.int32),
        n_a=na, t_a=ta, n_b=na.copy(), t_b=tb,
        families=tuple(f"f{i}" for i in range(families)),
        buckets=("all",),
    )  # fmt: skip


def _stat(a_n, a_t, b_n, b_t, axis=-1):  # type: ignore[no-untyped-def]
    return b_t.sum(axis) / b_n.sum(axis) - a_t.sum(axis) / a_n.sum(axis)


def _quantile_se(sigma: float, p: float, n_boot: int) -> float:
    """Monte Carlo SE of the p-quantile of n_boot draws of a normal with sd sigma.

    SE = sigma * sqrt(p(1 - p) / B) / phi(z_p) (asymptotic variance of a sample quantile).
    """
    z = stats.norm.ppf(p)
    return float(sigma * math.sqrt(p * (1 - p) / n_boot) / stats.norm.pdf(z))


# -- tier 1: external reference ------------------------------------------------------------------


def test_bca_agrees_with_scipy() -> None:
    ps = _sums(300, seed=3)
    n_boot = 20_000
    comp = compare(ps, arm_a="a", arm_b="b", n_boot=n_boot, stratify="none", seed=11)
    d = comp.pooled.delta
    args = (ps.n_a, ps.t_a, ps.n_b, ps.t_b)
    # the default (studentized) interval is checked against a hand computation in
    # tests/test_studentized.py; BCa here against scipy's
    ref = stats.bootstrap(
        args,
        _stat,
        paired=True,
        vectorized=True,
        n_resamples=n_boot,
        method="BCa",
        rng=np.random.default_rng(5),
        confidence_level=0.95,
    ).confidence_interval
    assert d.method == "cr2-eff-hall"
    sigma = float(np.std(comp.delta_reps[:, 0], ddof=1))
    z0, a = d.bca.z0, d.bca.acceleration
    for zq, ours, theirs in ((-1.959964, d.bca.lo, ref.low),
                             (1.959964, d.bca.hi, ref.high)):  # fmt: skip
        p = stats.norm.cdf(z0 + (z0 + zq) / (1 - a * (z0 + zq)))
        # z0 itself is estimated from the replicates: allow its own MC error too (k = 4.5)
        assert abs(ours - theirs) < 4.5 * math.sqrt(2) * _quantile_se(sigma, p, n_boot) * 1.5
    assert d.point == pytest.approx(float(_stat(*args)), rel=1e-12)


def test_medusa_7b_vs_13b_matches_direct_computation_and_scipy_bca() -> None:
    bk = Buckets.parse()
    a = read_arm(M7, buckets=bk, question_file=QUESTIONS, name="7B")
    b = read_arm(M13, buckets=bk, question_file=QUESTIONS, name="13B")
    ps, excluded = pair_arms(a, b, buckets=bk)
    assert excluded == []
    n_boot = 20_000
    comp = compare(ps, arm_a="7B", arm_b="13B", n_boot=n_boot, stratify="none")
    pooled = comp.pooled
    arms = {f.name: f for f in (pooled.arm_a, pooled.arm_b)}
    # direct computation from the JSONL: rounds = sum(idxs + 1), tokens = sum(new_tokens)
    tot = {}
    for arm, path in (("7B", M7), ("13B", M13)):
        n = t = 0
        for line in path.read_text().splitlines():
            ch = json.loads(line)["choices"][0]
            n += sum(i + 1 for i in ch["idxs"])
            t += sum(ch["new_tokens"])
        tot[arm] = t / n
        assert pytest.approx(t / n, rel=1e-12) == arms[arm].R
    assert round(tot["7B"], 4) == 2.5650 and round(tot["13B"], 4) == 2.6387
    # pooled BCa against scipy's BCa on the same per-question sums (paired, stratify none)
    order = np.argsort(ps.piece_request)
    args = tuple(v[order] for v in (ps.n_a, ps.t_a, ps.n_b, ps.t_b))
    ref = stats.bootstrap(
        args, _stat, paired=True, vectorized=True, n_resamples=n_boot, method="BCa",
        rng=np.random.default_rng(2),
    ).confidence_interval  # fmt: skip
    d = pooled.delta
    sigma = float(np.std(comp.delta_reps[:, 0], ddof=1))
    tol = 4.5 * math.sqrt(2) * _quantile_se(sigma, 0.025, n_boot) * 1.5
    assert abs(d.bca.lo - ref.low) < tol
    assert abs(d.bca.hi - ref.high) < tol
    # per category: R of each arm equals the direct ratio over the category's questions
    cats = {json.loads(x)["question_id"]: json.loads(x)["category"]
            for x in QUESTIONS.read_text().splitlines() if x.strip()}  # fmt: skip
    for c in comp.cells:
        if c.spec.level != "family":
            continue
        for arm, path in (("7B", M7), ("13B", M13)):
            n = t = 0
            for line in path.read_text().splitlines():
                obj = json.loads(line)
                if cats[obj["question_id"]] == c.spec.family:
                    n += sum(i + 1 for i in obj["choices"][0]["idxs"])
                    t += sum(obj["choices"][0]["new_tokens"])
            fig = next(f for f in (c.arm_a, c.arm_b) if f.name == arm)
            assert pytest.approx(t / n, rel=1e-12) == fig.R


def _skewed_sums() -> PairedSums:
    """12 requests whose gains in arm b are lognormal (σ = 1.5): a few requests carry most of Δ,
    so the jackknife values are skewed and the BCa acceleration clearly non-zero."""
    n = 12
    rng = np.random.default_rng(7)
    na = rng.integers(5, 40, n).astype(float)
    ta = na + rng.binomial((4 * na).astype(int), 0.4)
    tb = ta + np.floor(rng.lognormal(0.0, 1.5, n) * na * 0.2)
    return PairedSums(
        request_ids=tuple(f"r{i}" for i in range(n)),
        request_keys=np.arange(n, dtype=np.uint64) * np.uint64(104729) + np.uint64(1),
        family=np.zeros(n, np.int32), piece_request=np.arange(n),
        piece_bucket=np.zeros(n, np.int32), n_a=na, t_a=ta, n_b=na.copy(), t_b=tb,
        families=("f0",), buckets=("all",),
    )  # fmt: skip


def _hand_bca(
    reps: np.ndarray, theta: float, jack: np.ndarray
) -> tuple[float, float, tuple[float, float]]:
    """z0, acceleration and 95% BCa bounds by Efron & Tibshirani (1993) Eq. 14.14–14.15.

    z0 = Φ⁻¹(mean percentile of θ̂ among the replicates: (#{θ* < θ̂} + #{θ* ≤ θ̂}) / 2B, as
    scipy.stats.bootstrap); a = Σd³ / (6 (Σd²)^{3/2}), d = mean(θ_(i)) − θ_(i); bounds are the
    linear-interpolated replicate quantiles at Φ(z0 + (z0 + z) / (1 − a (z0 + z))), z = ±z_0.975.
    """
    b = len(reps)
    z0 = float(stats.norm.ppf((np.sum(reps < theta) + np.sum(reps <= theta)) / (2 * b)))
    d = jack.mean() - jack
    a = float(np.sum(d**3) / (6 * np.sum(d**2) ** 1.5))
    z975 = 1.959963984540054  # Φ⁻¹(0.975)
    q = [stats.norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z))) for z in (-z975, z975)]
    lo, hi = np.quantile(reps, q)
    return z0, a, (float(lo), float(hi))


def test_bca_matches_a_hand_jackknife_on_a_skewed_sample() -> None:
    ps = _skewed_sums()
    comp = compare(ps, arm_a="a", arm_b="b", n_boot=4000, seed=3, stratify="none")
    d = comp.pooled.delta
    # leave-one-request-out Δ and Δ/R_a recomputed from scratch (not from leave-one-out sums)
    keep = [np.arange(12) != i for i in range(12)]
    ra = np.array([ps.t_a[k].sum() / ps.n_a[k].sum() for k in keep])
    rb = np.array([ps.t_b[k].sum() / ps.n_b[k].sum() for k in keep])
    point = ps.t_b.sum() / ps.n_b.sum() - ps.t_a.sum() / ps.n_a.sum()
    rel_point = (ps.t_b.sum() / ps.n_b.sum()) / (ps.t_a.sum() / ps.n_a.sum()) - 1
    z0, a, (lo, hi) = _hand_bca(comp.delta_reps[:, 0], point, rb - ra)
    assert abs(a) > 0.03  # skewed enough that the sign of a moves the bounds
    # z0 and a are the same arithmetic in another order (~1e-15); a bound moves with the normal
    # quantile functions (statistics.NormalDist vs scipy, ~1e-16 in p) times the replicate spacing
    assert d.bca.z0 == pytest.approx(z0, abs=1e-12)
    assert d.bca.acceleration == pytest.approx(a, rel=1e-9)
    assert (d.bca.lo, d.bca.hi) == pytest.approx((lo, hi), abs=1e-9)
    _, _, (rlo, rhi) = _hand_bca(comp.rel_reps[:, 0], rel_point, rb / ra - 1)
    assert (d.bca.rel_lo, d.bca.rel_hi) == pytest.approx((rlo, rhi), abs=1e-9)


def _holm_by_hand(p: list[float]) -> list[float]:
    """Holm (1979) step-down: the i-th smallest p times (m − i + 1), running max, capped at 1."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


# MT-bench categories of the 7B → 13B Medusa example of docs/commands.md (n_boot 10,000, seed 0,
# stratified by category), 8 cells in the family level: verdicts pinned per margin. Several raw
# p-values clear 0.05 where their Holm-adjusted ones do not, so raw p-values would change these
# verdicts.
CATEGORIES = (
    *("coding", "extraction", "humanities", "math"),
    *("reasoning", "roleplay", "stem", "writing"),
)


@pytest.mark.parametrize("margin", ["0.5%", "10%"])
def test_medusa_categories_are_below_the_study_minimum(margin: str) -> None:
    """MT-bench categories hold 10 questions each, fewer than the study's MIN_REQUESTS: none is
    EQUIVALENT whatever the margin (at 10% four of them would pass their raw TOST: p 0.049,
    0.048, 0.026, 0.017 by the reference), its TOST p-value is 1 and the reason says why; none
    is DIFFERENT either (the small-cell tests see no change beyond noise)."""
    from specreplay.stats.cr2 import MIN_REQUESTS

    bk = Buckets.parse()
    a = read_arm(M7, buckets=bk, question_file=QUESTIONS, name="7B")
    b = read_arm(M13, buckets=bk, question_file=QUESTIONS, name="13B")
    ps, _ = pair_arms(a, b, buckets=bk)
    comp = compare(ps, arm_a="7B", arm_b="13B", margin=parse_margin(margin))
    cells = [(c, s) for c, s in zip(comp.cells, comp.layout, strict=True) if s.level == "family"]
    assert len(cells) == len(CATEGORIES)
    raw_pass = 0
    for c, spec in cells:
        d = c.delta
        assert c.n_requests == 10 < MIN_REQUESTS
        assert d.verdict == "INCONCLUSIVE"
        assert d.verdict_reason.startswith(f"10 requests < {MIN_REQUESTS}")
        assert d.p_equivalence == 1.0 == d.p_equivalence_adj and d.p_difference_adj >= 0.05
        ref = hand_cr2(ps, spec.fam_idx, spec.bucket_idx, rel=True)
        raw_pass += t_p_values(ref, parse_margin(margin).value)[1] < 0.05
    assert raw_pass == {"0.5%": 0, "10%": 4}[margin]


def _interval_delta(tmp_path: Path, a: Path, b: Path) -> dict[str, Any]:
    out = tmp_path / "out"
    res = CliRunner().invoke(
        app,
        ["interval", str(a), str(b), "--question-file", str(QUESTIONS), "--out", str(out),
         "-q", "--n-boot", "2000"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "results.json").read_text())
    d: dict[str, Any] = doc["cells"][0]["deltas"][0]
    return d


def test_one_file_against_itself_is_equivalent_with_zero_width_and_null_bca(
    tmp_path: Path,
) -> None:
    d = _interval_delta(tmp_path, M7, M7)  # one computation by construction: identical inputs
    assert d["verdict"] == "EQUIVALENT"
    assert d["lo"] == d["hi"] == d["point"] == 0.0
    assert d["bca"]["lo"] is None and "degenerate" in d["bca"]["null_reason"]


def test_two_identical_runs_are_not_equivalent_by_chance(tmp_path: Path) -> None:
    # two runs whose 80 answers happen to match: the hull decides (issue 16), and without a
    # depth (round traces) it cannot be formed: null, with the reason, never EQUIVALENT
    d = _interval_delta(tmp_path, M7, M7b)
    assert d["verdict"] is None and d["point"] is None
    assert "0 requests differ" in d["null_reason"] and "no bound" in d["null_reason"]


# -- tier 2/3: calibration ------------------------------------------------------------------------


# the coverage tests (with stated false-failure rates and power) are in tests/test_calibration.py


# -- tier 4: exact equivalence --------------------------------------------------------------------


def test_same_seed_identical_with_one_and_two_threads_and_any_row_order() -> None:
    ps = _sums(500, seed=8, families=3)
    numba.set_num_threads(1)
    try:
        one = bootstrap_sums(ps, n_boot=300, seed=4)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    two = bootstrap_sums(ps, n_boot=300, seed=4)
    assert np.array_equal(one, two)
    # shuffle the requests (and so the pieces): same replicates
    perm = np.random.default_rng(0).permutation(500)
    inv = np.argsort(perm)
    shuffled = PairedSums(
        request_ids=tuple(ps.request_ids[i] for i in perm),
        request_keys=ps.request_keys[perm],
        family=ps.family[perm],
        piece_request=inv[ps.piece_request][::-1],
        piece_bucket=ps.piece_bucket[::-1],
        n_a=ps.n_a[::-1], t_a=ps.t_a[::-1], n_b=ps.n_b[::-1], t_b=ps.t_b[::-1],
        families=ps.families, buckets=ps.buckets,
    )  # fmt: skip
    assert np.array_equal(bootstrap_sums(shuffled, n_boot=300, seed=4), two)
    assert not np.array_equal(bootstrap_sums(ps, n_boot=300, seed=5), two)


def test_resampling_counts_are_multinomial() -> None:
    """Each replicate draws exactly n requests per stratum: the resampled rounds of a stratum of
    constant-size requests are exactly n_s * rounds."""
    n = 1000
    ps = PairedSums(tuple(f"r{i}" for i in range(n)),
                    np.arange(n, dtype=np.uint64) * np.uint64(7919),
                    (np.arange(n) % 2).astype(np.int32), np.arange(n), np.zeros(n, np.int32),
                    np.full(n, 3.0), np.arange(n, dtype=float), np.full(n, 3.0),
                    np.arange(n, dtype=float), ("x", "y"), ("all",))  # fmt: skip
    s = bootstrap_sums(ps, n_boot=200, seed=1)
    assert (s[:, :, 0, 0] == 1500.0).all()
    # the resampled mean of t is unbiased: E[sum t] = n_s * mean(t), SE from 200 replicates
    tot = s[:, :, 0, 1].sum(axis=1)
    se = np.std(tot, ddof=1) / math.sqrt(200)
    assert abs(tot.mean() - np.arange(n).sum()) < 4.5 * se


# -- tier 2: verdict logic on constructed replicates ---------------------------------------------


def test_verdicts_follow_spec_definitions() -> None:
    # t* = z symmetric on [−1, 1] (exact linear quantiles); SE 0.001: the 90% interval is
    # θ̂ ± 0.0009, the 95% one θ̂ ± 0.00095
    z = np.linspace(-1, 1, 10_001)
    assert verdict(Studentized(0.0, 0.001, z), margin=0.002).verdict == "EQUIVALENT"
    assert verdict(Studentized(0.01, 0.001, z), margin=0.002).verdict == "DIFFERENT"
    assert verdict(Studentized(0.0, 0.003, z), margin=0.002).verdict == "INCONCLUSIVE"
    v = verdict(Studentized(0.0, 0.001, z), margin=0.002)
    assert v.smallest_equivalent_margin == pytest.approx(0.0009, abs=1e-9)


def test_equivalent_wins_over_different() -> None:
    """A Δ both EQUIVALENT and DIFFERENT by its intervals is EQUIVALENT
    (docs/methods.md#the-verdict-rule tests the 90% interval against ±m first). θ̂ = 0.0015, SE =
    0.001, t* = z, z = −1, −0.9998, …, 1 (exact linear quantiles): 90% interval [0.0006, 0.0024]
    inside ±0.0025, 95% interval [0.00055, 0.00245] excluding 0."""
    z = np.linspace(-1, 1, 10_001)
    test = Studentized(0.0015, 0.001, z)
    v = verdict(test, margin=0.0025)
    assert v.verdict == "EQUIVALENT"
    assert v.p_difference == 0.0  # no t* ≥ θ̂/SE = 1.5
    assert v.p_equivalence == 1 / 10_001  # only z = −1 reaches (θ̂ − m)/SE = −1
    assert v.smallest_equivalent_margin == pytest.approx(0.0024, abs=1e-12)
    assert test.interval(0.95) == pytest.approx((0.00055, 0.00245), abs=1e-15)
    # the same replicates with a margin the 90% interval does not fit: DIFFERENT
    assert verdict(test, margin=0.002).verdict == "DIFFERENT"


def _linear_quantile(x: np.ndarray, p: float) -> float:
    """The p-quantile of x by linear interpolation between order statistics at h = (n − 1)·p
    (Hyndman & Fan 1996, definition 7)."""
    xs = np.sort(x)
    h = (len(xs) - 1) * p
    k = math.floor(h)
    return float(xs[k] + (h - k) * (xs[min(k + 1, len(xs) - 1)] - xs[k]))


@pytest.mark.parametrize(
    ("margin", "alpha", "tost_level"), [("0.5%", 0.05, 0.9), ("0.02", 0.05, 0.9), ("1%", 0.1, 0.8)]
)
def test_tost_interval_and_smallest_margin_are_at_one_minus_two_alpha(
    margin: str, alpha: float, tost_level: float
) -> None:
    """The TOST interval is the CR2 t interval at 1 − 2α; in a Holm family of one the smallest
    EQUIVALENT margin is its largest |bound| (the t p-value is continuous in m)."""
    ps = _sums(80, seed=12)
    m = parse_margin(margin)
    comp = compare(ps, arm_a="a", arm_b="b", n_boot=2000, seed=1, margin=m, alpha=alpha)
    d = comp.pooled.delta
    lo, hi = t_interval(hand_cr2(ps, (0,), (0,), rel=m.relative), 1 - 2 * alpha)
    assert d.tost.level == pytest.approx(tost_level, abs=1e-15)
    assert (d.tost.lo, d.tost.hi) == pytest.approx((lo, hi), rel=1e-9)
    assert d.smallest_equivalent_margin == pytest.approx(max(abs(lo), abs(hi)), rel=1e-8)
    # the interval printed beside it stays at the 95% level (of Δ)
    assert (d.lo, d.hi) == pytest.approx(t_interval(hand_cr2(ps, (0,), (0,)), 0.95), rel=1e-9)


def test_holm_matches_hand_computation() -> None:
    # p = (0.01, 0.04, 0.03): sorted 0.01*3 = 0.03, 0.03*2 = 0.06, max(0.06, 0.04*1) = 0.06
    assert holm([0.01, 0.04, 0.03]) == [0.03, 0.06, 0.06]
    assert holm([0.5, 0.9]) == [1.0, 1.0]


def test_requests_for_margin_is_a_tost_power_calculation() -> None:
    """n' = (s (q + z_0.9) / m)² at true Δ = 0, s = se·√n, q = t_{ν', 0.95} with ν' = n' − 1, or
    ν·n'/n for a cell of effective df ν (Chow, Shao & Wang 2008 §3.2.3 with the default
    interval's quantile), and its power."""
    se, n, m = 0.01, 100, 0.02  # per-request SD s = 0.1
    got = requests_for_margin(se, m, n, alpha=0.05, power=0.8)
    assert got.null_reason is None and got.requests is not None
    k = got.requests
    q = stats.t.ppf(0.95, k - 1)
    assert k == math.ceil((0.1 * (q + stats.norm.ppf(0.9)) / m) ** 2)
    # with effective df 10 of 100 requests, n' requests have 0.1·n' effective clusters
    few = requests_for_margin(se, m, n, alpha=0.05, power=0.8, df=10.0).requests
    assert few is not None
    q_few = stats.t.ppf(0.95, 0.1 * few)
    assert few == math.ceil((0.1 * (q_few + stats.norm.ppf(0.9)) / m) ** 2) and few > k
    # at n' requests and a true Δ = 0 the TOST passes with probability ≥ 0.8 (normal model)
    half = m / (0.1 / math.sqrt(k)) - q
    assert 2 * stats.norm.cdf(half) - 1 >= 0.8
    # Holm's α/m needs more requests; zero variance is null with its reason, never bare null
    k4 = requests_for_margin(se, m, n, alpha=0.05 / 4).requests
    assert k4 is not None and k4 > k
    zero = requests_for_margin(0.0, m, n)
    assert (
        zero.requests is None
        and zero.null_reason is not None
        and "zero standard error" in zero.null_reason
    )
    assert t_ppf(0.95, 10) == pytest.approx(stats.t.ppf(0.95, 10), rel=1e-9)


def test_smallest_margin_is_the_holm_adjusted_one() -> None:
    """In a family of 4 cells the smallest EQUIVALENT margin lies between the unadjusted and the
    Bonferroni figure, and the verdict at that margin (re-run) is EQUIVALENT."""
    ps = _sums(200, seed=21, families=4, delta_p=0.0)
    comp = compare(ps, arm_a="a", arm_b="b", n_boot=2000, seed=2, margin=parse_margin("0.02"))
    idx = [i for i, c in enumerate(comp.cells) if c.spec.level == "family"]
    fam = [comp.cells[i].delta for i in idx]
    for kind in ("p_difference", "p_equivalence"):  # Holm over the level, by hand
        hand = _holm_by_hand([getattr(d, kind) for d in fam])
        assert [getattr(d, f"{kind}_adj") for d in fam] == pytest.approx(hand, abs=1e-12)
    for i, d in zip(idx, fam, strict=True):
        assert d.smallest_equivalent_margin >= max(abs(d.tost.lo), abs(d.tost.hi))
        # the sample size is for the verdict as adjusted: Holm's first step tests at α/4, with
        # the cell's CR2 SE and effective df
        cell = comp.layout[i]
        _, se, df, _, _ = hand_cr2(ps, cell.fam_idx, cell.bucket_idx)
        n = comp.cells[i].n_requests
        want = requests_for_margin(se, 0.02, n, 0.05 / 4, df=df).requests
        assert d.requests_for_margin == want
    m_star = max(d.smallest_equivalent_margin for d in fam) * (1 + 1e-6)
    again = compare(ps, arm_a="a", arm_b="b", n_boot=2000, seed=2,
                    margin=parse_margin(repr(m_star)))  # fmt: skip
    assert all(c.delta.verdict == "EQUIVALENT" for c in again.cells if c.spec.level == "family")


@pytest.mark.parametrize(
    ("text", "value", "relative"),
    [("0.5%", 0.005, True), ("0.02", 0.02, False), ("1%", 0.01, True)],
)
def test_parse_margin(text: str, value: float, relative: bool) -> None:
    m = parse_margin(text)
    assert m.value == pytest.approx(value) and m.relative is relative


@pytest.mark.parametrize("text", ["-1%", "abc", "0", ""])
def test_bad_margins(text: str) -> None:
    from specreplay.errors import SpecReplayError

    with pytest.raises(SpecReplayError, match="--margin"):
        parse_margin(text)


# -- the command ----------------------------------------------------------------------------------


def test_interval_command_outputs_and_exit_codes(tmp_path: Path) -> None:
    out = tmp_path / "iv"
    args = ["interval", str(M7), str(M13), "--question-file", str(QUESTIONS), "--out", str(out),
            "-q", "--n-boot", "1000", "--name-a", "7B", "--name-b", "13B"]  # fmt: skip
    res = CliRunner().invoke(app, [*args, "--fail-on", "DIFFERENT"])
    assert res.exit_code == 1, res.output  # 13B retains more: DIFFERENT at 0.5%
    assert res.stdout.startswith("VERDICT (pooled, MEASURED): DIFFERENT")
    doc = json.loads((out / "results.json").read_text())
    parse_result(json.dumps(doc).encode())  # report's checks pass
    assert doc["command"] == "interval" and doc["arms"] == ["7B", "13B"]
    assert {Path(i["path"]).name for i in doc["inputs"]} == {M7.name, M13.name, QUESTIONS.name}
    fam = [c for c in doc["cells"] if c["level"] == "family"]
    # 10 requests < the study's nominal size: small_sample with the study's coverage at 10
    assert len(fam) == 8 and all(c["deltas"][0]["small_sample"] for c in fam)
    assert all(c["deltas"][0]["coverage_at_size"]["n_requests"] == 10 for c in fam)
    assert all(c["deltas"][0]["bonferroni"]["level"] == pytest.approx(1 - 0.05 / 8) for c in fam)
    for f in ("TABLES.md", "cells.parquet", "forest.png"):
        assert (out / f).stat().st_size > 0
    assert "hdi" in doc["cells"][0]["deltas"][0]
    res = CliRunner().invoke(app, [*args, "--force", "--fail-on", "EQUIVALENT"])
    assert res.exit_code == 0


def test_unpaired_requests_error_or_counted(tmp_path: Path) -> None:
    partial = tmp_path / "partial.jsonl"
    partial.write_text("".join(M13.read_text().splitlines(keepends=True)[:70]))
    args = ["interval", str(M7), str(partial), "--question-file", str(QUESTIONS), "-q",
            "--n-boot", "500", "--out", str(tmp_path / "o")]  # fmt: skip
    res = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert res.exit_code == 2
    assert "10 unpaired request(s)" in res.stderr and "--drop-unpaired" in res.stderr
    assert "Traceback" not in res.output
    res = CliRunner().invoke(app, [*args, "--drop-unpaired"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    assert doc["excluded"][0]["requests"] == 10
    assert doc["cells"][0]["n_requests"] == 70


def test_spec_bench_per_category_R_through_the_command(tmp_path: Path) -> None:
    sb = DATA / "spec-bench"
    out = tmp_path / "sb"
    res = CliRunner().invoke(
        app,
        ["interval", str(sb / "sps.jsonl"), str(sb / "eagle.jsonl"), "--out", str(out), "-q",
         "--n-boot", "500", "--min-requests", "2"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "results.json").read_text())
    for arm, f in (("sps", "sps.jsonl"), ("eagle", "eagle.jsonl")):
        per: dict[str, list[int]] = {}
        for line in (sb / f).read_text().splitlines():
            if line.strip():
                o = json.loads(line)
                per.setdefault(o["category"], []).extend(o["choices"][0]["accept_lengths"])
        for c in doc["cells"]:
            if c["level"] == "family":
                acc = per[c["family"]]
                assert c["arms"][arm]["R"] == pytest.approx(sum(acc) / len(acc), rel=1e-12)


def test_replicates_as_arviz_datatree() -> None:
    import arviz as az

    from specreplay.stats.arviz_bridge import hdi_eti, replicates_tree

    ps = _sums(120, seed=2, families=2)
    comp = compare(ps, arm_a="a", arm_b="b", n_boot=800)
    with_hdi = hdi_eti(comp)
    tree = replicates_tree(comp)
    post = tree["posterior"]
    # the one bucket ("all") holds every request: it repeats the pooled draws and is left out
    assert post["delta"].shape == (1, 800, len(comp.cells) - 1)
    assert tree.attrs["cells_left_out"] == "all"
    hdi = az.hdi(tree, prob=0.95)["delta"].values  # (cell, ci_bound)
    pooled = with_hdi.pooled.delta
    assert pooled.hdi is not None and pooled.eti is not None
    assert hdi[0, 0] == pytest.approx(pooled.hdi.lo)
    assert hdi[0, 1] == pytest.approx(pooled.hdi.hi)
    lo, hi = np.quantile(comp.delta_reps[:, 0], [0.025, 0.975])
    assert (pooled.eti.lo, pooled.eti.hi) == pytest.approx((lo, hi))
    assert comp.pooled.delta.hdi is None  # hdi_eti returns a new comparison


def test_replicates_netcdf_round_trip(tmp_path: Path) -> None:
    import xarray as xr

    from specreplay.stats.arviz_bridge import replicates_tree, save_netcdf

    comp = compare(_sums(90, seed=4, families=2), arm_a="a", arm_b="b", n_boot=300, seed=7)
    path = tmp_path / "replicates.nc"
    save_netcdf(replicates_tree(comp), path)
    with xr.open_datatree(path) as back:
        post = back["posterior"]
        # netCDF4 stores float64 as is: the replicates come back bit for bit
        keep = [0, 1, 2, 4, 5]  # not the bucket "all" (index 3): the pooled cell's draws again
        np.testing.assert_array_equal(post["delta"].values, comp.delta_reps[None, :, keep])
        np.testing.assert_array_equal(post["rel"].values, comp.rel_reps[None, :, keep])
        assert post["delta"].dims == ("chain", "draw", "cell")
        names = ["pooled", "f0", "f1", "f0 × all", "f1 × all"]
        assert [str(c) for c in post["cell"].values] == names
        assert back.attrs["ci_prob"] == 0.95 and back.attrs["cells_left_out"] == "all"


def test_save_netcdf_without_a_writer_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from specreplay.errors import SpecReplayError
    from specreplay.stats import arviz_bridge

    comp = compare(_sums(40, seed=1), arm_a="a", arm_b="b", n_boot=50)
    monkeypatch.setattr(arviz_bridge, "_netcdf_engine", lambda: None)
    with pytest.raises(SpecReplayError, match=r"pip install 'specreplay\[netcdf\]'"):
        arviz_bridge.save_netcdf(arviz_bridge.replicates_tree(comp), tmp_path / "r.nc")
    assert list(tmp_path.iterdir()) == []

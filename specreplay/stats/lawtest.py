"""Law tests: is the emitted token of one position distributed as the target p? (SPEC §3.3).

Terms (SPEC §1, §3.2). At one position the drafter samples a candidate x from the **sampler law**
q^s; the verifier accepts it when v·q^v(x) < p(x) for a uniform v, where q^v is the **verifier law**
(q^v = q^s for a *matched* arm, e.g. ``dyadic24``; q^v ≠ q^s for a *mismatched* one, e.g.
``dyadic8/float64``); on rejection it emits a **residual** token from r ∝ max(0, p − q^v). The
categories of a position are its n candidates plus one **other** bucket holding the target mass
outside the candidates, p_other = max(0, 1 − Σp); p_ext = (p, p_other) has n + 1 entries. The
other bucket is always in the residual, since q^v = 0 there.

What this module computes, per (arm, position):

1. :func:`output_law` — the exact law of the emitted token,
   q^s(x)·a(x) + (1 − α)·r(x) with a(x) = P(v·q^v(x) < p(x)) and α = Σ_x q^s(x)·a(x), its
   acceptance α and its total-variation distance to p_ext.
2. :func:`sample_counts` — a Numba Monte Carlo sampler of the emitted token (counts over the n + 1
   categories), with counter-based uniforms (:mod:`specreplay.sim.rng`).
3. :func:`goodness_of_fit` — G-test (default) or Pearson χ² of the counts against p_ext, after
   merging small categories (:func:`merge_categories`).
4. Holm's step-down adjustment over every arm × position of one run
   (:func:`specreplay.stats.multiple.holm`).
5. :func:`run_law_tests` — all of the above with the number of draws chosen for power.

Decisions (documented here once; the functions cite them):

- **Accept convention** (SPEC §3.2): accept when v·q^v(x) < p(x), so a(x) = 1 when q^v(x) = 0 and
  p(x) > 0, a(x) = 0 when p(x) = 0, else min(1, p(x)/q^v(x)).
- **Empty residual.** When the residual mass W = Σ max(0, p − q^v) + p_other is 0 but a rejection
  is still possible (a mismatched sampler drafts a candidate with p = q^v = 0), the residual falls
  back to p_ext itself (the bonus-token law). For a matched arm W = 0 implies α = 1, so this never
  applies to one.
- **Reference law.** The tests compare against p_ext / Σ p_ext: inputs must satisfy
  |Σp + p_other − 1| ≤ 1e-6 (archived float32 log-probabilities), and the renormalisation keeps
  expected counts summing to the number of draws.
- **Merging** (:func:`merge_categories`), with E = draws · p_ref: (i) every candidate with E < 5 is
  merged into the other category; (ii) if the merged other category still has E < 5 and some
  candidate remains, it is merged into the remaining candidate with the smallest E (ties to the
  lower index). df = categories − 1; with a single category there is nothing to test
  (statistic 0, df 0, p-value 1).
- **Uniforms.** Draw i of a position uses ``uniform(seed, key, i, position, STREAM_*)`` with the
  draw index as the round, ``STREAM_DRAFT`` for u, ``STREAM_ACCEPT`` for v and
  ``STREAM_RESIDUAL`` for the residual draw; :func:`run_law_tests` uses the arm's stable key
  ``request_key(arm)``. Counts are integers, so they do not depend on the thread count.
- **Draft draw** by CDF inversion: float laws take the first index whose cumulative sum exceeds u
  (the last positive one if rounding leaves none); dyadic laws take k = ⌊u·2^53⌋ >> (53 − N)
  against the integer cumulative sums of m_s (SPEC §3.2).
- **χ² tail without scipy**: the regularised incomplete gamma by its series (x < a + 1) or
  Lentz's continued fraction (Numerical Recipes, 3rd ed., §6.2), p-values underflowing to 0.
- **Power**: the noncentral χ² with the Pearson noncentrality λ = draws · Σ (law − p)²/p over the
  merged categories (used for the G-test too: both statistics share this local-alternative
  asymptotics), at the Bonferroni level family_alpha / m (conservative for Holm; m = arm ×
  position tests of the run). Its cdf is computed *exactly* (no Patnaik/Sankaran approximation),
  as the Poisson(λ/2) mixture of central χ² cdfs summed outward from the Poisson mode with the
  recurrence P(a + 1, y) = P(a, y) − y^a e^{−y}/Γ(a + 1) (Abramowitz & Stegun 26.4.25, 6.5.21).
- **Draws**: the smallest number reaching power 0.99, floored at ``min_draws`` (more draws never
  hurt the test) and capped at ``max_draws`` (then ``underpowered`` with the power reached). When
  the exact law equals p up to rounding (TV ≤ 1e-12, e.g. every matched arm) there is no
  alternative to power against: ``min_draws`` draws, power ``None`` and rule ``null-law``.
- **Toy suite** (:func:`toy_cases`): a few fixed laws and the arms float64, dyadic8 and
  dyadic8/float64. Their dyadic laws come from :func:`toy_quantize_dyadic_nearest`, a local copy of
  SPEC §3.1 ``dyadicN:nearest`` for this suite only (the product quantizers live in
  ``specreplay.sim.policy``).

This module depends on numpy and numba only (scipy is a dev dependency, used in its tests).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, NamedTuple

import numpy as np
from numba import njit, prange
from numpy.typing import ArrayLike, NDArray

from specreplay.errors import SpecReplayError
from specreplay.sim.accept import accept_probs
from specreplay.sim.rng import STREAM_ACCEPT, STREAM_DRAFT, STREAM_RESIDUAL, request_key, uniform
from specreplay.sim.sampling import draw_float
from specreplay.stats.multiple import holm

__all__ = [
    "DEFAULT_FAMILY_ALPHA",
    "DEFAULT_MAX_DRAWS",
    "DEFAULT_MIN_DRAWS",
    "MIN_EXPECTED",
    "TARGET_POWER",
    "TV_NULL",
    "GofResult",
    "LawCase",
    "LawTestResult",
    "OutputLaw",
    "chi2_isf",
    "chi2_power",
    "chi2_sf",
    "draws_for_power",
    "gammainc_pq",
    "goodness_of_fit",
    "merge_categories",
    "ncx2_cdf",
    "output_law",
    "run_law_tests",
    "sample_counts",
    "to_json",
    "toy_cases",
    "toy_laws",
    "toy_quantize_dyadic_nearest",
]

DEFAULT_FAMILY_ALPHA = 1e-5
DEFAULT_MAX_DRAWS = 10_000_000
DEFAULT_MIN_DRAWS = 200_000
MIN_EXPECTED = 5.0
"""Categories with a smaller expected count are merged (SPEC §3.3)."""
TARGET_POWER = 0.99
TV_NULL = 1e-12
"""An exact TV at or below this is rounding: the arm's law is p, no alternative to power against."""

_SUM_TOL = 1e-9  # sampler/verifier laws are renormalised in float64 (SPEC §3.1)
_P_SUM_TOL = 1e-6  # target probabilities come from archived (possibly float32) log-probs
_CHUNKS = 64  # fixed work split of the sampler: independent of the thread count
_TWO_53 = 9007199254740992.0
_EPS = 1e-16
_FPMIN = 1e-300

Method = Literal["G", "pearson"]


# --------------------------------------------------------------------------------------------
# Validation (one function per entry point family)
# --------------------------------------------------------------------------------------------


def _law_iv(
    q_s: ArrayLike, q_v: ArrayLike, p: ArrayLike, p_other: float, where: str
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], float]:
    """Validate one position's laws; return contiguous float64 copies and p_other."""
    arrays = []
    for name, a in (("q_s", q_s), ("q_v", q_v), ("p", p)):
        x = np.ascontiguousarray(a, dtype=np.float64)
        if x.ndim != 1 or x.shape[0] == 0:
            raise SpecReplayError(f"{where}{name} must be a non-empty 1-D array, got {x.shape}")
        if not np.all(np.isfinite(x)) or np.any(x < 0.0):
            raise SpecReplayError(f"{where}{name} must be finite and non-negative")
        arrays.append(x)
    qs, qv, pp = arrays
    if not qs.shape == qv.shape == pp.shape:
        raise SpecReplayError(
            f"{where}q_s, q_v and p must have the same length, got "
            f"{qs.shape[0]}, {qv.shape[0]}, {pp.shape[0]}"
        )
    for name, x in (("q_s", qs), ("q_v", qv)):
        if abs(float(x.sum()) - 1.0) > _SUM_TOL:
            raise SpecReplayError(f"{where}{name} sums to {float(x.sum())!r}, not 1")
    po = float(p_other)
    if not math.isfinite(po) or po < 0.0:
        raise SpecReplayError(f"{where}p_other must be finite and non-negative, got {po!r}")
    total = float(pp.sum()) + po
    if abs(total - 1.0) > _P_SUM_TOL:
        raise SpecReplayError(f"{where}p sums with p_other to {total!r}, not 1 (±{_P_SUM_TOL})")
    return qs, qv, pp, po


def _dyadic_iv(
    m_s: ArrayLike | None, bits: int | None, q_s: NDArray[np.float64], where: str
) -> tuple[NDArray[np.int64], int]:
    """Validate a dyadic sampler; return its integer cumulative sums (empty for float laws)."""
    if m_s is None:
        return np.zeros(0, dtype=np.int64), 0
    m = np.ascontiguousarray(m_s)
    if m.ndim != 1 or m.shape != q_s.shape or not np.issubdtype(m.dtype, np.integer):
        raise SpecReplayError(f"{where}m_s must be a 1-D integer array as long as q_s")
    if bits is None or not 1 <= int(bits) <= 53:
        raise SpecReplayError(f"{where}bits must be in 1..53 with m_s, got {bits!r}")
    n_bits = int(bits)
    m = m.astype(np.int64)
    if np.any(m < 0) or int(m.sum()) != 1 << n_bits:
        raise SpecReplayError(f"{where}m_s must be non-negative and sum to 2^{n_bits}")
    if not np.array_equal(m / float(1 << n_bits), q_s):
        raise SpecReplayError(f"{where}q_s must equal m_s / 2^{n_bits} exactly")
    return np.cumsum(m), n_bits


def _method_iv(method: str) -> Method:
    if method == "G":
        return "G"
    if method == "pearson":
        return "pearson"
    raise SpecReplayError(f"method must be 'G' or 'pearson', got {method!r}")


# --------------------------------------------------------------------------------------------
# Exact output law (SPEC §1, §3.3)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputLaw:
    """Exact law of the token emitted at one position.

    Attributes
    ----------
    law : float64, (n + 1,)
        Probability of each candidate, then of the other bucket; sums to 1.
    alpha : float
        Acceptance α = Σ_x q^s(x)·a(x).
    tv : float
        Total variation ½ Σ |law − p_ref| to the normalised target p_ref = p_ext / Σ p_ext.
    residual : float64, (n + 1,)
        The residual weights actually used (max(0, p − q^v) then p_other, or p_ext when those
        sum to 0; see the module docstring), unnormalised.
    """

    law: NDArray[np.float64]
    alpha: float
    tv: float
    residual: NDArray[np.float64]


def _residual_weights(
    q_v: NDArray[np.float64], p: NDArray[np.float64], p_other: float
) -> NDArray[np.float64]:
    """Return the residual weights (n + 1,): max(0, p − q^v) and p_other, or p_ext if all 0."""
    w = np.append(np.maximum(0.0, p - q_v), p_other)
    if not w.sum() > 0.0:
        return np.append(p, p_other)  # empty residual: fall back to p_ext (module docstring)
    return w


def _p_ref(p: NDArray[np.float64], p_other: float) -> NDArray[np.float64]:
    ext = np.append(p, p_other)
    out: NDArray[np.float64] = ext / ext.sum()
    return out


def output_law(q_s: ArrayLike, q_v: ArrayLike, p: ArrayLike, p_other: float) -> OutputLaw:
    """Return the exact law of the emitted token under rejection sampling (SPEC §3.3).

    Parameters
    ----------
    q_s : float64, (n,)
        Sampler law over the candidates (sums to 1).
    q_v : float64, (n,)
        Verifier law (sums to 1; equals ``q_s`` for a matched arm).
    p : float64, (n,)
        Target probabilities of the candidates.
    p_other : float
        Target mass outside the candidates, max(0, 1 − Σp).

    Returns
    -------
    OutputLaw
        law (n + 1,) = q^s·a + (1 − α)·r over the candidates and the other bucket, α, TV to p.

    Examples
    --------
    A matched verifier emits p; a mismatched one does not:

    >>> q = [0.75, 0.25]
    >>> out = output_law(q, q, [0.6, 0.3], 0.1)
    >>> [round(float(v), 4) for v in out.law], round(out.alpha, 4), round(out.tv, 4)
    ([0.6, 0.3, 0.1], 0.85, 0.0)
    >>> out = output_law([1.0, 0.0], q, [0.6, 0.3], 0.1)
    >>> [round(float(v), 4) for v in out.law], round(out.alpha, 4), round(out.tv, 4)
    ([0.8, 0.0667, 0.1333], 0.8, 0.2333)
    """
    qs, qv, pp, po = _law_iv(q_s, q_v, p, p_other, "")
    return _output_law(qs, qv, pp, po)


def _output_law(
    qs: NDArray[np.float64], qv: NDArray[np.float64], pp: NDArray[np.float64], po: float
) -> OutputLaw:
    acc = accept_probs(qv, pp)  # SPEC §3.2 accept convention (sim.accept)
    accepted = qs * acc  # SPEC §3.3: q^s(x)·min(1, p(x)/q^v(x))
    alpha = float(accepted.sum())
    reject = float((qs * (1.0 - acc)).sum())  # 1 − α, summed directly (accurate as α → 1)
    w = _residual_weights(qv, pp, po)
    law = np.append(accepted, 0.0) + reject * (w / w.sum())
    tv = 0.5 * float(np.abs(law - _p_ref(pp, po)).sum())
    return OutputLaw(law=law, alpha=alpha, tv=tv, residual=w)


# --------------------------------------------------------------------------------------------
# Monte Carlo sampler (kernel + wrapper)
# --------------------------------------------------------------------------------------------


@njit(parallel=True, cache=True)
def _emit_counts(
    q_s: NDArray[np.float64],
    q_v: NDArray[np.float64],
    p: NDArray[np.float64],
    res_w: NDArray[np.float64],
    res_total: float,
    m_cum: NDArray[np.int64],
    bits: int,
    seed: np.uint64,
    key: np.uint64,
    position: int,
    draws: int,
    out: NDArray[np.int64],
) -> None:
    """Sample ``draws`` emitted tokens of one position and add their counts to ``out``.

    Parameters
    ----------
    q_s, q_v, p : float64 (n,)
        Sampler law, verifier law and target probabilities of the candidates.
    res_w : float64 (n + 1,)
        Residual weights (candidates, then the other bucket); res_total their sum (> 0).
    m_cum : int64 (n,) or (0,)
        Integer cumulative sums of a dyadic sampler with ``bits`` N; empty for a float law.
    seed, key : uint64; position : int
        Keys of the counter-based uniforms; draw i uses round i.
    draws : int
        Number of draws.
    out : int64 (n + 1,)
        Counts per category, incremented in place.
    """
    n = q_s.shape[0]
    local = np.zeros((_CHUNKS, n + 1), dtype=np.int64)
    shift = 53 - bits
    for c in prange(_CHUNKS):
        lo = draws * c // _CHUNKS
        hi = draws * (c + 1) // _CHUNKS
        for i in range(lo, hi):
            u = uniform(seed, key, i, position, STREAM_DRAFT)
            if m_cum.shape[0] > 0:
                k = np.int64(u * _TWO_53) >> shift  # SPEC §3.2: k = ⌊u·2^53⌋ >> (53 − N)
                x = np.int64(0)
                while m_cum[x] <= k:
                    x += 1
            else:
                x = np.int64(draw_float(q_s, 0, q_s.shape[0], u))
            v = uniform(seed, key, i, position, STREAM_ACCEPT)
            if v * q_v[x] < p[x]:  # SPEC §3.2: accept when v·q^v(x) < p(x)
                local[c, x] += 1
            else:
                w = uniform(seed, key, i, position, STREAM_RESIDUAL) * res_total
                local[c, draw_float(res_w, 0, res_w.shape[0], w)] += 1
    for c in range(_CHUNKS):
        for j in range(n + 1):
            out[j] += local[c, j]


def sample_counts(
    q_s: ArrayLike,
    q_v: ArrayLike,
    p: ArrayLike,
    p_other: float,
    *,
    draws: int,
    seed: int,
    key: int = 0,
    position: int = 0,
    m_s: ArrayLike | None = None,
    bits: int | None = None,
) -> NDArray[np.int64]:
    """Sample the emitted token of one position ``draws`` times (SPEC §3.3 Monte Carlo).

    Parameters
    ----------
    q_s, q_v, p : float64, (n,)
        Sampler law, verifier law, target probabilities (see :func:`output_law`).
    p_other : float
        Target mass outside the candidates.
    draws : int
        Number of emitted tokens to sample (≥ 1).
    seed, key, position : int
        Keys of the counter-based uniforms (key and seed taken modulo 2^64).
    m_s : int64, (n,), optional
        Dyadic integers of the sampler (Σ m_s = 2^bits, q_s = m_s / 2^bits); sampled by integer
        CDF inversion when given.
    bits : int, optional
        N of the dyadic sampler (1..53); ignored for a float sampler.

    Returns
    -------
    int64, (n + 1,)
        Counts of each candidate, then of the other bucket; they sum to ``draws``.
    """
    qs, qv, pp, po = _law_iv(q_s, q_v, p, p_other, "")
    m_cum, n_bits = _dyadic_iv(m_s, bits, qs, "")
    if int(draws) < 1:
        raise SpecReplayError(f"draws must be at least 1, got {draws!r}")
    if int(position) < 0:
        raise SpecReplayError(f"position must be non-negative, got {position!r}")
    return _counts(qs, qv, pp, po, m_cum, n_bits, int(draws), int(seed), int(key), int(position))


def _counts(
    qs: NDArray[np.float64],
    qv: NDArray[np.float64],
    pp: NDArray[np.float64],
    po: float,
    m_cum: NDArray[np.int64],
    bits: int,
    draws: int,
    seed: int,
    key: int,
    position: int,
) -> NDArray[np.int64]:
    w = _residual_weights(qv, pp, po)
    out = np.zeros(qs.shape[0] + 1, dtype=np.int64)
    _emit_counts(
        qs,
        qv,
        pp,
        w,
        float(w.sum()),
        m_cum,
        bits,
        np.uint64(seed % (1 << 64)),
        np.uint64(key % (1 << 64)),
        position,
        draws,
        out,
    )
    return out


# --------------------------------------------------------------------------------------------
# χ² and noncentral χ² distributions without scipy
# --------------------------------------------------------------------------------------------


def _log_prefactor(a: float, x: float) -> float:
    """log(x^a e^{−x} / Γ(a))."""
    return a * math.log(x) - x - math.lgamma(a)


def gammainc_pq(a: float, x: float) -> tuple[float, float]:
    """Return the regularised incomplete gamma functions (P(a, x), Q(a, x)), P + Q = 1.

    Series for P when x < a + 1, Lentz's continued fraction for Q otherwise (Numerical Recipes,
    3rd ed., §6.2, ``gser``/``gcf``); the other one is the complement, which never loses relative
    accuracy there (Q ≥ 0.08 on the series side). Huge x underflows Q to 0.

    Parameters
    ----------
    a : float
        Shape, > 0.
    x : float
        Argument, ≥ 0.

    Returns
    -------
    tuple of float
        (P, Q).

    Examples
    --------
    >>> [round(v, 12) for v in gammainc_pq(1.0, 2.0)]  # Q(1, x) = e^{-x}
    [0.864664716763, 0.135335283237]
    """
    if not a > 0.0 or not x >= 0.0:
        raise ValueError(f"gammainc_pq needs a > 0 and x >= 0, got a={a!r}, x={x!r}")
    if x == 0.0:
        return 0.0, 1.0
    if math.isinf(x):
        return 1.0, 0.0
    if x < a + 1.0:
        ap, term = a, 1.0 / a
        total = term
        for _ in range(1_000_000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * _EPS:
                break
        else:  # pragma: no cover - a is bounded by the callers
            raise ArithmeticError(f"gamma series did not converge (a={a}, x={x})")
        pv = total * math.exp(_log_prefactor(a, x))
        return pv, 1.0 - pv
    b = x + 1.0 - a
    c = 1.0 / _FPMIN
    d = 1.0 / b
    h = d
    for i in range(1, 1_000_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        if abs(d) < _FPMIN:
            d = _FPMIN
        c = b + an / c
        if abs(c) < _FPMIN:
            c = _FPMIN
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    else:  # pragma: no cover
        raise ArithmeticError(f"gamma continued fraction did not converge (a={a}, x={x})")
    lq = _log_prefactor(a, x) + math.log(h)
    qv = math.exp(lq) if lq > -745.0 else 0.0
    return 1.0 - qv, qv


def chi2_sf(x: float, df: float) -> float:
    """Return the χ² survival function P(χ²_df > x) = Q(df/2, x/2).

    Examples
    --------
    >>> round(chi2_sf(3.841458820694124, 1), 12)
    0.05
    """
    if not df > 0.0:
        raise ValueError(f"chi2_sf needs df > 0, got {df!r}")
    if x <= 0.0:
        return 1.0
    return gammainc_pq(0.5 * df, 0.5 * x)[1]


@lru_cache(maxsize=4096)
def chi2_isf(level: float, df: float) -> float:
    """Return c with P(χ²_df > c) = level (bisection on :func:`chi2_sf`, relative 1e-13).

    Examples
    --------
    >>> round(chi2_isf(0.05, 1), 9)
    3.841458821
    """
    if not 0.0 < level < 1.0 or not df > 0.0:
        raise ValueError(f"chi2_isf needs 0 < level < 1 and df > 0, got {level!r}, {df!r}")
    lo, hi = 0.0, max(1.0, float(df))
    while chi2_sf(hi, df) > level:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-13 * hi:
        mid = 0.5 * (lo + hi)
        if chi2_sf(mid, df) > level:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def ncx2_cdf(x: float, df: float, lam: float) -> float:
    """Return the noncentral χ² cdf P(χ²_df(λ) ≤ x), exactly as a Poisson mixture.

    P = Σ_j Pois(j; λ/2) · P(df/2 + j, x/2) (Johnson, Kotz & Balakrishnan, vol. 2, eq. 29.2),
    summed outward from the Poisson mode j0 until the weights fall below 1e-20: P(df/2 + j0, x/2)
    once by :func:`gammainc_pq`, neighbours by P(a + 1, y) = P(a, y) − y^a e^{−y}/Γ(a + 1)
    (A&S 6.5.21). Absolute error about 1e-14 per 1,000 terms; cost O(√λ) terms.

    Examples
    --------
    >>> round(ncx2_cdf(10.0, 3, 0.0), 12) == round(1.0 - chi2_sf(10.0, 3), 12)
    True
    """
    if not df > 0.0 or not lam >= 0.0:
        raise ValueError(f"ncx2_cdf needs df > 0 and lam >= 0, got {df!r}, {lam!r}")
    if x <= 0.0:
        return 0.0
    a, y, mu = 0.5 * df, 0.5 * x, 0.5 * lam
    if mu == 0.0:
        return gammainc_pq(a, y)[0]
    j0 = math.floor(mu)
    f0 = gammainc_pq(a + j0, y)[0]
    log_mu, log_y = math.log(mu), math.log(y)

    def weight(j: int) -> float:
        return math.exp(j * log_mu - mu - math.lgamma(j + 1.0))

    def step(j: int) -> float:  # y^{a+j} e^{−y} / Γ(a + j + 1)
        return math.exp((a + j) * log_y - y - math.lgamma(a + j + 1.0))

    total = weight(j0) * f0
    f = f0  # upward: P(a + j + 1) = P(a + j) − step(j)
    j = j0
    while True:
        f = max(0.0, f - step(j))
        j += 1
        w = weight(j)
        total += w * f
        if w < 1e-20 or f == 0.0:
            break
    f = f0  # downward: P(a + j − 1) = P(a + j) + step(j − 1)
    j = j0
    while j > 0:
        j -= 1
        f = min(1.0, f + step(j))
        w = weight(j)
        total += w * f
        if w < 1e-20:
            break
    return min(1.0, total)


def chi2_power(lam: float, df: int, level: float) -> float:
    """Return the power P(χ²_df(λ) > c), c the level-``level`` critical value of χ²_df.

    Examples
    --------
    >>> round(chi2_power(0.0, 3, 0.05), 12)
    0.05
    """
    if df < 1:
        return 0.0
    return 1.0 - ncx2_cdf(chi2_isf(level, df), df, lam)


@lru_cache(maxsize=4096)
def _lambda_for_power(df: int, level: float, target: float) -> float:
    """Smallest noncentrality λ with chi2_power(λ, df, level) ≥ target (bisection, rel. 1e-9)."""
    lo, hi = 0.0, 1.0
    while chi2_power(hi, df, level) < target:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-9 * hi:
        mid = 0.5 * (lo + hi)
        if chi2_power(mid, df, level) < target:
            lo = mid
        else:
            hi = mid
    return hi


# --------------------------------------------------------------------------------------------
# Goodness of fit, merging, Holm
# --------------------------------------------------------------------------------------------


def merge_categories(expected: ArrayLike, min_expected: float = MIN_EXPECTED) -> NDArray[np.int64]:
    """Return the merged group of each category (SPEC §3.3; rule in the module docstring).

    Parameters
    ----------
    expected : float64, (n + 1,)
        Expected counts of the n candidates, then of the other bucket.
    min_expected : float
        Categories expected below this are merged (5).

    Returns
    -------
    int64, (n + 1,)
        Group of each category, 0..G−1: the kept candidates in index order, the other bucket
        (with its merged candidates) last unless it was merged into a kept candidate.

    Examples
    --------
    >>> merge_categories([50.0, 3.0, 20.0, 1.0, 4.0]).tolist()  # other: 4 + 3 + 1 = 8
    [0, 2, 1, 2, 2]
    >>> merge_categories([50.0, 3.0, 20.0, 1.0, 0.5]).tolist()  # other: 4.5 < 5, into the 20
    [0, 1, 1, 1, 1]
    """
    e = np.asarray(expected, dtype=np.float64)
    n = e.shape[0] - 1
    small = e[:n] < min_expected
    kept = np.flatnonzero(~small)
    group = np.empty(n + 1, dtype=np.int64)
    group[kept] = np.arange(kept.shape[0])
    other_group = kept.shape[0]
    e_other = float(e[n] + e[:n][small].sum())
    if e_other < min_expected and kept.shape[0] > 0:
        other_group = int(np.argmin(e[kept]))  # smallest kept candidate, ties to lower index
    group[n] = other_group
    group[:n][small] = other_group
    return group


@dataclass(frozen=True)
class GofResult:
    """Goodness of fit of counts to a law after merging.

    Attributes
    ----------
    statistic : float
        G = 2 Σ O ln(O/E) or Pearson Σ (O − E)²/E over the merged categories.
    df : int
        Merged categories − 1.
    p_value : float
        χ²_df survival function of the statistic (1 when df = 0).
    group : int64, (n + 1,)
        Merged group of each category (:func:`merge_categories`).
    merged : tuple of int
        Candidates merged away from their own category (0-based), and n when the other bucket
        itself was merged into a candidate.
    """

    statistic: float
    df: int
    p_value: float
    group: NDArray[np.int64]
    merged: tuple[int, ...]


def _merged_label(group: NDArray[np.int64], expected: NDArray[np.float64]) -> tuple[int, ...]:
    """Candidates merged into the other bucket, then n if that bucket joined a candidate."""
    n = group.shape[0] - 1
    small = expected[:n] < MIN_EXPECTED
    out = [int(i) for i in np.flatnonzero(small)]
    if np.any(group[:n][~small] == group[n]):
        out.append(n)
    return tuple(out)


def goodness_of_fit(counts: ArrayLike, p_ref: ArrayLike, *, method: str = "G") -> GofResult:
    """Test counts against a law: G-test (default) or Pearson χ², small categories merged.

    Parameters
    ----------
    counts : int64, (n + 1,)
        Observed counts (candidates, then the other bucket).
    p_ref : float64, (n + 1,)
        Reference law (normalised here).
    method : {"G", "pearson"}

    Returns
    -------
    GofResult

    Examples
    --------
    >>> r = goodness_of_fit([30, 70], [0.5, 0.5], method="pearson")
    >>> round(r.statistic, 6), r.df, round(r.p_value, 8)
    (16.0, 1, 6.334e-05)
    """
    kind = _method_iv(method)
    o = np.asarray(counts, dtype=np.float64)
    ref = np.asarray(p_ref, dtype=np.float64)
    if o.ndim != 1 or o.shape != ref.shape or o.shape[0] < 2:
        raise SpecReplayError("counts and p_ref must be 1-D arrays of the same length (≥ 2)")
    if np.any(o < 0) or not np.all(np.isfinite(ref)) or np.any(ref < 0) or not ref.sum() > 0:
        raise SpecReplayError("counts must be non-negative and p_ref a non-negative law")
    total = float(o.sum())
    expected = total * ref / ref.sum()
    group = merge_categories(expected)
    n_groups = int(group.max()) + 1
    og = np.bincount(group, weights=o, minlength=n_groups)
    eg = np.bincount(group, weights=expected, minlength=n_groups)
    df = n_groups - 1
    if df == 0:
        return GofResult(0.0, 0, 1.0, group, _merged_label(group, expected))
    if kind == "G":
        pos = og > 0
        stat = 2.0 * float(np.sum(og[pos] * np.log(og[pos] / eg[pos])))
    else:
        stat = float(np.sum((og - eg) ** 2 / eg))
    stat = max(stat, 0.0)  # G can round to a tiny negative
    return GofResult(stat, df, chi2_sf(stat, df), group, _merged_label(group, expected))


# --------------------------------------------------------------------------------------------
# Draws for power
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Draws:
    draws: int
    power: float | None
    underpowered: bool
    rule: str


def _power_at(
    draws: int, law: NDArray[np.float64], p_ref: NDArray[np.float64], level: float
) -> tuple[float, int, float]:
    """Return (power, df, δ) at ``draws``: categories merged as the test will merge them."""
    group = merge_categories(draws * p_ref)
    n_groups = int(group.max()) + 1
    lg = np.bincount(group, weights=law, minlength=n_groups)
    pg = np.bincount(group, weights=p_ref, minlength=n_groups)
    pos = pg > 0
    delta = float(np.sum((lg[pos] - pg[pos]) ** 2 / pg[pos]))  # Cohen's w², λ = draws·δ
    df = n_groups - 1
    return chi2_power(draws * delta, df, level), df, delta


def draws_for_power(
    law: ArrayLike,
    p_ref: ArrayLike,
    *,
    level: float,
    min_draws: int = DEFAULT_MIN_DRAWS,
    max_draws: int = DEFAULT_MAX_DRAWS,
    target: float = TARGET_POWER,
) -> tuple[int, float | None, bool, str]:
    """Choose the number of draws of a law test for power ``target`` at ``level``.

    Fixed point n ← ⌈λ*(df_n)/δ_n⌉, where df_n and δ_n = Σ (law − p)²/p come from the
    categories merged at n draws and λ*(df) is the noncentrality of power ``target``; then
    floored at ``min_draws`` and capped at ``max_draws``.

    Parameters
    ----------
    law, p_ref : float64, (n + 1,)
        Exact output law and reference law.
    level : float
        Per-test level of the power computation (family alpha / m, Bonferroni).
    min_draws, max_draws : int
        Floor and cap.
    target : float
        Power to reach.

    Returns
    -------
    tuple
        (draws, power at draws or None for a null law, underpowered, rule), rule one of
        ``null-law``, ``power``, ``min-draws``, ``max-draws``.
    """
    lw = np.asarray(law, dtype=np.float64)
    pr = np.asarray(p_ref, dtype=np.float64)
    d = _choose_draws(lw, pr, level, int(min_draws), int(max_draws), float(target))
    return d.draws, d.power, d.underpowered, d.rule


def _choose_draws(
    law: NDArray[np.float64],
    p_ref: NDArray[np.float64],
    level: float,
    min_draws: int,
    max_draws: int,
    target: float,
) -> _Draws:
    if 0.5 * float(np.abs(law - p_ref).sum()) <= TV_NULL:
        return _Draws(min_draws, None, False, "null-law")
    n = max_draws
    seen: set[int] = set()
    for _ in range(50):  # merging changes df and δ with n: iterate to a fixed point
        _, df, delta = _power_at(n, law, p_ref, level)
        if df < 1 or not delta > 0.0:
            break
        nxt = min(max_draws, max(1, math.ceil(_lambda_for_power(df, level, target) / delta)))
        if nxt == n or nxt in seen:
            n = max(n, nxt)
            break
        seen.add(n)
        n = nxt
    n = max(n, min_draws)
    power = _power_at(n, law, p_ref, level)[0]
    while power < target and n < max_draws:  # guard against non-monotone merging
        n = min(max_draws, math.ceil(1.25 * n))
        power = _power_at(n, law, p_ref, level)[0]
    if power < target:
        return _Draws(n, power, True, "max-draws")
    return _Draws(n, power, False, "min-draws" if n == min_draws else "power")


# --------------------------------------------------------------------------------------------
# Run: every arm × position of one run, Holm over the family
# --------------------------------------------------------------------------------------------


class LawCase(NamedTuple):
    """One (arm, position) to test; a plain tuple in this field order works too.

    Attributes
    ----------
    arm : str
        Arm text (canonical form, SPEC §3.1).
    position : int
        Position index (1-based in SPEC outputs; any non-negative int here).
    q_s, q_v, p : float64, (n,)
        Sampler law, verifier law, target probabilities of the candidates.
    p_other : float
        Target mass outside the candidates.
    m_s : int64, (n,) or None
        Dyadic integers of the sampler, or None for a float sampler.
    bits : int or None
        N of the dyadic sampler (ignored when m_s is None).
    request : str or None
        The archive request the position is from (None for a toy position).
    round : int or None
        Its round within the request (None for a toy position).
    """

    arm: str
    position: int
    q_s: NDArray[np.float64]
    q_v: NDArray[np.float64]
    p: NDArray[np.float64]
    p_other: float
    m_s: NDArray[np.int64] | None
    bits: int | None
    request: str | None = None
    round: int | None = None


@dataclass(frozen=True)
class LawTestResult:
    """Law test of one (arm, position) (SPEC §3.3); label SIMULATED.

    Attributes
    ----------
    arm : str
    position : int
    tv : float
        Exact total variation of the output law to p.
    alpha : float
        Exact acceptance α of the position.
    draws : int
        Monte Carlo draws used.
    statistic : float
        G or Pearson statistic.
    df : int
        Degrees of freedom (merged categories − 1).
    p_value : float
        Unadjusted p-value.
    p_adj : float
        Holm-adjusted p-value over the run's family.
    passed : bool
        p_adj ≥ family alpha.
    power : float or None
        Power against the exact law at ``draws`` (None for a null law: nothing to detect).
    underpowered : bool
        ``max_draws`` could not reach the target power.
    merged_categories : tuple of int
        Candidates merged away (and n when the other bucket was merged into a candidate).
    categories : int
        Categories after merging.
    method : str
        ``G`` or ``pearson``.
    draws_rule : str
        Why this many draws: ``power``, ``min-draws``, ``max-draws`` or ``null-law``.
    label : str
        ``SIMULATED``.
    request, round : str or None, int or None
        Where in the archive the position is (None for a toy position).
    """

    arm: str
    position: int
    tv: float
    alpha: float
    draws: int
    statistic: float
    df: int
    p_value: float
    p_adj: float
    passed: bool
    power: float | None
    underpowered: bool
    merged_categories: tuple[int, ...]
    categories: int
    method: str
    draws_rule: str
    label: str = "SIMULATED"
    request: str | None = None
    round: int | None = None


def run_law_tests(
    cases: Iterable[LawCase | tuple[Any, ...]],
    *,
    seed: int,
    family_alpha: float = DEFAULT_FAMILY_ALPHA,
    max_draws: int = DEFAULT_MAX_DRAWS,
    min_draws: int = DEFAULT_MIN_DRAWS,
    method: str = "G",
) -> list[LawTestResult]:
    """Run the law test of every (arm, position) with Holm's correction over all of them.

    Parameters
    ----------
    cases : iterable of LawCase
        (arm, position, q_s, q_v, p, p_other, m_s or None, bits) per test.
    seed : int
        Seed of the counter-based uniforms (each case keyed by ``request_key(arm)`` and its
        position).
    family_alpha : float
        Family-wise error rate of Holm's procedure; the draws are powered at family_alpha / m.
    max_draws, min_draws : int
        Cap and floor of the draws per test (``min_draws`` also for null laws).
    method : {"G", "pearson"}
        Goodness-of-fit statistic.

    Returns
    -------
    list of LawTestResult
        In the order of ``cases``.
    """
    kind = _method_iv(method)
    prepared = _prepare(cases, family_alpha, min_draws, max_draws)
    if not prepared:
        return []
    level = family_alpha / len(prepared)  # Bonferroni level for the power computation
    rows = [_test_one(c, level, int(min_draws), int(max_draws), int(seed), kind) for c in prepared]
    p_adj = holm([gof.p_value for _, _, _, gof in rows])
    return [
        LawTestResult(
            arm=case.arm,
            position=int(case.position),
            request=case.request,
            round=None if case.round is None else int(case.round),
            tv=exact.tv,
            alpha=exact.alpha,
            draws=plan.draws,
            statistic=gof.statistic,
            df=gof.df,
            p_value=gof.p_value,
            p_adj=float(pa),
            passed=bool(pa >= family_alpha),
            power=plan.power,
            underpowered=plan.underpowered,
            merged_categories=gof.merged,
            categories=gof.df + 1,
            method=kind,
            draws_rule=plan.rule,
        )
        for (case, exact, plan, gof), pa in zip(rows, p_adj, strict=True)
    ]


class _Prepared(NamedTuple):
    """One validated law-test case: contiguous float64 laws and the sampler's dyadic form."""

    case: LawCase
    qs: NDArray[np.float64]
    qv: NDArray[np.float64]
    pp: NDArray[np.float64]
    po: float
    m_cum: NDArray[np.int64]  # cumulative dyadic integers; empty for a float sampler
    bits: int


def _prepare(
    cases: Iterable[LawCase | tuple[Any, ...]], family_alpha: float, min_draws: int, max_draws: int
) -> list[_Prepared]:
    """Validate the run's options and every case (SpecReplayError naming the case)."""
    if not 0.0 < family_alpha < 1.0:
        raise SpecReplayError(f"family_alpha must be in (0, 1), got {family_alpha!r}")
    if not 1 <= int(min_draws) <= int(max_draws):
        raise SpecReplayError(
            f"need 1 <= min_draws <= max_draws, got min_draws={min_draws}, max_draws={max_draws}"
        )
    prepared = []
    for raw in cases:
        case = LawCase(*raw)
        where = f"law test {case.arm!r} position {case.position}: "
        if int(case.position) < 0:
            raise SpecReplayError(f"{where}position must be non-negative")
        qs, qv, pp, po = _law_iv(case.q_s, case.q_v, case.p, case.p_other, where)
        m_cum, bits = _dyadic_iv(case.m_s, case.bits, qs, where)
        prepared.append(_Prepared(case, qs, qv, pp, po, m_cum, bits))
    return prepared


def _test_one(
    c: _Prepared, level: float, min_draws: int, max_draws: int, seed: int, kind: Method
) -> tuple[LawCase, OutputLaw, _Draws, GofResult]:
    """Exact law, draws for power, Monte Carlo counts and goodness of fit of one case."""
    exact = _output_law(c.qs, c.qv, c.pp, c.po)
    ref = _p_ref(c.pp, c.po)
    plan = _choose_draws(exact.law, ref, level, min_draws, max_draws, TARGET_POWER)
    counts = _counts(
        c.qs,
        c.qv,
        c.pp,
        c.po,
        c.m_cum,
        c.bits,
        plan.draws,
        seed,
        int(request_key(c.case.arm)),
        int(c.case.position),
    )
    return c.case, exact, plan, goodness_of_fit(counts, ref, method=kind)


def to_json(result: LawTestResult) -> dict[str, Any]:
    """Return the results.json ``law_tests`` entry of a result (SPEC §4.1), all fields."""
    return {
        "arm": result.arm,
        "position": result.position,
        "tv": result.tv,
        "p_adj": result.p_adj,
        "passed": result.passed,
        "request": result.request,
        "round": result.round,
        "acceptance_rate": result.alpha,
        "draws": result.draws,
        "statistic": result.statistic,
        "df": result.df,
        "p_value": result.p_value,
        "power": result.power,
        "underpowered": result.underpowered,
        "merged_categories": list(result.merged_categories),
        "categories": result.categories,
        "method": result.method,
        "draws_rule": result.draws_rule,
        "label": result.label,
    }


# --------------------------------------------------------------------------------------------
# Toy-law suite
# --------------------------------------------------------------------------------------------


def toy_quantize_dyadic_nearest(q: ArrayLike, bits: int) -> NDArray[np.int64]:
    """Largest-remainder dyadic integers of a float law — **for the toy suite only**.

    A local copy of SPEC §3.1 ``dyadicN:nearest`` so this module does not depend on
    ``specreplay.sim.policy``: m_i = ⌊q_i·2^N⌋, r = 2^N − Σ m_i; min(max(r, 0), n) units go to
    the largest fractional parts (ties to the lower index); any remaining surplus or deficit goes
    on the argmax, so Σ m_i = 2^N exactly.

    Parameters
    ----------
    q : float64, (n,)
        Float law (sums to 1).
    bits : int
        N, 1..53.

    Returns
    -------
    int64, (n,)

    Examples
    --------
    >>> toy_quantize_dyadic_nearest([0.5, 0.3, 0.2], 3).tolist()
    [4, 2, 2]
    """
    x = np.asarray(q, dtype=np.float64)
    scale = float(1 << bits)
    m = np.floor(x * scale).astype(np.int64)
    r = (1 << bits) - int(m.sum())
    frac = x * scale - m
    give = min(max(r, 0), x.shape[0])
    m[np.argsort(-frac, kind="stable")[:give]] += 1
    m[int(np.argmax(x))] += (1 << bits) - int(m.sum())
    if int(m.sum()) != 1 << bits or np.any(m < 0):
        raise ArithmeticError("toy dyadic quantizer did not reach 2^N")  # pragma: no cover
    return m


def toy_laws() -> list[tuple[str, NDArray[np.float64], NDArray[np.float64], float]]:
    """Return the fixed (name, p, q, p_other) toy positions."""
    p1 = np.array([0.62, 0.2, 0.1, 0.05, 0.02, 0.01])
    q1 = p1 ** (1 / 0.7) / np.sum(p1 ** (1 / 0.7))  # a t0.7 drafter: sharper than the target
    i16 = np.arange(16)
    p2 = np.full(16, 1 / 16)
    q2 = (1.0 + 0.3 * np.cos(i16)) / np.sum(1.0 + 0.3 * np.cos(i16))
    p3 = np.array([0.4, 0.3, 0.2, 0.1, 0.0, 0.0, 0.0, 0.0])
    q3 = np.array([0.3, 0.2, 0.2, 0.1, 0.05, 0.05, 0.05, 0.05])  # mass where p has none
    i32 = np.arange(32)
    p4 = 0.9 * 0.8**i32 / np.sum(0.8**i32)
    q4 = 0.8 ** (i32 / 0.7) / np.sum(0.8 ** (i32 / 0.7))
    return [
        ("peaked6", p1, q1, 0.0),
        ("flat16", p2, q2, 0.0),
        ("qonly8", p3, q3, 0.0),
        ("tail32", p4, q4, max(0.0, 1.0 - float(p4.sum()))),
    ]


def toy_cases(bits: int = 8) -> list[LawCase]:
    """Return the toy-law suite: arms float64, dyadicN and dyadicN/float64 on four toy positions.

    Positions 1..4 are a peaked target with a sharper (t0.7) drafter (6 candidates), a flat target
    (16), a drafter with mass where the target has none (8) and a 32-candidate geometric target
    with p_other = 0.1. The dyadic laws come from :func:`toy_quantize_dyadic_nearest`.

    Parameters
    ----------
    bits : int
        N of the dyadic arms (8 by default: the coarse quantizer whose mismatch is detectable).

    Returns
    -------
    list of LawCase
    """
    out: list[LawCase] = []
    for pos, (name, p, q, p_other) in enumerate(toy_laws(), start=1):
        m = toy_quantize_dyadic_nearest(q, bits)
        qd = m / float(1 << bits)
        out.append(LawCase(f"toy-{name}:float64", pos, q, q, p, p_other, None, None))
        out.append(LawCase(f"toy-{name}:dyadic{bits}", pos, qd, qd, p, p_other, m, bits))
        out.append(LawCase(f"toy-{name}:dyadic{bits}/float64", pos, qd, q, p, p_other, m, bits))
    return out

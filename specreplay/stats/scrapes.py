"""What two vLLM scrapes measure alone: acceptance figures, a binned median, a lower-bound SE.

See docs/commands.md#screen and docs/inputs.md#run-counters-and-vllm-scrapes.

Terms (vLLM's, ``vllm/v1/spec_decode/metrics.py`` at vLLM 0.33.0). Between two scrapes, Δdrafts
is the number of **drafts** (rounds), Δdraft_tokens the tokens they proposed, Δaccepted the tokens
the target accepted and Δper_pos[i] the drafts whose position i (0-based) was accepted, which is
already a survival: S_{i+1} = Δper_pos[i]/Δdrafts = P(A ≥ i + 1) (``observe_draft`` adds 1 to
positions 0..A − 1 of a draft). From these counts alone:

- **mean acceptance length** = 1 + Δaccepted/Δdrafts (R, bonus token included), exact whatever
  the proposal lengths;
- **per-position acceptance rate** i = S_{i+1};
- **draft acceptance rate** ("Avg Draft acceptance rate") = Δaccepted/Δdraft_tokens, which is
  not α: at a fixed depth d it is (R − 1)/d.

**Binned median** (:func:`bucket_quantile`): the φ-quantile of a differenced Prometheus histogram
by linear interpolation within the bucket, as Prometheus' ``histogram_quantile`` computes it
(``promql/quantile.go``, ``bucketQuantile``): buckets sorted by upper bound and equal bounds
merged; counts within a relative 1e-12 of the previous made equal, then made non-decreasing; NaN
with fewer than 2 buckets, a highest bucket that is not +Inf, or no observations; rank = φ·count;
the first bucket whose cumulative count reaches the rank; in the +Inf bucket the upper bound of
the bucket below it; in the lowest bucket, from 0 when its bound is positive (its bound itself
when ≤ 0); 0/0 there (q = 0 over an empty lowest bucket) is NaN, as in Go.

**Round-independent SE of R** (:func:`round_variance`): with A the accepted drafts of one round,
E[A] = Σ_i S_i and E[A²] = Σ_i (2i − 1)·S_i (A² = Σ_{i≤A} (2i − 1)), so the per-round variance is
Var(A) = Σ_i (2i − 1)·S_i − (Σ_i S_i)², and the SE of a mean over N drafts is √(Var(A)/N). It
treats rounds as independent; rounds of one request are correlated, so it is a lower bound of the
real SE (a position trace, docs/tour.md, gives a request-level interval).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["bucket_quantile", "mean_se", "round_variance"]


def bucket_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """Return Prometheus' ``histogram_quantile(q, …)`` of cumulative buckets (module docstring).

    Parameters
    ----------
    q : float
        The quantile, 0 ≤ q ≤ 1 (q < 0 gives −inf, q > 1 +inf, as Prometheus does).
    buckets : sequence of (upper bound, cumulative count)
        One pair per ``le`` label, in any order; ``math.inf`` for ``le="+Inf"``.

    Returns
    -------
    float
        The interpolated quantile, NaN where Prometheus returns NaN.

    Examples
    --------
    >>> round(bucket_quantile(0.5, [(0.025, 10.0), (0.05, 30.0), (math.inf, 40.0)]), 12)
    0.0375
    >>> bucket_quantile(0.5, [(0.025, 10.0), (0.05, 30.0)])  # no +Inf bucket
    nan
    """
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if not buckets:
        return math.nan
    ordered = sorted(buckets, key=lambda b: b[0])
    if not math.isinf(ordered[-1][0]) or ordered[-1][0] < 0:
        return math.nan
    merged: list[list[float]] = []
    for bound, count in ordered:  # coalesceBuckets: equal bounds add up
        if merged and merged[-1][0] == bound:
            merged[-1][1] += count
        else:
            merged.append([bound, count])
    prev = merged[0][1]
    for b in merged[1:]:  # correctPrecisionErrors(buckets, 1e-12)
        delta = abs(b[1] - prev)
        if delta == 0:
            continue
        if delta / b[1] <= 1e-12:
            b[1] = prev
        else:
            prev = b[1]
    top = merged[0][1]
    for b in merged[1:]:  # ensureMonotonic
        top = max(top, b[1])
        b[1] = top
    if len(merged) < 2:
        return math.nan
    observations = merged[-1][1]
    if observations == 0:
        return math.nan
    rank = q * observations
    hit = next((i for i in range(len(merged) - 1) if merged[i][1] >= rank), len(merged) - 1)
    if hit == len(merged) - 1:  # in the +Inf bucket: the highest finite bound
        return merged[-2][0]
    if hit == 0 and merged[0][0] <= 0:
        return merged[0][0]
    start, end, count = 0.0, merged[hit][0], merged[hit][1]
    if hit > 0:
        start = merged[hit - 1][0]
        count -= merged[hit - 1][1]
        rank -= merged[hit - 1][1]
    if count == 0:  # rank 0 in an empty lowest bucket: Go's 0/0, NaN
        return math.nan
    return start + (end - start) * (rank / count)


def round_variance(survivals: Sequence[float]) -> float:
    """Var(A) per round = Σ_i (2i − 1)·S_i − (Σ_i S_i)² (module docstring), i = 1..k.

    Examples
    --------
    >>> round(round_variance([0.8, 0.5, 0.2]), 10)  # 0.8 + 1.5 + 1.0 − 1.5²
    1.05
    """
    first = sum(survivals)
    second = sum((2 * i - 1) * s for i, s in enumerate(survivals, start=1))
    return max(second - first * first, 0.0)


def mean_se(survivals: Sequence[float], drafts: int) -> float:
    """SE of the mean acceptance length over ``drafts`` independent rounds: √(Var(A)/N)."""
    return math.sqrt(round_variance(survivals) / drafts)

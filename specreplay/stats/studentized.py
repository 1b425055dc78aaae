"""Studentized (bootstrap-t) intervals and p-values of a cell's Δ and Δ/R_a.

See docs/methods.md#bootstrap-intervals-kept-for-reference.

The default interval until issue 10, now one of the candidates the calibration study measures beside
the CR2 default (:mod:`specreplay.stats.cr2`; docs/calibration.md#calibration-of-the-intervals,
``bench/calibration.py``): it undercovers on skewed, sparse per-request effects. For a statistic θ
of a cell (Δ = R_b − R_a or Δ/R_a = R_b/R_a − 1, each R a ratio of sums over the cell's rounds) with
standard error SE, each replicate's t* = (θ* − θ̂)/SE* is formed with the SE* of that replicate's
own requests, and the (1 − α) interval is

    [θ̂ − q_{1−α/2}(t*)·SE,  θ̂ − q_{α/2}(t*)·SE]

(Efron & Tibshirani 1993, §12.5; Hall 1988): second-order accurate where the percentile interval
is first-order, which is what closes its undercoverage in small cells with skewed per-request
effects (0.913 → 0.947 at 20 requests in the calibration study's skewed setting).

SE is the linearised (delta-method) standard error with the request as the unit, stratified as
the resampling is: with u_i = β·z_i the influence of request i on θ (its residual coordinates
z_i, :data:`specreplay.stats.bootstrap.N_MOMENTS`, over its pieces in the cell, and β the
gradient of θ at the sample's own sums),

    SE² = Σ_s n_s/(n_s − 1) · [Σ_{i∈s} w_i u_i² − (Σ_{i∈s} w_i u_i)²/n_s],

n_s the requests of stratum s (a family, or all of them for ``--stratify none``; requests with
no round in the cell count with z = 0: a domain estimate) and w_i the request's count in the
replicate (1 for the sample itself). The sums come from the kernel's moments
(:func:`specreplay.stats.bootstrap.bootstrap_moments`), so SE* costs no second resampling.

p-values invert the same interval, so each verdict and the interval beside it agree: the
two-sided p of θ = 0 is 2·min(P*(t* ≥ θ̂/SE), P*(t* ≤ θ̂/SE)) (p < α iff the (1 − α) interval
excludes 0), and the TOST p of |θ| ≥ m is max(P*(t* ≤ (θ̂ − m)/SE), P*(t* ≥ (θ̂ + m)/SE)) (p < α
iff the (1 − 2α) interval lies inside (−m, m)). A sample with SE = 0 (identical arms) has the
zero-width interval [θ̂, θ̂] and p-values 0 or 1; a replicate with SE* = 0 (one request drawn
every time) gets t* = ±10³⁰⁰, or 0 when θ* = θ̂.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from specreplay.stats.bootstrap import Moments

__all__ = ["METHOD", "Studentized", "cell_standard_errors"]

METHOD: Final = "studentized"
_BIG: Final = 1e300


@dataclass(frozen=True)
class Studentized:
    """θ̂, its SE and the replicates' t* of one delta (the module docstring's interval).

    ``t`` is kept sorted (p-values are then binary searches: the Holm margin bisection asks for
    thousands of them).
    """

    theta: float
    se: float
    t: NDArray[np.float64]

    def __post_init__(self) -> None:
        object.__setattr__(self, "t", np.sort(np.asarray(self.t, np.float64)))

    @staticmethod
    def of(
        theta: float, se: float, reps: NDArray[np.float64], se_reps: NDArray[np.float64]
    ) -> Studentized:
        """Form t* = (θ* − θ̂)/SE* (see the module docstring for SE* = 0)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (reps - theta) / se_reps
        t = np.where(reps == theta, 0.0, t)
        return Studentized(float(theta), float(se), np.nan_to_num(t, posinf=_BIG, neginf=-_BIG))

    def interval(self, level: float) -> tuple[float, float]:
        """Return the (``level``) interval [θ̂ − q_{1−α/2}·SE, θ̂ − q_{α/2}·SE]."""
        if self.se == 0.0:
            return self.theta, self.theta
        a = (1.0 - level) / 2.0
        q_lo, q_hi = np.quantile(self.t, [a, 1.0 - a])
        return float(self.theta - q_hi * self.se), float(self.theta - q_lo * self.se)

    def p_difference(self) -> float:
        """Return the two-sided p-value of θ = 0 (inverts :meth:`interval`), at most 1."""
        if self.se == 0.0:
            return 1.0 if self.theta == 0.0 else 0.0
        s = self.theta / self.se
        b = self.t.shape[0]
        ge = (b - int(np.searchsorted(self.t, s, "left"))) / b
        le = int(np.searchsorted(self.t, s, "right")) / b
        return float(min(1.0, 2.0 * min(ge, le)))

    def p_equivalence(self, margin: float) -> float:
        """Return the TOST p-value of |θ| ≥ ``margin`` (inverts the 1 − 2α interval)."""
        if self.se == 0.0:
            return 0.0 if abs(self.theta) < margin else 1.0
        b = self.t.shape[0]
        upper = int(np.searchsorted(self.t, (self.theta - margin) / self.se, "right")) / b
        lower = (b - int(np.searchsorted(self.t, (self.theta + margin) / self.se, "left"))) / b
        return float(max(upper, lower))


def _quadratic(beta: NDArray[np.float64], mom: NDArray[np.float64]) -> NDArray[np.float64]:
    """Σ w u² = β^T (Σ w z z^T) β from the 10 products (last axis of ``mom`` from index 4)."""
    out = np.zeros(np.broadcast_shapes(beta.shape[:-1], mom.shape[:-1]))
    j = 4
    for u in range(4):
        for v in range(u, 4):
            coef = 1.0 if u == v else 2.0
            out = out + coef * beta[..., u] * beta[..., v] * mom[..., j]
            j += 1
    return out


def _gradients(
    sums: NDArray[np.float64], c: float
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """β of Δ, Δ/R_a, R_b and R_a on z = (n_a, n_b − n_a, e_a, d), from (N_a, T_a, N_b, T_b).

    With t_a − R_a n_a = e_a − (R_a − c) z_0 and t_b − R_b n_b = d + e_a − (R_b − c)(z_0 + z_1):
    for paired replays (n_b = n_a) every term of β^T (Σ w z z^T) β is of the order of the
    difference between the arms, so nothing cancels however small it is.
    """
    na, ta, nb, tb = sums[..., 0], sums[..., 1], sums[..., 2], sums[..., 3]
    with np.errstate(divide="ignore", invalid="ignore"):
        ra, rb = ta / na, tb / nb
        ga, gb = (ra - c) / na, (rb - c) / nb
        delta = np.stack([ga - gb, -gb, 1.0 / nb - 1.0 / na, 1.0 / nb], axis=-1)
        rel = np.stack(
            [
                (rb / ra * ga - gb) / ra,
                -gb / ra,
                (1.0 / nb - rb / (ra * na)) / ra,
                1.0 / (ra * nb),
            ],
            axis=-1,
        )
        r_b = np.stack([-gb, -gb, 1.0 / nb, 1.0 / nb], axis=-1)  # R_b alone
        zero = np.zeros_like(ga)
        r_a = np.stack([-ga, zero, 1.0 / na, zero], axis=-1)  # R_a alone
    return delta, rel, r_b, r_a


def _variance(
    beta: NDArray[np.float64], strata: NDArray[np.float64], size: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Σ_s n_s/(n_s − 1)·[Σ w u² − (Σ w u)²/n_s]; ``strata`` (..., S, 14), ``size`` (S,)."""
    b = beta[..., None, :]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        quad = _quadratic(b, strata)  # NaN where a replicate has no round of an arm (left out)
        lin = (b * strata[..., :4]).sum(axis=-1)
        factor = np.where(size > 1, size / (size - 1.0), 0.0)
        centred = quad - np.where(size > 0, lin * lin / np.where(size > 0, size, 1.0), 0.0)
        return np.asarray((factor * np.maximum(centred, 0.0)).sum(axis=-1))


def cell_standard_errors(
    mom: Moments,
    fam_idx: tuple[int, ...],
    bucket_idx: tuple[int, ...],
    point_sums: NDArray[np.float64],
    rep_sums: NDArray[np.float64],
) -> tuple[tuple[float, NDArray[np.float64]], ...]:
    """Return ((SE, SE*) of Δ, of Δ/R_a, of R_b, of R_a) of one cell, in one computation.

    Parameters
    ----------
    mom : Moments
    fam_idx, bucket_idx : tuple of int
        The cell's families and buckets: every bucket (pooled and family cells: request totals)
        or one (bucket and family × bucket cells: that bucket's pieces).
    point_sums : float64, (4,)
        The cell's observed (N_a, T_a, N_b, T_b).
    rep_sums : float64, (B, 4)
        The same per replicate.
    """
    return _standard_errors(mom, fam_idx, bucket_idx, point_sums, rep_sums)


def _standard_errors(
    mom: Moments,
    fam_idx: tuple[int, ...],
    bucket_idx: tuple[int, ...],
    point_sums: NDArray[np.float64],
    rep_sums: NDArray[np.float64],
) -> tuple[tuple[float, NDArray[np.float64]], ...]:
    """(SE, SE*) of Δ, Δ/R_a, R_b and R_a of one cell."""
    fi = list(fam_idx)
    n_buckets = mom.piece.shape[2]
    if len(bucket_idx) == n_buckets:
        reps, point = mom.total[:, fi], mom.total_point[fi]
    elif len(bucket_idx) == 1:
        reps, point = mom.piece[:, fi, bucket_idx[0]], mom.piece_point[fi, bucket_idx[0]]
    else:
        raise ValueError("a cell spans one bucket or all of them")
    if mom.stratified:
        size = mom.stratum_size[fi].astype(np.float64)
    else:  # one stratum: every request, those of other families with z = 0
        reps, point = reps.sum(axis=1, keepdims=True), point.sum(axis=0, keepdims=True)
        size = np.array([float(mom.stratum_size.sum())])
    pts = _gradients(point_sums, mom.center)
    rps = _gradients(rep_sums, mom.center)
    return tuple(
        (float(np.sqrt(_variance(b_pt, point, size))), np.sqrt(_variance(b_rep, reps, size)))
        for b_pt, b_rep in zip(pts, rps, strict=True)
    )

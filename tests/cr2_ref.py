"""A slow, independent CR2 reference for the tests.

Per cell it accumulates each request's totals from the raw pieces in a Python dict (no bincount),
forms the delta-method influence u_i of the ratio of ratios in the original coordinates and the
leverage h_i (x_i / X: rounds of both arms for Δ, t_a for Δ/R_a, rounds for one arm's R), the CR2
variance Σ u_i²/(1 − h_i), and the effective degrees of freedom from a dense eigendecomposition
of A^{1/2}(I − h 1ᵀ)Ω(I − h 1ᵀ)ᵀA^{1/2}, Ω = diag(u²); quantiles and p-values from scipy.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from scipy import stats

from specreplay.stats.bootstrap import PairedSums


def cell_rows(ps: PairedSums, fam_idx: tuple[int, ...], bucket_idx: tuple[int, ...]) -> np.ndarray:
    """Per request with rounds in the cell, its (n_a, t_a, n_b, t_b) totals there, (k, 4)."""
    acc: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for k in range(ps.piece_request.shape[0]):
        r = int(ps.piece_request[k])
        if int(ps.family[r]) in fam_idx and int(ps.piece_bucket[k]) in bucket_idx:
            row = acc[r]
            row[0] += float(ps.n_a[k])
            row[1] += float(ps.t_a[k])
            row[2] += float(ps.n_b[k])
            row[3] += float(ps.t_b[k])
    rows = [v for _, v in sorted(acc.items()) if v[0] + v[2] > 0]
    return np.array(rows, dtype=np.float64)


def cr2_of(u: np.ndarray, h: np.ndarray) -> tuple[float, float]:
    """(SE, effective df) of influences u with leverages h (dense eigenvalues)."""
    n = u.shape[0]
    se = float(np.sqrt((u**2 / (1.0 - h)).sum()))
    g = np.diag(1.0 / np.sqrt(1.0 - h)) @ (np.eye(n) - np.outer(h, np.ones(n))) @ np.diag(np.abs(u))
    lam = np.linalg.eigvalsh(g @ g.T)
    df = float(lam.sum() ** 2 / (lam**2).sum())
    return se, min(max(df, 1.0), n - 1.0)


def hand_cr2(
    ps: PairedSums, fam_idx: tuple[int, ...], bucket_idx: tuple[int, ...], rel: bool = False
) -> tuple[float, float, float]:
    """Return (θ̂, SE, df) of Δ (or Δ/R_a) in one cell."""
    x = cell_rows(ps, fam_idx, bucket_idx)
    na, ta, nb, tb = x.sum(axis=0)
    ra, rb = ta / na, tb / nb
    ia = (x[:, 1] - ra * x[:, 0]) / na  # influence of R_a
    ib = (x[:, 3] - rb * x[:, 2]) / nb
    if rel:
        u = ib / ra - rb / ra**2 * ia
        h = x[:, 1] / ta
        theta = rb / ra - 1.0
    else:
        u = ib - ia
        h = (x[:, 0] + x[:, 2]) / (na + nb)
        theta = rb - ra
    se, df = cr2_of(u, h)
    return float(theta), se, df


def t_interval(theta: float, se: float, df: float, level: float) -> tuple[float, float]:
    """θ ± t_{df, (1 + level)/2}·SE (scipy)."""
    q = float(stats.t.ppf(0.5 + level / 2.0, df))
    return theta - q * se, theta + q * se


def t_p_values(theta: float, se: float, df: float, margin: float) -> tuple[float, float]:
    """(two-sided p of θ = 0, TOST p of |θ| ≥ margin) by scipy's t distribution."""
    p_diff = float(2.0 * stats.t.sf(abs(theta) / se, df))
    p_eq = float(max(stats.t.sf((theta + margin) / se, df), stats.t.cdf((theta - margin) / se, df)))
    return p_diff, p_eq

"""A slow, independent studentized (bootstrap-t) reference for the tests.

Per replicate it takes the kernel's draw counts (the same counter-based draws: the test compares
arithmetic, not random numbers), forms each request's sums x_i in the cell from the raw pieces,
the replicate's ratios R*, the influence u_i = (t_bi − R*_b n_bi)/N*_b − (t_ai − R*_a n_ai)/N*_a
(or the Δ/R_a one), and the stratified variance Σ_s n_s/(n_s − 1)[Σ w u² − (Σ w u)²/n_s]
directly in the original coordinates: no moments, no residual coordinates.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from specreplay.stats.bootstrap import PairedSums, _count_draws, _layout


def _se(
    ps: PairedSums, x: NDArray[np.float64], w: NDArray[np.float64], strata: NDArray[np.int64],
    rel: bool,
) -> tuple[float, float]:  # fmt: skip
    s = (w[:, None] * x).sum(axis=0)
    ra, rb = s[1] / s[0], s[3] / s[2]
    ia = (x[:, 1] - ra * x[:, 0]) / s[0]
    ib = (x[:, 3] - rb * x[:, 2]) / s[2]
    u = ib / ra - rb / ra**2 * ia if rel else ib - ia
    theta = rb / ra - 1.0 if rel else rb - ra
    v = 0.0
    for st in np.unique(strata):
        m = strata == st
        n = int(m.sum())
        if n > 1:
            v += n / (n - 1) * ((w[m] * u[m] ** 2).sum() - (w[m] * u[m]).sum() ** 2 / n)
    return float(theta), float(np.sqrt(max(v, 0.0)))


def hand_studentized(
    ps: PairedSums,
    *,
    n_boot: int,
    seed: int,
    stratify: str,
    fam_idx: tuple[int, ...],
    bucket_idx: tuple[int, ...],
    rel: bool = False,
) -> tuple[float, float, NDArray[np.float64]]:
    """Return (θ̂, SE, t*) of one cell, t* = (θ* − θ̂)/SE* per replicate."""
    n = ps.n_requests
    sel = np.isin(ps.family[ps.piece_request], fam_idx) & np.isin(ps.piece_bucket, bucket_idx)
    x = np.zeros((n, 4))
    for v, arr in enumerate((ps.n_a, ps.t_a, ps.n_b, ps.t_b)):
        x[:, v] = np.bincount(ps.piece_request[sel], weights=arr[sel], minlength=n)
    strata = ps.family.astype(np.int64) if stratify == "family" else np.zeros(n, np.int64)
    theta, se = _se(ps, x, np.ones(n), strata, rel)
    lay = _layout(ps, stratify)
    t = np.empty(n_boot)
    for b in range(n_boot):
        cnt = np.zeros(n, np.int32)
        _count_draws(np.uint64(seed), b, lay.strat_start, cnt)
        w = np.zeros(n)
        w[lay.member_request] = cnt
        th_b, se_b = _se(ps, x, w, strata, rel)
        t[b] = (th_b - theta) / se_b
    return theta, se, t

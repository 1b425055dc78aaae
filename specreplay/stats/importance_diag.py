"""Tail diagnostics of the importance estimator: effective sample size and Pareto k̂.

See docs/methods.md#tail-diagnostics-ess-and-pareto-k-hat.

Terms. Over the S rounds of a cell that recorded k positions, the **policy ratio** r_k =
Π_{j≤k} q^s_j(x_j)/q^L_j(x_j) (the importance weight without its acceptance factor, so the
logging arm's is 1) has the **effective sample size** ESS = (Σ r)² / Σ r² (Kong 1992; Owen 2013,
*Monte Carlo theory, methods and examples*, ch. 9) and the **ESS share** ESS / S, and
its right tail the **Pareto k̂**: the shape of the generalised Pareto law fitted to its M largest
values (PSIS; Vehtari, Simpson, Gelman, Yao & Gabry 2024, "Pareto smoothed importance
sampling", JMLR 25(72); ArviZ's ``pareto_khat`` with r_eff = 1, right tail, computed by
:mod:`specreplay.stats.pareto` without importing ArviZ).

Thresholds
----------
- **k̂ > 0.7** (:data:`KHAT_MAX`): Vehtari et al. 2024: above 0.7 the importance
  estimate's error is unreliable (the ratio has too few finite moments for the central limit
  theorem to set in at any practical S), whatever the sample size.
- **k̂ > min(1 − 1/log10 S, 0.7)** (:func:`khat_threshold`): their sample-size-dependent
  threshold: with S draws a k̂ above it leaves the estimate's relative error larger than the
  S that was spent can remove (for S = 1000 it is 0.67; for S = 100, 0.5).
- **ESS share < 0.1** (:data:`ESS_SHARE_MIN`): the importance mean of S rounds has about the
  variance of an on-policy mean of ESS rounds (Owen 2013, ch. 9), so a share under 0.1 means the
  replay's intervals are more than √10 ≈ 3.2 times as wide as the same rounds drafted by the arm
  itself would give, i.e. the archive says little about that arm; ESS is itself unreliable
  where k̂ is high, which is why both are reported.

k̂ is scale-free: it reads the shape of the tail above the cutoff, not its size. A ratio that
stays within a hair of 1 but whose rare deviations follow a power law gets a large k̂ while its
ESS share is 1 to four digits: on the demo archive, ``top32:t0.7:dyadic24@8`` (its 2⁻²⁴ grid
rounds the smallest logging probabilities by a large relative amount; largest pooled r_8 = 1.33)
crosses 0.7 in 112 of 240 cell-depths with every ESS share ≥ 0.99997. The warning is kept as
the paper states it; the ESS share beside it shows how much the tail weighs.

A **constant ratio** (the logging arm: r_k = 1 within a few ulps, since its sampler law is its
policy law renormalised once more) has ESS = S exactly and no tail: its k̂ is null with the
reason :data:`CONSTANT_REASON`. "Constant" is a relative spread (max − min)/max ≤
:data:`CONSTANT_RTOL` = 10⁻¹²: each factor of the logging arm's ratio is 1 within (2n + 1)·u ≤
65u (32 candidates), so a product of ≤ 127 factors stays within 127·65·2⁻⁵³ ≈ 9·10⁻¹³ of 1.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from specreplay.stats.pareto import gpd_fit

__all__ = [
    "CONSTANT_REASON",
    "CONSTANT_RTOL",
    "ESS_SHARE_MIN",
    "KHAT_MAX",
    "TailDiagnostic",
    "diagnose",
    "khat_threshold",
    "pareto_khat_of_tail",
    "psis_tail_length",
]

KHAT_MAX: Final = 0.7
ESS_SHARE_MIN: Final = 0.1
CONSTANT_RTOL: Final = 1e-12
CONSTANT_REASON: Final = "ratio constant (the logging arm)"


@dataclass(frozen=True)
class TailDiagnostic:
    """ESS and Pareto k̂ of one arm's policy ratio r_k over one cell's rounds.

    Attributes
    ----------
    rounds : int
        S: rounds of the cell that recorded k positions.
    ess, ess_share : float or None
        (Σ r)² / Σ r² and ESS / S; None with ``null_reason`` (no round, every ratio 0).
    pareto_k : float or None
        k̂ of the right tail; None with ``null_reason``.
    khat_threshold : float or None
        min(1 − 1/log10 S, 0.7) (None when S < 2).
    warning : str or None
        Every threshold crossed, in words.
    null_reason : str or None
        Why ``ess`` or ``pareto_k`` is null.
    """

    rounds: int
    ess: float | None
    ess_share: float | None
    pareto_k: float | None
    khat_threshold: float | None
    warning: str | None
    null_reason: str | None


def psis_tail_length(n: int) -> int:
    """M: the tail draws PSIS fits for n draws and r_eff = 1 (⌊3√n⌋ if n > 225 else ⌊n/5⌋)."""
    return math.floor(3.0 * math.sqrt(n)) if n > 225 else n // 5


def khat_threshold(n: int) -> float | None:
    """min(1 − 1/log10 n, 0.7), Vehtari et al. 2024's sample-size-dependent threshold."""
    return min(1.0 - 1.0 / math.log10(n), KHAT_MAX) if n >= 2 else None


@functools.lru_cache(maxsize=512)
def _khat_of_excess(excess: bytes) -> float:
    """k̂ of the ascending float64 excesses held in ``excess``, memoised by their bytes.

    A run asks for the same fit several times (an arm's cell in its diagnostics, in auto's
    choice and in each comparison it is a side of); at most 512 entries, each of ≤ 4,095
    excesses from a run's tails (the tail cap), so ≤ 16 MiB.
    """
    return gpd_fit(np.frombuffer(excess, dtype=np.float64)).k


def _largest(values: NDArray[np.float64], k: int) -> NDArray[np.float64]:
    """Return the ``k`` largest of ``values`` (all when fewer), descending: partition, sort."""
    cut = values.shape[0] - k
    top = np.partition(values, cut)[cut:] if cut > 0 else values
    return np.sort(top)[::-1]


def pareto_khat_of_tail(
    tail: NDArray[np.float64], dropped: float, n: int
) -> tuple[float | None, str | None]:
    """Return k̂ of n ratios ≥ 0 from their kept largest values ``tail``, or None and why.

    ``dropped`` is the largest ratio not kept (−inf when every ratio was kept). k̂ needs only
    the M + 1 largest of the n ratios, so it is exact when the kept (M + 1)-th largest is ≥
    every dropped ratio (:mod:`specreplay.replay.tails`); it is the generalised Pareto fit of
    :func:`specreplay.stats.pareto.gpd_fit`, equal bit for bit to ArviZ's
    ``pareto_khat(r, r_eff=1, tail="right")`` on all n ratios.
    """
    m = psis_tail_length(n)
    if m < 5:
        return None, f"{n} rounds: Pareto k̂ needs at least 5 tail draws (25 rounds)"
    top = _largest(np.asarray(tail, dtype=np.float64), m + 1)
    if top.shape[0] < m + 1 or top[m] < dropped:
        return None, (
            f"the {m + 1} largest of {n} ratios were not all kept (tail cap exceeded): k̂ not "
            "computed"
        )
    if top[0] - top[m - 1] < np.finfo(float).tiny:
        return None, f"the {m} largest ratios are all equal: no tail to fit"
    # PSIS: the M largest less the (M + 1)-th largest, ascending (what ArviZ's _ps_tail fits)
    k = _khat_of_excess((top[m - 1 :: -1] - top[m]).tobytes())
    if not math.isfinite(k):
        return None, f"the generalised Pareto fit to the {m} largest of {n} ratios failed (k̂ {k})"
    return k, None


def _warning(share: float | None, k: float | None, thr: float | None, n: int) -> str | None:
    out: list[str] = []
    if k is not None and k > KHAT_MAX:
        out.append(f"Pareto k̂ {k:.2f} > {KHAT_MAX}: the importance estimate is unreliable")
    elif k is not None and thr is not None and k > thr:
        out.append(f"Pareto k̂ {k:.2f} > {thr:.2f} = min(1 − 1/log10 S, 0.7) for S = {n} rounds")
    if share is not None and share < ESS_SHARE_MIN:
        out.append(f"ESS share {share:.3f} < {ESS_SHARE_MIN}: few rounds carry the estimate")
    return "; ".join(out) or None


def diagnose(
    *,
    n: int,
    ratio_sum: float,
    ratio_sq: float,
    ratio_min: float,
    ratio_max: float,
    tail: NDArray[np.float64],
    dropped: float,
) -> TailDiagnostic:
    """Return the ESS and k̂ of a cell from its sums, extremes and kept tail (module docstring).

    Parameters
    ----------
    n : int
        S: rounds that recorded the depth.
    ratio_sum, ratio_sq : float
        Σ r and Σ r² over them.
    ratio_min, ratio_max : float
        Their smallest and largest r.
    tail : float64, (m,)
        Their kept largest r (any order).
    dropped : float
        Largest r not kept (−inf when none).
    """
    thr = khat_threshold(n)
    if n == 0:
        return TailDiagnostic(0, None, None, None, None, None, "no rounds in this cell")
    if ratio_max <= 0.0:
        zero = "every policy ratio is 0: the arm never drafts the archived tokens"
        return TailDiagnostic(n, None, None, None, thr, None, zero)
    if ratio_max - ratio_min <= CONSTANT_RTOL * ratio_max:
        # ESS = S exactly: (S·r)²/(S·r²); the computed sums differ from it by rounding alone
        return TailDiagnostic(n, float(n), 1.0, None, thr, None, CONSTANT_REASON)
    ess = ratio_sum * ratio_sum / ratio_sq  # Kong 1992; Owen 2013, ch. 9
    share = ess / n
    k, why = pareto_khat_of_tail(tail, dropped, n)
    return TailDiagnostic(n, ess, share, k, thr, _warning(share, k, thr, n), why)

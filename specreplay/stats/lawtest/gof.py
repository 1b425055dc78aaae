"""Goodness of fit of law-test counts: the G-test (or Pearson χ²) after merging small categories.

:func:`merge_categories` merges categories whose expected count is below :data:`MIN_EXPECTED`
(the rule is in :mod:`specreplay.stats.lawtest`); :func:`goodness_of_fit` tests the merged counts
against p_ext.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specreplay.errors import SpecReplayError
from specreplay.stats.lawtest.chi2 import chi2_sf
from specreplay.stats.lawtest.exact import check_method

__all__ = ["MIN_EXPECTED", "GofResult", "goodness_of_fit", "merge_categories"]

MIN_EXPECTED = 5.0
"""Categories with a smaller expected count are merged (docs/methods.md#law-tests)."""


def merge_categories(expected: ArrayLike, min_expected: float = MIN_EXPECTED) -> NDArray[np.int64]:
    """Return the merged group of each category (rule in the package docstring).

    See docs/methods.md#law-tests.

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
    kind = check_method(method)
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

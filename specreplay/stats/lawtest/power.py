"""How many draws a law test needs: power of the χ² test against the arm's exact law.

The noncentral χ² with the Pearson noncentrality λ = draws · Σ (law − p)²/p over the merged
categories, at the Bonferroni level family_alpha / m (conservative for Holm); the smallest number
of draws reaching :data:`TARGET_POWER`, floored and capped (the rules are in
:mod:`specreplay.stats.lawtest`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specreplay.stats.lawtest.chi2 import chi2_power, lambda_for_power
from specreplay.stats.lawtest.gof import merge_categories

__all__ = [
    "DEFAULT_MAX_DRAWS",
    "DEFAULT_MIN_DRAWS",
    "TARGET_POWER",
    "TV_NULL",
    "Draws",
    "choose_draws",
    "draws_for_power",
]

DEFAULT_MAX_DRAWS = 10_000_000
DEFAULT_MIN_DRAWS = 200_000
TARGET_POWER = 0.99
TV_NULL = 1e-12
"""An exact TV at or below this is rounding: the arm's law is p, no alternative to power against."""


@dataclass(frozen=True)
class Draws:
    """The draws chosen for one test, the power they reach (None for a null law) and why."""

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
    d = choose_draws(lw, pr, level, int(min_draws), int(max_draws), float(target))
    return d.draws, d.power, d.underpowered, d.rule


def choose_draws(
    law: NDArray[np.float64],
    p_ref: NDArray[np.float64],
    level: float,
    min_draws: int,
    max_draws: int,
    target: float,
) -> Draws:
    """Return the draws reaching power ``target`` at ``level``, floored and capped (package doc)."""
    if 0.5 * float(np.abs(law - p_ref).sum()) <= TV_NULL:
        return Draws(min_draws, None, False, "null-law")
    n = max_draws
    seen: set[int] = set()
    for _ in range(50):  # merging changes df and δ with n: iterate to a fixed point
        _, df, delta = _power_at(n, law, p_ref, level)
        if df < 1 or not delta > 0.0:
            break
        nxt = min(max_draws, max(1, math.ceil(lambda_for_power(df, level, target) / delta)))
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
        return Draws(n, power, True, "max-draws")
    return Draws(n, power, False, "min-draws" if n == min_draws else "power")

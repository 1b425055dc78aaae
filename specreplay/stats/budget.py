"""Budget arithmetic: what added cost per round a gain pays for.

See docs/methods.md#the-budget-break-even-cost.

Terms. ``R_0`` is the reference policy's retained tokens per round, ``Δ_lo`` the lower interval
bound of the new policy's gain over it (tokens per round), ``T`` the policy's price in ms per
round. The new policy breaks even when its rate equals the reference's:
(R_0 + Δ_lo)/(T + x) = R_0/T, so the **break-even added cost** is x = T·Δ_lo/R_0 ms per round;
what **remains** after the known added costs k_i is x − Σ k_i. The seed (000_fdf64d243a6bef57)
has T = 48.08 ms, Δ_lo = .175370, R_0 = 3.091813 and known costs .182813 ms:
48.08·.175370/3.091813 = 2.727134 ms and 2.544321 ms remaining (SPEC prints 2.72713, 2.54432).

The **sensitivity** of a historical population with rate r_0 (tokens/s), τ ms per round and the
relative gain g of the relevant replay, under an extra cost x ms per round, is the conditional
rate r_0·(1 + g)·τ/(τ + x). Every figure here is ESTIMATED: arithmetic on given inputs.

Pure functions on floats; no I/O. A budget that cannot be computed is ``None`` with its reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BudgetFigures", "SensitivityPoint", "break_even", "sensitivity"]


@dataclass(frozen=True)
class BudgetFigures:
    """Break-even added cost x = T·Δ_lo/R_0 and x − Σ known (ms per round), or None + reason."""

    break_even_ms: float | None
    remaining_ms: float | None
    null_reason: str | None


@dataclass(frozen=True)
class SensitivityPoint:
    """Conditional rate r_0·(1 + g)·τ/(τ + x) at one extra cost x; its change relative to r_0."""

    extra_ms: float
    rate: float
    rel_change: float


def break_even(
    r0: float, delta_lo: float, price_ms: float, known_ms: Sequence[float] = ()
) -> BudgetFigures:
    """Return the break-even added cost and what remains after the known costs.

    See docs/methods.md#the-budget-break-even-cost.

    Parameters
    ----------
    r0 : float
        R_0, the reference's retained tokens per round (> 0).
    delta_lo : float
        Δ_lo, the lower interval bound of the gain over the reference (tokens per round).
    price_ms : float
        T, the policy's price in ms per round (> 0).
    known_ms : sequence of float
        Known added costs k_i (ms per round), subtracted from the break-even cost.

    Returns
    -------
    BudgetFigures
        Null, with the reason, when Δ_lo ≤ 0 (no gain at the lower bound: nothing to spend) or
        R_0 ≤ 0.

    Examples
    --------
    The worked example of docs/methods.md#the-budget-break-even-cost:

    >>> b = break_even(3.091813, 0.175370, 48.08, [0.182813])
    >>> round(b.break_even_ms, 6), round(b.remaining_ms, 6)
    (2.727134, 2.544321)
    """
    if not (math.isfinite(r0) and r0 > 0):
        return BudgetFigures(None, None, f"R_0 = {r0:g} is not positive: no break-even cost")
    if not math.isfinite(delta_lo) or delta_lo <= 0:
        return BudgetFigures(
            None,
            None,
            f"Δ_lo = {delta_lo:.6g} ≤ 0: no gain at the lower interval bound, nothing to spend",
        )
    # (R_0 + Δ_lo)/(T + x) = R_0/T  ⇔  x = T·Δ_lo/R_0 (docs/methods.md#the-budget-break-even-cost)
    x = price_ms * delta_lo / r0
    return BudgetFigures(x, x - math.fsum(known_ms), None)


def sensitivity(
    rate: float, tau_ms: float, gain: float, extra_ms: Sequence[float]
) -> tuple[SensitivityPoint, ...]:
    """Return r_0·(1 + g)·τ/(τ + x) at each extra cost x of the grid.

    See docs/methods.md#the-budget-break-even-cost.

    Parameters
    ----------
    rate : float
        r_0, the historical rate (tokens/s).
    tau_ms : float
        τ, the historical ms per round (> 0).
    gain : float
        g, the relative gain of the relevant replay (Δ/R_0).
    extra_ms : sequence of float
        The grid of extra costs x (ms per round, ≥ 0).

    Examples
    --------
    >>> [round(p.rate, 4) for p in sensitivity(50.0, 40.0, 0.1, [0.0, 4.0])]
    [55.0, 50.0]
    """
    points = []
    for x in extra_ms:
        # docs/methods.md#the-budget-break-even-cost
        r = rate * (1.0 + gain) * tau_ms / (tau_ms + x)
        points.append(SensitivityPoint(extra_ms=x, rate=r, rel_change=r / rate - 1.0))
    return tuple(points)

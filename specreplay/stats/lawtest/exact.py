"""The exact law of the emitted token at one position, its acceptance and TV.

See docs/methods.md#rounds-retained-tokens-and-r, docs/methods.md#law-tests.

:func:`output_law` is q^s(x)·a(x) + (1 − α)·r(x) with a(x) = P(v·q^v(x) < p(x)) and α =
Σ_x q^s(x)·a(x), and its total-variation distance to p_ext. The input checks of every entry point
of the law tests live here too (:func:`check_laws`, :func:`check_dyadic`, :func:`check_method`). The
decisions (accept convention, empty residual, reference law) are in :mod:`specreplay.stats.lawtest`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specreplay.errors import SpecReplayError
from specreplay.sim.accept import accept_probs

__all__ = [
    "Method",
    "OutputLaw",
    "check_dyadic",
    "check_laws",
    "check_method",
    "output_law",
    "output_law_of_checked",
    "reference_law",
    "residual_weights",
]

# sampler/verifier laws are renormalised in float64 (docs/methods.md#arms-policy-and-quantizers)
_SUM_TOL = 1e-9
_P_SUM_TOL = 1e-6  # target probabilities come from archived (possibly float32) log-probs

Method = Literal["G", "pearson"]


def check_laws(
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


def check_dyadic(
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


def check_method(method: str) -> Method:
    """Return the goodness-of-fit ``method`` (``G`` or ``pearson``); raise on any other."""
    if method == "G":
        return "G"
    if method == "pearson":
        return "pearson"
    raise SpecReplayError(f"method must be 'G' or 'pearson', got {method!r}")


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
        sum to 0; see the :mod:`specreplay.stats.lawtest` docstring), unnormalised.
    """

    law: NDArray[np.float64]
    alpha: float
    tv: float
    residual: NDArray[np.float64]


def residual_weights(
    q_v: NDArray[np.float64], p: NDArray[np.float64], p_other: float
) -> NDArray[np.float64]:
    """Return the residual weights (n + 1,): max(0, p − q^v) and p_other, or p_ext if all 0."""
    w = np.append(np.maximum(0.0, p - q_v), p_other)
    if not w.sum() > 0.0:
        return np.append(p, p_other)  # empty residual: fall back to p_ext (package docstring)
    return w


def reference_law(p: NDArray[np.float64], p_other: float) -> NDArray[np.float64]:
    """Return the reference law p_ext / Σ p_ext the tests compare against (package docstring)."""
    ext = np.append(p, p_other)
    out: NDArray[np.float64] = ext / ext.sum()
    return out


def output_law(q_s: ArrayLike, q_v: ArrayLike, p: ArrayLike, p_other: float) -> OutputLaw:
    """Return the exact law of the emitted token under rejection sampling.

    See docs/methods.md#law-tests.

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
    qs, qv, pp, po = check_laws(q_s, q_v, p, p_other, "")
    return output_law_of_checked(qs, qv, pp, po)


def output_law_of_checked(
    qs: NDArray[np.float64], qv: NDArray[np.float64], pp: NDArray[np.float64], po: float
) -> OutputLaw:
    """Return :func:`output_law` of laws already checked by :func:`check_laws`."""
    # docs/methods.md#rounds-retained-tokens-and-r accept convention (sim.accept)
    acc = accept_probs(qv, pp)
    accepted = qs * acc  # docs/methods.md#law-tests: q^s(x)·min(1, p(x)/q^v(x))
    alpha = float(accepted.sum())
    reject = float((qs * (1.0 - acc)).sum())  # 1 − α, summed directly (accurate as α → 1)
    w = residual_weights(qv, pp, po)
    law = np.append(accepted, 0.0) + reject * (w / w.sum())
    tv = 0.5 * float(np.abs(law - reference_law(pp, po)).sum())
    return OutputLaw(law=law, alpha=alpha, tv=tv, residual=w)

"""The toy-law suite of the law tests: fixed laws, arms float64, dyadicN and dyadicN/float64.

Their dyadic laws come from :func:`toy_quantize_dyadic_nearest`, a local copy of
docs/methods.md#arms-policy-and-quantizers ``dyadicN:nearest`` for this suite only (the product
quantizers live in ``specreplay.sim.policy``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specreplay.stats.lawtest.family import LawCase

__all__ = ["toy_cases", "toy_laws", "toy_quantize_dyadic_nearest"]


def toy_quantize_dyadic_nearest(q: ArrayLike, bits: int) -> NDArray[np.int64]:
    """Largest-remainder dyadic integers of a float law — **for the toy suite only**.

    A local copy of docs/methods.md#arms-policy-and-quantizers ``dyadicN:nearest`` so this module
    does not depend on ``specreplay.sim.policy``: m_i = ⌊q_i·2^N⌋, r = 2^N − Σ m_i; min(max(r, 0),
    n) units go to the largest fractional parts (ties to the lower index); any remaining surplus or
    deficit goes on the argmax, so Σ m_i = 2^N exactly.

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

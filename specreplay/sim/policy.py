"""Policy laws and quantizers of arms, as Numba kernels over CSR position rows.

See docs/methods.md#arms-policy-and-quantizers.

A batch's position rows are CSR slices: row i's candidates are ``[offsets[i], offsets[i + 1])`` of
the flat ``draft_logprobs`` (full-vocabulary log-probabilities at temperature 1; −inf = q 0).

Terms
-----
policy law
    The float64 law q an arm's :class:`~specreplay.sim.arms.Policy` gives a row's candidates:
    temperature, then top-k, then top-p (vLLM's order), renormalised over the kept candidates;
    zeros for dropped candidates. Greedy is a point mass on the highest log-probability.
quantized law
    The law the drafter samples from (sampler) or the verifier accepts with (verifier): the policy
    law passed through a :class:`~specreplay.sim.arms.Quant`. Dyadic kinds also give the integers
    m_i with Σ m_i = 2^N exactly (q_i = m_i / 2^N).
row flag
    Bits per row, OR-ed: :data:`FLAG_K_EXCEEDS` (K > the row's number of candidates:
    docs/commands.md#arms never clamps silently, the caller makes those cells null with a count) and
    :data:`FLAG_NO_SUPPORT` (every log-probability is −inf: there is no law); the importance
    estimator adds :data:`FLAG_LOGGING_SUPPORT` (the arm can accept a candidate the logging law
    gives probability 0: the support condition of
    docs/methods.md#the-importance-estimator-and-its-weight fails). A flagged row still holds a
    proper law so that downstream kernels need no special case: the K = n law for FLAG_K_EXCEEDS, a
    point mass on the row's first candidate for FLAG_NO_SUPPORT.

Decisions
---------
- Order: candidates are ranked by decreasing scaled logit ``lp / T`` (= decreasing probability),
  ties to the lower index (a stable sort); top-k keeps the first K, top-p walks the same order over
  the top-k law, summing ``w_i / S_k`` until the cumulative mass reaches P (at least one kept).
  Sums over a row run in lane order (:mod:`specreplay.sim.lanes`; dropped candidates add 0). The
  test file's reference repeats these steps in pure Python, so kept sets and values agree exactly.
- float16 is a direct round-to-nearest-even of the float64 value (numpy's ``np.float16(x)``);
  bfloat16 is float64 → float32 (nearest even) → bfloat16 (nearest even on the float32 bit pattern,
  the way PyTorch converts), which can differ from a direct rounding in rare double-rounding ties.
  Both are exact significand roundings done with ``frexp``/``ldexp``/``rint`` inside the kernel
  (inputs are laws, in [0, 1], so there is no overflow); subnormals are kept.
- dyadic ``nearest`` gives its extra units only to candidates with q_i > 0 (a candidate dropped by
  top-k or top-p must never become draftable); units beyond the support's size, and any deficit, go
  to the argmax (largest q_i, ties to the lower index). This minimises Σ|m_i − q_i·2^N| among
  non-negative integer vectors with Σ m_i = 2^N. An all-zero row quantizes to zeros.
- Σ m_i = 2^N and m_i ≥ 0 are internal invariants checked in :func:`quantize` (AssertionError):
  they are not user input. Checked after the parallel loop, since an assert inside a ``prange``
  stops Numba from parallelising it.

This module depends on NumPy, Numba and :mod:`specreplay.sim.arms` only.

Examples
--------
>>> import numpy as np
>>> from specreplay.sim.arms import parse_arm
>>> offsets = np.array([0, 3], dtype=np.int64)
>>> lp = np.log(np.array([0.5, 0.3, 0.2]))
>>> laws = arm_laws(parse_arm("top2:dyadic8@5"), offsets, lp)
>>> laws.m_sampler.tolist(), laws.flag.tolist()
([160, 96, 0], [0])
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from llvmlite import ir  # type: ignore[import-untyped]
from numba import njit, prange, types
from numba.extending import intrinsic
from numpy.typing import NDArray

from specreplay import use_numba_cache
from specreplay.sim.arms import Arm, Policy, Quant
from specreplay.sim.lanes import lane_max, lane_sum

__all__ = [
    "FLAG_K_EXCEEDS",
    "FLAG_LOGGING_SUPPORT",
    "FLAG_NO_SUPPORT",
    "HIST_BINS",
    "KIND_BFLOAT16",
    "KIND_CODES",
    "KIND_DYADIC",
    "KIND_FLOAT16",
    "KIND_FLOAT32",
    "KIND_FLOAT64",
    "ROUNDING_CODES",
    "ROUND_FLOOR_ARGMAX",
    "ROUND_NEAREST",
    "ArmLaws",
    "LawCache",
    "PolicyLaw",
    "QuantLaw",
    "Workspace",
    "arm_laws",
    "policy_law",
    "policy_law_of",
    "policy_row",
    "policy_row_flag",
    "quantize",
    "quantize_law",
    "quantize_row",
]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)

KIND_FLOAT64 = 0
KIND_FLOAT32 = 1
KIND_BFLOAT16 = 2
KIND_FLOAT16 = 3
KIND_DYADIC = 4
KIND_CODES: dict[str, int] = {
    "float64": KIND_FLOAT64,
    "float32": KIND_FLOAT32,
    "bfloat16": KIND_BFLOAT16,
    "float16": KIND_FLOAT16,
    "dyadic": KIND_DYADIC,
}
ROUND_NEAREST = 0
ROUND_FLOOR_ARGMAX = 1
ROUNDING_CODES: dict[str, int] = {"nearest": ROUND_NEAREST, "floor-argmax": ROUND_FLOOR_ARGMAX}

FLAG_K_EXCEEDS = 1
FLAG_NO_SUPPORT = 2
FLAG_LOGGING_SUPPORT = 4  # set by the importance estimator, never by the policy law

# significand bits after the leading one, and the smallest normal exponent (IEEE 754 binary16;
# bfloat16 shares float32's exponent range)
_F16_MANT, _F16_EMIN = 10, -14
_BF16_MANT, _BF16_EMIN = 7, -126


# ================================================================================================
# kernels
# ================================================================================================


# Fast-math flags of the policy kernel: no-NaN and no-signed-zero (log-probabilities are never
# NaN; −inf is allowed, so no "ninf"). No reassociation: it made a freshly compiled kernel and a
# cached one disagree in the last bits (specreplay/replay/estimators/analytic.py); the sums run
# in lane order instead (specreplay/sim/lanes.py).
_FM = {"nsz", "nnan"}

_LOG2E = 1.4426950408889634
_LN2_HI = 0.693145751953125  # ln 2 split for Cody-Waite: k·_LN2_HI is exact for |k| < 2^11
_LN2_LO = 1.42860682030941723212e-06
# (e^r − 1 − r) / r² on |r| ≤ ln2/2 as a degree-9 polynomial: Chebyshev interpolation at 10
# nodes in 50-digit arithmetic (mpmath); e^r = 1 + r + r²·g(r) is then within 1.7e-17 relative
_EXP_G = (
    0.5000000000000001,
    0.16666666666666669,
    0.041666666666624164,
    0.008333333333330065,
    0.0013888888917196719,
    0.00019841269863040545,
    2.4801521322368692e-05,
    2.7557268480310024e-06,
    2.7620075879983367e-07,
    2.5100375832561234e-08,
)


def _opaque_typing(typingctx: Any, x: Any, zero: Any) -> Any:
    """Return x itself, passed through an integer OR with a run-time zero (an intrinsic).

    Under reassociation the optimiser could otherwise fold Cody-Waite's two-step reduction into
    one subtraction of a rounded ln 2, or multiply the two power-of-two factors of a subnormal
    result first (underflowing to 0). The OR makes each step opaque, so :func:`_exp` gives the
    same bits with or without fast-math flags.
    """
    sig = types.float64(types.float64, types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        bits = builder.bitcast(args[0], ir.IntType(64))
        return builder.bitcast(builder.or_(bits, args[1]), ir.DoubleType())

    return sig, codegen


def _pow2_typing(typingctx: Any, k: Any) -> Any:
    """Return 2^k for an integral float k in [−1022, 1023]: the bits (k + 1023) << 52."""
    sig = types.float64(types.float64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i64 = ir.IntType(64)
        ki = builder.sext(builder.fptosi(args[0], ir.IntType(32)), i64)
        bits = builder.shl(builder.add(ki, ir.Constant(i64, 1023)), ir.Constant(i64, 52))
        return builder.bitcast(bits, ir.DoubleType())

    return sig, codegen


_opaque: Any = intrinsic(_opaque_typing)
_pow2: Any = intrinsic(_pow2_typing)


@njit(inline="always", fastmath=_FM, cache=True)
def _exp(x: float, zero: int) -> float:
    """e^x for x ≤ 0 (−inf → 0), within 1 ulp of a correctly rounded exp; vectorisable.

    x = k·ln 2 + r with k = rint(x·log2 e) and |r| ≤ ln2/2 (Cody-Waite), e^r by a degree-11
    polynomial (error 1.7e-17 relative, see ``_EXP_G``), times 2^k as two
    power-of-two factors so that subnormal results round once. ``zero`` must be 0 at run time
    (see :func:`_opaque`). :func:`exp_reference` repeats these steps in Python.
    """
    x = max(x, -746.0)  # below, e^x rounds to 0; also maps −inf
    k = np.rint(x * _LOG2E)
    r = _opaque(x - k * _LN2_HI, zero)
    r = _opaque(r - k * _LN2_LO, zero)
    g = _EXP_G
    # e^r = 1 + (r + r²·(E(r²) + r·O(r²))): g's even and odd coefficients as two independent
    # Horner chains in r² (half the latency of plain Horner, which bounds a vectorised loop over
    # short rows), the leading 1 + r added last so that they round once
    s = r * r
    ev = g[8]
    ev = ev * s + g[6]
    ev = ev * s + g[4]
    ev = ev * s + g[2]
    ev = ev * s + g[0]
    od = g[9]
    od = od * s + g[7]
    od = od * s + g[5]
    od = od * s + g[3]
    od = od * s + g[1]
    y = 1.0 + (r + s * (ev + r * od))
    k1 = np.floor(k * 0.5)
    e: float = _opaque(y * _pow2(k1), zero) * _pow2(k - k1)
    return e


def exp_reference(x: float) -> float:
    """:func:`_exp` step by step in Python floats (the same IEEE operations, so the same bits)."""
    x = max(x, -746.0)
    k = float(np.rint(x * _LOG2E))
    r = x - k * _LN2_HI
    r = r - k * _LN2_LO
    s = r * r
    ev = _EXP_G[8]
    for c in _EXP_G[6::-2]:
        ev = ev * s + c
    od = _EXP_G[9]
    for c in _EXP_G[7::-2]:
        od = od * s + c
    y = 1.0 + (r + s * (ev + r * od))
    k1 = math.floor(k * 0.5)
    return (y * 2.0 ** int(k1)) * 2.0 ** int(k - k1)


@njit(fastmath=_FM, cache=True)
def policy_row(
    lp: NDArray[np.float64],
    greedy: bool,
    top_k: int | np.int64,
    temperature: float,
    top_p: float,
    out_q: NDArray[np.float64],
    zero: int,
) -> int:
    """Write one row's policy law into ``out_q`` (the row's slice of the output); return its flags.

    The one implementation of an arm's policy law (docs/methods.md#arms-policy-and-quantizers):
    :func:`policy_law` applies it to every row of a batch, and the toy generator
    (:mod:`specreplay.sim.synth`) to its logging arm, so the archived ``emitted_q`` is the replay's
    law of the logging arm bit for bit.

    ``lp`` and ``out_q`` are the row's slices, float64 (n,): indices from 0 let LLVM vectorise the
    loops (an offset index goes through Numba's negative-index wraparound, which blocks it). The
    policy arguments are those of :func:`policy_law`; ``zero`` must be 0 at run time and unknown to
    the compiler (see :func:`_opaque`).
    """
    n = lp.shape[0]
    if n == 0:
        return FLAG_NO_SUPPORT
    flag = 0
    if not greedy and top_k > n:
        flag |= FLAG_K_EXCEEDS
    mx = lane_max(lp, n, -np.inf)
    if mx == -np.inf:
        out_q[:] = 0.0
        out_q[0] = 1.0
        return flag | FLAG_NO_SUPPORT
    # docs/commands.md#arms: point mass on the highest log-probability, ties to the lower index
    if greedy:
        out_q[:] = 0.0
        for j in range(n):
            if lp[j] == mx:
                out_q[j] = 1.0
                break
        return flag
    # temperature: softmax of lp / T, shifted by the maximum (exp(−inf) = 0)
    for j in range(n):
        out_q[j] = lp[j] / temperature
    smx = mx / temperature  # the largest lp / T (division by T > 0 is monotone)
    for j in range(n):
        out_q[j] = _exp(out_q[j] - smx, zero)
    k = n if top_k <= 0 or top_k >= n else top_k
    if k < n or top_p < 1.0:
        key = np.empty(n)
        for j in range(n):
            key[j] = -(lp[j] / temperature)
        order = np.argsort(key, kind="mergesort")  # stable: ties to the lower index
        for r in range(k, n):  # top-k: the K largest scaled logits
            out_q[order[r]] = 0.0
        if top_p < 1.0:  # top-p on the top-k law: until the cumulative mass reaches P
            s_k = lane_sum(out_q, n)
            cum = 0.0
            kept = 0
            while kept < k:
                cum += out_q[order[kept]] / s_k
                kept += 1
                if cum >= top_p:
                    break
            for r in range(kept, k):
                out_q[order[r]] = 0.0
    s = lane_sum(out_q, n)
    for j in range(n):
        out_q[j] = out_q[j] / s
    return flag


@njit(inline="always", fastmath=_FM, cache=True)
def policy_row_flag(lp: NDArray[np.float64], greedy: bool, top_k: int | np.int64) -> int:
    """Return the flags :func:`policy_row` gives the row ``lp`` (a slice), without its law.

    For the rows a replay reads only to count their flags (positions past the arms' depth:
    :mod:`specreplay.replay.estimators.allarms`); each branch is :func:`policy_row`'s.
    """
    n = lp.shape[0]
    if n == 0:
        return FLAG_NO_SUPPORT
    flag = 0
    if not greedy and top_k > n:
        flag |= FLAG_K_EXCEEDS
    if lane_max(lp, n, -np.inf) == -np.inf:
        return flag | FLAG_NO_SUPPORT
    return flag


@njit(parallel=True, cache=True)
def policy_law(
    offsets: NDArray[np.int64],
    draft_logprobs: NDArray[np.float64],
    greedy: bool,
    top_k: int,
    temperature: float,
    top_p: float,
    out_q: NDArray[np.float64],
    out_flag: NDArray[np.int8],
) -> None:
    """Write every row's policy law (docs/methods.md#arms-policy-and-quantizers) and flag.

    Parameters
    ----------
    offsets : int64, (n_rows + 1,)
        Row i is ``[offsets[i], offsets[i + 1])``.
    draft_logprobs : float64, (nnz,)
        Candidates' draft log-probabilities (temperature 1); −inf allowed.
    greedy : bool
        Point mass on the highest log-probability (ties to the lower index); the other policy
        arguments are then ignored.
    top_k : int
        K ≥ 1, or ≤ 0 for all candidates. K > n sets FLAG_K_EXCEEDS; the law is then that of K = n.
    temperature : float
        T > 0.
    top_p : float
        P in (0, 1]; 1 keeps every top-k candidate.
    out_q : float64, (nnz,)
        Written: the law, summing to 1 per row; 0 for dropped candidates.
    out_flag : int8, (n_rows,)
        Written: FLAG_K_EXCEEDS | FLAG_NO_SUPPORT bits, 0 for a clean row.
    """
    zero = offsets[0]  # 0 for valid offsets, unknown to the compiler (see _opaque)
    for i in prange(offsets.shape[0] - 1):
        lo = offsets[i]
        hi = offsets[i + 1]
        out_flag[i] = policy_row(
            draft_logprobs[lo:hi], greedy, top_k, temperature, top_p, out_q[lo:hi], zero
        )


@njit(inline="always", cache=True)
def _round_significand(x: float, mant_bits: int, min_exp: int) -> float:
    """Round x ≥ 0 to nearest even: ``mant_bits`` bits after the leading 1, normals ≥ 2^min_exp."""
    if x == 0.0:
        return 0.0
    _, e = math.frexp(x)  # x = f·2^e, f in [0.5, 1): the leading bit is 2^(e − 1)
    shift = max(e - 1, min_exp) - mant_bits  # the quantum is 2^shift (subnormal below min_exp)
    return math.ldexp(np.rint(math.ldexp(x, -shift)), shift)  # both scalings are exact


HIST_BINS = 64  # histogram buckets of the fractional parts (dyadic nearest)


@njit(cache=True)
def quantize_row(
    q: NDArray[np.float64],
    lo: int,
    hi: int,
    kind: int,
    bits: int,
    rounding: int,
    out_q: NDArray[np.float64],
    out_m: NDArray[np.int64],
    key: NDArray[np.float64],
    order: NDArray[np.int64],
    hist: NDArray[np.int64],
) -> bool:
    """Quantize one row ``q[lo:hi]``; return False if a dyadic invariant fails.

    ``key`` and ``order`` are scratch arrays of at least the row's length and ``hist`` one of
    ``HIST_BINS`` counts (all reused across rows).
    """
    n = hi - lo
    if n == 0:
        return True
    if kind != KIND_DYADIC:
        qq = q[lo:hi]  # slices indexed from 0: the loops vectorise (see policy_row)
        oq = out_q[lo:hi]
        out_m[lo:hi] = 0
        for j in range(n):
            x = qq[j]
            if kind == KIND_FLOAT32:
                x = float(np.float32(x))
            elif kind == KIND_BFLOAT16:
                x = _round_significand(float(np.float32(x)), _BF16_MANT, _BF16_EMIN)
            elif kind == KIND_FLOAT16:
                x = _round_significand(x, _F16_MANT, _F16_EMIN)
            oq[j] = x  # a value cast to 0 leaves the support
        s = lane_sum(oq, n)
        for j in range(n):
            oq[j] = oq[j] / s if s > 0.0 else 0.0
        return True
    # dyadicN: m_i = ⌊q_i·2^N⌋ (ldexp scales exactly, also for subnormal q_i), r = 2^N − Σ m_i
    total = np.int64(1) << bits
    scale = float(total)  # q·2^N and m·2^-N are exact scalings by powers of two
    inv = 1.0 / scale
    top = lo
    n_support = 0
    r = total
    for j in range(lo, hi):
        m = np.int64(q[j] * scale)  # truncation = floor: q ≥ 0
        out_m[j] = m
        r -= m
        if q[j] > q[top]:
            top = j
        if q[j] > 0.0:
            n_support += 1
    if n_support == 0:
        for j in range(lo, hi):
            out_q[j] = 0.0
        return True
    if rounding == ROUND_NEAREST and r > 0:
        # largest remainder: one unit each to the min(r, support) largest fractional parts,
        # ties to the lower index; candidates with q_i = 0 sort last and get none
        units = r if r < n_support else np.int64(n_support)
        # the `units` largest fractional parts among the support, ties to the lower index,
        # without sorting: a 64-bucket histogram of the fractions finds the bucket holding the
        # threshold; buckets above it all get a unit; inside it, the few members are ranked by
        # (fraction descending, index ascending) with an insertion sort
        for t in range(HIST_BINS):
            hist[t] = 0
        for j in range(lo, hi):
            if q[j] > 0.0:
                v = q[j] * scale
                hist[np.int64((v - float(np.int64(v))) * HIST_BINS)] += 1
        need = units
        bstar = HIST_BINS - 1
        while hist[bstar] < need:
            need -= hist[bstar]
            bstar -= 1
        nk = 0
        for j in range(lo, hi):
            if q[j] > 0.0:
                v = q[j] * scale
                f = v - float(np.int64(v))
                b = np.int64(f * HIST_BINS)
                if b > bstar:
                    out_m[j] += 1
                elif b == bstar:
                    # insert (f, j) keeping descending f, ascending index among equals
                    slot = nk
                    while slot > 0 and key[slot - 1] < f:
                        key[slot] = key[slot - 1]
                        order[slot] = order[slot - 1]
                        slot -= 1
                    key[slot] = f
                    order[slot] = j
                    nk += 1
        for t in range(need):
            out_m[order[t]] += 1
        r -= units
    out_m[top] += r  # floor-argmax: the whole remainder; nearest: any surplus beyond the support
    check = np.int64(0)
    for j in range(lo, hi):
        check += out_m[j]
        out_q[j] = float(out_m[j]) * inv  # exact: m_i ≤ 2^53
    return bool(check == total and out_m[top] >= 0)


@njit(parallel=True, cache=True)
def quantize(
    offsets: NDArray[np.int64],
    q: NDArray[np.float64],
    kind_code: int,
    bits: int,
    rounding_code: int,
    out_q: NDArray[np.float64],
    out_m: NDArray[np.int64],
) -> None:
    """Quantize every row's law (docs/commands.md#arms).

    Parameters
    ----------
    offsets : int64, (n_rows + 1,)
        Row i is ``[offsets[i], offsets[i + 1])``.
    q : float64, (nnz,)
        Policy laws: non-negative, each row summing to 1 up to rounding.
    kind_code : int
        One of the ``KIND_*`` codes.
    bits : int
        N for KIND_DYADIC (any 1..53 works here; arms allow 8..53); ignored otherwise.
    rounding_code : int
        ROUND_NEAREST (largest remainder) or ROUND_FLOOR_ARGMAX; dyadic only.
    out_q : float64, (nnz,)
        Written: the quantized law (renormalised in float64 for float kinds; m_i / 2^N for dyadic).
    out_m : int64, (nnz,)
        Written: the integers m_i for dyadic (Σ = 2^N per row with positive mass); zeros otherwise.

    Raises
    ------
    AssertionError
        If a dyadic row's integers do not sum to 2^N or go negative (an internal invariant).
    """
    n_rows = offsets.shape[0] - 1
    ok = np.ones(n_rows, dtype=np.bool_)
    width = 0
    for i in range(n_rows):
        width = max(width, offsets[i + 1] - offsets[i])
    n_chunks = min(n_rows, 256)  # scratch arrays allocated once per chunk of rows, not per row
    for c in prange(n_chunks):
        key = np.empty(width)
        order = np.empty(width, np.int64)
        hist = np.empty(HIST_BINS, np.int64)
        for i in range(c * n_rows // n_chunks, (c + 1) * n_rows // n_chunks):
            ok[i] = quantize_row(
                q,
                offsets[i],
                offsets[i + 1],
                kind_code,
                bits,
                rounding_code,
                out_q,
                out_m,
                key,
                order,
                hist,
            )
    for i in range(n_rows):
        if not ok[i]:
            raise AssertionError("dyadic quantizer: integers do not sum to 2^N (internal bug)")


# ================================================================================================
# wrappers
# ================================================================================================


@dataclass(frozen=True)
class PolicyLaw:
    """A policy's float64 law over a batch's rows.

    Attributes
    ----------
    q : float64, (nnz,)
        The law per row (0 for dropped candidates).
    flag : int8, (n_rows,)
        FLAG_K_EXCEEDS | FLAG_NO_SUPPORT bits; 0 for a clean row.
    """

    q: NDArray[np.float64]
    flag: NDArray[np.int8]


@dataclass(frozen=True)
class QuantLaw:
    """A quantized law over a batch's rows.

    Attributes
    ----------
    q : float64, (nnz,)
        The quantized law (m_i / 2^N for dyadic kinds).
    m : int64, (nnz,)
        The dyadic integers (Σ = 2^N per row); zeros for float kinds.
    bits : int
        N for dyadic kinds, 0 for float kinds.
    """

    q: NDArray[np.float64]
    m: NDArray[np.int64]
    bits: int


@dataclass(frozen=True)
class ArmLaws:
    """Everything the replay kernels need about one arm on one batch.

    Attributes
    ----------
    q_sampler : float64, (nnz,)
        The law the drafter samples from.
    m_sampler : int64, (nnz,)
        Its dyadic integers (Σ = 2^N per row) when ``sampler_bits > 0``; zeros otherwise.
    q_verifier : float64, (nnz,)
        The law of the accept test and the residual; the same array object as ``q_sampler`` when
        the arm is matched.
    flag : int8, (n_rows,)
        Row flags of the policy (FLAG_K_EXCEEDS, FLAG_NO_SUPPORT): such rows' cells are null.
    sampler_bits : int
        N of a dyadic sampler (draw with CDF inversion on ``m_sampler``), 0 for float samplers.
    """

    q_sampler: NDArray[np.float64]
    m_sampler: NDArray[np.int64]
    q_verifier: NDArray[np.float64]
    flag: NDArray[np.int8]
    sampler_bits: int


def _as_csr(
    offsets: NDArray[np.integer], values: NDArray[np.floating]
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Validate and convert a CSR pair (ValueError: these are internal arrays, not user input)."""
    off = np.ascontiguousarray(offsets, dtype=np.int64)
    val = np.ascontiguousarray(values, dtype=np.float64)
    if off.ndim != 1 or val.ndim != 1 or off.shape[0] < 1:
        raise ValueError("offsets (n_rows + 1,) and values (nnz,) must be non-empty 1-D arrays")
    if off[0] != 0 or off[-1] != val.shape[0] or bool(np.any(np.diff(off) < 0)):
        raise ValueError("offsets must start at 0, be non-decreasing and end at len(values)")
    return off, val


class Workspace:
    """Reusable output buffers across batches.

    A stream of batches then does not fault in fresh memory for every law: each buffer grows to
    the largest batch and is sliced after that.
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple[object, str], NDArray[Any]] = {}

    def get(self, owner: object, name: str, n: int, dtype: type[np.generic]) -> NDArray[Any]:
        """Return an uninitialised array of ``n`` items owned by ``(owner, name)``."""
        key = (owner, name)
        buf = self._buffers.get(key)
        if buf is None or buf.shape[0] < n or buf.dtype != dtype:
            buf = np.empty(max(n, 1), dtype=dtype)
            self._buffers[key] = buf
        return buf[:n]


def _alloc(
    ws: Workspace | None, owner: object, name: str, n: int, dtype: type[np.generic]
) -> NDArray[Any]:
    return np.empty(n, dtype=dtype) if ws is None else ws.get(owner, name, n, dtype)


def policy_law_of(
    policy: Policy,
    offsets: NDArray[np.integer],
    draft_logprobs: NDArray[np.floating],
    workspace: Workspace | None = None,
) -> PolicyLaw:
    """Compute a policy's law on CSR rows (wrapper of :func:`policy_law`).

    Parameters
    ----------
    policy : Policy
    offsets : int64, (n_rows + 1,)
    draft_logprobs : float64, (nnz,)

    Returns
    -------
    PolicyLaw
    """
    off, lp = _as_csr(offsets, draft_logprobs)
    out_q = _alloc(workspace, policy, "q", lp.shape[0], np.float64)
    out_flag = _alloc(workspace, policy, "flag", off.shape[0] - 1, np.int8)
    top_k = 0 if policy.top_k is None else policy.top_k
    policy_law(off, lp, policy.greedy, top_k, policy.temperature, policy.top_p, out_q, out_flag)
    return PolicyLaw(out_q, out_flag)


def quantize_law(
    quant: Quant,
    offsets: NDArray[np.integer],
    q: NDArray[np.floating],
    workspace: Workspace | None = None,
    owner: object = None,
) -> QuantLaw:
    """Quantize laws on CSR rows (wrapper of :func:`quantize`).

    Parameters
    ----------
    quant : Quant
    offsets : int64, (n_rows + 1,)
    q : float64, (nnz,)
        Policy laws.

    Returns
    -------
    QuantLaw
    """
    off, qq = _as_csr(offsets, q)
    key = (owner, quant)
    out_q = _alloc(workspace, key, "q", qq.shape[0], np.float64)
    out_m = _alloc(workspace, key, "m", qq.shape[0], np.int64)
    code = KIND_CODES[quant.kind]
    quantize(off, qq, code, quant.bits, ROUNDING_CODES[quant.rounding], out_q, out_m)
    return QuantLaw(out_q, out_m, quant.bits if code == KIND_DYADIC else 0)


@dataclass
class LawCache:
    """Per-batch cache: each distinct Policy's law, and each (Policy, Quant), computed once.

    Arms that share a policy (say ``top32:t0.7@5``, ``top32:t0.7:dyadic8@5`` and
    ``top32:t0.7:dyadic8/float64@5``) share its policy law, and every arm's float64 verifier is the
    same array. Keys are the frozen dataclasses, so two spellings of one arm share entries.

    Parameters
    ----------
    offsets : int64, (n_rows + 1,)
    draft_logprobs : float64, (nnz,)
    workspace : Workspace, optional
        Buffers reused across batches (the laws of one batch are overwritten by the next).
    """

    offsets: NDArray[np.int64]
    draft_logprobs: NDArray[np.float64]
    workspace: Workspace | None = None
    _policies: dict[Policy, PolicyLaw] = field(default_factory=dict, init=False, repr=False)
    _quants: dict[tuple[Policy, Quant], QuantLaw] = field(
        default_factory=dict, init=False, repr=False
    )
    memo: dict[object, object] = field(default_factory=dict, init=False, repr=False)
    """What later stages derive once per batch from its laws (the drafting policies' sorted
    rows and their arms' fixed-depth values), keyed by what it depends on."""

    def __post_init__(self) -> None:
        self.offsets, self.draft_logprobs = _as_csr(self.offsets, self.draft_logprobs)

    def policy(self, policy: Policy) -> PolicyLaw:
        """Return the policy's law on this batch (computed once)."""
        law = self._policies.get(policy)
        if law is None:
            law = policy_law_of(policy, self.offsets, self.draft_logprobs, self.workspace)
            self._policies[policy] = law
        return law

    def quantized(self, policy: Policy, quant: Quant) -> QuantLaw:
        """Return the policy's law through ``quant`` on this batch (computed once)."""
        key = (policy, quant)
        law = self._quants.get(key)
        if law is None:
            law = quantize_law(
                quant, self.offsets, self.policy(policy).q, self.workspace, owner=policy
            )
            self._quants[key] = law
        return law

    def laws(self, arm: Arm) -> ArmLaws:
        """Return the arm's sampler and verifier laws on this batch."""
        sampler = self.quantized(arm.policy, arm.sampler)
        verifier = sampler if arm.matched else self.quantized(arm.policy, arm.verifier)
        return ArmLaws(
            q_sampler=sampler.q,
            m_sampler=sampler.m,
            q_verifier=verifier.q,
            flag=self.policy(arm.policy).flag,
            sampler_bits=sampler.bits,
        )


def arm_laws(
    arm: Arm, offsets: NDArray[np.integer], draft_logprobs: NDArray[np.floating]
) -> ArmLaws:
    """Compute one arm's sampler and verifier laws on CSR rows (no sharing across arms).

    Parameters
    ----------
    arm : Arm
    offsets : int64, (n_rows + 1,)
    draft_logprobs : float64, (nnz,)

    Returns
    -------
    ArmLaws
        Use :class:`LawCache` to share policy laws across the arms of one batch.
    """
    return LawCache(np.asarray(offsets), np.asarray(draft_logprobs)).laws(arm)

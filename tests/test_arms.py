"""Arms: the parser and canonical form, policy laws and quantizers.

See docs/methods.md#arms-policy-and-quantizers.

Tiers (STYLE.md): exact equivalence of every kernel with a slow pure-Python/NumPy reference written
here from docs/methods.md#arms-policy-and-quantizers over the whole argument grid; exhaustive
enumeration for the largest-remainder rule's optimality; hypothesis properties (exact dyadic sums
for N = 8..53, float-cast underflow); and every validation message with ``pytest.raises(match=…)``.
Hypothesis runs derandomized (seeded) with ``deadline=None`` (a cached Numba kernel's first call
costs 0.3 s: STACK-NOTES gotcha 7).
"""

from __future__ import annotations

import itertools
import math
import re
from fractions import Fraction
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit
from numpy.typing import NDArray

from specreplay.errors import SpecReplayError
from specreplay.sim.arms import Arm, Policy, Quant, canonical, parse_arm
from specreplay.sim.lanes import lane_sum_reference
from specreplay.sim.policy import (
    FLAG_K_EXCEEDS,
    FLAG_NO_SUPPORT,
    KIND_CODES,
    KIND_DYADIC,
    ROUND_FLOOR_ARGMAX,
    ROUND_NEAREST,
    ROUNDING_CODES,
    LawCache,
    _exp,
    arm_laws,
    exp_reference,
    policy_law_of,
    quantize,
    quantize_law,
)

SETTINGS = settings(deadline=None, derandomize=True, database=None, max_examples=150)
NEG_INF = -math.inf


# ================================================================================================
# slow references, from docs/methods.md#arms-policy-and-quantizers (pure Python; NumPy only for the
# casts)
# ================================================================================================


def ref_policy(
    lp: list[float], greedy: bool, top_k: int | None, t: float, p: float
) -> tuple[list[float], int]:
    """The policy law of one row and its flag bits.

    Same order of operations as docs/methods.md#arms-policy-and-quantizers spells out: temperature,
    top-k, then top-p walking the candidates by decreasing ``lp / T`` (ties to the lower index) and
    summing ``w_i / S_k``; sums over the row (dropped candidates as 0) in the kernels' lane order
    (``lane_sum_reference``). The kernel's exp (``exp_reference``, the same IEEE operations in
    Python; its accuracy against math.exp is tested on its own below): the same operations in the
    same order, so the law is the kernel's to the bit.
    """
    n = len(lp)
    flag = FLAG_K_EXCEEDS if (not greedy and top_k is not None and top_k > n) else 0
    if all(v == NEG_INF for v in lp):
        return [1.0] + [0.0] * (n - 1), flag | FLAG_NO_SUPPORT
    if greedy:
        best = min(range(n), key=lambda i: (-lp[i], i))
        return [1.0 if i == best else 0.0 for i in range(n)], flag
    x = [v / t for v in lp]
    mx = max(x)
    w = [exp_reference(v - mx) for v in x]
    order = sorted(range(n), key=lambda i: (-x[i], i))
    kept = order[: n if top_k is None else min(top_k, n)]
    if p < 1.0:
        top = set(kept)
        s_k = lane_sum_reference([w[i] if i in top else 0.0 for i in range(n)])
        cum, chosen = 0.0, []
        for i in kept:
            cum += w[i] / s_k
            chosen.append(i)
            if cum >= p:
                break
        kept = chosen
    keep = set(kept)
    s = lane_sum_reference([w[i] if i in keep else 0.0 for i in range(n)])
    return [w[i] / s if i in keep else 0.0 for i in range(n)], flag


def ref_cast(q: list[float], kind: str) -> list[float]:
    """Cast each value (numpy's float32/float16 casts; bfloat16 by bits), renormalise in float64."""
    a = np.asarray(q, dtype=np.float64)
    if kind == "float32":
        a = a.astype(np.float32).astype(np.float64)
    elif kind == "float16":
        a = a.astype(np.float16).astype(np.float64)
    elif kind == "bfloat16":
        # round to nearest even of the float32 bit pattern to its top 16 bits
        bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)
        top = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        a = top.astype(np.uint32).view(np.float32).astype(np.float64)
    s = lane_sum_reference(a.tolist())
    return [v / s if s > 0 else 0.0 for v in a.tolist()]


def ref_dyadic(q: list[float], bits: int, rounding: str) -> list[int]:
    """DyadicN in exact rational arithmetic (support-only remainder units).

    The quantizer of docs/methods.md#arms-policy-and-quantizers.
    """
    n, total = len(q), 1 << bits
    if not any(v > 0 for v in q):
        return [0] * n
    v = [Fraction(x) * total for x in q]
    m = [math.floor(f) for f in v]
    r = total - sum(m)
    top = min(range(n), key=lambda i: (-q[i], i))
    if rounding == "nearest" and r > 0:
        support = sorted((i for i in range(n) if q[i] > 0), key=lambda i: (m[i] - v[i], i))
        units = min(r, len(support))
        for i in support[:units]:
            m[i] += 1
        r -= units
    m[top] += r
    return m


# ================================================================================================
# helpers
# ================================================================================================


def csr(rows: list[list[float]]) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in rows])
    flat = np.array([v for r in rows for v in r], dtype=np.float64)
    return offsets, flat


def split(offsets: NDArray[np.int64], flat: NDArray[np.generic]) -> list[list[float]]:
    return [flat[offsets[i] : offsets[i + 1]].tolist() for i in range(offsets.shape[0] - 1)]


def kernel_dyadic(q: list[float], bits: int, rounding: int) -> NDArray[np.int64]:
    """Call the kernel directly on one row (any bits ≥ 1: small totals for enumeration)."""
    offsets, flat = csr([q])
    out_q = np.empty_like(flat)
    out_m = np.empty(flat.shape[0], dtype=np.int64)
    quantize(offsets, flat, KIND_DYADIC, bits, rounding, out_q, out_m)
    return out_m


def _grid_rows() -> list[list[float]]:
    """Position rows covering every branch; seeded (seed 20261129: any seed works, none tuned)."""
    rng = np.random.default_rng(20261129)
    rows: list[list[float]] = []
    for n in (1, 2, 3, 5, 8, 16, 32, 40):
        w = rng.dirichlet(np.full(n, 0.5))
        lp = np.log(w * 0.97)  # leave some mass outside the candidates, as archives do
        rows.append(lp.tolist())  # unsorted
        rows.append(np.sort(lp)[::-1].tolist())  # archive order: decreasing
    rows += [
        [-1.0, -1.0, -2.0, -2.0, -2.0, -1.0],  # ties everywhere
        [math.log(0.5), math.log(0.25), math.log(0.25)],  # top-p 0.5 reaches P exactly
        [math.log(0.25)] * 4,  # all tied
        [NEG_INF, -0.5, NEG_INF, -1.5, -1.5],  # q = 0 candidates, a tie
        [NEG_INF, NEG_INF, NEG_INF],  # no support: flagged
        [NEG_INF],
        [NEG_INF, -3.0],  # one finite
        [-0.1],  # one candidate
        [0.0, -20.0, -25.0, -80.0, -100.0, -105.0, -110.0, -745.0, NEG_INF],  # cast underflows
        [-1e-9, -30.0, -200.0, -700.0],
    ]
    return rows


GRID_ROWS = _grid_rows()
GRID_OFFSETS, GRID_LP = csr(GRID_ROWS)
MAX_N = max(len(r) for r in GRID_ROWS)
TEMPERATURES = (0.3, 0.7, 1.0, 2.0)
TOP_PS = (0.5, 0.9, 1.0)
# every K from 1 to one past the longest row (K > n is flagged), and None (= all)
POLICIES = [Policy(greedy=True)] + [
    Policy(top_k=k, temperature=t, top_p=p)
    for k in [None, *range(1, MAX_N + 2)]
    for t in TEMPERATURES
    for p in TOP_PS
]
QUANTS = [Quant(k) for k in ("float64", "float32", "bfloat16", "float16")] + [
    Quant("dyadic", n, r) for n in (8, 12, 16, 24, 53) for r in ("nearest", "floor-argmax")
]


# ================================================================================================
# kernel = reference over the whole grid
# ================================================================================================


def test_policy_law_matches_reference_on_grid() -> None:
    for pol in POLICIES:
        law = policy_law_of(pol, GRID_OFFSETS, GRID_LP)
        for i, (lp, got) in enumerate(zip(GRID_ROWS, split(GRID_OFFSETS, law.q), strict=True)):
            want, flag = ref_policy(lp, pol.greedy, pol.top_k, pol.temperature, pol.top_p)
            where = f"{pol} row {i}"
            assert law.flag[i] == flag, where
            assert [v > 0 for v in got] == [v > 0 for v in want], where  # kept sets: exact
            assert got == want, where  # same operations in the same order: exact
            assert abs(math.fsum(got) - 1.0) < 1e-14, where


# Quantizers on the laws of a spread of policies (the full policy × quantizer product would take
# minutes in the Fraction reference; every policy branch is already covered above).
QUANT_POLICIES = [
    Policy(greedy=True),
    Policy(),
    Policy(temperature=0.3),
    Policy(temperature=2.0, top_p=0.9),
    Policy(top_k=1),
    Policy(top_k=3, temperature=0.7),
    Policy(top_k=8, temperature=0.7, top_p=0.5),
    Policy(top_k=32, temperature=1.0, top_p=0.9),
    Policy(top_k=41, temperature=0.3),
]


@pytest.mark.parametrize("quant", QUANTS, ids=lambda q: q.spelling)
def test_quantizers_match_reference_on_grid(quant: Quant) -> None:
    for pol in QUANT_POLICIES:
        q = policy_law_of(pol, GRID_OFFSETS, GRID_LP).q
        out = quantize_law(quant, GRID_OFFSETS, q)
        for i, (row, got_q, got_m) in enumerate(
            zip(
                split(GRID_OFFSETS, q),
                split(GRID_OFFSETS, out.q),
                split(GRID_OFFSETS, out.m),
                strict=True,
            )
        ):
            where = f"{pol} {quant.spelling} row {i}"
            if quant.kind == "dyadic":
                want_m = ref_dyadic(row, quant.bits, quant.rounding)
                assert got_m == want_m, where
                assert got_q == [m / 2**quant.bits for m in want_m], where
                assert out.bits == quant.bits
            else:
                assert got_m == [0] * len(row), where
                assert got_q == ref_cast(row, quant.kind), where  # same ops, same order: exact
                assert out.bits == 0


# ================================================================================================
# policy kernel: explicit cases (what the grid checks, spelled out)
# ================================================================================================


def _law(pol: Policy, rows: list[list[float]]) -> tuple[list[list[float]], list[int]]:
    offsets, lp = csr(rows)
    law = policy_law_of(pol, offsets, lp)
    return split(offsets, law.q), law.flag.tolist()


def test_greedy_ties_to_lower_index_and_no_k_flag() -> None:
    q, flag = _law(Policy(greedy=True), [[-2.0, -1.0, -1.0], [-0.5]])
    assert q == [[0.0, 1.0, 0.0], [1.0]] and flag == [0, 0]


def test_top_k_ties_to_lower_index() -> None:
    (q,), _ = _law(Policy(top_k=2), [[-2.0, -1.0, -2.0, -1.0]])
    assert q == [0.0, 0.5, 0.0, 0.5]
    (q,), _ = _law(Policy(top_k=3), [[-2.0, -1.0, -2.0, -1.0]])
    assert [v > 0 for v in q] == [True, True, False, True]


def test_top_p_stops_when_mass_reaches_p_keeping_at_least_one() -> None:
    lp = [math.log(0.25), math.log(0.5), math.log(0.25)]
    (q,), _ = _law(Policy(top_p=0.5), [lp])
    assert q == [0.0, 1.0, 0.0]  # 0.5 reaches P = 0.5 exactly
    (q,), _ = _law(Policy(top_p=0.6), [lp])
    assert q == [pytest.approx(1 / 3), pytest.approx(2 / 3), 0.0]  # the tie goes to index 0
    (q,), _ = _law(Policy(top_p=1e-9), [lp])
    assert q == [0.0, 1.0, 0.0]


def test_top_p_acts_on_the_top_k_law() -> None:
    # top-2 of (0.4, 0.35, 0.25) renormalises to (0.533, 0.467): P = 0.5 then keeps one candidate,
    # where P = 0.5 on the untruncated law would have kept two (0.4 < 0.5)
    (q,), _ = _law(Policy(top_k=2, top_p=0.5), [np.log([0.4, 0.35, 0.25]).tolist()])
    assert q == [1.0, 0.0, 0.0]


def test_k_exceeding_the_row_is_flagged_never_clamped_silently() -> None:
    rows = [[-1.0, -2.0], [-1.0, -2.0, -3.0]]
    q3, flag3 = _law(Policy(top_k=3), rows)
    q_all, flag_all = _law(Policy(), rows)
    assert flag3 == [FLAG_K_EXCEEDS, 0] and flag_all == [0, 0]
    assert q3 == q_all  # the flagged row still holds a law (K = n) for downstream kernels


def test_all_neg_inf_row_is_flagged_with_a_point_mass() -> None:
    q, flag = _law(Policy(top_k=5, temperature=0.7), [[NEG_INF, NEG_INF], [NEG_INF, -1.0]])
    assert q == [[1.0, 0.0], [0.0, 1.0]]
    assert flag == [FLAG_NO_SUPPORT | FLAG_K_EXCEEDS, FLAG_K_EXCEEDS]


@st.composite
def logprob_rows(draw: st.DrawFn) -> list[float]:
    n = draw(st.integers(1, 12))
    # a small value set makes ties frequent; −inf is q = 0
    value = st.sampled_from([0.0, -0.5, -1.0, -2.0, -7.0, -40.0, NEG_INF]) | st.floats(-50, 0)
    return draw(st.lists(value, min_size=n, max_size=n))


@SETTINGS
@given(
    rows=st.lists(logprob_rows(), min_size=1, max_size=6),
    greedy=st.booleans(),
    top_k=st.none() | st.integers(1, 14),
    t=st.floats(0.05, 20.0),
    p=st.floats(1e-6, 1.0),
)
def test_policy_law_matches_reference_hypothesis(
    rows: list[list[float]], greedy: bool, top_k: int | None, t: float, p: float
) -> None:
    pol = Policy(greedy=True) if greedy else Policy(top_k=top_k, temperature=t, top_p=p)
    got, flags = _law(pol, rows)
    for lp, q, flag in zip(rows, got, flags, strict=True):
        want, want_flag = ref_policy(lp, pol.greedy, pol.top_k, pol.temperature, pol.top_p)
        assert flag == want_flag
        assert [v > 0 for v in q] == [v > 0 for v in want]
        assert q == want  # same operations in the same order: exact
        assert all(v >= 0 for v in q) and abs(math.fsum(q) - 1.0) < 1e-14
        if top_k is not None and not greedy:
            assert sum(v > 0 for v in q) <= top_k


# ================================================================================================
# quantizers: properties
# ================================================================================================


@st.composite
def laws(draw: st.DrawFn, max_n: int = 12) -> list[float]:
    """A law over 1..max_n candidates: zeros, ties, tiny (subnormal) and dominant values."""
    n = draw(st.integers(1, max_n))
    weight = (
        st.just(0.0)
        | st.sampled_from([1.0, 3.0])  # ties
        | st.builds(math.ldexp, st.floats(1.0, 2.0, exclude_max=True), st.integers(-1100, 60))
    )
    w = draw(st.lists(weight, min_size=n, max_size=n))
    i = draw(st.integers(0, n - 1))
    w[i] = max(w[i], 1.0)  # at least one positive weight
    s = math.fsum(w)
    return [x / s for x in w]


@SETTINGS
@given(q=laws(), bits=st.integers(8, 53), rounding=st.sampled_from(["nearest", "floor-argmax"]))
def test_dyadic_sums_exactly_and_matches_reference(
    q: list[float], bits: int, rounding: str
) -> None:
    offsets, flat = csr([q])
    out = quantize_law(Quant("dyadic", bits, rounding), offsets, flat)
    m = out.m.tolist()
    assert sum(m) == 2**bits  # docs/methods.md#arms-policy-and-quantizers: Σ m_i = 2^N exactly
    assert all(v >= 0 for v in m)
    assert all(mi == 0 for mi, qi in zip(m, q, strict=True) if qi == 0.0)  # support kept
    assert out.q.tolist() == [v / 2**bits for v in m]
    assert m == ref_dyadic(q, bits, rounding)
    v = [Fraction(x) * 2**bits for x in q]
    top = min(range(len(q)), key=lambda i: (-q[i], i))
    if rounding == "floor-argmax":
        assert all(m[i] == math.floor(v[i]) for i in range(len(q)) if i != top)
    else:  # largest remainder on a law: every non-argmax candidate within one unit
        assert all(abs(m[i] - v[i]) < 1 for i in range(len(q)) if i != top)


@SETTINGS
@given(rows=st.lists(laws(max_n=6), min_size=1, max_size=5), quant=st.sampled_from(QUANTS))
def test_rows_are_independent(rows: list[list[float]], quant: Quant) -> None:
    offsets, flat = csr(rows)
    together = quantize_law(quant, offsets, flat)
    for i, row in enumerate(rows):
        o1, f1 = csr([row])
        alone = quantize_law(quant, o1, f1)
        lo, hi = offsets[i], offsets[i + 1]
        assert together.q[lo:hi].tolist() == alone.q.tolist()
        assert together.m[lo:hi].tolist() == alone.m.tolist()


@SETTINGS
@given(q=laws(), kind=st.sampled_from(["float64", "float32", "bfloat16", "float16"]))
def test_float_kinds_sum_to_one_with_zeros_exactly_where_the_cast_underflows(
    q: list[float], kind: str
) -> None:
    offsets, flat = csr([q])
    got = quantize_law(Quant(kind), offsets, flat).q.tolist()
    assert abs(math.fsum(got) - 1.0) < 1e-12
    assert all(v >= 0 for v in got)
    cast = {"float64": np.float64, "float32": np.float32, "float16": np.float16}
    if kind in cast:
        underflow = [qi > 0 and cast[kind](qi) == 0 for qi in q]
    else:  # bfloat16 underflows below half its smallest subnormal (2^-133), after float32
        underflow = [qi > 0 and v == 0 for qi, v in zip(q, ref_cast(q, "bfloat16"), strict=True)]
        # (2^-134 itself ties to even, i.e. to 0)
        assert underflow == [qi > 0 and np.float32(qi) <= 2.0**-134 for qi in q]
    assert [v == 0 for v in got] == [qi == 0 or u for qi, u in zip(q, underflow, strict=True)]
    assert got == ref_cast(q, kind)


def test_casts_round_to_nearest_even_directly_for_float16() -> None:
    # 1 + 2^-11 + 2^-40: float16 rounds up directly (numpy); via float32 it would tie to 1.0,
    # which is what bfloat16's float32 path does at its own precision (1 + 2^-8 + 2^-40 → 1)
    q = [1 + 2**-11 + 2**-40, 2**-8 + 2**-40]
    offsets, flat = csr([q])
    s16 = (1 + 2**-10) + 2**-8
    assert quantize_law(Quant("float16"), offsets, flat).q.tolist() == [
        (1 + 2**-10) / s16,
        2**-8 / s16,
    ]
    qb = [1 + 2**-8 + 2**-40]
    ob, fb = csr([qb])
    assert quantize_law(Quant("bfloat16"), ob, fb).q.tolist() == [1.0]
    assert np.float16(q[0]) == 1 + 2**-10  # the numpy behaviour the reference relies on


def test_nearest_ties_to_the_lower_index() -> None:
    third = 1 / 3
    assert kernel_dyadic([third, third, third], 8, ROUND_NEAREST).tolist() == [86, 85, 85]
    assert kernel_dyadic([third, third, third], 8, ROUND_FLOOR_ARGMAX).tolist() == [86, 85, 85]
    # fractional parts .8, .4, .8 (×2^3 of 0.35, 0.3, 0.35): the two .8s get a unit each... and
    # the remainder is exactly 2
    assert kernel_dyadic([0.35, 0.3, 0.35], 3, ROUND_NEAREST).tolist() == [3, 2, 3]


def test_floor_argmax_puts_everything_on_the_argmax() -> None:
    q = [0.1, 0.45, 0.45]  # ×2^4 = 1.6, 7.2, 7.2 → floors 1, 7, 7, remainder 1 → index 1
    assert kernel_dyadic(q, 4, ROUND_FLOOR_ARGMAX).tolist() == [1, 8, 7]
    assert kernel_dyadic(q, 4, ROUND_NEAREST).tolist() == [2, 7, 7]


def test_nearest_never_gives_units_to_dropped_candidates() -> None:
    # q·2^53 is integral everywhere and sums to 2^53 − 1: the missing unit must not revive the
    # top-k-dropped candidate at index 0 (its fractional part 0 ties the others at the lowest
    # index); it goes to index 1, the lowest-index candidate of the support
    q = [0.0, 0.5, 0.5 - 2**-53]
    assert kernel_dyadic(q, 53, ROUND_NEAREST).tolist() == [0, 2**52 + 1, 2**52 - 1]


def test_small_values_leave_the_dyadic_support() -> None:
    q = [1 - 2**-10, 2**-10]  # 2^-10·2^8 = 0.25: floored to 0, and 0.25 loses to nothing
    m = kernel_dyadic(q, 8, ROUND_NEAREST)
    assert m.tolist() == [256, 0]


def test_full_53_bits() -> None:
    assert kernel_dyadic([1.0], 53, ROUND_NEAREST).tolist() == [2**53]
    q = [2**-1074, 1.0 - 2**-53, 2**-53]  # smallest subnormal, and values near 1 and 2^-53
    assert kernel_dyadic(q, 53, ROUND_NEAREST).tolist() == [0, 2**53 - 1, 1]


def test_all_zero_row_quantizes_to_zeros() -> None:
    offsets, flat = csr([[0.0, 0.0]])
    for quant in QUANTS:
        out = quantize_law(quant, offsets, flat)
        assert out.q.tolist() == [0.0, 0.0] and out.m.tolist() == [0, 0]


def test_invariant_violation_raises_assertion() -> None:
    # not a law (Σ q = 10): the deficit would drive the argmax negative; the kernel must refuse
    with pytest.raises(AssertionError, match=r"do not sum to 2\^N \(internal bug\)"):
        kernel_dyadic([5.0, 5.0], 8, ROUND_NEAREST)


@cache
def compositions(n: int, total: int) -> NDArray[np.int64]:
    """Every non-negative integer vector of length n summing to total (stars and bars)."""
    out = []
    for bars in itertools.combinations(range(total + n - 1), n - 1):
        edges = (-1, *bars, total + n - 1)
        out.append([edges[j + 1] - edges[j] - 1 for j in range(n)])
    return np.array(out, dtype=np.int64)


@SETTINGS
@given(q=laws(max_n=4), bits=st.integers(1, 6))
def test_nearest_minimises_l1_error_exhaustively(q: list[float], bits: int) -> None:
    total = 2**bits
    v = np.array([float(Fraction(x) * total) for x in q])
    m = kernel_dyadic(q, bits, ROUND_NEAREST)
    best = float(np.abs(compositions(len(q), total) - v).sum(axis=1).min())
    assert float(np.abs(m - v).sum()) == pytest.approx(best, abs=1e-9)
    floor_argmax = kernel_dyadic(q, bits, ROUND_FLOOR_ARGMAX)
    assert int(floor_argmax.sum()) == total and int(m.sum()) == total


# ================================================================================================
# wrappers: ArmLaws and LawCache
# ================================================================================================


def test_arm_laws_matched_shares_the_array_and_mismatched_does_not() -> None:
    matched = arm_laws(parse_arm("top32:t0.7:dyadic8@5"), GRID_OFFSETS, GRID_LP)
    assert matched.q_verifier is matched.q_sampler and matched.sampler_bits == 8
    np.testing.assert_array_equal(matched.q_sampler, matched.m_sampler / 256)
    mismatched = arm_laws(parse_arm("top32:t0.7:dyadic8/float64@5"), GRID_OFFSETS, GRID_LP)
    assert mismatched.q_verifier is not mismatched.q_sampler
    np.testing.assert_array_equal(mismatched.q_sampler, matched.q_sampler)
    law = policy_law_of(Policy(top_k=32, temperature=0.7), GRID_OFFSETS, GRID_LP)
    np.testing.assert_allclose(mismatched.q_verifier, law.q, rtol=1e-15, atol=0)
    np.testing.assert_array_equal(mismatched.flag, law.flag)
    floats = arm_laws(parse_arm("t0.7:float16@5"), GRID_OFFSETS, GRID_LP)
    assert floats.sampler_bits == 0 and not floats.m_sampler.any()
    assert floats.m_sampler.shape == floats.q_sampler.shape == GRID_LP.shape


def test_law_cache_computes_each_policy_and_quant_once() -> None:
    cache = LawCache(GRID_OFFSETS, GRID_LP)
    a = cache.laws(parse_arm("top32:t0.7:dyadic8/float64@5"))
    b = cache.laws(parse_arm("t0.70:top32@3"))  # same policy, float64 sampler
    c = cache.laws(parse_arm("top32:t0.7:dyadic8:nearest@4"))
    assert b.q_sampler is a.q_verifier and c.q_sampler is a.q_sampler
    assert a.flag is b.flag is c.flag
    assert (
        cache.policy(Policy(top_k=32, temperature=0.7)).q
        is cache.policy(parse_arm("top32:t0.7@1").policy).q
    )


@pytest.mark.parametrize(
    ("offsets", "values", "match"),
    [
        (np.array([1, 2]), np.zeros(2), "start at 0"),
        (np.array([0, 2, 1, 2]), np.zeros(2), "non-decreasing"),
        (np.array([0, 1]), np.zeros(2), "end at len"),
        (np.array([], dtype=np.int64), np.zeros(0), "non-empty 1-D"),
        (np.array([0, 2]), np.zeros((1, 2)), "non-empty 1-D"),
    ],
)
def test_csr_validation(
    offsets: NDArray[np.int64], values: NDArray[np.float64], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        policy_law_of(Policy(), offsets, values)


def test_codes_cover_every_kind_and_rounding() -> None:
    assert set(KIND_CODES) == {"float64", "float32", "bfloat16", "float16", "dyadic"}
    assert len(set(KIND_CODES.values())) == 5
    assert ROUNDING_CODES == {"nearest": ROUND_NEAREST, "floor-argmax": ROUND_FLOOR_ARGMAX}


# ================================================================================================
# parser and canonical form
# ================================================================================================


@pytest.mark.parametrize(
    ("text", "canon"),
    [
        ("greedy@5", "greedy@5"),
        ("top32:t0.7@5", "top32:t0.7@5"),
        ("top32:t0.7:float64@5", "top32:t0.7@5"),
        ("top32:t0.7:dyadic24@5", "top32:t0.7:dyadic24@5"),
        ("top32:p0.9:dyadic16:floor-argmax@4", "top32:p0.9:dyadic16:floor-argmax@4"),
        ("top32:t0.7:dyadic8/float64@5", "top32:t0.7:dyadic8/float64@5"),
        ("p0.90:t0.70:top032:dyadic8:nearest/dyadic8@05", "top32:t0.7:p0.9:dyadic8@5"),
        ("t1@1", "t1@1"),
        ("p1:t1.0@2", "t1@2"),
        ("t1.50:float16@127", "t1.5:float16@127"),
        ("t7e-1@3", "t0.7@3"),
        ("t2.0/bfloat16@3", "t2/bfloat16@3"),
        ("  top4:float32@3 ", "top4:float32@3"),
        ("t0.7:dyadic53:floor-argmax/dyadic53@2", "t0.7:dyadic53:floor-argmax/dyadic53@2"),
    ],
)
def test_canonical_examples(text: str, canon: str) -> None:
    arm = parse_arm(text)
    assert arm.canonical == canonical(arm) == canon
    assert arm.spelled == text
    assert parse_arm(canon) == arm


def test_arm_fields_and_matched() -> None:
    arm = parse_arm("top32:p0.9:dyadic16:floor-argmax/float32@4")
    assert arm.policy == Policy(top_k=32, top_p=0.9)
    assert arm.sampler == Quant("dyadic", 16, "floor-argmax")
    assert arm.verifier == Quant("float32") and arm.depth == 4 and not arm.matched
    assert parse_arm("greedy@5") == Arm(Policy(greedy=True), depth=5)
    assert parse_arm("greedy@5").matched
    assert Arm(Policy(temperature=0.7), depth=2).spelled == "t0.7@2"  # defaults to canonical
    # spelled is not compared: arms key dictionaries by meaning
    assert len({parse_arm("t0.7@5"), parse_arm("t0.70:float64@5")}) == 1


def _spell_float(draw: st.DrawFn, x: float) -> str:
    forms = [repr(x), format(x, ".17g")]
    if "e" not in repr(x):
        forms.append(repr(x) + "0")
        forms.append("0" + repr(x))
    return draw(st.sampled_from(forms))


_QUANT_STRATEGY = st.sampled_from([Quant(k) for k in ("float64", "float32", "bfloat16", "float16")])
_QUANT_STRATEGY |= st.builds(
    Quant, st.just("dyadic"), st.integers(8, 53), st.sampled_from(["nearest", "floor-argmax"])
)


@st.composite
def spelled_arms(draw: st.DrawFn) -> tuple[str, Arm]:
    """A valid arm text in a random (non-canonical) spelling, with the Arm it must parse to."""
    depth = draw(st.integers(1, 127))
    depth_text = draw(st.sampled_from([str(depth), f"0{depth}"]))
    if draw(st.integers(0, 4)) == 0:
        return f"greedy@{depth_text}", Arm(Policy(greedy=True), depth=depth)
    top_k = draw(st.none() | st.integers(1, 5000))
    t = draw(st.just(1.0) | st.floats(1e-4, 1e4))
    p = draw(st.just(1.0) | st.floats(1e-6, 1.0, exclude_min=True))
    parts = []
    if top_k is not None:
        parts.append(draw(st.sampled_from([f"top{top_k}", f"top0{top_k}"])))
    if t != 1.0 or draw(st.booleans()):
        parts.append("t" + _spell_float(draw, t))
    if p != 1.0 or draw(st.booleans()):
        parts.append("p" + _spell_float(draw, p))
    if not parts:
        parts.append(draw(st.sampled_from(["t1", "p1", "t1.0"])))
    parts = list(draw(st.permutations(parts)))

    def spell_quant(q: Quant) -> str:
        if q.kind == "dyadic" and q.rounding == "nearest":
            return draw(st.sampled_from([q.spelling, q.spelling + ":nearest"]))
        return q.spelling

    sampler = draw(_QUANT_STRATEGY)
    if sampler != Quant() or draw(st.booleans()):
        parts.append(spell_quant(sampler))
    verifier = draw(st.none() | _QUANT_STRATEGY)
    text = ":".join(parts)
    if verifier is not None:
        text += "/" + spell_quant(verifier)
    arm = Arm(Policy(top_k=top_k, temperature=t, top_p=p), sampler, verifier or sampler, depth)
    return f"{text}@{depth_text}", arm


@SETTINGS
@given(case=spelled_arms())
def test_canonical_round_trips(case: tuple[str, Arm]) -> None:
    text, expected = case
    arm = parse_arm(text)
    assert arm == expected and arm.spelled == text
    canon = arm.canonical
    again = parse_arm(canon)
    assert again == arm and again.canonical == canon and again.spelled == canon
    assert arm.matched == (expected.sampler == expected.verifier)
    # defaults never printed
    for default in (":float64@", ":nearest", ":p1@", ":t1@", ":p1:", ":t1:"):
        assert default not in canon
    assert canon.count("/") == (0 if arm.matched else 1)
    head = canon.split("@")[0].split("/")[0].split(":")
    policy_parts = [h for h in head if h[0] in "tp" and h != "greedy"]
    assert policy_parts == sorted(
        policy_parts, key=lambda h: ("top", "t", "p").index("top" if h.startswith("top") else h[0])
    )


ERRORS = [
    ("top32:t0@5", r"temperature 0 \('t0'\): use greedy"),
    ("t0.0:top4@5", r"temperature 0 \('t0.0'\): use greedy"),
    ("t1e-400@5", "use greedy"),
    ("greedy:t0.7@5", r"greedy takes no other part \(got 't0.7'\)"),
    ("greedy:p0.9@5", "greedy takes no other part"),
    ("top4:greedy@5", "greedy takes no other part"),
    ("greedy:float64@5", "greedy takes no QUANT"),
    ("greedy:dyadic24@5", "greedy takes no QUANT"),
    ("greedy/float32@5", "greedy takes no QUANT"),
    ("top32:t0.7:dyadic7@5", r"N of dyadicN must be an integer in 8\.\.53, got 'dyadic7'"),
    ("t0.7:dyadic54@5", r"N of dyadicN must be an integer in 8\.\.53"),
    ("t0.7:dyadic@5", r"N of dyadicN must be an integer in 8\.\.53, got 'dyadic'"),
    ("t0.7/dyadicx@5", r"N of dyadicN must be an integer in 8\.\.53"),
    ("t0.7@0", r"DEPTH must be an integer in 1\.\.127, got '0'"),
    ("t0.7@128", r"DEPTH must be an integer in 1\.\.127"),
    ("t0.7@", r"DEPTH must be an integer in 1\.\.127, got ''"),
    ("t0.7@-1", r"DEPTH must be an integer in 1\.\.127"),
    ("t0.7", r"expected exactly one '@DEPTH'"),
    ("t0.7@5@6", r"expected exactly one '@DEPTH'"),
    ("t0.7:t0.5@5", r"part 't' given twice \('t0.7' and 't0.5'\)"),
    ("top3:p0.5:top4@5", r"part 'top' given twice"),
    ("p0.5:p0.5@5", r"part 'p' given twice"),
    ("t-1@5", r"T of tT must be > 0, got 't-1'"),
    ("tx@5", r"T of tT must be a decimal number, got 'tx'"),
    ("tinf@5", "T of tT must be a decimal number"),
    ("t1e999@5", r"T of tT must be finite, got 't1e999'"),
    ("p0@5", r"P of pP must be in \(0, 1\], got 'p0'"),
    ("p1.5@5", r"P of pP must be in \(0, 1\]"),
    ("p-0.1@5", r"P of pP must be in \(0, 1\]"),
    ("pnan@5", "P of pP must be a decimal number"),
    ("top0@5", r"K of topK must be an integer ≥ 1, got 'top0'"),
    ("top@5", "K of topK must be an integer ≥ 1"),
    ("top-1@5", "K of topK must be an integer ≥ 1"),
    ("top1.5@5", "K of topK must be an integer ≥ 1"),
    ("foo@5", r"unknown part 'foo'; expected greedy, topK, tT, pP or a QUANT"),
    ("t0.7:nearest@5", "unknown part 'nearest'"),
    ("float32@5", "expected POLICY before the QUANT"),
    ("t0.7:float32:nearest@5", r"sampler 'float32' takes no 'nearest'; expected a rounding"),
    ("t0.7/float16:floor-argmax@5", "verifier 'float16' takes no 'floor-argmax'; expected"),
    ("t0.7:dyadic8:nearest:floor-argmax@5", "expected at most one rounding"),
    ("t0.7:dyadic8:t0.5@5", r"'t0.5' after the sampler QUANT 'dyadic8'; expected POLICY parts"),
    ("t0.7:float32:float16@5", "'float16' after the sampler QUANT"),
    ("t0.7/t0.5@5", r"expected a verifier QUANT \(float64, .*\), got 't0.5'"),
    ("t0.7/float32/float16@5", r"expected at most one '/QUANT'"),
    ("t0.7::p0.9@5", "empty part"),
    (":t0.7@5", "empty part"),
    ("t0.7/@5", "empty part"),
    ("@5", "empty part"),
    ("", "expected exactly one '@DEPTH'"),
    ("Greedy@5", "unknown part 'Greedy'"),
]


@pytest.mark.parametrize(("text", "match"), ERRORS)
def test_parse_errors(text: str, match: str) -> None:
    with pytest.raises(SpecReplayError, match=match) as info:
        parse_arm(text)
    message = str(info.value)
    assert message.startswith(f"arm {text!r}: ")  # names the arm text
    # one line (docs/inputs.md#position-traces-schema-v1: the CLI prints it as is)
    assert "\n" not in message
    assert re.search(r"expected|must|use greedy", message)  # and says what was expected


def test_parse_rejects_non_strings() -> None:
    with pytest.raises(SpecReplayError, match="expected a string"):
        parse_arm(5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: Quant("dyadic"), r"dyadic bits must be in 8\.\.53"),
        (lambda: Quant("dyadic", 54), r"dyadic bits must be in 8\.\.53"),
        (lambda: Quant("float32", 8), "bits and rounding apply to dyadic only"),
        (lambda: Quant("float16", 0, "floor-argmax"), "bits and rounding apply to dyadic only"),
        (lambda: Quant("int8"), "kind must be one of"),
        (lambda: Quant("dyadic", 8, "up"), "rounding must be nearest or floor-argmax"),
        (lambda: Policy(greedy=True, temperature=0.5), "greedy takes no top_k"),
        (lambda: Policy(greedy=True, top_k=3), "greedy takes no top_k"),
        (lambda: Policy(top_k=0), r"top_k must be None \(all\) or an integer ≥ 1"),
        (lambda: Policy(top_k=2.0), "top_k must be None"),  # type: ignore[arg-type]
        (lambda: Quant("dyadic", 8.0), "dyadic bits must be in"),  # type: ignore[arg-type]
        (lambda: Arm(Policy(), depth=2.0), r"depth must be 1\.\.127"),  # type: ignore[arg-type]
        (lambda: Policy(temperature=0.0), r"temperature must be finite and > 0 \(use greedy\)"),
        (lambda: Policy(temperature=math.inf), "temperature must be finite"),
        (lambda: Policy(top_p=0.0), r"top_p must be in \(0, 1\]"),
        (lambda: Arm(Policy(), depth=0), r"depth must be 1\.\.127"),
        (lambda: Arm(Policy(greedy=True), Quant("float32")), "greedy takes no quantizer"),
        (lambda: Arm(Policy(greedy=True), verifier=Quant("dyadic", 8)), "greedy takes no"),
    ],
)
def test_dataclass_validation(build: object, match: str) -> None:
    with pytest.raises(SpecReplayError, match=match):
        build()  # type: ignore[operator]


# ================================================================================================
# the policy's exp
# ================================================================================================


@njit
def _exp_many(x: NDArray[np.float64]) -> NDArray[np.float64]:
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = _exp(x[i], 0)
    return out


def _exp_points() -> NDArray[np.float64]:
    rng = np.random.default_rng(20261129)  # any seed: none tuned
    special = [0.0, -0.0, -1e-300, -5e-324, -math.log(2.0), -0.5 * math.log(2.0), -1.0, -708.0,
               -708.4, -709.0, -744.4, -745.1, -745.2, -746.0, -800.0, NEG_INF]  # fmt: skip
    return np.concatenate([special, -rng.random(200_000) * 50.0, -rng.random(50_000) * 746.0])


def test_exp_is_bit_identical_to_its_python_steps() -> None:
    """The same IEEE operations in Python: the fast-math kernel has not reassociated them."""
    x = _exp_points()[:20_000]
    got = _exp_many(x)
    want = np.array([exp_reference(float(v)) for v in x])
    np.testing.assert_array_equal(got, want)


def test_exp_within_one_ulp_of_libm() -> None:
    """Against math.exp (glibc: correctly rounded in practice), including subnormal results."""
    x = _exp_points()
    got = _exp_many(x)
    want = np.array([math.exp(v) for v in x])
    ulp = np.spacing(np.maximum(want, 5e-324))
    assert (np.abs(got - want) <= ulp).all()
    assert got[x == NEG_INF].tolist() == [0.0]

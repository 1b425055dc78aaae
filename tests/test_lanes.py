"""Lane-order sums (:mod:`specreplay.sim.lanes`): every kernel sums a row as its Python twin does.

The kernels sum a row's candidates in lane order (eight accumulators, lane l taking the terms
i ≡ l mod 8, combined in one fixed tree) so that LLVM can run the sum wide without reassociating.
Each test here recomputes a kernel's sums in Python floats with :func:`lane_sum_reference`, from
references that share no code with the kernel (exact rational quantizers from test_arms, the
branchy accept probability written out below), and requires the kernel's values **to the bit**.

Two things make these tests fail: a kernel that sums in another order (a planted sequential sum,
another tree, a term left out or counted twice), and a kernel compiled with fast-math
``reassoc``, which lets LLVM reorder the lanes (measured here: a reassociating build of
:func:`lane_sum` differed from its twin on 587 of 1,600 random rows).
``tests/test_jit_determinism.py`` checks the flags themselves.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit
from numpy.typing import NDArray
from test_arms import GRID_LP, GRID_OFFSETS, GRID_ROWS, QUANT_POLICIES, QUANTS, ref_cast, ref_dyadic

from specreplay.replay.estimators.allarms import all_arms_rounds
from specreplay.replay.estimators.analytic import analytic_rounds, dyadic_nearest_row
from specreplay.replay.estimators.importance import importance_rounds
from specreplay.sim.accept import accept_prob, accept_probs, alpha_row
from specreplay.sim.arms import Arm, Policy, Quant
from specreplay.sim.lanes import lane_max, lane_sum, lane_sum_reference
from specreplay.sim.policy import policy_law_of

RNG_SEED = 20261213


@njit(cache=True)
def _lane_sum(x: NDArray[np.float64]) -> float:
    return lane_sum(x, x.shape[0])


@njit(cache=True)
def _alpha_row(
    qs: NDArray[np.float64], qv: NDArray[np.float64], p: NDArray[np.float64], dr: int
) -> tuple[float, float]:
    return alpha_row(qs, qv, p, dr, np.empty(qs.shape[0]))


def _accept_ref(qv: float, p: float) -> float:
    """a(x) as docs/methods.md#acceptance-at-one-position-alpha defines it, branch by branch."""
    if p <= 0.0:
        return 0.0
    if qv <= p:
        return 1.0
    return p / qv


def _seq_sum(xs: list[float]) -> float:
    s = 0.0
    for x in xs:
        s += x
    return s


def _spread_rows(rng: np.random.Generator) -> list[NDArray[np.float64]]:
    """Rows of 0..70 terms spanning 16 decades: sums whose order shows in the last bits."""
    return [rng.random(n) * 10.0 ** rng.integers(-8, 8, n) for n in range(71) for _ in range(8)]


def test_lane_sum_is_its_python_twin() -> None:
    rows = _spread_rows(np.random.default_rng(RNG_SEED))
    got = [_lane_sum(x) for x in rows]
    assert got == [lane_sum_reference(x) for x in rows]
    # the check can see the order: a left-to-right sum differs from lane order on many rows
    # (planted sequential sum → caught)
    assert sum(g != _seq_sum(x.tolist()) for g, x in zip(got, rows, strict=True)) > len(rows) // 4


@njit(cache=True)
def _lane_max(x: NDArray[np.float64], init: float) -> float:
    return lane_max(x, x.shape[0], init)


def test_lane_max_is_the_maximum() -> None:
    # a maximum is exact in any order: every lane and the last, partial round must be seen
    rng = np.random.default_rng(RNG_SEED + 2)
    for n in range(71):
        x = np.where(rng.random(n) < 0.2, -np.inf, rng.standard_normal(n))
        for k in range(n):  # the maximum at every position in turn (a lane left out shows)
            y = x.copy()
            y[k] = 10.0
            assert _lane_max(y, -np.inf) == 10.0
        assert _lane_max(x, -np.inf) == (x.max() if n else -np.inf)
        assert _lane_max(x, 5.0) == 5.0  # the initial value takes part


def test_lane_order_by_hand() -> None:
    # lane 0 holds 1e16 and −1e16 (they cancel), lanes 1..7 hold a 1.0 each: 7.0 in lane order,
    # while a left-to-right sum loses every 1.0 in 1e16 and ends at 0.0
    x = np.array([1e16, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -1e16])
    assert _lane_sum(x) == lane_sum_reference(x) == 7.0
    assert _seq_sum(x.tolist()) == 0.0
    # the tree: ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)). With s4 = 2^53 (where the
    # spacing is 2), s0 = 1 and then s2 = 1 are each absorbed (ties round to even), while the
    # right half brings s1 + s3 = 2: 2^53 + 2. Left to right, or the lanes in index order
    # ((s0 + s1) + (s2 + s3)) + …, the four ones meet first: 2^53 + 4.
    y = np.array([1.0, 1.0, 1.0, 1.0, 2.0**53, 0.0, 0.0, 0.0])
    assert _lane_sum(y) == 2.0**53 + 2.0 == lane_sum_reference(y)
    assert _seq_sum(y.tolist()) == 2.0**53 + 4.0
    assert _lane_sum(np.empty(0)) == 0.0


def test_accept_prob_is_the_branchy_definition() -> None:
    # edges of the branch-free form: q^v = 0, p = 0, both, q^v = p, q^v a few ulps either side of
    # p (p/q^v rounds to 1 from below), subnormals, 1.0
    tiny = 5e-324
    pts = [0.0, tiny, 2.2250738585072014e-308, 1e-300, 0.3, 0.7, 1.0]
    pairs = [(qv, p) for qv in pts for p in pts]
    for p in (0.3, 0.7, 1e-300, 2.2250738585072014e-308):
        qv = p
        for _ in range(3):
            qv = float(np.nextafter(qv, 2.0))
            pairs += [(qv, p), (p, qv)]
    qv_arr = np.array([a for a, _ in pairs])
    p_arr = np.array([b for _, b in pairs])
    want = [_accept_ref(a, b) for a, b in pairs]
    assert [accept_prob(a, b) for a, b in pairs] == want
    assert accept_probs(qv_arr, p_arr).tolist() == want  # the vectorised loop too


@pytest.mark.parametrize("n", [1, 7, 8, 9, 32, 41, 70])
def test_alpha_row_is_a_lane_sum_of_its_terms(n: int) -> None:
    rng = np.random.default_rng(RNG_SEED + n)
    for _ in range(20):
        qs = rng.dirichlet(np.full(n, 0.4))
        qv = np.where(rng.random(n) < 0.2, 0.0, rng.dirichlet(np.full(n, 0.4)))
        p = np.where(rng.random(n) < 0.2, 0.0, rng.dirichlet(np.full(n, 0.4)))
        terms = [a * _accept_ref(b, c) for a, b, c in zip(qs, qv, p, strict=True)]
        for dr in (-1, 0, n // 2, n - 1, n):
            want_dr = terms[dr] if 0 <= dr < n else 0.0
            assert _alpha_row(qs, qv, p, dr) == (lane_sum_reference(terms), want_dr)


def _ref_quant(row: list[float], quant: Quant) -> list[float]:
    if quant.kind == "dyadic":
        return [m / 2**quant.bits for m in ref_dyadic(row, quant.bits, quant.rounding)]
    return ref_cast(row, quant.kind)


def _fast_alpha(q: list[float], p: list[float], bits: int) -> float:
    """α of the analytic kernel's dyadic-nearest path from the exact rational integers.

    Σ_i min(m'_i·2^−N, p_i) in lane order, where m' are the integers before any units beyond
    the support (or a deficit) go to the argmax; that share is added after the sum, as the
    kernel does (specreplay/replay/estimators/analytic.py).
    """
    m = ref_dyadic(q, bits, "nearest")
    total = 1 << bits
    r = total - sum(int(np.floor(v * total)) for v in q)
    units = min(r, sum(v > 0 for v in q)) if r > 0 else 0
    rest = r - units
    top = max(range(len(q)), key=lambda i: (q[i], -i))
    inv = 1.0 / total
    m_pre = list(m)
    m_pre[top] -= rest
    alpha = lane_sum_reference([min(k * inv, pi) for k, pi in zip(m_pre, p, strict=True)])
    if rest != 0:
        alpha += min(m[top] * inv, p[top]) - min(m_pre[top] * inv, p[top])
    return alpha


def _ref_alpha(q: list[float], p: list[float], sampler: Quant, verifier: Quant) -> float:
    """α of one row as the analytic kernel forms it: its fast path where that settles, else
    the lane sum of q^s·a over the reference quantizers' laws."""
    if sampler == verifier and sampler.kind == "dyadic" and sampler.rounding == "nearest":
        frac, out = np.empty(len(q)), np.empty(len(q))
        if dyadic_nearest_row(np.array(q), sampler.bits, frac, out):  # the fast path settles
            return _fast_alpha(q, p, sampler.bits)
    qs = _ref_quant(q, sampler)
    qv = qs if sampler == verifier else _ref_quant(q, verifier)
    return lane_sum_reference([a * _accept_ref(b, c) for a, b, c in zip(qs, qv, p, strict=True)])


def _target_rows(seed: int) -> NDArray[np.float64]:
    rng = np.random.default_rng(seed)
    p = [rng.dirichlet(np.ones(len(row))) * rng.uniform(0.5, 1.0) for row in GRID_ROWS]
    for row in p:
        row[rng.random(len(row)) < 0.15] = 0.0  # target zeros
    return np.concatenate(p)


P_GRID = _target_rows(RNG_SEED)
ONE_ROW_ROUNDS = np.arange(len(GRID_ROWS) + 1, dtype=np.int64)  # each row a round of one position
DRAFTED = np.zeros(len(GRID_ROWS), np.int32)


def _rows(flat: NDArray[np.float64]) -> list[list[float]]:
    return [flat[GRID_OFFSETS[i] : GRID_OFFSETS[i + 1]].tolist() for i in range(len(GRID_ROWS))]


@pytest.mark.parametrize(
    ("sampler", "verifier"),
    [(q, q) for q in QUANTS] + [(Quant("dyadic", 24), Quant("float32"))],
    ids=lambda q: q.spelling,
)
def test_analytic_alpha_is_the_lane_sum(sampler: Quant, verifier: Quant) -> None:
    # a round of one position: P(A ≥ 1) = α, exactly the row's α
    for pol in QUANT_POLICIES[1:]:  # greedy laws are point masses: nothing to order
        q = policy_law_of(pol, GRID_OFFSETS, GRID_LP).q
        v = analytic_rounds(
            offsets=GRID_OFFSETS, target_probs=P_GRID, q_policy=q, sampler=sampler,
            verifier=verifier, drafted_idx=DRAFTED, round_offsets=ONE_ROW_ROUNDS, max_depth=1,
        )  # fmt: skip
        want = [
            _ref_alpha(qr, pr, sampler, verifier)
            for qr, pr in zip(_rows(q), _rows(P_GRID), strict=True)
        ]
        assert v.surv[:, 0].tolist() == want, f"{pol} {sampler.spelling}/{verifier.spelling}"
        # the fused pass over every arm (issue 18) forms α with the same sums
        fused = all_arms_rounds(
            arms=[Arm(pol, sampler, verifier, 1)], offsets=GRID_OFFSETS, draft_logprobs=GRID_LP,
            target_probs=P_GRID, drafted_idx=DRAFTED, round_offsets=ONE_ROW_ROUNDS, max_depth=1,
        )  # fmt: skip
        assert fused.analytic[0].surv[:, 0].tolist() == want, f"fused {pol} {sampler.spelling}"


@pytest.mark.parametrize("quant", [Quant("float64"), Quant("dyadic", 8), Quant("dyadic", 24)])
def test_importance_moment_and_bound_are_exact(quant: Quant) -> None:
    rng = np.random.default_rng(RNG_SEED + 1)
    logging = policy_law_of(Policy(top_k=8, temperature=0.7), GRID_OFFSETS, GRID_LP).q
    for pol in (Policy(), Policy(temperature=2.0, top_p=0.9)):
        q = policy_law_of(pol, GRID_OFFSETS, GRID_LP).q
        drafted = np.array([rng.integers(0, len(r)) for r in GRID_ROWS], np.int32)
        v = importance_rounds(
            offsets=GRID_OFFSETS, target_probs=P_GRID, q_policy=q, sampler=quant,
            verifier=quant, q_logging=logging, drafted_idx=drafted,
            round_offsets=ONE_ROW_ROUNDS, max_depth=1,
        )  # fmt: skip
        fused = all_arms_rounds(
            arms=[Arm(pol, quant, quant, 1)], offsets=GRID_OFFSETS, draft_logprobs=GRID_LP,
            target_probs=P_GRID, drafted_idx=drafted, round_offsets=ONE_ROW_ROUNDS, max_depth=1,
            q_logging=logging,
        ).importance  # fmt: skip
        # the fused pass over every arm (issue 18): the same sums
        assert fused is not None
        for i, (qr, lr) in enumerate(zip(_rows(q), _rows(logging), strict=True)):
            qs = _ref_quant(qr, quant)
            ratios = [a / b if b > 0.0 else 0.0 for a, b in zip(qs, lr, strict=True)]
            moment = lane_sum_reference([a * r for a, r in zip(qs, ratios, strict=True)])
            where = f"{pol} {quant.spelling} row {i}"
            assert v.moment[i, 0] == moment, where  # m_1 = Σ_x q^s(x)²/q^L(x), lane order
            assert v.bound[i, 0] == max(ratios), where  # b_1: a maximum, in any order
            assert fused[0].moment[i, 0] == moment and fused[0].bound[i, 0] == max(ratios), where

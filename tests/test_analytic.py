"""Fused analytic replay (issue 3): quantization inside the replay equals the slow references.

The reference of every case is independent of the kernel under test: the quantized laws come from
``ref_dyadic`` (exact rational arithmetic) and ``ref_cast`` of tests/test_arms.py, α, the
survival products and the off-path expectations are summed here in plain Python. Tolerances:
the kernel sums a row's ≤ 41 terms in [0, 1] in lane order, the reference with ``math.fsum``
(correctly rounded), so values agree to a few ulps of sums ≤ 6 (rtol 1e-12 leaves a wide margin
over the ~1e-15 of a sum's order); tests/test_lanes.py checks the lane order itself to the bit.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest
from test_arms import GRID_LP, GRID_OFFSETS, GRID_ROWS, QUANT_POLICIES, QUANTS, ref_cast, ref_dyadic

from specreplay.replay.estimators.analytic import analytic_rounds
from specreplay.replay.estimators.montecarlo import replay_rounds
from specreplay.sim.arms import Policy, Quant, parse_arm
from specreplay.sim.policy import policy_law_of, quantize_law

DEPTH = 5


def _ref_quant(row: list[float], quant: Quant) -> list[float]:
    if quant.kind == "dyadic":
        return [m / 2**quant.bits for m in ref_dyadic(row, quant.bits, quant.rounding)]
    return ref_cast(row, quant.kind)


def _accept(qv: float, p: float) -> float:
    return 0.0 if p <= 0.0 else (1.0 if qv <= p else p / qv)


def _ref_rounds(
    q_rows: list[list[float]],
    p_rows: list[list[float]],
    drafted: list[int],
    round_offsets: list[int],
    sampler: Quant,
    verifier: Quant,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """t, survival and off-path expectations per round, in plain Python.

    See docs/methods.md#the-importance-estimator-and-its-weight.
    """
    n_rounds = len(round_offsets) - 1
    t = np.full((n_rounds, DEPTH), np.nan)
    s = np.full((n_rounds, DEPTH), np.nan)
    off = np.zeros((n_rounds, 4))
    for r in range(n_rounds):
        prod, on_path, acc = 1.0, 1.0, 1.0
        for j, row in enumerate(range(round_offsets[r], round_offsets[r + 1])):
            if j == DEPTH:
                break
            qs = _ref_quant(q_rows[row], sampler)
            qv = _ref_quant(q_rows[row], verifier)
            terms = [a * _accept(b, c) for a, b, c in zip(qs, qv, p_rows[row], strict=True)]
            alpha = math.fsum(terms)
            a_dr = terms[drafted[row]] if drafted[row] >= 0 else 0.0
            off[r] += [prod * alpha, prod * (alpha - a_dr), prod, prod - on_path]
            on_path *= a_dr
            prod *= alpha
            acc += prod
            t[r, j], s[r, j] = acc, prod
    return t, s, off


def _grid_batch(seed: int) -> dict[str, np.ndarray]:
    """The policy grid's rows as rounds of 1..5 positions, with target laws and drafted indices."""
    rng = np.random.default_rng(seed)
    p_rows = []
    for row in GRID_ROWS:
        p = rng.dirichlet(np.ones(len(row))) * rng.uniform(0.5, 1.0)
        p[rng.random(len(row)) < 0.15] = 0.0  # target zeros
        p_rows.append(p)
    drafted = np.array([int(rng.integers(-1, len(r))) for r in GRID_ROWS], np.int32)
    bounds = [0]
    while bounds[-1] < len(GRID_ROWS):
        bounds.append(min(len(GRID_ROWS), bounds[-1] + int(rng.integers(1, 7))))
    return {
        "p": np.concatenate(p_rows),
        "drafted": drafted,
        "round_offsets": np.array(bounds, np.int64),
    }


GRID = _grid_batch(11)
MISMATCHED = [
    (Quant("dyadic", 8), Quant("float64")),
    (Quant("dyadic", 24), Quant("float32")),
    (Quant("float64"), Quant("dyadic", 12, "floor-argmax")),
    (Quant("bfloat16"), Quant("float16")),
]


def _check(policy: Policy, sampler: Quant, verifier: Quant) -> None:
    q = policy_law_of(policy, GRID_OFFSETS, GRID_LP).q
    v = analytic_rounds(
        offsets=GRID_OFFSETS, target_probs=GRID["p"], q_policy=q, sampler=sampler,
        verifier=verifier, drafted_idx=GRID["drafted"], round_offsets=GRID["round_offsets"],
        max_depth=DEPTH,
    )  # fmt: skip
    q_rows = [q[GRID_OFFSETS[i] : GRID_OFFSETS[i + 1]].tolist() for i in range(len(GRID_ROWS))]
    p_rows = [GRID["p"][GRID_OFFSETS[i] : GRID_OFFSETS[i + 1]].tolist() for i in range(len(q_rows))]
    t, s, off = _ref_rounds(
        q_rows, p_rows, GRID["drafted"].tolist(), GRID["round_offsets"].tolist(), sampler, verifier
    )
    where = f"{policy} {sampler.spelling}/{verifier.spelling}"
    np.testing.assert_allclose(v.t, t, rtol=1e-12, atol=1e-15, err_msg=where)
    np.testing.assert_allclose(v.surv, s, rtol=1e-12, atol=1e-15, err_msg=where)
    np.testing.assert_allclose(v.offpath, off, rtol=1e-12, atol=1e-15, err_msg=where)
    depth = np.minimum(np.diff(GRID["round_offsets"]), DEPTH)
    np.testing.assert_array_equal(v.depth, depth)
    assert (v.var == 0).all()  # exact: no Monte Carlo variance


@pytest.mark.parametrize("quant", QUANTS, ids=lambda q: q.spelling)
def test_matched_arms_match_reference_on_grid(quant: Quant) -> None:
    for policy in QUANT_POLICIES:
        _check(policy, quant, quant)


@pytest.mark.parametrize(("sampler", "verifier"), MISMATCHED, ids=lambda q: q.spelling)
def test_mismatched_arms_match_reference_on_grid(sampler: Quant, verifier: Quant) -> None:
    for policy in QUANT_POLICIES:
        _check(policy, sampler, verifier)


def test_tied_fractions_at_the_cut_go_to_the_lower_index() -> None:
    """q = (1/3, 1/3, 1/3) at dyadic8: 256/3 = 85.33 each, one unit left, to index 0 (a tie the
    threshold search cannot split, so the reference quantizer decides); p = (0.9, 0, 0) makes α
    the quantized q_0 = 86/256 exactly, against 85/256 had the unit gone elsewhere."""
    q = np.full(3, 1.0 / 3.0)
    v = analytic_rounds(
        offsets=np.array([0, 3], np.int64), target_probs=np.array([0.9, 0.0, 0.0]), q_policy=q,
        sampler=Quant("dyadic", 8), verifier=Quant("dyadic", 8),
        drafted_idx=np.array([0], np.int32), round_offsets=np.array([0, 1], np.int64),
        max_depth=1,
    )  # fmt: skip
    assert v.surv[0, 0] == 86 / 256
    assert v.offpath[0, 1] == 0.0  # the drafted candidate holds all of α


def _random_rounds(seed: int, n_rounds: int, k: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    depth = rng.integers(1, DEPTH + 2, n_rounds)  # some rounds longer than the replayed depth
    n_rows = int(depth.sum())
    logits = 2.0 * rng.standard_normal((n_rows, k))
    q = np.exp(logits / 0.7)
    q /= q.sum(1, keepdims=True)
    p = np.exp(logits + 0.8 * rng.standard_normal((n_rows, k)))
    p *= 0.95 / p.sum(1, keepdims=True)
    ro = np.zeros(n_rounds + 1, np.int64)
    np.cumsum(depth, out=ro[1:])
    return {
        "offsets": np.arange(n_rows + 1, dtype=np.int64) * k,
        "q": q.ravel(),
        "p": p.ravel(),
        "drafted": rng.integers(-1, k, n_rows).astype(np.int32),
        "round_offsets": ro,
        "round_key": rng.integers(0, 2**63, n_rounds).astype(np.uint64),
        "round_index": np.arange(n_rounds, dtype=np.int64),
    }


@pytest.mark.parametrize("arm", ["top32:t0.7:dyadic24@5", "top32:t0.7:dyadic12@5"])
def test_fast_path_matches_two_stage_replay_on_many_rows(arm: str) -> None:
    """20,000 rows of 32 candidates: the threshold search against quantize + replay_rounds (whose
    integers test_arms checks against exact rational arithmetic)."""
    b = _random_rounds(5, 5000, 32)
    a = parse_arm(arm)
    law = quantize_law(a.sampler, b["offsets"], b["q"])
    ref = replay_rounds(
        offsets=b["offsets"], target_probs=b["p"], q_sampler=law.q, m_sampler=law.m,
        bits=law.bits, q_verifier=law.q, drafted_idx=b["drafted"],
        round_offsets=b["round_offsets"], round_key=b["round_key"],
        round_index=b["round_index"], seed=0, replicates=0, max_depth=DEPTH,
    )  # fmt: skip
    v = analytic_rounds(
        offsets=b["offsets"], target_probs=b["p"], q_policy=b["q"], sampler=a.sampler,
        verifier=a.verifier, drafted_idx=b["drafted"], round_offsets=b["round_offsets"],
        max_depth=DEPTH,
    )  # fmt: skip
    np.testing.assert_allclose(v.t, ref.t, rtol=1e-12, atol=0)
    np.testing.assert_allclose(v.offpath, ref.offpath, rtol=1e-12, atol=1e-15)


def test_same_values_with_one_and_two_threads_and_any_batch_cut() -> None:
    b = _random_rounds(6, 3000, 32)
    a = parse_arm("top32:t0.7:dyadic24@5")

    def run(lo: int, hi: int) -> np.ndarray:
        ro = b["round_offsets"][lo : hi + 1]
        rows = slice(int(ro[0]), int(ro[-1]))
        off = b["offsets"][rows.start : rows.stop + 1]
        v = analytic_rounds(
            offsets=off - off[0], target_probs=b["p"][off[0] : off[-1]],
            q_policy=b["q"][off[0] : off[-1]], sampler=a.sampler, verifier=a.verifier,
            drafted_idx=b["drafted"][rows], round_offsets=ro - ro[0], max_depth=DEPTH,
        )  # fmt: skip
        return np.hstack([v.t, v.surv, v.offpath])

    numba.set_num_threads(1)
    try:
        one = run(0, 3000)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    two = run(0, 3000)
    cut = np.vstack([run(0, 1234), run(1234, 3000)])
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one, cut)


@pytest.mark.parametrize("bits", [3, 8, 12])
def test_dyadic_nearest_row_is_the_exact_rational_quantizer(bits: int) -> None:
    """The importance estimator's whole quantized row (dyadic_nearest_row, sharing the kernel's cut)
    equals the dyadic-nearest of docs/methods.md#arms-policy-and-quantizers in exact rational
    arithmetic (test_arms.ref_dyadic), on 300 seeded rows of 1–40 candidates with zeros; rows it
    declines (tied fractional parts) are few and the reference quantizer takes them."""
    from specreplay.replay.estimators.analytic import dyadic_nearest_row

    rng = np.random.default_rng(bits)
    done = 0
    for _ in range(300):
        n = int(rng.integers(1, 41))
        q = rng.dirichlet(np.full(n, 0.3))
        q[rng.random(n) < 0.2] = 0.0
        if q.sum() == 0.0:
            q[0] = 1.0
        q /= q.sum()
        frac, out = np.empty(n), np.empty(n)
        if dyadic_nearest_row(q, bits, frac, out):
            done += 1
            assert (out * (1 << bits)).tolist() == ref_dyadic(q.tolist(), bits, "nearest")
    assert done >= 290

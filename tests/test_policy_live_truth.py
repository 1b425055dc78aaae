"""Live ground truth for drafting policies (issue 14): the live runner, then importance against it.

The live runner (:mod:`specreplay_testing.livepolicy`) is checked first on its own: hand-made
paths with exact dyadic ties (the rules' boundaries, no toy pair), exact equality with the
fixed-depth live kernel (:func:`specreplay.sim.live.live_accepts`) when the rule never stops, and
exact equality with rounds drafted one at a time by :func:`specreplay.sim.toy.live_round`, the
stop decided after each drafted token by a loop written here.

Then the replay: 32,000 archived round starts (2,000 i.i.d. requests × 16 rounds, the SE
clustered by request) of the default toy archive (depth 5), 4 live rounds per start, common to
every policy of an arm. Two arms: ``top32:t0.7:dyadic8`` (its q^s sit on a 1/256 grid, so a τ on
the grid meets exact ties) and ``top32`` (t1: a flatter law than the logging arm's, every round
reweighted), each by stop-below and stop-cum over a grid of ≥ 6 τ and by a two-depth table. For
the importance estimator, R = 1 + Σ_k P(A ≥ k) and E[L] are within 3.5 SE of live for every
policy, and P(A ≥ k), P(L ≥ k) within 4.2 SE at every k. Few live rounds per start cost little:
one archived round per start dominates d_s = est − truth (its variance is var(L | start)·(1 +
1/n_live) for E[L] on the dyadic arm), so 4 rounds give within 6% of the SE of 16 at a quarter
of the live cost. Largest |z| of R or E[L] over the 28 policies (measured, seeds 0–4): 2.32,
2.05, 1.62, 1.88, 1.61; of P(A ≥ k) or P(L ≥ k): 2.71, 2.65, 2.51, 3.24, 2.08.

A planted ``>`` for ``≥`` in the replay's stop (tried on the replay kernel, not committed) fails
the R/E[L] test at 5 policies of the dyadic arm (E[L] z = −3.96, −20.7, −35.6 at τ = 0.875,
0.9375, 0.96875 of stop-below; −6.5, −24.3 at 0.9375, 0.96875 of stop-cum), as
:func:`test_the_agreement_test_would_catch_planted_stop_rule_bugs` predicts from the live side.

Runtime on the 2-core machine with a warm Numba cache (measured): 31 s for the module, 26 s of
it the table's fixture (sampling the starts 4 s, the live paths 2 × 2 s, 56 replay calls).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from specreplay.sim.arms import Arm, parse_arm
from specreplay.sim.drafting import DepthByBucket, StopRule, parse_policy
from specreplay.sim.live import arm_round_laws, live_accepts
from specreplay.sim.synth import SynthConfig
from specreplay.sim.toy import LiveRound, live_round
from specreplay_testing.livepolicy import (
    LivePaths,
    PolicyRounds,
    PolicyTruth,
    PolicyTruthTable,
    draft_by,
    live_paths,
    policy_truth,
    survival_by_start,
)
from specreplay_testing.livetruth import Paired, SampledStarts, sample_starts

# ------------------------------------------------------------------------------------------------
# the live runner on its own
# ------------------------------------------------------------------------------------------------


def _paths(q: list[list[float]], accepted: list[list[bool]], context: int = 0) -> LivePaths:
    """One start, one replicate per row of ``q`` (exact dyadic values: ties are exact)."""
    qq = np.array(q, dtype=np.float64)[None, :, :]
    return LivePaths(
        q_sampler=qq,
        accept_prob=np.ones_like(qq),
        accepted=np.array(accepted, dtype=np.bool_)[None, :, :],
        context=np.array([context], dtype=np.int64),
    )


def test_stop_below_continues_at_equality_and_stops_below() -> None:
    # q^s of the drafted tokens 1/2, 1/4, 1/4, 1, 1: at τ = 1/4 no token is below τ (equality
    # continues), just above 1/4 the second token triggers the stop and is itself drafted (L = 2).
    p = _paths([[0.5, 0.25, 0.25, 1.0, 1.0]], [[True] * 5])
    assert int(draft_by(StopRule(0.25, 5), p).drafted[0, 0]) == 5
    assert int(draft_by(StopRule(0.25 + 2**-20, 5), p).drafted[0, 0]) == 2
    assert int(draft_by(StopRule(0.5 + 2**-20, 5), p).drafted[0, 0]) == 1
    assert int(draft_by(StopRule(0.0, 5), p).drafted[0, 0]) == 5  # τ = 0 never stops
    assert int(draft_by(StopRule(1.0, 3), p).drafted[0, 0]) == 1  # D = 3 caps only


def test_stop_cum_continues_while_the_product_is_at_least_tau() -> None:
    # running products 1/2, 1/8, 1/32, 1/32, 1/64: at τ = 1/8 the product 1/8 continues
    # (≥ τ) and 1/32 stops (L = 3); at τ = 1/32 every product down to the fifth continues.
    p = _paths([[0.5, 0.25, 0.25, 1.0, 0.5]], [[True] * 5])
    assert int(draft_by(StopRule(1 / 8, 5, cumulative=True), p).drafted[0, 0]) == 3
    assert int(draft_by(StopRule(1 / 32, 5, cumulative=True), p).drafted[0, 0]) == 5
    assert int(draft_by(StopRule(1 / 32, 4, cumulative=True), p).drafted[0, 0]) == 4
    assert int(draft_by(StopRule(1 / 2, 5, cumulative=True), p).drafted[0, 0]) == 2
    # stop-below at 1/8 never stops here (no single token is below 1/8): the two rules differ
    assert int(draft_by(StopRule(1 / 8, 5), p).drafted[0, 0]) == 5


def test_accepted_counts_leading_accepts_within_the_drafted_positions() -> None:
    # replicate 0 rejects at position 4, replicate 1 at 2; stop-below:0.3 stops after position 2
    # (q = 1/4) in both, so A = min(L, leading accepts) = 2 and 1; the acceptance probability
    # plays no part in the stop (the drafter decides before the verifier).
    q = [[1.0, 0.25, 1.0, 1.0, 1.0], [1.0, 0.25, 1.0, 1.0, 1.0]]
    acc = [[True, True, True, False, True], [True, False, True, True, True]]
    p = _paths(q, acc)
    p = LivePaths(p.q_sampler, np.full_like(p.q_sampler, 1e-3), p.accepted, p.context)
    r = draft_by(StopRule(0.3, 5), p)
    assert r.drafted.tolist() == [[2, 2]]
    assert r.accepted.tolist() == [[2, 1]]
    assert r.drafted.dtype == np.int64 and r.accepted.dtype == np.int64
    np.testing.assert_array_equal(survival_by_start(r.accepted, 3), [[1.0, 0.5, 0.0]])


def test_depth_by_bucket_reads_the_starts_context() -> None:
    table = parse_policy("depth-by-bucket:<4K=2/>=4K=4")
    q = [[0.01] * 5]
    acc = [[True] * 5]
    assert draft_by(table, _paths(q, acc, context=4095)).drafted.tolist() == [[2]]
    assert draft_by(table, _paths(q, acc, context=4096)).accepted.tolist() == [[4]]


def test_draft_by_errors() -> None:
    p = _paths([[1.0] * 3], [[True] * 3])
    with pytest.raises(ValueError, match=r"drafts up to 5 > 3 positions"):
        draft_by(StopRule(0.5, 5), p)
    cfg = SynthConfig(n_requests=4, rounds=2, depth=3)
    s = sample_starts(cfg, 0, n_starts=2)
    with pytest.raises(ValueError, match="n_live and depth must be >= 1"):
        live_paths(cfg.pair, s.live, parse_arm("greedy@3"), n_live=0, depth=3)
    with pytest.raises(ValueError, match="n_candidates must be in"):
        live_paths(cfg.pair, s.live, parse_arm("greedy@3"), n_live=1, depth=3, n_candidates=0)
    with pytest.raises(
        ValueError, match=r"greedy@1: policies draft up to 5 positions, the archive"
    ):
        policy_truth(cfg, 0, {"greedy@1": ["stop-below:0.5@5"]}, n_starts=2, n_live=1)
    with pytest.raises(ValueError, match="up to 0 positions"):
        policy_truth(cfg, 0, {"greedy@1": []}, n_starts=2, n_live=1)


SMALL = SynthConfig(n_requests=8, rounds=4)
SMALL_ARMS = ["top32:t0.7:dyadic8@5", "top32:t0.7:dyadic8/float64@5", "top32:t1@5"]


@pytest.fixture(scope="module")
def small_starts() -> SampledStarts:
    return sample_starts(SMALL, 3, n_starts=8, rounds_per_request=2)


def test_a_rule_that_never_stops_is_the_fixed_depth_live_round(
    small_starts: SampledStarts,
) -> None:
    # Exact: τ = 0 and a one-range table draft D positions, and A is then the fixed-depth live
    # kernel's A with the same keys (a path verifies every position; A cuts at the first reject).
    for name in SMALL_ARMS:
        arm = parse_arm(name)
        paths = live_paths(SMALL.pair, small_starts.live, arm, n_live=6, depth=5)
        expect = live_accepts(SMALL.pair, small_starts.live, arm, n_live=6).astype(np.int64)
        never = (StopRule(0.0, 5), StopRule(0.0, 5, True), parse_policy("depth-by-bucket:>=0=5"))
        for rule in never:
            r = draft_by(rule, paths)
            np.testing.assert_array_equal(r.accepted, expect, err_msg=f"{name} {rule}")
            assert np.all(r.drafted == 5)


def _drafted_q(r: LiveRound) -> float:
    """q^s of the last drafted token of a live round (its index among the candidates)."""
    j = len(r.drafted) - 1
    (x,) = np.flatnonzero(r.cand_ids[j] == r.drafted[j])
    return float(r.q[j][x])


def _reference_round(
    rule: StopRule, start_s: int, m: int, sampled: SampledStarts, arm: str
) -> tuple[int, int]:
    """(L, A) of one round drafted one token at a time, the stop decided after each token.

    Position j is drafted by ``live_round(depth=j)`` (the same keys draft the same prefix); the
    loop stops after a token with q^s < τ (stop-below) or once the running product < τ
    (stop-cum); the round is then verified at depth L by ``live_round(depth=L)``.
    """
    law, verifier = arm_round_laws(parse_arm(arm))

    def run(depth: int) -> LiveRound:
        return live_round(
            SMALL.pair, sampled.starts[start_s], law, depth=depth,
            seed=int(sampled.live.seed[start_s]), request_key=sampled.live.request_key[start_s],
            round_index=m, verifier_law=verifier,
        )  # fmt: skip

    running = 1.0
    length = rule.depth
    for j in range(1, rule.depth + 1):
        r = run(j)
        qx = _drafted_q(r)
        running = running * qx if rule.cumulative else qx
        if running < rule.tau:
            length = j
            break
    return length, run(length).n_accepted


@pytest.mark.parametrize("arm", SMALL_ARMS[:2])
def test_policy_rounds_equal_rounds_drafted_one_token_at_a_time(
    small_starts: SampledStarts, arm: str
) -> None:
    # Exact, on every start × 3 replicates × 4 rules (τ chosen so that rounds of every length
    # occur: the q^s of drafted tokens cluster near 1 on the toy pair).
    n_live = 3
    paths = live_paths(SMALL.pair, small_starts.live, parse_arm(arm), n_live=n_live, depth=5)
    rules = [StopRule(0.95, 5), StopRule(0.99, 4), StopRule(0.9, 5, True), StopRule(0.5, 5, True)]
    lengths = set()
    for rule in rules:
        got = draft_by(rule, paths)
        for s in range(len(small_starts.starts)):
            for m in range(n_live):
                length, a = _reference_round(rule, s, m, small_starts, arm)
                pair = (int(got.drafted[s, m]), int(got.accepted[s, m]))
                assert pair == (length, a), (rule, s, m)
                lengths.add(length)
    assert len(lengths) >= 3, lengths


def test_paths_do_not_depend_on_which_starts_run_together(small_starts: SampledStarts) -> None:
    # Counter-based draws: a start's paths are a function of its keys alone.
    arm = parse_arm(SMALL_ARMS[0])
    full = live_paths(SMALL.pair, small_starts.live, arm, n_live=4, depth=5)
    live = small_starts.live
    sub = type(live)(
        live.family[3:5], live.context[3:5], live.history[3:5], live.seed[3:5],
        live.request_key[3:5],
    )  # fmt: skip
    part = live_paths(SMALL.pair, sub, arm, n_live=4, depth=5)
    np.testing.assert_array_equal(part.q_sampler, full.q_sampler[3:5])
    np.testing.assert_array_equal(part.accepted, full.accepted[3:5])
    np.testing.assert_array_equal(part.accept_prob, full.accept_prob[3:5])


# ------------------------------------------------------------------------------------------------
# the replay's importance estimator against the live truth
# ------------------------------------------------------------------------------------------------

CFG = SynthConfig(depth=5)  # the archive records 5 positions per round: every policy's D ≤ 5
SEED = 0  # the synthetic archive's seed; every other key is derived from it
N_STARTS, ROUNDS_PER_REQUEST, N_LIVE = 32_000, 16, 4
DYADIC, FLOAT = "top32:t0.7:dyadic8@5", "top32@5"  # canonical forms (t1 is the default)
TABLE = "depth-by-bucket:<4K=2/>=4K=5"
# The dyadic arm's q^s are multiples of 1/256 and cluster near 1 (a drafted token's q^s is
# 255/256 for 13% of positions, 248/256 for 3%): a grid reaching 0.96875 = 248/256 puts τ on
# exact ties, where "continue while q ≥ τ" and "while q > τ" differ. The float arm (a flatter
# law than the logging arm's t0.7) reweights every round, so its stop decisions read q^s, not
# the logging law; its grid is where its rounds stop.
GRID_DYADIC = (0.05, 0.25, 0.5, 0.75, 0.875, 0.9375, 0.96875)
GRID_FLOAT = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5)


def _policies(grid: tuple[float, ...]) -> list[str]:
    return [f"{k}:{t!r}@5" for k in ("stop-below", "stop-cum") for t in grid] + [TABLE]


CASES: dict[str | Arm, list[str]] = {DYADIC: _policies(GRID_DYADIC), FLOAT: _policies(GRID_FLOAT)}
N_POLICIES = sum(len(v) for v in CASES.values())  # 15 + 13 = 28
# R_D and E[L] of 28 policies = 56 two-sided tests at 3.5 SE (the bar): P(|Z| > 3.5) =
# 4.65e-4 each, family-wise ≤ 56 · 4.65e-4 = 2.6% (Bonferroni; the tests are strongly positively
# correlated: every τ of an arm reads the same archived rounds and live paths, neighbouring τ
# differ in few rounds, so the real rate is well below that bound).
K_R = 3.5
# P(A ≥ k) and P(L ≥ k), k = 1..5: 280 tests at 4.2 SE, P(|Z| > 4.2) = 2.7e-5 each, family-wise
# ≤ 280 · 2.7e-5 = 0.75%. P(L ≥ 1) = 1 and a table's P(L ≥ k) are exact on both sides (SE 0).
K_K = 4.2
EXACT = 1e-12  # the slack for a difference of 0 with an SE of 0 (sums of equal floats)


@pytest.fixture(scope="module")
def table() -> PolicyTruthTable:
    return policy_truth(
        CFG, SEED, CASES, n_starts=N_STARTS, n_live=N_LIVE, rounds_per_request=ROUNDS_PER_REQUEST
    )


def _within(p: Paired, k: float, at: slice = slice(None)) -> bool:
    return bool(np.all(np.abs(p.bias[at]) <= k * p.bias_se[at] + EXACT))


def _z(p: Paired) -> list[float]:
    """bias / SE per depth, for failure messages (an exact 0 over an SE of 0 is nan)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return [round(float(z), 2) for z in p.bias / p.bias_se]


def test_importance_matches_live_r_and_mean_length_for_every_policy(
    table: PolicyTruthTable,
) -> None:
    bad = []
    for arm in table.arms:
        assert len(arm.policies) == len(CASES[arm.arm])
        for p in arm.policies:
            r, el = p.retained["importance"], p.mean_length["importance"]
            if not (_within(r, K_R, slice(-1, None)) and _within(el, K_R, slice(-1, None))):
                bad.append((arm.arm, p.policy, _z(r)[-1], _z(el)[-1]))
    assert not bad, bad


def test_importance_matches_live_survival_and_length_at_every_position(
    table: PolicyTruthTable,
) -> None:
    bad = []
    for arm in table.arms:
        for p in arm.policies:
            s, n = p.survival["importance"], p.length["importance"]
            if not (_within(s, K_K) and _within(n, K_K)):
                bad.append((arm.arm, p.policy, _z(s), _z(n)))
    assert not bad, bad


def test_the_grids_and_the_table_exercise_the_policies(table: PolicyTruthTable) -> None:
    # ≥ 6 τ per rule and arm; along each grid every path's L is non-increasing (common random
    # numbers: a larger τ stops each path no later) and E[L] falls; the table's two depths both
    # occur among the sampled starts.
    for arm in table.arms:
        grid = GRID_DYADIC if arm.arm == DYADIC else GRID_FLOAT
        assert len(grid) >= 6
        for kind in ("stop-below", "stop-cum"):
            rules = [parse_policy(f"{kind}:{t!r}@5") for t in grid]
            lengths = [draft_by(r, arm.paths).drafted for r in rules]
            assert all(np.all(a >= b) for a, b in itertools.pairwise(lengths))
            means = [arm.policy(r).length_truth_by_start.sum(axis=1).mean() for r in rules]
            assert means[0] - means[-1] > 0.15, (arm.arm, kind, means)  # SE of each ≈ 0.005
        bucket = parse_policy(TABLE)
        assert isinstance(bucket, DepthByBucket)
        assert {bucket.depth_at(int(c)) for c in arm.paths.context} == {2, 5}


def _planted(rule: StopRule, paths: LivePaths, bug: str) -> PolicyRounds:
    """The rounds of ``rule`` as a replay with a planted bug would see them.

    ``"strict"``: continue only while q^s > τ (``>`` for ``≥``); ``"acceptance"``: the stop reads
    q^s·min(1, p/q^v), the weight's factor, instead of q^s.
    """
    q = paths.q_sampler[:, :, : rule.depth]
    if bug == "acceptance":
        q = q * paths.accept_prob[:, :, : rule.depth]
    running = np.cumprod(q, axis=-1) if rule.cumulative else q
    stop = running <= rule.tau if bug == "strict" else running < rule.tau
    length = np.where(stop.any(axis=-1), np.argmax(stop, axis=-1) + 1, rule.depth)
    leading = np.cumprod(paths.accepted, axis=-1).sum(axis=-1)
    return PolicyRounds(drafted=length, accepted=np.minimum(leading, length))


def _shift(p: PolicyTruth, bugged: PolicyRounds) -> tuple[float, float]:
    """(R_D, E[L]) of the bugged policy minus the policy's live truth, in the importance SE."""
    d = p.truth_by_start.shape[1]
    r = survival_by_start(bugged.accepted, d).sum(axis=1).mean()
    r -= p.truth_by_start.sum(axis=1).mean()
    el = survival_by_start(bugged.drafted, d).sum(axis=1).mean()
    el -= p.length_truth_by_start.sum(axis=1).mean()
    return (
        float(r / p.retained["importance"].bias_se[-1]),
        float(el / p.mean_length["importance"].bias_se[-1]),
    )


# A replay with a planted bug estimates the bugged policy without bias, so its z against the
# live truth is about shift + N(0, 1): with |shift| ≥ 2 · 3.5 the 3.5-SE test fails with
# probability ≥ 1 − P(Z > 3.5) = 0.9998. Measured (seed 0): ">" for "≥" moves the dyadic arm's
# E[L] by −28 and −74 SE at τ = 0.9375 and 0.96875 (stop-below), −9 and −37 (stop-cum); it cannot
# show on the float arm (a float q^s equals τ with probability 0). The acceptance factor moves
# E[L] by −229 to −635 SE at every τ of both arms (at least 223 SE over seeds 0–4).
POWER = 2 * K_R


def test_the_agreement_test_would_catch_planted_stop_rule_bugs(table: PolicyTruthTable) -> None:
    for arm in table.arms:
        strict: dict[bool, list[float]] = {False: [], True: []}
        for p in arm.policies:
            rule = parse_policy(p.policy)
            if not isinstance(rule, StopRule):
                continue
            strict[rule.cumulative].append(abs(_shift(p, _planted(rule, arm.paths, "strict"))[1]))
            _, el = _shift(p, _planted(rule, arm.paths, "acceptance"))
            assert abs(el) >= POWER, (arm.arm, p.policy, el)
        if arm.arm == DYADIC:  # ties only exist on a dyadic law
            assert min(max(v) for v in strict.values()) >= POWER, strict

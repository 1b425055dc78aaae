"""Live ground truth for drafting policies (issue 14): the live runner, then importance against it.

The live runner (:mod:`specreplay_testing.livepolicy`) is checked first on its own: hand-made
paths with exact dyadic ties (the rules' boundaries, no toy pair), exact equality with the
fixed-depth live kernel (:func:`specreplay.sim.live.live_accepts`) when the rule never stops, and
exact equality with rounds drafted one at a time by :func:`specreplay.sim.toy.live_round`, the
stop decided after each drafted token by a loop written here.
"""

from __future__ import annotations

import numpy as np
import pytest

from specreplay.sim.arms import parse_arm
from specreplay.sim.drafting import StopRule, parse_policy
from specreplay.sim.live import arm_round_laws, live_accepts
from specreplay.sim.synth import SynthConfig
from specreplay.sim.toy import LiveRound, live_round
from specreplay_testing.livepolicy import (
    LivePaths,
    draft_by,
    live_paths,
    policy_truth,
    survival_by_start,
)
from specreplay_testing.livetruth import SampledStarts, sample_starts

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

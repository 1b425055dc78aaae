"""Drafting policies replayed (docs/methods.md#policies-adaptive-drafting): per-round values.

Independent values: closed forms on constant-law archives (issue 14's q = (0.9, 0.1),
p = (0.7, 0.3), and a dyadic one whose τ sits exactly on a candidate's probability, so ``>`` for
``≥`` fails), exact equality with the fixed depth for rules that never or always trigger, a
hand-enumerated 3-position ``stop-cum`` example, and a pure-Python enumeration over every draft
sequence (analytic) and over the archived tokens (importance) on the built-in world's rounds.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from archive_factory import write_parquet

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.batch import RoundBatch, concat_batches
from specreplay.replay.archive.reader import ArchiveReader
from specreplay.replay.archive.synthetic import synth_frames
from specreplay.replay.estimators import get_estimator
from specreplay.replay.estimators.base import RoundValues
from specreplay.replay.estimators.policies import remember_fixed
from specreplay.sim.arms import Arm, parse_arm
from specreplay.sim.drafting import parse_policy
from specreplay.sim.policy import LawCache, arm_laws
from specreplay.sim.synth import SynthConfig

LOGGING = "top32:t0.7@5"


def _constant_archive(
    path: Path, q: list[float], p: list[float], depth: int, *, rounds: int = 2, ctx: int = 100
) -> Path:
    """Rounds of ``depth`` positions with the same draft law q and target law p everywhere."""
    rows = []
    for rnd in range(rounds):
        for pos in range(1, depth + 1):
            rows.append(
                {
                    "request_id": "r0",
                    "family": "chat",
                    "context_tokens": ctx + 10 * rnd,
                    "round": rnd,
                    "position": pos,
                    "cand_ids": list(range(len(q))),
                    "draft_logprobs": [math.log(x) for x in q],
                    "target_probs": p,
                    "drafted_id": 0,
                    "accepted": False,
                    "logging_arm": f"t1@{depth}",
                    "emitted_q": q,
                }
            )
    return write_parquet(path, rows)


def _batch(path: Path) -> RoundBatch:
    return concat_batches(list(ArchiveReader(path)))


def _run(
    batch: RoundBatch, arm: Arm, estimator: str = "analytic", width: int | None = None
) -> RoundValues:
    cache = LawCache(batch.offsets, batch.draft_logprobs)
    return get_estimator(estimator).rounds(
        batch,
        arm,
        cache,
        seed=0,
        replicates=0,
        max_depth=width or arm.depth,
        logging=parse_arm(LOGGING) if estimator == "importance" else None,
    )


def _policy(arm: str, policy: str, length: bool = False) -> Arm:
    return parse_arm(arm).with_rule(parse_policy(policy), length=length)


@pytest.mark.parametrize("tau", [0.1000001, 0.3, 0.5, 0.9])
def test_issue_closed_form_stop_below(tmp_path: Path, tau: float) -> None:
    """q = (0.9, 0.1), p = (0.7, 0.3), 0.1 < τ ≤ 0.9.

    P(A ≥ k) = 0.8·0.7^(k−1) and P(L ≥ k) = 0.9^(k−1).
    """
    b = _batch(_constant_archive(tmp_path / "c.parquet", [0.9, 0.1], [0.7, 0.3], 5))
    ret = _run(b, _policy("t1@5", f"stop-below:{tau}@5"))
    length = _run(b, _policy("t1@5", f"stop-below:{tau}@5", length=True))
    k = np.arange(1, 6)
    np.testing.assert_allclose(ret.surv, np.tile(0.8 * 0.7 ** (k - 1), (2, 1)), rtol=1e-12)
    np.testing.assert_allclose(ret.t[:, -1], 1 + (0.8 * 0.7 ** (k - 1)).sum(), rtol=1e-12)
    np.testing.assert_allclose(length.surv, np.tile(0.9 ** (k - 1), (2, 1)), rtol=1e-12)
    np.testing.assert_allclose(length.t[:, -1], (0.9 ** (k - 1)).sum(), rtol=1e-12)
    assert (ret.depth == 5).all() and (length.depth == 5).all()


def test_threshold_on_a_candidate_continues(tmp_path: Path) -> None:
    """Dyadic q = (3/4, 1/4), p = (1/2, 1/2), τ = 3/4 exactly: 3/4 ≥ τ continues (not ``>``).

    c = min(3/4, 1/2) = 1/2 (no acceptance factor in the stop decision), m = 3/4:
    P(A ≥ k) = (3/4)·(1/2)^(k−1) and P(L ≥ k) = (3/4)^(k−1), exactly.
    """
    b = _batch(_constant_archive(tmp_path / "d.parquet", [0.75, 0.25], [0.5, 0.5], 4))
    ret = _run(b, _policy("t1:dyadic8@4", "stop-below:0.75@4"))
    length = _run(b, _policy("t1:dyadic8@4", "stop-below:0.75@4", length=True))
    k = np.arange(1, 5)
    assert ret.surv[0].tolist() == (0.75 * 0.5 ** (k - 1)).tolist()
    assert length.surv[0].tolist() == (0.75 ** (k - 1)).tolist()
    # the cumulative product too: π = (3/4)^j ≥ 3/4 only for j = 1
    cum = _run(b, _policy("t1:dyadic8@4", "stop-cum:0.75@4"))
    cum_len = _run(b, _policy("t1:dyadic8@4", "stop-cum:0.75@4", length=True))
    assert cum.surv[0].tolist() == [0.75, 0.5 * 0.75, 0.0, 0.0]
    assert cum_len.surv[0].tolist() == [1.0, 0.75, 0.0, 0.0]


def test_hand_enumerated_stop_cum(tmp_path: Path) -> None:
    """3 positions, q = (1/2, 1/4, 1/4), p = (1/4, 1/2, 1/4), ``stop-cum:0.125@3``, by hand.

    a(x) = min(q, p) = (1/4, 1/4, 1/4), α = 3/4. Position 1 always drafted: P(A ≥ 1) = 3/4.
    Continue after x₁ iff q(x₁) ≥ 1/8: all three, so P(L ≥ 2) = 1 and P(A ≥ 2) = 3/4·3/4.
    After x₁x₂ the product is 1/4, 1/8 (x₁ = 0 and x₂ ≠ 0, or x₁ ≠ 0 and x₂ = 0), or 1/16
    (both ≠ 0): the pairs with π ≥ 1/8 are (0,0), (0,1), (0,2), (1,0), (2,0), of draft mass
    1/4 + 1/8 + 1/8 + 1/8 + 1/8 = 3/4 = P(L ≥ 3), and accept-mass 5·(1/4)² = 5/16, so
    P(A ≥ 3) = 5/16·3/4 = 15/64.
    """
    b = _batch(_constant_archive(tmp_path / "h.parquet", [0.5, 0.25, 0.25], [0.25, 0.5, 0.25], 3))
    ret = _run(b, _policy("t1:dyadic8@3", "stop-cum:0.125@3"))
    length = _run(b, _policy("t1:dyadic8@3", "stop-cum:0.125@3", length=True))
    assert ret.surv[0].tolist() == [0.75, 0.5625, 15 / 64]
    assert length.surv[0].tolist() == [1.0, 1.0, 0.75]
    assert ret.t[0, -1] == 1 + 0.75 + 0.5625 + 15 / 64
    assert length.t[0, -1] == 2.75


@pytest.fixture(scope="module")
def synth_batch(tmp_path_factory: pytest.TempPathFactory) -> RoundBatch:
    """12 requests × 4 rounds × 5 positions of the toy pair, logged by top32:t0.7@5."""
    out = tmp_path_factory.mktemp("pol") / "synth.parquet"
    pl.concat(list(synth_frames(SynthConfig(n_requests=12, rounds=4), seed=5))).write_parquet(out)
    return _batch(out)


@pytest.mark.parametrize("estimator", ["analytic", "importance"])
@pytest.mark.parametrize("arm", ["top32:t0.7@5", "top32:t0.7:float32@5"])
def test_never_and_always_triggering_equal_fixed_depths(
    synth_batch: RoundBatch, estimator: str, arm: str
) -> None:
    """τ = 0 never stops: depth D to the bit; τ = 1 always stops at once: depth 1 (L = 1)."""
    fixed = _run(synth_batch, parse_arm(arm), estimator)
    one = _run(synth_batch, parse_arm(arm).at_depth(1), estimator, width=5)
    for rule in ("stop-below", "stop-cum"):
        never = _run(synth_batch, _policy(arm, f"{rule}:0@5"), estimator)
        assert never.t.tobytes() == fixed.t.tobytes()
        assert never.surv.tobytes() == fixed.surv.tobytes()
        never_len = _run(synth_batch, _policy(arm, f"{rule}:0@5", length=True), estimator)
        if estimator == "analytic":
            assert (never_len.surv == 1.0).all()
        always = _run(synth_batch, _policy(arm, f"{rule}:1@5"), estimator)
        assert always.t[:, -1].tobytes() == one.t[:, 0].tobytes()
        always_len = _run(synth_batch, _policy(arm, f"{rule}:1@5", length=True), estimator)
        assert (always_len.t[:, -1] == 1.0).all()


@pytest.mark.parametrize("estimator", ["analytic", "importance"])
def test_one_depth_everywhere_equals_the_fixed_depth(
    synth_batch: RoundBatch, estimator: str
) -> None:
    for d in (2, 4):
        table = _run(
            synth_batch, _policy("top32:t0.7@5", f"depth-by-bucket:>=0={d}"), estimator, width=5
        )
        fixed = _run(synth_batch, parse_arm(f"top32:t0.7@{d}"), estimator, width=5)
        assert table.t[:, d - 1].tobytes() == fixed.t[:, d - 1].tobytes()
        assert np.isnan(table.t[:, d:]).all()  # the policy's own D is d
        length = _run(
            synth_batch,
            _policy("top32:t0.7@5", f"depth-by-bucket:>=0={d}", length=True),
            estimator,
            width=5,
        )
        assert (length.t[:, d - 1] == d).all()


def _by_prefix(
    qs: list[np.ndarray], qv: list[np.ndarray], p: list[np.ndarray], tau: float, cum: bool
) -> tuple[list[float], list[float]]:
    """P(A ≥ k) and P(L ≥ k) by recursion over prefixes (each prefix once)."""
    d = len(qs)
    pa, pl_ = [0.0] * d, [0.0] * d

    def walk(j: int, draft: float, accept: float, pi: float) -> None:
        pl_[j] += draft
        for x in range(len(qs[j])):
            qx = qs[j][x]
            if qx == 0.0:
                continue
            a = min(1.0, p[j][x] / qv[j][x]) if p[j][x] > 0 else 0.0
            pa[j] += accept * qx * a
            nxt = pi * qx
            if j + 1 < d and (nxt if cum else qx) >= tau:
                walk(j + 1, draft * qx, accept * qx * a, nxt)

    walk(0, 1.0, 1.0, 1.0)
    return pa, pl_


@pytest.mark.parametrize("cum", [False, True])
@pytest.mark.parametrize("tau", [0.02, 0.1, 0.3])
def test_analytic_equals_enumeration_over_draft_sequences(
    tmp_path: Path, cum: bool, tau: float
) -> None:
    """Random 5-candidate laws at 3 positions: the kernel against every prefix summed."""
    rng = np.random.default_rng(14)
    rows = []
    qs_rows, p_rows = [], []
    for pos in range(1, 4):
        q = rng.dirichlet(np.ones(5))
        p = rng.dirichlet(np.ones(5))
        qs_rows.append(q)
        p_rows.append(p)
        rows.append(
            {
                "request_id": "r0",
                "family": "chat",
                "context_tokens": 100,
                "round": 0,
                "position": pos,
                "cand_ids": list(range(5)),
                "draft_logprobs": [math.log(x) for x in q],
                "target_probs": [float(x) for x in p],
                "drafted_id": 0,
                "accepted": False,
            }
        )
    b = _batch(write_parquet(tmp_path / "r.parquet", rows))
    arm = parse_arm("t1:float32@3")
    laws = arm_laws(arm, b.offsets, b.draft_logprobs)
    qs = [laws.q_sampler[b.offsets[j] : b.offsets[j + 1]] for j in range(3)]
    qv = [laws.q_verifier[b.offsets[j] : b.offsets[j + 1]] for j in range(3)]
    name = "stop-cum" if cum else "stop-below"
    want_a, want_l = _by_prefix(qs, qv, p_rows, tau, cum)
    got = _run(b, _policy("t1:float32@3", f"{name}:{tau}@3"))
    got_l = _run(b, _policy("t1:float32@3", f"{name}:{tau}@3", length=True))
    np.testing.assert_allclose(got.surv[0], want_a, rtol=1e-13)
    np.testing.assert_allclose(got_l.surv[0], want_l, rtol=1e-13)
    assert got_l.surv[0, 2] < 1  # the rule bites at this τ


@pytest.mark.parametrize("cum", [False, True])
def test_importance_equals_reweighted_archived_tokens(synth_batch: RoundBatch, cum: bool) -> None:
    """Per round: Π (a/q^L)(x_j) with the indicators on the archived tokens, in pure Python."""
    b = synth_batch
    arm = parse_arm("top32:t0.7:dyadic8@5")
    laws = arm_laws(arm, b.offsets, b.draft_logprobs)
    q_log = b.emitted_q
    tau = 0.3 if not cum else 0.05
    name = "stop-cum" if cum else "stop-below"
    got = _run(b, _policy(str(arm.canonical), f"{name}:{tau}@5"), "importance")
    got_l = _run(b, _policy(str(arm.canonical), f"{name}:{tau}@5", length=True), "importance")
    for r in range(b.n_rounds):
        w, v, on, pi = 1.0, 1.0, 1.0, 1.0
        for j in range(5):
            row = int(b.round_offsets[r]) + j
            x = int(b.offsets[row] + b.drafted_idx[row])
            qs, qv, p = laws.q_sampler[x], laws.q_verifier[x], b.target_probs[x]
            a = (min(1.0, p / qv) if qv > 0 else 1.0) if p > 0 else 0.0
            assert got_l.surv[r, j] == pytest.approx(on * v, rel=1e-12)
            w = w * ((qs / q_log[x]) * a)
            assert got.surv[r, j] == pytest.approx(on * w, rel=1e-12, abs=1e-300)
            v *= qs / q_log[x]
            pi *= qs
            if (pi if cum else qs) < tau:
                on = 0.0


def test_short_rounds_and_unknown_context_are_unsupported(tmp_path: Path) -> None:
    """A table's round is supported when it records its own depth and has a context."""
    b = _batch(_constant_archive(tmp_path / "s.parquet", [0.9, 0.1], [0.7, 0.3], 3, ctx=5000))
    ok = _run(b, _policy("t1@3", "depth-by-bucket:<4K=5/>=4K=3"), width=5)
    assert (ok.depth == 5).all()  # records 3 = its depth at 5,000 tokens
    short = _run(b, _policy("t1@3", "depth-by-bucket:<4K=3/>=4K=4"), width=4)
    assert (short.depth < 4).all()
    stop = _run(b, _policy("t1@3", "stop-below:0.5@4"), width=4)
    assert (stop.depth == 3).all()  # fewer than D = 4 recorded: short at depth 4


def test_montecarlo_and_tiny_cumulative_tau_are_refused(synth_batch: RoundBatch) -> None:
    with pytest.raises(SpecReplayError, match="analytic and importance"):
        _run(synth_batch, _policy("top32:t0.7@5", "stop-below:0.1@5"), "montecarlo")
    with pytest.raises(SpecReplayError, match="needs --estimator importance"):
        _run(synth_batch, _policy("top32:t0.7@5", "stop-cum:1e-7@5"))


@pytest.mark.parametrize("estimator", ["analytic", "importance"])
@pytest.mark.parametrize("policy", ["stop-below:0.3@4", "stop-cum:0.2@4", "depth-by-bucket:>=0=3"])
def test_the_pass_fixed_arm_serves_the_policy_to_the_bit(
    synth_batch: RoundBatch, estimator: str, policy: str
) -> None:
    """A policy started from the pass's own replay of its base arm (wider, another seed) equals
    one that replays the base arm itself: the engine's values are reused, not recomputed."""
    arm = parse_arm("top32:t0.7@5")
    rule = parse_policy(policy)
    logging = parse_arm(LOGGING) if estimator == "importance" else None
    est = get_estimator(estimator)

    def replay(cache: LawCache, a: Arm, seed: int = 0) -> RoundValues:
        return est.rounds(synth_batch, a, cache, seed=seed, replicates=0, max_depth=5,
                          logging=logging)  # fmt: skip

    fresh = LawCache(synth_batch.offsets, synth_batch.draft_logprobs)
    served = LawCache(synth_batch.offsets, synth_batch.draft_logprobs)
    base = arm.at_depth(rule.max_depth)
    remember_fixed(served, estimator, base, logging, replay(served, base, seed=7))
    assert ("fixed", estimator, base, logging) in served.memo
    for length in (False, True):
        pa = arm.with_rule(rule, length=length)
        a, b = replay(fresh, pa), replay(served, pa)
        for x, y in ((a.t, b.t), (a.surv, b.surv), (a.depth, b.depth)):
            assert x.tobytes() == y.tobytes()
    # a ruled arm and Monte Carlo are never kept
    remember_fixed(served, "montecarlo", base, logging, replay(served, base))
    remember_fixed(served, estimator, arm.with_rule(rule), logging, replay(served, base))
    assert not any(k[1] == "montecarlo" or k[2].rule is not None for k in served.memo
                   if isinstance(k, tuple) and k[0] == "fixed")  # fmt: skip

"""Tests of the toy draft/target model pair and of the live-round API."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from specreplay.sim.rng import request_key
from specreplay.sim.synth import SynthConfig, request_ids, simulate_shard
from specreplay.sim.toy import (
    FAMILIES,
    VOCAB_SIZE,
    RoundStart,
    ToyPair,
    _top_indices,
    draft_law,
    greedy_law,
    live_round,
    logging_law,
    rank_to_token,
    sample_residual,
    state_key,
    tail_pmf,
    target_law,
)

PAIR = ToyPair()
ALL_TAIL_RANKS = np.arange(VOCAB_SIZE - PAIR.n_explicit, dtype=np.int64)
STATES = [
    (fam, ctx, (int(a), int(b)))
    for fam in FAMILIES
    for ctx, a, b in [(256, 0, 1), (5_000, 17, 129_279), (131_072, 4242, 99_999)]
]


@pytest.mark.parametrize(("family", "context", "history"), STATES)
def test_target_law_normalised_over_full_vocabulary(
    family: str, context: int, history: tuple[int, int]
) -> None:
    law = target_law(PAIR, family, state_key(family, context, history))
    tail = tail_pmf(PAIR, law.tail_scale, ALL_TAIL_RANKS)
    assert law.ids.shape == (PAIR.n_explicit,) and law.ids.dtype == np.int64
    assert len(np.unique(law.ids)) == PAIR.n_explicit
    assert np.all((law.ids >= 0) & (law.ids < VOCAB_SIZE))
    # explicit + every tail rank sums to 1 (the telescoping tail is exact up to rounding)
    assert abs(law.probs.sum() + tail.sum() - 1.0) < 1e-12
    assert abs(tail.sum() - law.tail_mass) < 1e-12
    assert np.all(tail > 0.0) and np.all(np.diff(tail) <= 0.0)
    assert tail[0] <= law.probs.min()  # the explicit set is the top of the law


@pytest.mark.parametrize(("family", "context", "history"), STATES)
@pytest.mark.parametrize(("position", "surprise"), [(1, 0.0), (3, 2.5), (5, 40.0)])
def test_draft_law_normalised_over_full_vocabulary(
    family: str, context: int, history: tuple[int, int], position: int, surprise: float
) -> None:
    key = state_key(family, context, history)
    law = draft_law(PAIR, family, key, context_tokens=context, position=position, surprise=surprise)
    tail = tail_pmf(PAIR, law.tail_scale, ALL_TAIL_RANKS)
    assert abs(law.probs.sum() + tail.sum() - 1.0) < 1e-12
    assert np.allclose(np.exp(law.logprobs), law.probs, rtol=1e-12, atol=0.0)
    assert np.array_equal(law.ids, target_law(PAIR, family, key).ids)
    assert tail[0] <= law.probs.min()
    top = law.logprobs[law.candidates]
    assert np.all(np.diff(top) <= 0.0)
    assert np.exp(top[:32]).sum() < 1.0


@pytest.mark.parametrize("n_keep", [1, 5, 32, 64])
def test_top_indices_is_a_stable_descending_argsort(n_keep: int) -> None:
    rng = np.random.default_rng(n_keep)
    for _ in range(50):
        x = rng.integers(0, 12, 64).astype(np.float64)  # many ties
        out = np.empty(n_keep, dtype=np.int64)
        _top_indices(x, out)
        assert np.array_equal(out, np.argsort(-x, kind="stable")[:n_keep])


def test_rank_to_token_is_a_permutation_of_the_vocabulary() -> None:
    key = state_key("chat", 1000, (3, 4))
    tokens = rank_to_token(key, np.arange(VOCAB_SIZE, dtype=np.int64))
    assert np.array_equal(np.sort(tokens), np.arange(VOCAB_SIZE))
    assert np.array_equal(tokens[: PAIR.n_explicit], target_law(PAIR, "chat", key).ids)


def test_residual_walks_candidates_then_explicit_then_tail() -> None:
    key = state_key("math", 2048, (10, 11))
    law = target_law(PAIR, "math", key)
    _, gp = PAIR.packed()
    no_cand = np.empty(0, dtype=np.int64)
    explicit_mass = law.probs.sum()
    first = sample_residual(law.ids, law.probs, no_cand, np.empty(0), law.tail_scale, key, gp, 0.0)
    assert first == law.ids[0]
    # just past the explicit mass: the first tail rank; at the very end: a deep tail rank
    u = (explicit_mass + 0.1 * tail_pmf(PAIR, law.tail_scale, np.array([0]))[0]) / 1.0
    tok = sample_residual(law.ids, law.probs, no_cand, np.empty(0), law.tail_scale, key, gp, u)
    assert tok == rank_to_token(key, np.array([PAIR.n_explicit]))[0]
    deep = sample_residual(
        law.ids, law.probs, no_cand, np.empty(0), law.tail_scale, key, gp, 1.0 - 1e-15
    )
    assert deep not in set(law.ids.tolist())
    # a candidate with q >= p has no residual mass: it is never the correction
    cand = np.array([0], dtype=np.int64)
    tok = sample_residual(law.ids, law.probs, cand, np.array([1.0]), law.tail_scale, key, gp, 0.0)
    assert tok == law.ids[1]


def _small_shard(greedy: bool) -> tuple[SynthConfig, list[str], int]:
    cfg = SynthConfig(n_requests=6, rounds=12, greedy=greedy)
    return cfg, request_ids(cfg.n_requests), 20260101


@pytest.mark.parametrize("greedy", [False, True])
def test_live_round_reproduces_generator_rows(greedy: bool) -> None:
    cfg, ids, seed = _small_shard(greedy)
    shard = simulate_shard(cfg, seed, ids)
    law = logging_law(cfg.temperature, greedy=greedy)
    d, k = cfg.depth, cfg.top_k
    for i, rid in enumerate(ids):
        for r in range(cfg.rounds):
            start = shard.round_start(i, r)
            live = live_round(
                PAIR, start, law, depth=d, seed=seed, request_key=request_key(rid), round_index=r
            )
            rows = slice((i * cfg.rounds + r) * d, (i * cfg.rounds + r + 1) * d)
            assert np.array_equal(live.drafted, shard.drafted_id[rows])
            assert np.array_equal(live.accepted, shard.accepted[rows])
            assert np.array_equal(live.state_keys, shard.toy_state[rows])
            assert np.array_equal(np.stack(live.cand_ids), shard.cand_ids[rows])
            assert np.array_equal(np.stack(live.draft_logprobs), shard.draft_logprobs[rows])
            assert np.array_equal(np.stack(live.target_probs), shard.target_probs[rows])
            assert np.array_equal(np.stack(live.q), shard.emitted_q[rows])
            assert live.n_accepted == int(np.cumprod(shard.accepted[rows]).sum())
            assert live.emitted.shape == (1 + live.n_accepted,)
            assert live.emitted[-1] == shard.round_final[i * cfg.rounds + r]
            assert np.array_equal(live.emitted[:-1], live.drafted[: live.n_accepted])
            if r + 1 < cfg.rounds:
                assert live.next_start == shard.round_start(i, r + 1)
            assert np.sum([q.shape == (k,) for q in live.q]) == d


def test_greedy_law_is_point_mass_on_first_maximum() -> None:
    q = greedy_law(np.array([-3.0, -0.5, -0.5, -9.0]))
    assert np.array_equal(q, [0.0, 1.0, 0.0, 0.0])


def test_toy_depends_on_drafted_prefix() -> None:
    """Changing the token drafted at position 1 changes both laws at position 2."""
    start = RoundStart(family="code", context_tokens=3000, history=(5, 6))
    base = logging_law(0.7)
    calls = {"n": 0}

    def second_candidate_first(cand_logprobs: NDArray[np.float64]) -> NDArray[np.float64]:
        calls["n"] += 1
        if calls["n"] == 1:  # position 1: draft the second candidate instead of sampling
            q = np.zeros_like(cand_logprobs)
            q[1] = 1.0
            return q
        return base(cand_logprobs)

    keys = {"depth": 3, "seed": 1, "request_key": request_key("prefix"), "round_index": 0}
    a = live_round(PAIR, start, greedy_law, **keys)  # type: ignore[arg-type]
    b = live_round(PAIR, start, second_candidate_first, **keys)  # type: ignore[arg-type]
    assert a.drafted[0] != b.drafted[0]
    assert np.array_equal(a.cand_ids[0], b.cand_ids[0])  # same position-1 state
    assert a.state_keys[1] != b.state_keys[1]
    assert not np.array_equal(a.target_probs[1], b.target_probs[1])
    assert not np.array_equal(a.draft_logprobs[1], b.draft_logprobs[1])


def test_draft_disagreement_grows_with_position_context_and_surprise() -> None:
    """Mean TV(draft, target) over fixed states rises with each difficulty factor.

    The states, noise draws and miss draws are shared between settings (keyed by the state), and a
    miss happens when a fixed uniform falls below a hazard that grows with the difficulty, so the
    comparison is deterministic, not statistical.
    """
    rng = np.random.default_rng(7)
    keys = [
        state_key("chat", 1000, (int(a), int(b))) for a, b in rng.integers(0, VOCAB_SIZE, (200, 2))
    ]
    targets = [target_law(PAIR, "chat", k).probs for k in keys]

    def mean_tv(context: int, position: int, surprise: float) -> float:
        tv = [
            np.abs(
                draft_law(
                    PAIR, "chat", k, context_tokens=context, position=position, surprise=surprise
                ).probs
                - p
            ).sum()
            for k, p in zip(keys, targets, strict=True)
        ]
        return float(np.mean(tv))

    base = mean_tv(1000, 1, 0.0)
    assert base < mean_tv(1000, 5, 0.0)
    assert base < mean_tv(100_000, 1, 0.0)
    assert base < mean_tv(1000, 1, 6.0)


def test_live_round_rejects_a_bad_law() -> None:
    start = RoundStart(family="math", context_tokens=500, history=(1, 2))
    keys = {"depth": 2, "seed": 0, "request_key": np.uint64(1), "round_index": 0}
    with pytest.raises(ValueError, match="law sums to"):
        live_round(PAIR, start, lambda lp: np.full(lp.shape, 0.5), **keys)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected \\(32,\\)"):
        live_round(PAIR, start, lambda lp: np.ones(3) / 3, **keys)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="negative or non-finite"):
        live_round(PAIR, start, lambda lp: -np.ones(lp.shape), **keys)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown family"):
        state_key("poetry", 10, (1, 2))

"""Tests of the synthetic archive generator (docs/inputs.md#position-traces-schema-v1, and the
calibration directions of docs/inputs.md#the-built-in-archive)."""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
import polars as pl
import pytest
from numpy.typing import NDArray

from specreplay.replay.archive.synthetic import FRAME_SCHEMA, synth_frames
from specreplay.sim.arms import parse_arm
from specreplay.sim.policy import policy_law_of
from specreplay.sim.synth import (
    SynthConfig,
    logging_arm_name,
    request_ids,
    request_start,
    simulate_shard,
)
from specreplay.sim.toy import FAMILIES

SEED = 11
# 400 requests × 32 rounds × 5 positions = 64,000 rows: about a second once compiled
CFG = SynthConfig(n_requests=400, rounds=32, requests_per_shard=150)
K_SE = 4.0  # one-sided normal tail at 4 SE: a false failure about 3e-5 of the time


@pytest.fixture(scope="module")
def archive() -> pl.DataFrame:
    return pl.concat(list(synth_frames(CFG, SEED)))


def _matrix(s: pl.Series) -> NDArray[Any]:
    """A (rows, k) array from a List column whose lists all have length k."""
    k = int(s.list.len()[0])
    out: NDArray[Any] = s.explode().to_numpy().reshape(-1, k)
    return out


def _round_a(df: pl.DataFrame, depth: int) -> NDArray[np.int64]:
    acc = df["accepted"].to_numpy().reshape(-1, depth)
    out: NDArray[np.int64] = np.cumprod(acc, axis=1).sum(axis=1)
    return out


def _ratio_and_se(t: NDArray[np.float64], n: NDArray[np.float64]) -> tuple[float, float]:
    """R = Σt / Σn over requests and its delta-method SE (requests are the independent unit)."""
    r = t.sum() / n.sum()
    return float(r), float(np.sqrt(((t - r * n) ** 2).sum()) / n.sum())


def _r_by(df: pl.DataFrame, mask: NDArray[np.bool_]) -> tuple[float, float]:
    """MEASURED R of the rounds selected by ``mask`` (one entry per round), clustered by request."""
    d = CFG.depth
    rounds = pl.DataFrame(
        {
            "request_id": df["request_id"].gather_every(d),
            "retained": 1 + _round_a(df, d),
        }
    ).filter(pl.Series(mask))
    per_req = rounds.group_by("request_id").agg(
        pl.col("retained").sum().alias("t"), pl.len().alias("n")
    )
    return _ratio_and_se(
        per_req["t"].to_numpy().astype(float), per_req["n"].to_numpy().astype(float)
    )


def test_frames_have_the_schema_v1_columns_in_order(archive: pl.DataFrame) -> None:
    assert archive.schema == pl.Schema(FRAME_SCHEMA)
    assert archive.height == CFG.n_requests * CFG.rounds * CFG.depth
    assert archive["request_id"][0] == "synth-00000"
    assert archive["request_id"][-1] == "synth-00399"
    assert set(archive["logging_arm"].unique()) == {"top32:t0.7@5"}
    assert np.array_equal(
        archive["position"].to_numpy(), np.tile(np.arange(1, 6), archive.height // 5)
    )
    per_round = archive.group_by("request_id", "round").agg(
        pl.col("context_tokens").n_unique().alias("ctx"),
        pl.col("family").n_unique().alias("fam"),
    )
    assert per_round["ctx"].max() == 1 and per_round["fam"].max() == 1
    checks = archive.select(
        ok_len=(pl.col("cand_ids").list.len() == 32).all(),
        ok_q=((pl.col("emitted_q").list.sum() - 1.0).abs() < 1e-12).all(),
        ok_lp=(pl.col("draft_logprobs").list.eval(pl.element().exp()).list.sum() < 1.0).all(),
        ok_p=(pl.col("target_probs").list.sum() <= 1.0 + 1e-12).all(),
        ok_in=pl.col("cand_ids").list.contains(pl.col("drafted_id")).all(),
        ok_uniq=(pl.col("cand_ids").list.n_unique() == 32).all(),
    )
    assert all(checks.row(0))
    acc = archive["accepted"].to_numpy().reshape(-1, CFG.depth)
    assert not np.any(acc[:, 1:] & ~acc[:, :-1])  # no True after a False within a round


def test_context_advances_by_retained_tokens(archive: pl.DataFrame) -> None:
    d = CFG.depth
    ctx = archive["context_tokens"].to_numpy()[::d].reshape(CFG.n_requests, CFG.rounds)
    a = _round_a(archive, d).reshape(CFG.n_requests, CFG.rounds)
    assert np.array_equal(np.diff(ctx, axis=1), 1 + a[:, :-1])


def test_generator_is_deterministic_and_shard_invariant() -> None:
    small = SynthConfig(n_requests=30, rounds=6, requests_per_shard=7)
    a = pl.concat(list(synth_frames(small, SEED)))
    b = pl.concat(list(synth_frames(SynthConfig(n_requests=30, rounds=6), SEED)))
    assert a.equals(b)
    c = pl.concat(list(synth_frames(small, SEED + 1)))
    assert not a["drafted_id"].equals(c["drafted_id"])
    assert not a["accepted"].equals(c["accepted"])


def test_accept_count_matches_min_ratio_on_verified_positions(archive: pl.DataFrame) -> None:
    """Σ accepted = Σ min(1, p(x)/q(x)) over verified positions, within binomial error.

    Given the prefix and the drafted token, each verified position is accepted with probability
    a = min(1, p(x)/q(x)) by an independent uniform, so the count has variance Σ a(1 − a). At
    4.5 SE the two-sided false-failure rate is about 7e-6.
    """
    d = CFG.depth
    acc = archive["accepted"].to_numpy().reshape(-1, d)
    verified = np.ones_like(acc)
    verified[:, 1:] = np.cumprod(acc, axis=1)[:, :-1]  # reached: all earlier positions accepted
    cand = _matrix(archive["cand_ids"])
    x = np.argmax(cand == archive["drafted_id"].to_numpy()[:, None], axis=1)
    rows = np.arange(archive.height)
    p = _matrix(archive["target_probs"])[rows, x]
    q = _matrix(archive["emitted_q"])[rows, x]
    a = np.minimum(1.0, p / q).reshape(-1, d)[verified]
    observed = acc[verified].sum()
    z = (observed - a.sum()) / math.sqrt((a * (1 - a)).sum())
    assert abs(z) < 4.5


def test_families_and_context_order_measured_r(archive: pl.DataFrame) -> None:
    d = CFG.depth
    fam = archive["family"].to_numpy()[::d]
    r_code, se_code = _r_by(archive, fam == "code")
    r_chat, se_chat = _r_by(archive, fam == "chat")
    r_tr, se_tr = _r_by(archive, fam == "translation")
    assert r_code - r_tr > K_SE * math.hypot(se_code, se_tr)
    assert r_code - r_chat > K_SE * math.hypot(se_code, se_chat)
    ctx = archive["context_tokens"].to_numpy()[::d]
    r_short, se_short = _r_by(archive, ctx < 4096)
    r_long, se_long = _r_by(archive, ctx >= 65536)
    assert r_short - r_long > K_SE * math.hypot(se_short, se_long)


def test_acceptance_decays_with_position(archive: pl.DataFrame) -> None:
    acc = archive["accepted"].to_numpy().reshape(-1, CFG.depth)
    surv = np.cumprod(acc, axis=1)
    reached5 = surv[:, 3].astype(bool)
    p1 = acc[:, 0].mean()
    p5 = acc[reached5, 4].mean()  # conditional acceptance at position 5
    se = math.sqrt(p1 * (1 - p1) / acc.shape[0] + p5 * (1 - p5) / reached5.sum())
    assert p1 - p5 > K_SE * se
    assert surv[:, 4].mean() < 0.5 * surv[:, 0].mean()


def test_greedy_arm_logs_one_hot_argmax() -> None:
    cfg = SynthConfig(n_requests=8, rounds=4, greedy=True)
    df = pl.concat(list(synth_frames(cfg, SEED)))
    assert logging_arm_name(cfg) == "greedy@5"
    assert set(df["logging_arm"].unique()) == {"greedy@5"}
    q = _matrix(df["emitted_q"])
    lp = _matrix(df["draft_logprobs"])
    assert np.array_equal(q, np.eye(32)[np.argmax(lp, axis=1)])
    x = np.argmax(_matrix(df["cand_ids"]) == df["drafted_id"].to_numpy()[:, None], 1)
    assert np.array_equal(x, np.argmax(lp, axis=1))


def test_other_policies_and_depths() -> None:
    cfg = SynthConfig(n_requests=5, rounds=3, depth=3, top_k=8, temperature=1.0)
    df = pl.concat(list(synth_frames(cfg, SEED)))
    assert logging_arm_name(cfg) == "top8:t1@3"
    assert df.height == 5 * 3 * 3
    assert (df["cand_ids"].list.len() == 8).all()
    assert set(df["position"].unique()) == {1, 2, 3}
    with pytest.raises(ValueError, match="top_k must be in"):
        SynthConfig(top_k=65)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        SynthConfig(temperature=0.0)


def test_starting_contexts_span_every_bucket_and_family() -> None:
    cfg = SynthConfig()
    starts = [request_start(cfg, SEED, rid) for rid in request_ids(500)]
    ctx = np.array([s.context_tokens for s in starts])
    buckets = np.searchsorted([4096, 16384, 32768, 65536], ctx, side="right")
    assert set(buckets.tolist()) == {0, 1, 2, 3, 4}
    assert {s.family for s in starts} == set(FAMILIES)
    assert ctx.min() >= cfg.context_min and ctx.max() <= cfg.context_max


def test_archive_is_the_same_for_one_and_two_threads() -> None:
    cfg = SynthConfig(n_requests=12, rounds=5)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = pl.concat(list(synth_frames(cfg, SEED)))
        numba.set_num_threads(min(2, before))
        two = pl.concat(list(synth_frames(cfg, SEED)))
    finally:
        numba.set_num_threads(before)
    assert one.equals(two)


@pytest.mark.parametrize(
    ("cfg", "arm"),
    [
        (SynthConfig(n_requests=8, rounds=6), "top32:t0.7@5"),
        (SynthConfig(n_requests=4, rounds=3, depth=3, top_k=8, temperature=1.3), "top8:t1.3@3"),
        (SynthConfig(n_requests=4, rounds=3, greedy=True), "greedy@5"),
    ],
)
def test_logged_emitted_q_is_the_replay_policy_law_bit_for_bit(cfg: SynthConfig, arm: str) -> None:
    """The generator logs the replay's own law of its logging arm (importance weights are 1).

    Recomputed independently of the generator: the archived draft log-probabilities go through
    the replay's law of the parsed arm (sim.policy.policy_law_of over CSR rows).
    """
    shard = simulate_shard(cfg, SEED, request_ids(cfg.n_requests))
    assert logging_arm_name(cfg) == arm
    rows, k = shard.draft_logprobs.shape
    offsets = np.arange(rows + 1, dtype=np.int64) * k
    law = policy_law_of(parse_arm(arm).policy, offsets, shard.draft_logprobs.ravel())
    assert not law.flag.any()
    assert np.array_equal(law.q, shard.emitted_q.ravel())

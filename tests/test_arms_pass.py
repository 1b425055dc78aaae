"""The fused pass over every arm equals the per-arm kernels to the bit (issue 18, item 2).

:func:`~specreplay.replay.estimators.allarms.all_arms_rounds` against today's path, arm by arm:
the batch-wide policy law (:class:`~specreplay.sim.policy.LawCache`), then
:func:`~specreplay.replay.estimators.analytic.analytic_rounds` and
:func:`~specreplay.replay.estimators.importance.importance_rounds`. Every output array must be
``np.array_equal`` (NaN positions included): random batches that reach every branch, a
synthesised archive's batches, and a whole shard's sums with the fused pass switched off.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numba
import numpy as np
import pytest

from specreplay.replay import shard
from specreplay.replay.archive.reader import ArchiveReader
from specreplay.replay.estimators import get_estimator
from specreplay.replay.estimators.allarms import AllArms, all_arms_rounds
from specreplay.replay.estimators.analytic import analytic_rounds
from specreplay.replay.estimators.base import RoundValues
from specreplay.replay.estimators.importance import importance_rounds, logging_law
from specreplay.sim.arms import Arm, parse_arm
from specreplay.sim.policy import LawCache, policy_law_of, policy_row_flag

# every quantizer kind and rounding, matched and mismatched, greedy, top-k above the rows'
# candidates (up to 40 here: FLAG_K_EXCEEDS), top-p, two arms sharing each sampled policy
ARMS = [
    "top32:t0.7@4",
    "top32:t0.7:dyadic24@4",
    "top32:t0.7:dyadic8@4",
    "top32:t0.7:dyadic10:floor-argmax@4",
    "top32:t0.7:dyadic8/float64@4",
    "t1.3:float32@4",
    "t1.3:bfloat16/float16@4",
    "top64:p0.9:float16@4",
    "top8:t0.5:p0.8:dyadic12@4",
    "greedy@4",
]

FIELDS = [f.name for f in dataclasses.fields(RoundValues)]


def _batch(seed: int, drafted_known: bool = True) -> dict[str, np.ndarray]:
    """Random rounds: 1–7 positions, 1–40 candidates, −inf entries, zeros in p and q^L."""
    rng = np.random.default_rng(seed)
    depths = rng.integers(1, 8, 60)
    widths = rng.integers(1, 41, int(depths.sum()))
    widths[::17] = 1  # one-candidate rows
    offsets = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
    nnz = int(offsets[-1])
    lp = rng.normal(-3.0, 2.0, nnz)
    lp[rng.random(nnz) < 0.1] = -np.inf
    for i in np.flatnonzero(widths > 3)[::5]:  # ties: the quantizers' tie rules
        lp[offsets[i] : offsets[i] + 3] = lp[offsets[i]]
    p = rng.random(nnz) ** 3
    p[rng.random(nnz) < 0.15] = 0.0
    q_log = rng.random(nnz)
    q_log[rng.random(nnz) < 0.1] = 0.0
    drafted = np.empty(widths.shape[0], np.int32)
    for i in range(widths.shape[0]):
        lo, hi = offsets[i], offsets[i + 1]
        p[lo:hi] /= max(p[lo:hi].sum(), 1e-300)
        if not np.isfinite(lp[lo:hi]).any():  # keep every row drawable (the reader refuses
            lp[lo] = -1.0  # rows without a finite log-probability)
        q_log[lo:hi] /= max(q_log[lo:hi].sum(), 1e-300)
        drafted[i] = rng.integers(0, hi - lo)
    if not drafted_known:
        drafted[rng.random(drafted.shape[0]) < 0.3] = -1
    rounds = np.concatenate([[0], np.cumsum(depths)]).astype(np.int64)
    return {
        "offsets": offsets,
        "draft_logprobs": lp,
        "target_probs": p,
        "q_logging": q_log,
        "drafted_idx": drafted,
        "round_offsets": rounds,
    }


def _per_arm(b: dict[str, np.ndarray], arms: list[Arm], depth: int, imp: bool) -> AllArms:
    """Today's path: the batch-wide policy law, then each estimator's kernel, arm by arm."""
    cache = LawCache(b["offsets"], b["draft_logprobs"])
    an, im = [], []
    for arm in arms:
        law = cache.policy(arm.policy)
        common = {
            "offsets": b["offsets"],
            "target_probs": b["target_probs"],
            "q_policy": law.q,
            "sampler": arm.sampler,
            "verifier": arm.verifier,
            "drafted_idx": b["drafted_idx"],
            "round_offsets": b["round_offsets"],
            "max_depth": depth,
            "flag": law.flag,
        }
        v = analytic_rounds(**common)
        an.append(dataclasses.replace(v, flag=v.flag.copy()))  # law.flag is the cache's buffer
        if imp:
            im.append(importance_rounds(**common, q_logging=b["q_logging"]))
    return AllArms(tuple(an), tuple(im) if imp else None)


def _assert_same(got: tuple[RoundValues, ...], want: tuple[RoundValues, ...]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        for name in FIELDS:
            a, b = getattr(g, name), getattr(w, name)
            assert (a is None) == (b is None), name
            if a is not None:
                assert a.dtype == b.dtype and a.shape == b.shape, name
                assert np.array_equal(a, b, equal_nan=True), name


@pytest.mark.parametrize(("seed", "depth"), [(1, 4), (2, 3), (3, 6)])
def test_fused_equals_per_arm_on_random_batches(seed: int, depth: int) -> None:
    """Analytic and importance, every arm: depth 3 leaves rows past it (flags only)."""
    b = _batch(seed)
    arms = [parse_arm(a) for a in ARMS]
    want = _per_arm(b, arms, depth, imp=True)
    got = all_arms_rounds(arms=arms, max_depth=depth, **b)
    _assert_same(got.analytic, want.analytic)
    assert got.importance is not None and want.importance is not None
    _assert_same(got.importance, want.importance)
    # the batch reaches the branches it is meant to
    flags = np.bitwise_or.reduce(np.concatenate([v.flag for v in got.importance]))
    assert flags == 1 | 4  # FLAG_K_EXCEEDS (top64) and FLAG_LOGGING_SUPPORT (zeros in q^L)


def test_fused_same_values_with_one_and_two_threads() -> None:
    """Each round's arithmetic is its own: the thread count changes no bit."""
    b = _batch(6)
    arms = [parse_arm(a) for a in ARMS]
    numba.set_num_threads(1)
    try:
        one = all_arms_rounds(arms=arms, max_depth=4, **b)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    two = all_arms_rounds(arms=arms, max_depth=4, **b)
    assert one.importance is not None and two.importance is not None
    _assert_same(one.analytic + one.importance, two.analytic + two.importance)


def test_fused_analytic_alone_with_unknown_drafted_tokens() -> None:
    """Without a logging law only the analytic values; drafted −1 rows as the kernel takes them."""
    b = _batch(4, drafted_known=False)
    q_log = b.pop("q_logging")
    arms = [parse_arm(a) for a in ARMS]
    want = _per_arm({**b, "q_logging": q_log}, arms, 4, imp=False)
    got = all_arms_rounds(arms=arms, max_depth=4, **b)
    assert got.importance is None
    _assert_same(got.analytic, want.analytic)


def test_policy_row_flag_is_policy_rows_flag() -> None:
    """The flag-only twin gives policy_row's flags (the rows past the depth)."""
    b = _batch(5)
    off, lp = b["offsets"], b["draft_logprobs"].copy()
    lp[off[3] : off[4]] = -np.inf  # a row with no finite log-probability
    for text in ("top32:t0.7@4", "greedy@4", "t1.3@4"):
        pol = parse_arm(text).policy
        want = policy_law_of(pol, off, lp).flag
        k = 0 if pol.top_k is None else pol.top_k
        got = [policy_row_flag(lp[off[i] : off[i + 1]], pol.greedy, k) for i in range(len(off) - 1)]
        assert np.array_equal(np.array(got, np.int8), want)
        assert want[3] & 2


def test_fused_equals_per_arm_on_archive_batches(small_archive: Path) -> None:
    """The estimators' own calls (what the pass ran before) on a synthesised archive."""
    arms = [parse_arm(a) for a in ("top32:t0.7@5", "top32:t0.7:dyadic24@5", "greedy@5")]
    analytic, importance = get_estimator("analytic"), get_estimator("importance")
    for batch in ArchiveReader(small_archive, batch_rows=700):
        cache = LawCache(batch.offsets, batch.draft_logprobs)
        got = all_arms_rounds(
            arms=arms,
            offsets=batch.offsets,
            draft_logprobs=batch.draft_logprobs,
            target_probs=batch.target_probs,
            drafted_idx=batch.drafted_idx,
            round_offsets=batch.round_offsets,
            max_depth=5,
            q_logging=logging_law(batch, cache, None),
        )
        kw = {"seed": 0, "replicates": 0, "max_depth": 5}
        want_an = tuple(analytic.rounds(batch, a, cache, **kw) for a in arms)
        _assert_same(got.analytic, want_an)
        want_im = tuple(importance.rounds(batch, a, cache, **kw) for a in arms)
        assert got.importance is not None
        _assert_same(got.importance, want_im)


def _sums(s: shard.ShardSums) -> list[np.ndarray]:
    out = []
    for name, rep in s.replays.items():
        for arm, acc in rep.arms.items():
            for f in dataclasses.fields(acc):
                x = getattr(acc, f.name)
                if isinstance(x, np.ndarray):
                    out.append(x)
            out.append(rep.unlogged[arm])
            tail = rep.tails.get(arm)
            if tail is not None:
                out += [x for x in vars(tail).values() if isinstance(x, np.ndarray)]
        assert name
    out += list(s.flagged.values()) + list(s.no_support.values())
    return out


def test_whole_pass_identical_with_fused_arms_off(
    small_archive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard's every sum, tail and count: the fused pass against the per-arm one."""
    arms = [parse_arm(a) for a in ("top32:t0.7@5", "top32:t0.7:dyadic24@5", "greedy@3")]
    opts = shard.ReplayOptions(estimators=("analytic", "importance"), auto=True, batch_rows=900)
    file = sorted(small_archive.glob("*.parquet"))[0]
    fused = shard.replay_shard(file, arms, opts)
    monkeypatch.setattr(shard, "FUSED_ARMS", False)
    before = shard.replay_shard(file, arms, opts)
    got, want = _sums(fused), _sums(before)
    assert len(got) == len(want) > 20
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)

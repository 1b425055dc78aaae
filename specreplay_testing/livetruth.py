"""Live ground truth for the built-in world: replay estimators against rounds run live.

The toy pair (:mod:`specreplay.sim.toy`) can run any arm's round live from a round start, with
the draft law moving with the drafted prefix. Archives record only a state key per position, so
the round starts come from regenerating the synthetic archive (same :class:`SynthConfig` and
seed, :meth:`~specreplay.sim.synth.SynthShard.round_start`). For sampled archived rounds this
module computes, per arm and depth k = 1..D, the **live truth** P(A ≥ k) and each replay
estimator's value on the same archived rounds, and their paired difference.

Terms
-----
start
    An archived round's start state (family, context, last two tokens). Starts are sampled as
    ``n_starts / rounds_per_request`` requests of the archive (the smallest ranks
    ``uniform(seed, request key, 0, START_POSITION, STREAM_LIVE_STARTS)``; requests are i.i.d.
    by construction, each keyed by its id) and ``rounds_per_request`` distinct rounds of each
    (smallest ranks at (request key, round, 1)).
live truth of a start
    truth_s(k) = (1/n_live)·Σ_m 1{A_m ≥ k} over ``n_live`` live rounds of the arm from start s
    (:func:`~specreplay.sim.live.live_accepts`), an unbiased estimate of P(A ≥ k | start s).
    Replicate m draws ``uniform(seed_s, request key, m, position, STREAM_DRAFT/ACCEPT)`` with
    ``seed_s = uniform_bits(seed, request key, round, START_POSITION, STREAM_LIVE_ROUNDS)``:
    independent of the archive's draws, common to all arms (common random numbers).
estimate of a start
    est_s(k) = the estimator's ``surv[:, k − 1]`` on the archived round
    (docs/calibration.md#is-the-replay-right-live-ground-truth): the importance weight w_k, the
    analytic Π α_j, or the Monte Carlo mean over ``replicates`` (seeded with ``uniform_bits(seed, 0,
    0, START_POSITION, STREAM_LIVE_REPLAY_SEED)``, so no replicate reuses the archive's own
    uniforms).
bias
    The mean over starts of d_s = est_s − truth_s: it estimates E[est − truth] over the
    archive's round starts, which is 0 for an unbiased estimator (importance) and the path bias
    for the estimators that assume the archived laws do not depend on the drafted prefix
    (analytic, Monte Carlo). R_d = 1 + Σ_{k≤d} P(A ≥ k) is compared the same way.

Why the standard error is right
-------------------------------
The design is paired by start: the estimate and the truth of a start share its heterogeneity
(family, context, state), which cancels in d_s. The SE of the mean bias is ``sd(d̄_c)/√C`` over
the C sampled requests, d̄_c the mean of d_s over the request's rounds (ddof 1). Requests are
i.i.d. (their draws are keyed by independent request keys, their rounds by independent draws),
so the d̄_c are i.i.d. and this is the textbook SE of a mean, whatever the dependence between
the rounds of one request (cluster-robust; with one round per request it is ``sd(d_s)/√S``).
For an unbiased estimator with E[est_s | start] = P(A ≥ k | start) = E[truth_s | start], d_s has
mean 0 given the start, so the test statistic bias / SE is asymptotically standard normal. The
live-truth noise (binomial, n_live draws) and the estimator's noise (one archived round per
start, plus Monte Carlo error) are both inside d_s, so nothing is double counted or left out.

A testing module, outside the runtime package (:mod:`specreplay_testing`). It depends on the sim
layer, the replay estimators, NumPy and polars (a :class:`RoundBatch`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import polars as pl
from numpy.typing import NDArray

from specreplay.replay.archive.batch import RoundBatch
from specreplay.replay.estimators import get_estimator
from specreplay.sim.arms import Arm, parse_arm
from specreplay.sim.live import LiveStarts, live_accepts
from specreplay.sim.policy import LawCache
from specreplay.sim.rng import (
    START_POSITION,
    STREAM_LIVE_REPLAY_SEED,
    STREAM_LIVE_ROUNDS,
    STREAM_LIVE_STARTS,
    request_key,
    uniform_bits,
)
from specreplay.sim.synth import (
    SynthConfig,
    SynthShard,
    logging_arm_name,
    request_ids,
    simulate_shard,
)
from specreplay.sim.toy import RoundStart

__all__ = [
    "ArmTruth",
    "LiveTruthTable",
    "Paired",
    "SampledStarts",
    "estimates",
    "live_truth",
    "paired",
    "round_batch",
    "sample_starts",
]

ESTIMATOR_NAMES: tuple[str, ...] = ("importance", "analytic", "montecarlo")


@dataclass(frozen=True)
class Paired:
    """One estimator against the live truth on the same starts, per depth (D,) arrays.

    Attributes
    ----------
    estimator : str
    estimate, estimate_se : float64 (D,)
        Mean over starts of the estimator's value, and its cluster SE.
    bias, bias_se : float64 (D,)
        Mean over starts of (estimate − truth), and its cluster SE (module docstring).
    by_start : float64 (S, D)
        The estimator's value per start.
    """

    estimator: str
    estimate: NDArray[np.float64]
    estimate_se: NDArray[np.float64]
    bias: NDArray[np.float64]
    bias_se: NDArray[np.float64]
    by_start: NDArray[np.float64]

    def interval(self, level: float = 0.95) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Return the normal interval of the bias at ``level`` (low, high), per depth."""
        z = NormalDist().inv_cdf(0.5 + level / 2.0)
        return self.bias - z * self.bias_se, self.bias + z * self.bias_se

    @property
    def z(self) -> NDArray[np.float64]:
        """The z statistic bias / bias_se per depth."""
        out: NDArray[np.float64] = self.bias / self.bias_se
        return out


@dataclass(frozen=True)
class ArmTruth:
    """Live truth and the estimators of one arm, depths k = 1..D.

    Attributes
    ----------
    arm : str
        Canonical arm.
    truth, truth_se : float64 (D,)
        SIMULATED P(A ≥ k): mean over starts of the live frequency, and its cluster SE.
    truth_by_start : float64 (S, D)
        Live frequency of A ≥ k per start.
    survival : dict of str to Paired
        Per estimator, P(A ≥ k) against the truth.
    retained_truth, retained_truth_se : float64 (D,)
        SIMULATED R_d = 1 + Σ_{k≤d} P(A ≥ k) and its SE.
    retained : dict of str to Paired
        Per estimator, R_d against the truth.
    """

    arm: str
    truth: NDArray[np.float64]
    truth_se: NDArray[np.float64]
    truth_by_start: NDArray[np.float64]
    survival: dict[str, Paired]
    retained_truth: NDArray[np.float64]
    retained_truth_se: NDArray[np.float64]
    retained: dict[str, Paired]


@dataclass(frozen=True)
class LiveTruthTable:
    """The result of :func:`live_truth`.

    Attributes
    ----------
    arms : tuple of ArmTruth
    n_starts, n_requests, n_live, replicates : int
        Starts, sampled requests (clusters), live rounds per start, Monte Carlo replicates.
    seed : int
        The archive's seed (every other key is derived from it).
    logging_arm : str
    surprise_growth : float
        The toy pair's prefix dependence.
    """

    arms: tuple[ArmTruth, ...]
    n_starts: int
    n_requests: int
    n_live: int
    replicates: int
    seed: int
    logging_arm: str
    surprise_growth: float

    def arm(self, name: str) -> ArmTruth:
        """Return the :class:`ArmTruth` of arm ``name`` (any spelling)."""
        canon = parse_arm(name).canonical
        for a in self.arms:
            if a.arm == canon:
                return a
        raise KeyError(f"arm {canon!r} is not in the table")


@dataclass(frozen=True)
class SampledStarts:
    """Sampled archived rounds (S of them, in request order) and the arrays to replay them.

    Attributes
    ----------
    shard : SynthShard
        The sampled requests regenerated (rounds 0 .. the last sampled one).
    request : int64 (S,)
        Index of each start's request in ``shard``.
    round_index : int64 (S,)
        The archived round number.
    starts : list of RoundStart (S,)
    live : LiveStarts
        The starts with the keys of their live rounds.
    """

    shard: SynthShard
    request: NDArray[np.int64]
    round_index: NDArray[np.int64]
    starts: list[RoundStart]
    live: LiveStarts


def _rank_pick(keys: NDArray[np.uint64], n: int) -> NDArray[np.int64]:
    """Return the indices of the ``n`` smallest ``keys`` (ties to the lower index), ascending."""
    return np.sort(np.argsort(keys, kind="stable")[:n]).astype(np.int64)


def sample_starts(
    cfg: SynthConfig, seed: int, *, n_starts: int, rounds_per_request: int = 1
) -> SampledStarts:
    """Sample archived rounds of the synthetic archive ``(cfg, seed)`` (module docstring)."""
    if n_starts < 1 or rounds_per_request < 1 or n_starts % rounds_per_request:
        raise ValueError("n_starts must be a positive multiple of rounds_per_request (>= 1)")
    n_req = n_starts // rounds_per_request
    if n_req > cfg.n_requests or rounds_per_request > cfg.rounds:
        raise ValueError(
            f"{n_req} requests x {rounds_per_request} rounds do not fit an archive of "
            f"{cfg.n_requests} requests x {cfg.rounds} rounds"
        )
    s64 = np.uint64(seed)
    ids = request_ids(cfg.n_requests)
    keys = np.array([request_key(i) for i in ids], dtype=np.uint64)
    at = np.int64(START_POSITION)
    stream = np.int64(STREAM_LIVE_STARTS)
    rank = np.array([uniform_bits(s64, k, np.int64(0), at, stream) for k in keys], np.uint64)
    chosen = _rank_pick(rank, n_req)
    rnd = np.empty((n_req, rounds_per_request), np.int64)
    for c, i in enumerate(chosen):
        r_rank = np.array(
            [
                uniform_bits(s64, keys[i], np.int64(r), np.int64(1), stream)
                for r in range(cfg.rounds)
            ],
            np.uint64,
        )
        rnd[c] = _rank_pick(r_rank, rounds_per_request)
    sub = dataclasses.replace(cfg, rounds=int(rnd.max()) + 1)  # later rounds are not needed
    shard = simulate_shard(sub, seed, [ids[i] for i in chosen])
    request = np.repeat(np.arange(n_req, dtype=np.int64), rounds_per_request)
    round_index = rnd.ravel()
    starts = [shard.round_start(int(c), int(r)) for c, r in zip(request, round_index, strict=True)]
    rk = keys[chosen][request]
    live_seed = np.array(
        [
            uniform_bits(s64, k, r, at, np.int64(STREAM_LIVE_ROUNDS))
            for k, r in zip(rk, round_index, strict=True)
        ],
        np.uint64,
    )
    return SampledStarts(shard, request, round_index, starts, LiveStarts.of(starts, live_seed, rk))


def round_batch(sampled: SampledStarts, cfg: SynthConfig) -> RoundBatch:
    """Return the sampled archived rounds as a :class:`RoundBatch` (as the reader would)."""
    sh = sampled.shard
    d, k = cfg.depth, cfg.top_k
    n_rounds = sh.round_context.shape[0] // len(sh.request_ids)
    n = sampled.request.shape[0]
    rr = sampled.request * n_rounds + sampled.round_index
    rows = (rr[:, None] * d + np.arange(d)[None, :]).ravel()
    cand = sh.cand_ids[rows]
    drafted = np.argmax(cand == sh.drafted_id[rows][:, None], axis=1).astype(np.int32)
    acc = sh.accepted[rows].reshape(n, d)
    keys = np.array([request_key(i) for i in sh.request_ids], np.uint64)
    return RoundBatch(
        offsets=np.arange(n * d + 1, dtype=np.int64) * k,
        cand_ids=np.ascontiguousarray(cand.ravel()),
        draft_logprobs=np.ascontiguousarray(sh.draft_logprobs[rows].ravel()),
        target_probs=np.ascontiguousarray(sh.target_probs[rows].ravel()),
        emitted_q=np.ascontiguousarray(sh.emitted_q[rows].ravel()),
        position=np.tile(np.arange(1, d + 1, dtype=np.int64), n),
        drafted_idx=drafted,
        accepted=acc.ravel().astype(np.int8),
        round_offsets=np.arange(n + 1, dtype=np.int64) * d,
        round_request=sampled.request.copy(),
        round_key=keys[sampled.request],
        round_index=sampled.round_index.copy(),
        round_family=sh.family[sampled.request].astype(np.int32),
        round_bucket=np.zeros(n, np.int32),
        round_context=sh.round_context[rr].copy(),
        round_depth=np.full(n, d, np.int32),
        measured_accepted=np.cumprod(acc, axis=1).sum(axis=1).astype(np.int32),
        extras=pl.DataFrame(),
    )


def _cluster_mean_se(
    x: NDArray[np.float64], request: NDArray[np.int64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Mean over starts and its cluster SE ``sd(cluster means)/√C`` (x: (S, D), equal sizes)."""
    n_c = int(request.max()) + 1
    means = np.zeros((n_c, x.shape[1]))
    np.add.at(means, request, x)
    means /= np.bincount(request, minlength=n_c)[:, None]
    se = means.std(axis=0, ddof=1) / np.sqrt(n_c) if n_c > 1 else np.full(x.shape[1], np.nan)
    return means.mean(axis=0), se


def paired(
    name: str, est: NDArray[np.float64], truth: NDArray[np.float64], request: NDArray[np.int64]
) -> Paired:
    """Pair an estimator's per-start values with the live truth's, both float64 (S, D)."""
    mean, se = _cluster_mean_se(est, request)
    bias, bias_se = _cluster_mean_se(est - truth, request)
    return Paired(name, mean, se, bias, bias_se, est)


def _retained(s: NDArray[np.float64]) -> NDArray[np.float64]:
    """R_d = 1 + Σ_{k≤d} s_k per row (s: (S, D))."""
    out: NDArray[np.float64] = 1.0 + np.cumsum(s, axis=1)
    return out


def estimates(
    batch: RoundBatch,
    arm: Arm,
    estimators: Sequence[str],
    *,
    seed: int,
    replicates: int,
    logging: Arm,
) -> dict[str, NDArray[np.float64]]:
    """Per estimator, ``surv`` (S, arm.depth) on the batch; ValueError on any flagged row.

    The replay seed (Monte Carlo) is derived from the archive's ``seed`` (module docstring).
    """
    replay_seed = int(
        uniform_bits(
            np.uint64(seed), np.uint64(0), np.int64(0), np.int64(START_POSITION),
            np.int64(STREAM_LIVE_REPLAY_SEED),
        )
    )  # fmt: skip
    cache = LawCache(batch.offsets, batch.draft_logprobs)
    out: dict[str, NDArray[np.float64]] = {}
    for name in estimators:
        est = get_estimator(name)
        vals = est.rounds(
            batch, arm, cache, seed=replay_seed, replicates=est.replicates_used(replicates),
            max_depth=arm.depth, logging=logging,
        )  # fmt: skip
        n_flag = int(np.count_nonzero(vals.flag))
        if n_flag:
            raise ValueError(f"{arm.canonical}: {n_flag} flagged rows under {name}")
        out[name] = vals.surv
    return out


def _arm_truth(
    arm: Arm,
    accepts: NDArray[np.int8],
    surv: dict[str, NDArray[np.float64]],
    request: NDArray[np.int64],
) -> ArmTruth:
    ks = np.arange(1, arm.depth + 1)
    truth_s = (accepts[:, :, None] >= ks[None, None, :]).mean(axis=1)
    truth, truth_se = _cluster_mean_se(truth_s, request)
    r_truth, r_truth_se = _cluster_mean_se(_retained(truth_s), request)
    return ArmTruth(
        arm=arm.canonical,
        truth=truth,
        truth_se=truth_se,
        truth_by_start=truth_s,
        survival={n: paired(n, s, truth_s, request) for n, s in surv.items()},
        retained_truth=r_truth,
        retained_truth_se=r_truth_se,
        retained={n: paired(n, _retained(s), _retained(truth_s), request) for n, s in surv.items()},
    )


def live_truth(
    cfg: SynthConfig,
    seed: int,
    arms: Sequence[str | Arm],
    *,
    n_starts: int,
    n_live: int,
    rounds_per_request: int = 1,
    estimators: Sequence[str] = ESTIMATOR_NAMES,
    replicates: int = 16,
) -> LiveTruthTable:
    """Compare replay estimators with live rounds on sampled starts of the archive (cfg, seed).

    Parameters
    ----------
    cfg : SynthConfig
        The synthetic archive's configuration (its ``pair`` runs the live rounds).
    seed : int
        The archive's seed.
    arms : sequence of str or Arm
        Arms to evaluate; each arm's depth must be ≤ ``cfg.depth``.
    n_starts : int
        Sampled archived rounds (a multiple of ``rounds_per_request``).
    n_live : int
        Live rounds per start and arm.
    rounds_per_request : int
        Rounds sampled per request (the SE clusters by request).
    estimators : sequence of str
        Registry names (:func:`~specreplay.replay.estimators.get_estimator`).
    replicates : int
        Monte Carlo replicates.

    Returns
    -------
    LiveTruthTable
    """
    parsed = [a if isinstance(a, Arm) else parse_arm(a) for a in arms]
    for a in parsed:
        if a.depth > cfg.depth:
            raise ValueError(f"{a.canonical}: depth above the archive's {cfg.depth}")
    sampled = sample_starts(cfg, seed, n_starts=n_starts, rounds_per_request=rounds_per_request)
    batch = round_batch(sampled, cfg)
    logging = parse_arm(logging_arm_name(cfg))
    out = []
    for arm in parsed:
        surv = estimates(batch, arm, estimators, seed=seed, replicates=replicates, logging=logging)
        acc = live_accepts(cfg.pair, sampled.live, arm, n_live=n_live, n_candidates=cfg.top_k)
        out.append(_arm_truth(arm, acc, surv, sampled.request))
    return LiveTruthTable(
        arms=tuple(out),
        n_starts=n_starts,
        n_requests=n_starts // rounds_per_request,
        n_live=n_live,
        replicates=replicates,
        seed=seed,
        logging_arm=logging.canonical,
        surprise_growth=cfg.pair.surprise_growth,
    )

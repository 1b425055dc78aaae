"""Live ground truth for drafting policies (issue 14): rounds drafted live by a stop rule or table.

:mod:`specreplay_testing.livetruth` runs an arm's rounds live at a fixed depth. This module runs
them as a drafter following a **drafting policy** (:mod:`specreplay.sim.drafting`) would: from
each sampled archived round start, ``n_live`` live rounds whose drafter decides after every
drafted token whether to draft another, then the verifier's decisions, and per round the
positions drafted L and the accepted positions A.

Terms
-----
live path
    Replicate m from start s drafted to the policies' largest depth D, regardless of any rule:
    position j's token x_j is drawn from the arm's sampler law q^s_j at the live prefix
    x_1..x_{j−1} (the toy pair's state and prefix surprise move with it), by CDF inversion of
    ``u = uniform(seed_s, request key, m, j, STREAM_DRAFT)``, and the verifier's decision at j is
    ``v·q^v_j(x_j) < p_j(x_j)`` with ``v = uniform(seed_s, request key, m, j, STREAM_ACCEPT)``
    (standard rejection sampling: accepted with probability min(1, p_j(x_j)/q^v_j(x_j))). The
    keys are those of :mod:`specreplay_testing.livetruth` (``seed_s`` from STREAM_LIVE_ROUNDS):
    independent of the archive's draws, common to every arm and policy (common random numbers).
policy round
    The live round a drafter following the rule drafts: L = the first j at which the rule stops
    (else D), A = the leading accepted positions among 1..L. Because every draw is keyed by its
    position, a drafter that stops at L has drafted exactly x_1..x_L of the live path with the
    same uniforms (the token at j depends only on the prefix and the position-j draws), and the
    verifier's decisions at 1..L are the path's; so one path serves every policy, and
    :func:`draft_by` only applies the rule to it. (Tested against
    :func:`specreplay.sim.toy.live_round` run at depth L, one round at a time.)
stop rules (:func:`draft_by`, written here and nowhere else in the tests' path)
    ``stop-below:τ@D``: continue after position j while q^s_j(x_j) ≥ τ; stop after the first
    drafted token with q^s_j(x_j) < τ (that token is drafted and verified). ``stop-cum:τ@D``:
    continue while the running product Π_{i≤j} q^s_i(x_i) ≥ τ. ``depth-by-bucket``: L = the
    table's depth at the round's starting context. No acceptance factor enters any rule: the
    drafter decides before the verifier has seen anything.
live truth of a start
    P(A ≥ k) and P(L ≥ k), k = 1..D, the frequencies over the start's ``n_live`` policy rounds;
    R_d = 1 + Σ_{k≤d} P(A ≥ k) and E[L]_d = Σ_{k≤d} P(L ≥ k) (E[L] at d = D).
estimate of a start
    The estimator's ``surv`` on the archived round for the rule arm (``arm.with_rule(rule)``:
    P(A ≥ k)) and the length arm (``with_rule(rule, length=True)``: P(L ≥ k)), and their
    cumulative sums as above.

The pairing, the bias and its cluster-robust SE are :mod:`specreplay_testing.livetruth`'s
(:func:`~specreplay_testing.livetruth.paired`): d_s = est_s − truth_s has mean 0 given the start
for an unbiased estimator, and the SE is sd(request means of d)/√C over C i.i.d. requests.

A testing module, outside the runtime package. It depends on the sim layer, the replay
estimators (only through :func:`~specreplay.replay.estimators.get_estimator`, via livetruth),
NumPy and Numba.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from specreplay.replay.archive.batch import RoundBatch
from specreplay.sim.arms import Arm, parse_arm
from specreplay.sim.drafting import DraftRule, StopRule, parse_policy
from specreplay.sim.live import LiveScratch, LiveStarts, arm_codes, live_position, live_scratch
from specreplay.sim.synth import SynthConfig, logging_arm_name
from specreplay.sim.toy import (
    ToyPair,
    surprise_step,
)
from specreplay_testing.livetruth import (
    Paired,
    SampledStarts,
    estimates,
    paired,
    round_batch,
    sample_starts,
)

__all__ = [
    "ArmPolicies",
    "LivePaths",
    "PolicyRounds",
    "PolicyTruth",
    "PolicyTruthTable",
    "draft_by",
    "live_paths",
    "policy_truth",
    "survival_by_start",
]


# ================================================================================================
# kernels: live paths
# ================================================================================================


@njit(cache=True)
def _one_path(
    start: NDArray[np.int64],
    seed: np.uint64,
    rkey: np.uint64,
    m: np.int64,
    fp: NDArray[np.float64],
    gp: NDArray[np.float64],
    policy: NDArray[np.float64],
    quant: NDArray[np.int64],
    scratch: LiveScratch,
    q_out: NDArray[np.float64],
    a_out: NDArray[np.float64],
    acc_out: NDArray[np.bool_],
) -> None:
    """Draft one live path to depth D = q_out.shape[0] (module docstring), writing per position.

    ``start`` int64 (4,): family index, context, last two tokens. ``q_out`` float64 (D,):
    q^s_j(x_j); ``a_out`` float64 (D,): min(1, p_j(x_j)/q^v_j(x_j)); ``acc_out`` bool (D,): the
    verifier's decision at j (``v·q^v_j(x_j) < p_j(x_j)``), computed at every position whatever
    happened before. ``scratch``: :func:`~specreplay.sim.live.live_scratch`.
    """
    ids, _, _, cand, lp, _, qs, qv, _, _, _, _ = scratch
    fam, ctx0, a, b = start[0], start[1], start[2], start[3]
    surprise = 0.0
    for j in range(1, q_out.shape[0] + 1):
        x, px, v = live_position(
            fam, ctx0, np.int64(j), a, b, surprise, seed, rkey, m, fp, gp, policy, quant,
            scratch, 0,
        )  # fmt: skip
        q_out[j - 1] = qs[x]
        a_out[j - 1] = 1.0 if not qv[x] > px else px / qv[x]
        acc_out[j - 1] = v * qv[x] < px  # docs/methods.md#rounds-retained-tokens-and-r
        surprise = surprise_step(surprise, lp[x], px)
        a, b = b, ids[cand[x]]


@njit(parallel=True, cache=True)
def _paths_kernel(
    start: NDArray[np.int64],
    seed: NDArray[np.uint64],
    rkey: NDArray[np.uint64],
    fp: NDArray[np.float64],
    gp: NDArray[np.float64],
    policy: NDArray[np.float64],
    quant: NDArray[np.int64],
    n_explicit: np.int64,
    n_cand: np.int64,
    q_out: NDArray[np.float64],
    a_out: NDArray[np.float64],
    acc_out: NDArray[np.bool_],
) -> None:
    """Write the live paths of every start s and replicate m into ``*_out[s, m, :]`` (S, M, D).

    ``start`` int64 (S, 4): family index, context, last two tokens; ``seed``, ``rkey`` uint64
    (S,) as :class:`~specreplay.sim.live.LiveStarts`; outputs as :func:`_one_path`. Each (s, m)
    depends on its keys alone, so the result does not depend on threads.
    """
    n_starts, n_live = q_out.shape[0], q_out.shape[1]
    n_chunks = min(n_starts, 256)  # scratch allocated once per chunk of starts
    for c in prange(n_chunks):
        scratch = live_scratch(n_explicit, n_cand)
        for s in range(c * n_starts // n_chunks, (c + 1) * n_starts // n_chunks):
            for m in range(n_live):
                _one_path(
                    start[s], seed[s], rkey[s], np.int64(m), fp, gp, policy, quant, scratch,
                    q_out[s, m], a_out[s, m], acc_out[s, m],
                )  # fmt: skip


# ================================================================================================
# wrappers
# ================================================================================================


@dataclass(frozen=True)
class LivePaths:
    """Live paths of one arm (S starts × M replicates × D positions), module docstring.

    Attributes
    ----------
    q_sampler : float64 (S, M, D)
        q^s_j(x_j), the sampler law's probability of the drafted token.
    accept_prob : float64 (S, M, D)
        min(1, p_j(x_j)/q^v_j(x_j)), the probability the verifier accepts it.
    accepted : bool (S, M, D)
        The verifier's decision at every position (not cut at the first rejection).
    context : int64 (S,)
        Each start's context length (``depth-by-bucket`` reads it).
    """

    q_sampler: NDArray[np.float64]
    accept_prob: NDArray[np.float64]
    accepted: NDArray[np.bool_]
    context: NDArray[np.int64]

    @property
    def depth(self) -> int:
        """D, the positions of every path."""
        return int(self.q_sampler.shape[2])


def live_paths(
    pair: ToyPair,
    starts: LiveStarts,
    arm: Arm,
    *,
    n_live: int,
    depth: int,
    n_candidates: int = 32,
) -> LivePaths:
    """Draft ``n_live`` live paths of ``arm``'s sampler to ``depth`` from each start.

    The arm's own depth and rule are ignored: a path drafts every position (module docstring).
    """
    if n_live < 1 or depth < 1:
        raise ValueError(f"n_live and depth must be >= 1, got {n_live} and {depth}")
    if not 1 <= n_candidates <= pair.n_explicit:
        raise ValueError(f"n_candidates must be in 1..{pair.n_explicit}, got {n_candidates}")
    fp, gp = pair.packed()
    codes = arm_codes(arm)
    shape = (starts.family.shape[0], n_live, depth)
    q = np.zeros(shape)
    a = np.zeros(shape)
    acc = np.zeros(shape, dtype=np.bool_)
    if shape[0]:
        start = np.column_stack([starts.family, starts.context, starts.history]).astype(np.int64)
        _paths_kernel(
            start, starts.seed, starts.request_key, fp, gp, codes.policy, codes.quant,
            np.int64(pair.n_explicit), np.int64(n_candidates), q, a, acc,
        )  # fmt: skip
    return LivePaths(q, a, acc, starts.context.copy())


@dataclass(frozen=True)
class PolicyRounds:
    """Policy rounds on live paths (module docstring): per start and replicate, int64 (S, M).

    Attributes
    ----------
    drafted : int64 (S, M)
        L, the positions the drafter drafted (1..D).
    accepted : int64 (S, M)
        A, the leading accepted positions among 1..L.
    """

    drafted: NDArray[np.int64]
    accepted: NDArray[np.int64]


def _first_stop(stop: NDArray[np.bool_], depth: int) -> NDArray[np.int64]:
    """L = 1 + the first index j with ``stop[..., j]`` (the stopping token is drafted), else D."""
    first = np.argmax(stop, axis=-1).astype(np.int64) + 1
    out: NDArray[np.int64] = np.where(stop.any(axis=-1), first, np.int64(depth))
    return out


def draft_by(rule: DraftRule, paths: LivePaths) -> PolicyRounds:
    """Apply a drafting policy to live paths: L and A of each policy round (module docstring).

    This is the live side's stop rule, written apart from the replay's so that one misreading
    cannot pass both: continue while q^s ≥ τ (``stop-below``) or while the running product of
    q^s ≥ τ (``stop-cum``); a table's depth at the start's context.
    """
    d = paths.depth
    s, m = paths.q_sampler.shape[:2]
    if rule.max_depth > d:
        raise ValueError(f"policy {rule.canonical}: drafts up to {rule.max_depth} > {d} positions")
    if isinstance(rule, StopRule):
        q = paths.q_sampler[:, :, : rule.depth]
        running = np.cumprod(q, axis=-1) if rule.cumulative else q
        length = _first_stop(running < rule.tau, rule.depth)
    else:
        by_start = np.array([rule.depth_at(int(c)) for c in paths.context], dtype=np.int64)
        if np.any(by_start < 1):
            raise ValueError(f"policy {rule.canonical}: a start has no depth")
        length = np.broadcast_to(by_start[:, None], (s, m)).copy()
    leading = np.cumprod(paths.accepted, axis=-1).sum(axis=-1).astype(np.int64)
    return PolicyRounds(drafted=length, accepted=np.minimum(leading, length))


def survival_by_start(x: NDArray[np.int64], depth: int) -> NDArray[np.float64]:
    """Per start, the frequency over replicates of x ≥ k, k = 1..depth: float64 (S, depth)."""
    ks = np.arange(1, depth + 1)
    out: NDArray[np.float64] = (x[:, :, None] >= ks[None, None, :]).mean(axis=1)
    return out


@dataclass(frozen=True)
class PolicyTruth:
    """Live truth and the estimators of one arm under one drafting policy, k = 1..D.

    Attributes
    ----------
    policy : str
        The rule's canonical form.
    truth_by_start, length_truth_by_start : float64 (S, D)
        Live P(A ≥ k) and P(L ≥ k) per start (0 past a table's depth).
    survival, retained : dict of str to Paired
        Per estimator, P(A ≥ k) and R_d = 1 + Σ_{k≤d} P(A ≥ k) against the live truth.
    length, mean_length : dict of str to Paired
        Per estimator, P(L ≥ k) and E[L]_d = Σ_{k≤d} P(L ≥ k) against the live truth.
    """

    policy: str
    truth_by_start: NDArray[np.float64]
    length_truth_by_start: NDArray[np.float64]
    survival: dict[str, Paired]
    retained: dict[str, Paired]
    length: dict[str, Paired]
    mean_length: dict[str, Paired]


@dataclass(frozen=True)
class ArmPolicies:
    """One arm's policies against their live truth.

    Attributes
    ----------
    arm : str
        The arm's canonical form as given (its sampler and verifier; its depth is not used).
    policies : tuple of PolicyTruth
    paths : LivePaths
        The live paths every policy's rounds were cut from (D = the policies' largest depth).
    """

    arm: str
    policies: tuple[PolicyTruth, ...]
    paths: LivePaths

    def policy(self, text: str | DraftRule) -> PolicyTruth:
        """Return the :class:`PolicyTruth` of a policy (any spelling)."""
        canon = (parse_policy(text) if isinstance(text, str) else text).canonical
        for p in self.policies:
            if p.policy == canon:
                return p
        raise KeyError(f"policy {canon!r} is not in the table of {self.arm}")


@dataclass(frozen=True)
class PolicyTruthTable:
    """The result of :func:`policy_truth`.

    Attributes
    ----------
    arms : tuple of ArmPolicies
    sampled : SampledStarts
        The starts, common to every arm (``sampled.request`` clusters the SE).
    n_live, seed : int
        Live rounds per start; the archive's seed.
    logging_arm : str
    """

    arms: tuple[ArmPolicies, ...]
    sampled: SampledStarts
    n_live: int
    seed: int
    logging_arm: str

    def arm(self, name: str | Arm) -> ArmPolicies:
        """Return the :class:`ArmPolicies` of arm ``name`` (any spelling)."""
        canon = (parse_arm(name) if isinstance(name, str) else name).canonical
        for a in self.arms:
            if a.arm == canon:
                return a
        raise KeyError(f"arm {canon!r} is not in the table")


def _cum(x: NDArray[np.float64], plus: float) -> NDArray[np.float64]:
    out: NDArray[np.float64] = plus + np.cumsum(x, axis=1)
    return out


def _policy_truth(
    rule: DraftRule,
    rounds: PolicyRounds,
    est: dict[str, NDArray[np.float64]],
    est_len: dict[str, NDArray[np.float64]],
    request: NDArray[np.int64],
) -> PolicyTruth:
    d = rule.max_depth
    truth = survival_by_start(rounds.accepted, d)
    truth_l = survival_by_start(rounds.drafted, d)
    r, el = _cum(truth, 1.0), _cum(truth_l, 0.0)
    return PolicyTruth(
        policy=rule.canonical,
        truth_by_start=truth,
        length_truth_by_start=truth_l,
        survival={n: paired(n, s, truth, request) for n, s in est.items()},
        retained={n: paired(n, _cum(s, 1.0), r, request) for n, s in est.items()},
        length={n: paired(n, s, truth_l, request) for n, s in est_len.items()},
        mean_length={n: paired(n, _cum(s, 0.0), el, request) for n, s in est_len.items()},
    )


def _arm_policies(
    cfg: SynthConfig,
    sampled: SampledStarts,
    batch: RoundBatch,
    arm: Arm,
    rules: Sequence[DraftRule],
    *,
    seed: int,
    n_live: int,
    estimators: Sequence[str],
) -> ArmPolicies:
    """Run ``arm`` by each rule, live and in the replay (validated by :func:`policy_truth`)."""
    depth = max(r.max_depth for r in rules)
    paths = live_paths(
        cfg.pair, sampled.live, arm, n_live=n_live, depth=depth, n_candidates=cfg.top_k
    )
    logging = parse_arm(logging_arm_name(cfg))
    out = []
    for rule in rules:
        est, est_len = (
            estimates(batch, a, estimators, seed=seed, replicates=0, logging=logging)
            for a in (arm.with_rule(rule), arm.with_rule(rule, length=True))
        )
        out.append(_policy_truth(rule, draft_by(rule, paths), est, est_len, sampled.request))
    return ArmPolicies(arm.canonical, tuple(out), paths)


def policy_truth(
    cfg: SynthConfig,
    seed: int,
    cases: Mapping[str | Arm, Sequence[str | DraftRule]],
    *,
    n_starts: int,
    n_live: int,
    rounds_per_request: int = 1,
    estimators: Sequence[str] = ("importance",),
) -> PolicyTruthTable:
    """Compare replay estimators with live policy rounds on sampled starts of (cfg, seed).

    Parameters
    ----------
    cfg : SynthConfig
        The synthetic archive (its ``pair`` runs the live rounds); ``cfg.depth`` ≥ every
        policy's largest depth.
    seed : int
        The archive's seed.
    cases : mapping of arm to sequence of policies
        Per arm (str or Arm: its sampler and verifier; its depth is not used), the drafting
        policies to run it by (str or DraftRule).
    n_starts, n_live, rounds_per_request : int
        As :func:`specreplay_testing.livetruth.live_truth`; the starts are common to every arm.
    estimators : sequence of str
        Registry names; each runs on every rule arm and its length arm.

    Returns
    -------
    PolicyTruthTable
    """
    parsed = {
        (a if isinstance(a, Arm) else parse_arm(a)): [
            parse_policy(p) if isinstance(p, str) else p for p in ps
        ]
        for a, ps in cases.items()
    }
    for arm, rules in parsed.items():
        depth = max((r.max_depth for r in rules), default=0)
        if not 1 <= depth <= cfg.depth:
            raise ValueError(
                f"{arm.canonical}: policies draft up to {depth} positions, the archive records "
                f"1..{cfg.depth}"
            )
    sampled = sample_starts(cfg, seed, n_starts=n_starts, rounds_per_request=rounds_per_request)
    batch = round_batch(sampled, cfg)
    arms = [
        _arm_policies(cfg, sampled, batch, a, rs, seed=seed, n_live=n_live, estimators=estimators)
        for a, rs in parsed.items()
    ]
    return PolicyTruthTable(
        arms=tuple(arms),
        sampled=sampled,
        n_live=n_live,
        seed=seed,
        logging_arm=parse_arm(logging_arm_name(cfg)).canonical,
    )

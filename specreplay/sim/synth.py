"""Synthetic replay archive from the toy model pair (.md#position-traces-schema-v1 schema v1, §7).

See docs/inputs.md#position-traces-schema-v1.

The generator logs an archive the way a serving engine would: per request, rounds of the logging
arm (``top32:t0.7@D``: the draft's top-32 candidates, q = softmax(logprob / 0.7) over them, depth
D) verified by standard rejection sampling against the toy target (:mod:`specreplay.sim.toy`).
Every (request, round, position) is a row; positions after the first rejection are recorded (the
target scored all of them in one pass) with ``accepted = False``.

The **built-in archive** (``specreplay synth`` and ``specreplay demo``) is drafted at depth 8
(``SYNTH_DEPTH`` of :mod:`specreplay.pipelines.options`, ``synth --depth``); :class:`SynthConfig`
keeps depth 5 as its own default (the small archives of the tests and benchmarks, whose expected
figures were worked out at depth 5). Why 8, and why the logging arm drafts 8 rather than drafting 5
and recording 8 (issue 14): a replay can only answer depths and stop rules up to the positions the
archive records, so an archive drafted at 5 can only say that 5, the deepest recorded, is best, and
a stop rule can only stop earlier. Here the target verifies every drafted position, so a logging
arm that drafts 8 gives MEASURED acceptance (``accepted``), the logged law (``emitted_q``) and so
importance weights at every recorded position. Recording 8 positions of an arm that drafts 5 would
mean drafting positions 6..8 without verifying them: no verifier decision there, so MEASURED
acceptance and the path-bias diagnostic would stop at 5, and ``accepted`` would need a meaning the
schema does not give it.

Requests are independent and every draw is counter-based (:mod:`specreplay.sim.rng`), keyed by
(seed, request key, round, position, stream), so the kernel runs requests in parallel and the
archive is identical for any thread count or shard size. A request's family, starting context
(log-uniform over [context_min, context_max], spanning every default bucket) and starting history
use round 0, position 0 (a position no round uses), streams ``START_STREAMS`` of
:mod:`specreplay.sim.rng`.

This module depends on NumPy, Numba and polars (the frames are the writer's input).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from specreplay import use_numba_cache
from specreplay.sim.policy import policy_row
from specreplay.sim.rng import (
    START_POSITION,
    STREAM_START_CONTEXT,
    STREAM_START_FAMILY,
    STREAM_START_TOKEN1,
    STREAM_START_TOKEN2,
    request_key,
    uniform,
)
from specreplay.sim.toy import (
    FAMILIES,
    STREAM_ACCEPT_I64,
    STREAM_DRAFT_I64,
    STREAM_RESIDUAL_I64,
    VOCAB_SIZE,
    RoundStart,
    ToyPair,
    draw_cdf,
    position_laws,
    sample_residual,
    state_key_kernel,
    surprise_step,
    target_law_alloc,
)

__all__ = [
    "SynthConfig",
    "SynthShard",
    "logging_arm_name",
    "request_ids",
    "request_start",
    "simulate_shard",
]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)


@dataclass(frozen=True)
class SynthConfig:
    """What to generate.

    Attributes
    ----------
    n_requests, rounds, depth : int
        Requests, rounds per request and drafted positions per round (default 5; the built-in
        archive drafts 8: module docstring).
    temperature, top_k : float, int
        Logging policy: ``top_k`` candidates (≤ ``pair.n_explicit``), q = softmax(logprob / T).
    greedy : bool
        Log a greedy drafter instead (point mass on the top candidate; arm ``greedy@depth``).
    requests_per_shard : int
        Requests per frame yielded by :func:`synth_frames`.
    context_min, context_max : int
        Starting contexts are log-uniform on [context_min, context_max].
    pair : ToyPair
        The model pair.
    """

    n_requests: int = 2000
    rounds: int = 64
    depth: int = 5
    temperature: float = 0.7
    top_k: int = 32
    greedy: bool = False
    requests_per_shard: int = 250
    context_min: int = 256
    context_max: int = 131_072
    pair: ToyPair = field(default_factory=ToyPair)

    def __post_init__(self) -> None:
        if self.n_requests < 1 or self.rounds < 1 or self.requests_per_shard < 1:
            raise ValueError("n_requests, rounds and requests_per_shard must be >= 1")
        if not 1 <= self.depth <= 127:
            raise ValueError(f"depth must be in 1..127, got {self.depth}")
        if not 1 <= self.top_k <= self.pair.n_explicit:
            raise ValueError(f"top_k must be in 1..{self.pair.n_explicit}, got {self.top_k}")
        if not self.greedy and not self.temperature > 0.0:
            raise ValueError(f"temperature must be > 0 (use greedy=True), got {self.temperature}")
        if not 1 <= self.context_min <= self.context_max:
            raise ValueError("need 1 <= context_min <= context_max")


def logging_arm_name(cfg: SynthConfig) -> str:
    """Canonical arm of the logging policy: ``top32:t0.7@5`` or ``greedy@5``.

    See docs/methods.md#arms-policy-and-quantizers.
    """
    if cfg.greedy:
        return f"greedy@{cfg.depth}"
    return f"top{cfg.top_k}:t{cfg.temperature:g}@{cfg.depth}"


def request_ids(n_requests: int) -> list[str]:
    """Request ids ``synth-00000``… (zero-padded to at least 5 digits)."""
    width = max(5, len(str(n_requests - 1)))
    return [f"synth-{i:0{width}d}" for i in range(n_requests)]


# ================================================================================================
# kernels
# ================================================================================================


@njit(cache=True)
def _request_start(
    seed: np.uint64, rkey: np.uint64, log_ctx_min: float, log_ctx_max: float, n_families: np.int64
) -> tuple[np.int64, np.int64, np.int64, np.int64]:
    """(family index, starting context, history token 1, history token 2) of a request."""
    at = np.int64(START_POSITION)
    u0 = uniform(seed, rkey, np.int64(0), at, np.int64(STREAM_START_FAMILY))
    u1 = uniform(seed, rkey, np.int64(0), at, np.int64(STREAM_START_CONTEXT))
    u2 = uniform(seed, rkey, np.int64(0), at, np.int64(STREAM_START_TOKEN1))
    u3 = uniform(seed, rkey, np.int64(0), at, np.int64(STREAM_START_TOKEN2))
    fam = np.int64(u0 * n_families)
    ctx = np.int64(round(math.exp(log_ctx_min + u1 * (log_ctx_max - log_ctx_min))))
    return fam, ctx, np.int64(u2 * VOCAB_SIZE), np.int64(u3 * VOCAB_SIZE)


@njit(cache=True)
def _simulate_request(
    i: int,
    seed: np.uint64,
    rkeys: NDArray[np.uint64],
    rounds: np.int64,
    depth: np.int64,
    n_cand: np.int64,
    greedy: bool,
    temperature: float,
    log_ctx_min: float,
    log_ctx_max: float,
    fp: NDArray[np.float64],
    gp: NDArray[np.float64],
    n_explicit: np.int64,
    zero: int,
    fam_out: NDArray[np.int64],
    round_ctx: NDArray[np.int64],
    round_hist: NDArray[np.int64],
    round_bonus: NDArray[np.int64],
    cand_ids: NDArray[np.int64],
    draft_lp: NDArray[np.float64],
    target_p: NDArray[np.float64],
    emitted_q: NDArray[np.float64],
    drafted: NDArray[np.int64],
    accepted: NDArray[np.bool_],
    states: NDArray[np.uint64],
) -> None:
    """Simulate request ``i`` of ``rkeys`` into its rows (see :func:`_simulate` for the arrays)."""
    rkey = rkeys[i]
    fam, ctx, t1, t2 = _request_start(seed, rkey, log_ctx_min, log_ctx_max, np.int64(fp.shape[0]))
    fam_out[i] = fam
    ids = np.empty((depth, n_explicit), dtype=np.int64)
    p = np.empty((depth, n_explicit))
    logq1 = np.empty((depth, n_explicit))
    cand = np.empty((depth, n_cand), dtype=np.int64)
    ts = np.empty(depth)
    xs = np.empty(depth, dtype=np.int64)
    for r in range(rounds):
        rr = i * rounds + r
        round_ctx[rr] = ctx
        round_hist[rr, 0] = t1
        round_hist[rr, 1] = t2
        a = t1
        b = t2
        surprise = 0.0
        for j in range(1, depth + 1):
            row = rr * depth + (j - 1)
            key = state_key_kernel(fam, ctx + j - 1, a, b)
            ts[j - 1] = position_laws(
                key,
                fam,
                ctx + j - 1,
                np.int64(j),
                surprise,
                fp,
                gp,
                ids[j - 1],
                p[j - 1],
                logq1[j - 1],
                cand[j - 1],
            )
            for c in range(n_cand):
                k = cand[j - 1, c]
                cand_ids[row, c] = ids[j - 1, k]
                draft_lp[row, c] = logq1[j - 1, k]
                target_p[row, c] = p[j - 1, k]
            # the replay's law of the logging arm (docs/methods.md#arms-policy-and-quantizers), so
            # emitted_q equals it bit for bit
            policy_row(draft_lp[row], greedy, n_cand, temperature, 1.0, emitted_q[row], zero)
            x = draw_cdf(
                emitted_q[row], uniform(seed, rkey, np.int64(r), np.int64(j), STREAM_DRAFT_I64)
            )
            xs[j - 1] = x
            tok = cand_ids[row, x]
            drafted[row] = tok
            states[row] = key
            accepted[row] = False
            surprise = surprise_step(surprise, draft_lp[row, x], target_p[row, x])
            a = b
            b = tok
        n_acc = 0
        # docs/methods.md#rounds-retained-tokens-and-r: accept x when v·q(x) < p(x), stop at first
        # no
        for j in range(1, depth + 1):
            row = rr * depth + (j - 1)
            x = xs[j - 1]
            v = uniform(seed, rkey, np.int64(r), np.int64(j), STREAM_ACCEPT_I64)
            if v * emitted_q[row, x] < target_p[row, x]:
                accepted[row] = True
                n_acc += 1
            else:
                break
        if n_acc < depth:  # correction from the residual at the first rejected position
            j = n_acc + 1
            row = rr * depth + (j - 1)
            y = sample_residual(
                ids[j - 1],
                p[j - 1],
                cand[j - 1],
                emitted_q[row],
                ts[j - 1],
                states[row],
                gp,
                uniform(seed, rkey, np.int64(r), np.int64(j), STREAM_RESIDUAL_I64),
            )
        else:  # bonus token from the target at position depth + 1
            key = state_key_kernel(fam, ctx + depth, a, b)
            ids_b, p_b, ts_b = target_law_alloc(key, fam, n_explicit, fp, gp)
            y = sample_residual(
                ids_b,
                p_b,
                np.empty(0, dtype=np.int64),
                np.empty(0),
                ts_b,
                key,
                gp,
                uniform(seed, rkey, np.int64(r), np.int64(depth + 1), STREAM_RESIDUAL_I64),
            )
        round_bonus[rr] = y
        t1 = drafted[rr * depth + n_acc - 1] if n_acc >= 1 else t2
        t2 = y
        ctx += 1 + n_acc


@njit(parallel=True, cache=True)
def _simulate(
    seed: np.uint64,
    rkeys: NDArray[np.uint64],
    rounds: np.int64,
    depth: np.int64,
    n_cand: np.int64,
    greedy: bool,
    temperature: float,
    log_ctx_min: float,
    log_ctx_max: float,
    fp: NDArray[np.float64],
    gp: NDArray[np.float64],
    n_explicit: np.int64,
    zero: int,
    fam_out: NDArray[np.int64],
    round_ctx: NDArray[np.int64],
    round_hist: NDArray[np.int64],
    round_bonus: NDArray[np.int64],
    cand_ids: NDArray[np.int64],
    draft_lp: NDArray[np.float64],
    target_p: NDArray[np.float64],
    emitted_q: NDArray[np.float64],
    drafted: NDArray[np.int64],
    accepted: NDArray[np.bool_],
    states: NDArray[np.uint64],
) -> None:
    """Simulate ``rkeys.shape[0]`` requests; rows in (request, round, position) order.

    Parameters
    ----------
    seed : uint64; rkeys : uint64 (n,)
        Seed and request keys.
    rounds, depth, n_cand : int64
        Rounds per request, positions per round, candidates per position.
    greedy, temperature : logging policy.
    log_ctx_min, log_ctx_max : float
        Log of the starting-context range.
    fp, gp : packed :class:`~specreplay.sim.toy.ToyPair`; n_explicit its explicit-set size.
    zero : int
        0, passed at run time (:func:`~specreplay.sim.policy.policy_row` needs a zero the
        compiler cannot see, so that the logged law has the replay's bits).
    fam_out : int64 (n,)
        Written: family index per request.
    round_ctx : int64 (n·rounds,); round_hist : int64 (n·rounds, 2); round_bonus : int64 (n·rounds,)
        Written per round: start context, start history, and the correction/bonus token.
    cand_ids, draft_lp, target_p, emitted_q : (n·rounds·depth, n_cand)
        Written per row (int64, float64, float64, float64).
    drafted : int64 (rows,); accepted : bool (rows,); states : uint64 (rows,)
        Written per row.
    """
    for i in prange(rkeys.shape[0]):  # requests are independent: counter-based uniforms
        _simulate_request(
            i,
            seed,
            rkeys,
            rounds,
            depth,
            n_cand,
            greedy,
            temperature,
            log_ctx_min,
            log_ctx_max,
            fp,
            gp,
            n_explicit,
            zero,
            fam_out,
            round_ctx,
            round_hist,
            round_bonus,
            cand_ids,
            draft_lp,
            target_p,
            emitted_q,
            drafted,
            accepted,
            states,
        )


# ================================================================================================
# Python API
# ================================================================================================


@dataclass(frozen=True)
class SynthShard:
    """Raw arrays of one shard (requests ``first .. first + n - 1``).

    Attributes
    ----------
    request_ids : list of str (n,)
    family : int64 (n,)
        Index into :data:`~specreplay.sim.toy.FAMILIES`.
    round_context : int64 (n·rounds,)
        Context at the start of each round.
    round_history : int64 (n·rounds, 2)
        Last two emitted tokens at the start of each round.
    round_final : int64 (n·rounds,)
        The round's correction or bonus token (its last emitted token).
    cand_ids : int64 (rows, top_k); draft_logprobs, target_probs, emitted_q : float64 (rows, top_k)
    drafted_id : int64 (rows,); accepted : bool (rows,); toy_state : uint64 (rows,)
        Per row, rows = n·rounds·depth in (request, round, position) order.
    """

    request_ids: list[str]
    family: NDArray[np.int64]
    round_context: NDArray[np.int64]
    round_history: NDArray[np.int64]
    round_final: NDArray[np.int64]
    cand_ids: NDArray[np.int64]
    draft_logprobs: NDArray[np.float64]
    target_probs: NDArray[np.float64]
    emitted_q: NDArray[np.float64]
    drafted_id: NDArray[np.int64]
    accepted: NDArray[np.bool_]
    toy_state: NDArray[np.uint64]

    def round_start(self, request: int, rnd: int) -> RoundStart:
        """Return the start of round ``rnd`` of the shard's ``request``-th request."""
        n_rounds = self.round_context.shape[0] // len(self.request_ids)
        rr = request * n_rounds + rnd
        return RoundStart(
            family=FAMILIES[int(self.family[request])],
            context_tokens=int(self.round_context[rr]),
            history=(int(self.round_history[rr, 0]), int(self.round_history[rr, 1])),
        )


def request_start(cfg: SynthConfig, seed: int, request_id: str) -> RoundStart:
    """Return the start of round 0 of a request, as the generator draws it."""
    fam, ctx, t1, t2 = _request_start(
        np.uint64(seed),
        request_key(request_id),
        math.log(cfg.context_min),
        math.log(cfg.context_max),
        np.int64(len(FAMILIES)),
    )
    return RoundStart(
        family=FAMILIES[int(fam)], context_tokens=int(ctx), history=(int(t1), int(t2))
    )


def simulate_shard(cfg: SynthConfig, seed: int, ids: list[str]) -> SynthShard:
    """Simulate the requests ``ids`` (any ids; the generator uses :func:`request_ids`)."""
    n = len(ids)
    n_rounds = n * cfg.rounds
    rows = n_rounds * cfg.depth
    k = cfg.top_k
    fp, gp = cfg.pair.packed()
    rkeys = np.array([request_key(s) for s in ids], dtype=np.uint64)
    out = SynthShard(
        request_ids=list(ids),
        family=np.empty(n, dtype=np.int64),
        round_context=np.empty(n_rounds, dtype=np.int64),
        round_history=np.empty((n_rounds, 2), dtype=np.int64),
        round_final=np.empty(n_rounds, dtype=np.int64),
        cand_ids=np.empty((rows, k), dtype=np.int64),
        draft_logprobs=np.empty((rows, k)),
        target_probs=np.empty((rows, k)),
        emitted_q=np.empty((rows, k)),
        drafted_id=np.empty(rows, dtype=np.int64),
        accepted=np.empty(rows, dtype=np.bool_),
        toy_state=np.empty(rows, dtype=np.uint64),
    )
    _simulate(
        np.uint64(seed),
        rkeys,
        np.int64(cfg.rounds),
        np.int64(cfg.depth),
        np.int64(k),
        cfg.greedy,
        float(cfg.temperature),
        math.log(cfg.context_min),
        math.log(cfg.context_max),
        fp,
        gp,
        np.int64(cfg.pair.n_explicit),
        0,  # the run-time zero of sim.policy.policy_row
        out.family,
        out.round_context,
        out.round_history,
        out.round_final,
        out.cand_ids,
        out.draft_logprobs,
        out.target_probs,
        out.emitted_q,
        out.drafted_id,
        out.accepted,
        out.toy_state,
    )
    return out

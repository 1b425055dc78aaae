"""Many live rounds of an arm on the toy pair, compiled: the accept counts only.

:func:`specreplay.sim.toy.live_round` runs one round in Python (about a millisecond); the live
ground truth of :mod:`specreplay_testing.livetruth` needs hundreds of thousands of them. This
module runs the same round in one Numba kernel for many (round start, replicate) pairs and keeps
only what the truth needs: A, the number of leading accepted positions.

Terms
-----
arm law
    The arm's **sampler law** at a position: its policy (:func:`~specreplay.sim.policy.policy_row`)
    on the candidates' draft log-probabilities, then its sampler quantizer
    (:func:`~specreplay.sim.policy.quantize_row`); the **verifier law** is the same policy through
    the verifier quantizer (docs/methods.md#arms-policy-and-quantizers). The replay estimators use
    exactly these laws.
live round
    Positions 1..d drafted autoregressively from a :class:`~specreplay.sim.toy.RoundStart` (each
    state built from the drafted prefix, so the prefix surprise moves the draft law), the drafted
    candidate x drawn by CDF inversion of the sampler law with ``u = uniform(seed, key, m, j,
    STREAM_DRAFT)`` and accepted when ``v·q^v(x) < p(x)`` with ``v = uniform(seed, key, m, j,
    STREAM_ACCEPT)`` (docs/methods.md#rounds-retained-tokens-and-r); ``m`` is the replicate, passed
    as the round index.

Decisions
---------
- The kernel verifies each position as soon as it is drafted and stops at the first rejection:
  the draft at position j + 1 cannot change the decision at j, and the uniforms are keyed per
  position, so A is exactly that of :func:`~specreplay.sim.toy.live_round` (tested) at about 2/3
  of the cost. No correction or bonus token is drawn (it does not enter A).
- The candidate draw is float CDF inversion on the quantized law (m_i / 2^N for dyadic arms), as
  in ``live_round``; the Monte Carlo replay draws dyadic arms on the integers, which is the same
  law with a different map from u to tokens.

This module depends on NumPy and Numba only (and on the sim layer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from specreplay import use_numba_cache
from specreplay.sim.arms import Arm
from specreplay.sim.policy import (
    HIST_BINS,
    KIND_CODES,
    ROUNDING_CODES,
    policy_row,
    quantize_row,
)
from specreplay.sim.rng import uniform
from specreplay.sim.toy import (
    STREAM_ACCEPT_I64,
    STREAM_DRAFT_I64,
    RoundStart,
    ToyPair,
    draw_cdf,
    family_index,
    position_laws,
    state_key_kernel,
    surprise_step,
)

__all__ = [
    "ArmCodes",
    "LiveScratch",
    "LiveStarts",
    "arm_codes",
    "arm_round_laws",
    "live_accepts",
    "live_position",
    "live_scratch",
]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)

Law = Callable[[NDArray[np.float64]], NDArray[np.float64]]


@dataclass(frozen=True)
class ArmCodes:
    """An arm's laws as kernel arguments.

    Attributes
    ----------
    policy : float64 (4,)
        [greedy (0/1), top_k (0: all), temperature, top_p].
    quant : int64 (7,)
        [sampler kind code, bits, rounding code, verifier kind code, bits, rounding code,
        matched (0/1)] (codes of :data:`~specreplay.sim.policy.KIND_CODES` and
        :data:`~specreplay.sim.policy.ROUNDING_CODES`).
    """

    policy: NDArray[np.float64]
    quant: NDArray[np.int64]


def arm_codes(arm: Arm) -> ArmCodes:
    """Return the kernel form of ``arm``'s policy and quantizers."""
    pol = arm.policy
    top_k = 0 if pol.top_k is None else int(pol.top_k)
    s, v = arm.sampler, arm.verifier
    quant = [KIND_CODES[s.kind], s.bits, ROUNDING_CODES[s.rounding]]
    quant += [KIND_CODES[v.kind], v.bits, ROUNDING_CODES[v.rounding], int(arm.matched)]
    return ArmCodes(
        policy=np.array([float(pol.greedy), float(top_k), pol.temperature, pol.top_p]),
        quant=np.array(quant, dtype=np.int64),
    )


@njit(cache=True)
def _arm_row(
    lp: NDArray[np.float64],
    policy: NDArray[np.float64],
    quant: NDArray[np.int64],
    verifier: bool,
    q: NDArray[np.float64],
    out_q: NDArray[np.float64],
    out_m: NDArray[np.int64],
    key: NDArray[np.float64],
    order: NDArray[np.int64],
    hist: NDArray[np.int64],
    zero: int,
) -> None:
    """Write one row's sampler law (``verifier`` False) or verifier law into ``out_q`` (n,).

    ``q`` (n,) receives the policy law; ``out_m``, ``key``, ``order`` (n,) and ``hist``
    (HIST_BINS,) are scratch; ``zero`` is the run-time 0 of :func:`policy_row`.
    """
    top_k = np.int64(policy[1])
    policy_row(lp, policy[0] != 0.0, top_k, policy[2], policy[3], q, zero)
    o = 3 if verifier else 0
    quantize_row(
        q, 0, lp.shape[0], quant[o], quant[o + 1], quant[o + 2], out_q, out_m, key, order, hist
    )


def arm_round_laws(arm: Arm) -> tuple[Law, Law | None]:
    """Return ``(sampler law, verifier law or None when matched)`` callables for ``live_round``.

    Each maps the candidates' draft log-probabilities float64 (n,) to the arm's law (n,), as the
    replay computes it (:class:`~specreplay.sim.policy.LawCache`).
    """
    codes = arm_codes(arm)

    def make(verifier: bool) -> Law:
        def law(lp: NDArray[np.float64]) -> NDArray[np.float64]:
            x = np.ascontiguousarray(lp, dtype=np.float64)
            n = x.shape[0]
            out = np.empty(n)
            _arm_row(
                x,
                codes.policy,
                codes.quant,
                verifier,
                np.empty(n),
                out,
                np.empty(n, np.int64),
                np.empty(n),
                np.empty(n, np.int64),
                np.empty(HIST_BINS, np.int64),
                0,
            )
            return out

        return law

    return make(False), (None if arm.matched else make(True))


@dataclass(frozen=True)
class LiveStarts:
    """Round starts with the keys of their live rounds (S starts).

    Attributes
    ----------
    family, context : int64 (S,)
        Family index and context length at the start.
    history : int64 (S, 2)
        The last two emitted tokens.
    seed, request_key : uint64 (S,)
        Keys of each start's live rounds: replicate m draws ``uniform(seed[s], request_key[s],
        m, j, stream)``.
    """

    family: NDArray[np.int64]
    context: NDArray[np.int64]
    history: NDArray[np.int64]
    seed: NDArray[np.uint64]
    request_key: NDArray[np.uint64]

    @classmethod
    def of(
        cls, starts: list[RoundStart], seeds: NDArray[np.uint64], keys: NDArray[np.uint64]
    ) -> LiveStarts:
        """Build from :class:`RoundStart` objects and their keys."""
        return cls(
            family=np.array([family_index(s.family) for s in starts], dtype=np.int64),
            context=np.array([s.context_tokens for s in starts], dtype=np.int64),
            history=np.array([s.history for s in starts], dtype=np.int64).reshape(-1, 2),
            seed=np.ascontiguousarray(seeds, dtype=np.uint64),
            request_key=np.ascontiguousarray(keys, dtype=np.uint64),
        )


LiveScratch = tuple[
    NDArray[np.int64], NDArray[np.float64], NDArray[np.float64], NDArray[np.int64],
    NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64],
    NDArray[np.int64], NDArray[np.float64], NDArray[np.int64], NDArray[np.int64],
]  # fmt: skip
"""The scratch of :func:`live_position`: ids, p, logq1 (K,); cand, lp, q, qs, qv, ms, key,
order (n,); hist (HIST_BINS,) (:func:`live_scratch`)."""


@njit(cache=True)
def live_scratch(n_explicit: np.int64, n_cand: np.int64) -> LiveScratch:
    """Return the scratch of :func:`live_position` for K = ``n_explicit``, n = ``n_cand``.

    One per thread: a kernel allocates it once per chunk of starts and reuses it.
    """
    return (
        np.empty(n_explicit, np.int64), np.empty(n_explicit), np.empty(n_explicit),
        np.empty(n_cand, np.int64), np.empty(n_cand), np.empty(n_cand), np.empty(n_cand),
        np.empty(n_cand), np.empty(n_cand, np.int64), np.empty(n_cand),
        np.empty(n_cand, np.int64), np.empty(HIST_BINS, np.int64),
    )  # fmt: skip


@njit(cache=True)
def live_position(
    fam: np.int64,
    ctx0: np.int64,
    j: np.int64,
    t1: np.int64,
    t2: np.int64,
    surprise: float,
    seed: np.uint64,
    rkey: np.uint64,
    m: np.int64,
    fp: NDArray[np.float64],
    gp: NDArray[np.float64],
    policy: NDArray[np.float64],
    quant: NDArray[np.int64],
    scratch: LiveScratch,
    zero: int,
) -> tuple[np.int64, float, float]:
    """Draft position j of a live round after the tokens (t1, t2): return (x, p(x), v).

    Writes the position's laws into ``scratch`` (:data:`LiveScratch`: ``p`` over the explicit
    tokens, ``lp`` the candidates' draft log-probabilities, ``qs``/``qv`` the arm's sampler and
    verifier laws); x is the drafted candidate (drawn from q^s with the draft stream), v the
    verifier's uniform (the accept stream): the verifier accepts when v·q^v(x) < p(x). What
    happens next (stop at a rejection, or draft on whatever the verifier says) is the caller's:
    :func:`_one_round` stops, ``specreplay_testing.livepolicy`` drafts every position. ``zero``
    is the run-time 0 of :func:`policy_row`.
    """
    ids, p, logq1, cand, lp, q, qs, qv, ms, key, order, hist = scratch
    ctx = ctx0 + j - 1
    skey = state_key_kernel(fam, ctx, t1, t2)
    position_laws(skey, fam, ctx, j, surprise, fp, gp, ids, p, logq1, cand)
    for c in range(cand.shape[0]):
        lp[c] = logq1[cand[c]]
    _arm_row(lp, policy, quant, False, q, qs, ms, key, order, hist, zero)
    if quant[6] == 0:
        _arm_row(lp, policy, quant, True, q, qv, ms, key, order, hist, zero)
    else:
        qv[:] = qs
    x = draw_cdf(qs, uniform(seed, rkey, m, j, STREAM_DRAFT_I64))
    px = p[cand[x]]
    v = uniform(seed, rkey, m, j, STREAM_ACCEPT_I64)
    return x, px, v


@njit(cache=True)
def _one_round(
    fam: np.int64,
    ctx0: np.int64,
    t1: np.int64,
    t2: np.int64,
    seed: np.uint64,
    rkey: np.uint64,
    m: np.int64,
    depth: np.int64,
    fp: NDArray[np.float64],
    gp: NDArray[np.float64],
    policy: NDArray[np.float64],
    quant: NDArray[np.int64],
    scratch: LiveScratch,
    zero: int,
) -> np.int64:
    """Return A of one live round (module docstring); ``scratch``: :func:`live_scratch`."""
    ids, _, _, cand, lp, _, _, qv, _, _, _, _ = scratch
    a, b = t1, t2
    surprise = 0.0
    for j in range(1, depth + 1):
        x, px, v = live_position(
            fam, ctx0, np.int64(j), a, b, surprise, seed, rkey, m, fp, gp, policy, quant,
            scratch, zero,
        )  # fmt: skip
        # docs/methods.md#rounds-retained-tokens-and-r: accept when v·q^v(x) < p(x)
        if not v * qv[x] < px:
            return np.int64(j - 1)
        surprise = surprise_step(surprise, lp[x], px)
        a, b = b, ids[cand[x]]
    return np.int64(depth)


@njit(parallel=True, cache=True)
def _live_kernel(
    family: NDArray[np.int64],
    context: NDArray[np.int64],
    history: NDArray[np.int64],
    seed: NDArray[np.uint64],
    rkey: NDArray[np.uint64],
    n_live: np.int64,
    depth: np.int64,
    n_cand: np.int64,
    n_explicit: np.int64,
    fp: NDArray[np.float64],
    gp: NDArray[np.float64],
    policy: NDArray[np.float64],
    quant: NDArray[np.int64],
    zero: int,
    out: NDArray[np.int8],
) -> None:
    """Write A of replicate m from start s into ``out[s, m]`` (int8 (S, n_live)).

    Starts are independent (counter-based uniforms), so the result does not depend on threads.
    """
    n_starts = family.shape[0]
    n_chunks = min(n_starts, 256)  # scratch allocated once per chunk of starts
    for c in prange(n_chunks):
        scratch = live_scratch(n_explicit, n_cand)
        for s in range(c * n_starts // n_chunks, (c + 1) * n_starts // n_chunks):
            for m in range(n_live):
                out[s, m] = _one_round(
                    family[s], context[s], history[s, 0], history[s, 1], seed[s], rkey[s],
                    np.int64(m), depth, fp, gp, policy, quant, scratch, zero,
                )  # fmt: skip


def live_accepts(
    pair: ToyPair, starts: LiveStarts, arm: Arm, *, n_live: int, n_candidates: int = 32
) -> NDArray[np.int8]:
    """Return A of ``n_live`` live rounds of ``arm`` from each start: int8 (S, n_live).

    Replicate m from start s equals ``live_round(pair, start_s, *arm_round_laws(arm),
    depth=arm.depth, seed=starts.seed[s], request_key=starts.request_key[s], round_index=m,
    n_candidates=n_candidates).n_accepted`` (the verifier law passed as ``verifier_law``).
    """
    if n_live < 1:
        raise ValueError(f"n_live must be >= 1, got {n_live}")
    if not 1 <= n_candidates <= pair.n_explicit:
        raise ValueError(f"n_candidates must be in 1..{pair.n_explicit}, got {n_candidates}")
    fp, gp = pair.packed()
    codes = arm_codes(arm)
    out = np.zeros((starts.family.shape[0], n_live), dtype=np.int8)
    if out.shape[0] == 0:
        return out
    _live_kernel(
        starts.family,
        starts.context,
        np.ascontiguousarray(starts.history),
        starts.seed,
        starts.request_key,
        np.int64(n_live),
        np.int64(arm.depth),
        np.int64(n_candidates),
        np.int64(pair.n_explicit),
        fp,
        gp,
        codes.policy,
        codes.quant,
        0,
        out,
    )
    return out

"""A seeded toy draft/target model pair with real prefix dependence, and one live round.

The toy stands in for a serving engine's two models so that the synthetic archive (issue 1,
docs/inputs.md#the-built-in-archive) looks like production: heavy-tailed target laws over a
129,280-token vocabulary, a drafter that is good at position 1 and worse at position 5, worse on
long contexts and on hard families, and whose errors compound along the drafted prefix (so accepted
prefixes are not a random sample of drafted ones,
docs/methods.md#the-importance-estimator-and-its-weight).

Terms
-----
state key
    A uint64 hash of (family, context length, last two tokens). The target law at a position is a
    pure function of (family, state key); it is what the ``toy_state`` archive column records.
explicit set
    The ``n_explicit`` (64) most probable token ids of a state, ``rank_to_token(0..n_explicit-1)``
    of the state's pseudo-random permutation of the vocabulary. Each has an explicit logit.
tail
    Every other token: rank ``r = 0 .. VOCAB_SIZE - n_explicit - 1`` maps to token
    ``rank_to_token(n_explicit + r)`` and has probability ``ts·(G(r) − G(r + 1))`` with
    ``G(x) = (1 + x / c)^(−a)``: a closed-form power law whose sum telescopes, so each law is
    normalised exactly and no dense vocabulary array is ever built. ``ts`` is chosen so that the
    first tail token weighs ``rho`` times the least probable explicit token (``rho ≤ 1``): the
    explicit set really is the top of the law.
target law
    Logits ``ℓ_0 = 0``, ``ℓ_k = −g − β·log k`` (k ≥ 1) on the explicit ranks: a top token ahead by
    the state's confidence gap g, then a power-law shoulder of slope β, both drawn per state around
    family values (unit-variance logistic draws keyed by the state), so every family mixes
    confident and uncertain states and families differ in how sharply their laws peak.
draft law
    The same explicit ids with logits ``κ_family·ℓ_k + σ·ε_k`` (ε unit-variance triangular keyed by
    the state) and its own tail; with probability ``1 − exp(−hazard_family·D)`` the state is a
    *miss*: one of the target's next plausible tokens is promoted above the draft's top (the drafter
    is confidently wrong). The difficulty
    ``D = (1 + g_pos·(j − 1))·(1 + g_ctx·max(0, log2(ctx / ctx_ref)))·(1 + g_s·min(S, cap))``
    scales both σ and the hazard; it grows with the position j in the round, the context length and
    the *surprise*
    ``S = Σ_{i<j} max(0, log q1_i(x_i) − log p_i(x_i))`` of the drafted prefix (q1 the draft law at
    temperature 1): a drafted token the target finds implausible puts the drafter off its training
    distribution for the rest of the round. Candidates are the draft's top ``n_candidates``
    explicit ids, in decreasing draft probability (ties to the lower rank).
round
    Positions 1..d are drafted autoregressively, each state built from the previously drafted
    tokens; the target verifies by standard rejection sampling
    (docs/methods.md#rounds-retained-tokens-and-r) with the counter-based uniforms of
    :mod:`specreplay.sim.rng`: the draft draw u at (round, j, STREAM_DRAFT), the accept draw v at
    (round, j, STREAM_ACCEPT), the correction draw at (round, j, STREAM_RESIDUAL) for the first
    rejected position j, and the bonus draw at (round, d + 1, STREAM_RESIDUAL). A round retains 1 +
    A tokens; they advance the history and the context length.

The kernels are module-level ``@njit(cache=True)`` functions over arrays; the model parameters reach
them as two float64 arrays built by :meth:`ToyPair.packed`. This module depends only on NumPy and
Numba (no polars).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numba import njit, uint64
from numpy.typing import NDArray

from specreplay import use_numba_cache
from specreplay.sim.policy import policy_row
from specreplay.sim.rng import (
    STREAM_ACCEPT,
    STREAM_DRAFT,
    STREAM_RESIDUAL,
    fold,
    mix64,
    uniform,
)
from specreplay.sim.sampling import draw_float

Int = int | np.int64  # integer scalars of the kernels (numba types both as int64)

__all__ = [
    "FAMILIES",
    "STREAM_ACCEPT_I64",
    "STREAM_DRAFT_I64",
    "STREAM_RESIDUAL_I64",
    "VOCAB_SIZE",
    "DraftLaw",
    "LiveRound",
    "RoundStart",
    "TargetLaw",
    "ToyPair",
    "draft_law",
    "draw_cdf",
    "family_index",
    "greedy_law",
    "live_round",
    "logging_law",
    "position_laws",
    "rank_to_token",
    "sample_residual",
    "state_key",
    "state_key_kernel",
    "surprise_step",
    "tail_pmf",
    "target_law",
    "target_law_alloc",
]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)

VOCAB_SIZE = 129_280
FAMILIES: tuple[str, ...] = ("code", "chat", "math", "translation")

# --- packed parameter layout (see ToyPair.packed) -----------------------------------------------
_F_GAP, _F_GAP_SPREAD, _F_SLOPE, _F_HAZARD, _F_SIGMA, _F_KAPPA = 0, 1, 2, 3, 4, 5
_G_RHO_T, _G_RHO_D, _G_TAIL_C, _G_TAIL_A = 0, 1, 2, 3
_G_POS, _G_CTX, _G_CTX_REF, _G_SURP, _G_SURP_CAP, _G_GAP_MAX = 4, 5, 6, 7, 8, 9
_G_SLOPE_SPREAD, _G_SIGMA_SPREAD, _G_MISS_RANKS, _G_MISS_MARGIN = 10, 11, 12, 13
_N_GLOBAL = 14

# --- hashing constants (uint64-wrapped: STACK-NOTES gotcha 2); the mixer is sim.rng's fold ------
_SALT_STATE = uint64(0x70F5_7A7E_C0DE_0001)
_SALT_PERM1 = uint64(0x70F5_7A7E_C0DE_0002)
_SALT_PERM2 = uint64(0x70F5_7A7E_C0DE_0003)
_SALT_GAP = uint64(0x70F5_7A7E_C0DE_0004)
_SALT_SLOPE = uint64(0x70F5_7A7E_C0DE_0005)
_SALT_DRAFT = uint64(0x70F5_7A7E_C0DE_0006)
_SALT_SIGMA = uint64(0x70F5_7A7E_C0DE_0007)
_SALT_MISS = uint64(0x70F5_7A7E_C0DE_0008)
_MASK17 = uint64(0x1FFFF)  # the permutation acts on [0, 2^17) and cycle-walks into [0, VOCAB_SIZE)
_ODD1 = uint64(0x0B5AD)
_ODD2 = uint64(0x1C69B)
_ODD3 = uint64(0x0D2F3)
_VOCAB_U = uint64(VOCAB_SIZE)
STREAM_DRAFT_I64 = np.int64(STREAM_DRAFT)
STREAM_ACCEPT_I64 = np.int64(STREAM_ACCEPT)
STREAM_RESIDUAL_I64 = np.int64(STREAM_RESIDUAL)
_INV_2_53 = 1.0 / 9007199254740992.0
_LOGISTIC_SCALE = math.sqrt(3.0) / math.pi  # unit variance for the standard logistic
_TRIANGULAR_SCALE = math.sqrt(6.0)  # unit variance for u1 + u2 − 1
_MAX_EXPLICIT = 1024
_LOG_K = np.log(np.maximum(np.arange(_MAX_EXPLICIT, dtype=np.float64), 1.0))  # log k, log 0 := 0


# ================================================================================================
# kernels
# ================================================================================================


@njit(inline="always", cache=True)
def _logistic(h: np.uint64) -> float:
    """Unit-variance logistic variate from 64 hash bits (53-bit uniform in (0, 1))."""
    u = (float(h >> uint64(11)) + 0.5) * _INV_2_53
    return math.log(u / (1.0 - u)) * _LOGISTIC_SCALE


@njit(inline="always", cache=True)
def _unit(h: np.uint64) -> float:
    """53-bit uniform in [0, 1) from 64 hash bits."""
    return float(h >> uint64(11)) * _INV_2_53


@njit(inline="always", cache=True)
def _triangular(h: np.uint64) -> float:
    """Unit-variance symmetric triangular variate from 64 hash bits (two 53-bit uniforms)."""
    return (_unit(h) + _unit(mix64(h)) - 1.0) * _TRIANGULAR_SCALE


@njit(cache=True)
def state_key_kernel(family: Int, context: Int, t1: Int, t2: Int) -> np.uint64:
    """State key of (family, context length, last two tokens ``t1, t2``), as uint64."""
    h = fold(_SALT_STATE, uint64(family))
    h = fold(h, uint64(context))
    h = fold(h, uint64(t1))
    return fold(h, uint64(t2))


@njit(inline="always", cache=True)
def _perm17(x: np.uint64, k1: np.uint64, k2: np.uint64) -> np.uint64:
    """Keyed bijection of [0, 2^17): odd multiplies, xorshifts and keyed adds, all mod 2^17."""
    x = (x + k1) & _MASK17
    x = (x * _ODD1) & _MASK17
    x = x ^ (x >> uint64(8))
    x = x ^ (k2 & _MASK17)
    x = (x * _ODD2) & _MASK17
    x = x ^ (x >> uint64(9))
    x = (x + (k1 >> uint64(23))) & _MASK17
    x = (x * _ODD3) & _MASK17
    return x ^ (x >> uint64(7))


@njit(cache=True)
def _rank_to_token(rank: Int, k1: np.uint64, k2: np.uint64) -> np.int64:
    """Token id of a rank in [0, VOCAB_SIZE) (cycle-walking: a permutation of the vocabulary)."""
    x = _perm17(uint64(rank), k1, k2)
    while x >= _VOCAB_U:
        x = _perm17(x, k1, k2)
    return np.int64(x)


@njit(cache=True)
def _perm_keys(key: np.uint64) -> tuple[np.uint64, np.uint64]:
    return fold(key, _SALT_PERM1), fold(key, _SALT_PERM2)


@njit(cache=True)
def _tail_consts(n_tail: Int, c: float, a: float) -> tuple[float, float]:
    """Return (1 − G(1), 1 − G(n_tail)) for G(x) = (1 + x/c)^(−a), both accurate near 0."""
    one_m_g1 = -math.expm1(-a * math.log1p(1.0 / c))
    one_m_gn = -math.expm1(-a * math.log1p(n_tail / c))
    return one_m_g1, one_m_gn


@njit(cache=True)
def _normalise(
    logits: NDArray[np.float64],
    rho: float,
    c: float,
    a: float,
    out_prob: NDArray[np.float64],
    out_logprob: NDArray[np.float64],
) -> float:
    """Normalise explicit logits plus the power-law tail over the full vocabulary.

    Parameters
    ----------
    logits : float64 (K,)
        Explicit logits (any offset).
    rho, c, a : float
        Tail floor (first tail token weighs ``rho`` × the least explicit one), tail scale and
        exponent of ``G(x) = (1 + x/c)^(−a)``.
    out_prob, out_logprob : float64 (K,)
        Written: explicit probabilities and their logs (full-vocabulary normalisation).

    Returns
    -------
    float
        Tail scale ``ts``: tail rank r has probability ``ts·(G(r) − G(r + 1))``; the tail mass is
        ``ts·(1 − G(VOCAB_SIZE − K))``, so explicit + tail sums to 1 (telescoping).
    """
    k_exp = logits.shape[0]
    lmax = logits.max()
    lmin = logits.min()
    s = 0.0
    for k in range(k_exp):
        e = math.exp(logits[k] - lmax)
        out_prob[k] = e
        s += e
    one_m_g1, one_m_gn = _tail_consts(np.int64(VOCAB_SIZE - k_exp), c, a)
    w_floor = rho * math.exp(lmin - lmax)
    z = s + w_floor * one_m_gn / one_m_g1
    log_z = math.log(z)
    for k in range(k_exp):
        out_prob[k] /= z
        out_logprob[k] = (logits[k] - lmax) - log_z
    return w_floor / (one_m_g1 * z)


@njit(cache=True)
def _target_logits(
    key: np.uint64,
    family: Int,
    fp: NDArray[np.float64],
    gp: NDArray[np.float64],
    out: NDArray[np.float64],
) -> None:
    """Explicit target logits of a state; writes out (K,).

    ``ℓ_0 = 0`` and ``ℓ_k = −g − β·log(k)`` for k ≥ 1: a top token ahead by the state's
    confidence gap g, then a power-law shoulder of slope β. Per state
    ``g = gap_family + gap_spread_family·z1`` (capped) and ``β = slope_family·exp(slope_spread·z2)``
    with z1, z2 unit-variance logistic draws keyed by the state.
    """
    z1 = _logistic(fold(key, _SALT_GAP))
    z2 = _logistic(fold(key, _SALT_SLOPE))
    gap = min(fp[family, _F_GAP] + fp[family, _F_GAP_SPREAD] * z1, gp[_G_GAP_MAX])
    slope = fp[family, _F_SLOPE] * math.exp(gp[_G_SLOPE_SPREAD] * z2)
    out[0] = 0.0
    for k in range(1, out.shape[0]):
        out[k] = -gap - slope * _LOG_K[k]


@njit(cache=True)
def _target_at(
    key: np.uint64,
    family: Int,
    fp: NDArray[np.float64],
    gp: NDArray[np.float64],
    ids: NDArray[np.int64],
    lt: NDArray[np.float64],
    p: NDArray[np.float64],
    logp: NDArray[np.float64],
) -> float:
    """Target law of a state: writes ids, logits lt, probs p and log-probs logp (all (K,)).

    Returns the tail scale ``ts`` (see :func:`_normalise`).
    """
    k1, k2 = _perm_keys(key)
    for k in range(ids.shape[0]):
        ids[k] = _rank_to_token(np.int64(k), k1, k2)
    _target_logits(key, family, fp, gp, lt)
    return _normalise(lt, gp[_G_RHO_T], gp[_G_TAIL_C], gp[_G_TAIL_A], p, logp)


@njit(cache=True)
def _draft_difficulty(
    context: Int,
    position: Int,
    surprise: float,
    gp: NDArray[np.float64],
) -> float:
    """Multiplier of the draft's miss hazard and noise: position, context and prefix surprise."""
    ctx_term = max(0.0, math.log2(max(float(context), 1.0) / gp[_G_CTX_REF]))
    return float(
        (1.0 + gp[_G_POS] * (position - 1))
        * (1.0 + gp[_G_CTX] * ctx_term)
        * (1.0 + gp[_G_SURP] * min(surprise, gp[_G_SURP_CAP]))
    )


@njit(cache=True)
def _draft_from_target(
    key: np.uint64,
    family: Int,
    difficulty: float,
    fp: NDArray[np.float64],
    gp: NDArray[np.float64],
    lt: NDArray[np.float64],
    q1: NDArray[np.float64],
    logq1: NDArray[np.float64],
) -> float:
    """Draft law (temperature 1) from the target logits lt: writes q1, logq1 (K,); returns ts.

    Logits ``κ·ℓ_k + σ·ε_k`` with ``σ = σ_family·exp(σ_spread·z)·difficulty``; then, with
    probability ``1 − exp(−hazard_family·difficulty)`` (a *miss*), one of the target's next
    ``miss_ranks`` plausible tokens is promoted above the draft's top by a margin in
    ``miss_margin·[0.5, 1.5)``: the drafter is confidently wrong.
    """
    k_exp = lt.shape[0]
    ld = np.empty(k_exp)
    hd = fold(key, _SALT_DRAFT)
    kappa = fp[family, _F_KAPPA]
    sigma = fp[family, _F_SIGMA] * math.exp(gp[_G_SIGMA_SPREAD] * _logistic(fold(key, _SALT_SIGMA)))
    sigma *= difficulty
    top = -np.inf
    for k in range(k_exp):
        ld[k] = kappa * lt[k] + sigma * _triangular(fold(hd, uint64(k)))
        top = max(top, ld[k])
    hazard = fp[family, _F_HAZARD] * difficulty
    h_miss = fold(key, _SALT_MISS)
    if _unit(h_miss) < -math.expm1(-hazard):
        h2 = mix64(h_miss)
        n_ranks = min(np.int64(gp[_G_MISS_RANKS]), np.int64(k_exp - 1))
        m = 1 + np.int64(_unit(h2) * n_ranks)
        ld[m] = top + gp[_G_MISS_MARGIN] * (0.5 + _unit(mix64(h2)))
    return _normalise(ld, gp[_G_RHO_D], gp[_G_TAIL_C], gp[_G_TAIL_A], q1, logq1)


@njit(cache=True)
def position_laws(
    key: np.uint64,
    family: Int,
    context: Int,
    position: Int,
    surprise: float,
    fp: NDArray[np.float64],
    gp: NDArray[np.float64],
    ids: NDArray[np.int64],
    p: NDArray[np.float64],
    logq1: NDArray[np.float64],
    cand: NDArray[np.int64],
) -> float:
    """Both laws at one position.

    Parameters
    ----------
    key, family, context, position, surprise
        State key, family index, context length at this position, position 1..d in the round and
        the surprise of the drafted prefix.
    fp : float64 (len(FAMILIES), 4); gp : float64 (10,)
        Packed :class:`ToyPair`.
    ids : int64 (K,)
        Written: explicit token ids.
    p : float64 (K,)
        Written: target probabilities of ``ids``.
    logq1 : float64 (K,)
        Written: draft log-probabilities (full vocabulary, temperature 1) of ``ids``.
    cand : int64 (n_cand,)
        Written: indices into ``ids`` of the draft's top ``n_cand``, decreasing draft
        probability, ties to the lower rank.

    Returns
    -------
    float
        The target tail scale ``ts``.
    """
    k_exp = ids.shape[0]
    lt = np.empty(k_exp)
    logp = np.empty(k_exp)
    q1 = np.empty(k_exp)
    ts = _target_at(key, family, fp, gp, ids, lt, p, logp)
    difficulty = _draft_difficulty(context, position, surprise, gp)
    _draft_from_target(key, family, difficulty, fp, gp, lt, q1, logq1)
    _top_indices(logq1, cand)
    return ts


@njit(cache=True)
def _top_indices(x: NDArray[np.float64], out: NDArray[np.int64]) -> None:
    """Write the indices of the ``out.shape[0]`` largest values of x (n,), decreasing.

    Ties go to the lower index (a stable descending insertion into the kept prefix).
    """
    n_keep = out.shape[0]
    filled = 0
    for k in range(x.shape[0]):
        v = x[k]
        if filled == n_keep and not v > x[out[n_keep - 1]]:
            continue
        pos = min(filled, n_keep - 1)
        while pos > 0 and v > x[out[pos - 1]]:
            out[pos] = out[pos - 1]
            pos -= 1
        out[pos] = k
        filled = min(filled + 1, n_keep)


@njit(cache=True)
def _policy_q_alloc(
    logprobs: NDArray[np.float64], greedy: bool, temperature: float, zero: int
) -> NDArray[np.float64]:
    """Return the logging law over all given candidates (:func:`.policy.policy_row`)."""
    out = np.empty(logprobs.shape[0])
    policy_row(logprobs, greedy, np.int64(0), temperature, 1.0, out, zero)
    return out


@njit(cache=True)
def draw_cdf(q: NDArray[np.float64], u: float) -> np.int64:
    """CDF inversion over the whole array (:func:`specreplay.sim.sampling.draw_float`)."""
    return np.int64(draw_float(q, 0, q.shape[0], u))


@njit(cache=True)
def surprise_step(surprise: float, logq1_x: float, p_x: float) -> float:
    """Add ``max(0, log q1(x) − log p(x))`` of a drafted token to the prefix surprise."""
    return surprise + max(0.0, logq1_x - math.log(p_x))


@njit(cache=True)
def sample_residual(
    ids: NDArray[np.int64],
    p: NDArray[np.float64],
    cand: NDArray[np.int64],
    q: NDArray[np.float64],
    ts: float,
    key: np.uint64,
    gp: NDArray[np.float64],
    u: float,
) -> np.int64:
    """Draw one token from ``r ∝ max(0, p − q)`` over the full vocabulary.

    See docs/methods.md#rounds-retained-tokens-and-r.

    Parameters
    ----------
    ids, p : int64, float64 (K,)
        Explicit ids of the target state and their target probabilities.
    cand : int64 (n,); q : float64 (n,)
        Candidate indices into ``ids`` and the law the drafter sampled from. With ``n = 0`` (or
        q = 0) this samples the target law itself (the bonus token).
    ts : float
        Target tail scale; key : uint64 the target state key (tail rank → token map).
    gp : float64 (10,)
        Packed globals; u : uniform in [0, 1).

    Returns
    -------
    int64
        The token id: candidates first (in candidate order), then the other explicit ids (rank
        order), then the tail by closed-form inversion of its CDF.
    """
    k_exp = ids.shape[0]
    n = cand.shape[0]
    is_cand = np.zeros(k_exp, dtype=np.bool_)
    total = 0.0
    for i in range(n):
        is_cand[cand[i]] = True
        total += max(0.0, p[cand[i]] - q[i])
    for k in range(k_exp):
        if not is_cand[k]:
            total += p[k]
    c = gp[_G_TAIL_C]
    a = gp[_G_TAIL_A]
    n_tail = np.int64(VOCAB_SIZE - k_exp)
    _, one_m_gn = _tail_consts(n_tail, c, a)
    total += ts * one_m_gn
    t = u * total
    for i in range(n):
        w = max(0.0, p[cand[i]] - q[i])
        if t < w:
            return np.int64(ids[cand[i]])
        t -= w
    for k in range(k_exp):
        if not is_cand[k]:
            if t < p[k]:
                return np.int64(ids[k])
            t -= p[k]
    # tail: smallest r with ts·(1 − G(r + 1)) > t, i.e. r = floor(c·(y^(−1/a) − 1)), y = 1 − t/ts
    y = 1.0 - t / ts
    r = n_tail - 1
    if y > 0.0:
        x = c * math.expm1(-math.log(y) / a)
        if x < float(n_tail - 1):
            r = max(np.int64(0), np.int64(math.floor(x)))
    k1, k2 = _perm_keys(key)
    return _rank_to_token(np.int64(k_exp) + r, k1, k2)


@njit(cache=True)
def target_law_alloc(
    key: np.uint64,
    family: Int,
    n_explicit: Int,
    fp: NDArray[np.float64],
    gp: NDArray[np.float64],
) -> tuple[NDArray[np.int64], NDArray[np.float64], float]:
    """Return the target law at a state: explicit token ids, their probabilities, the tail mass."""
    ids = np.empty(n_explicit, dtype=np.int64)
    lt = np.empty(n_explicit)
    p = np.empty(n_explicit)
    logp = np.empty(n_explicit)
    ts = _target_at(key, family, fp, gp, ids, lt, p, logp)
    return ids, p, ts


@njit(cache=True)
def _draft_law_alloc(
    key: np.uint64,
    family: Int,
    context: Int,
    position: Int,
    surprise: float,
    n_explicit: Int,
    fp: NDArray[np.float64],
    gp: NDArray[np.float64],
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64], float]:
    ids = np.empty(n_explicit, dtype=np.int64)
    lt = np.empty(n_explicit)
    p = np.empty(n_explicit)
    logp = np.empty(n_explicit)
    q1 = np.empty(n_explicit)
    logq1 = np.empty(n_explicit)
    _target_at(key, family, fp, gp, ids, lt, p, logp)
    difficulty = _draft_difficulty(context, position, surprise, gp)
    ts = _draft_from_target(key, family, difficulty, fp, gp, lt, q1, logq1)
    return ids, q1, logq1, ts


@njit(cache=True)
def _ranks_to_tokens(key: np.uint64, ranks: NDArray[np.int64]) -> NDArray[np.int64]:
    k1, k2 = _perm_keys(key)
    out = np.empty(ranks.shape[0], dtype=np.int64)
    for i in range(ranks.shape[0]):
        out[i] = _rank_to_token(ranks[i], k1, k2)
    return out


# ================================================================================================
# Python API
# ================================================================================================


_FAMILY_FIELDS = (
    "target_gap",
    "target_gap_spread",
    "target_slope",
    "draft_hazard",
    "draft_sigma",
    "draft_kappa",
)


@dataclass(frozen=True)
class ToyPair:
    """All parameters of the toy draft/target pair (seed-independent; defaults calibrated).

    Per-family tuples follow :data:`FAMILIES` (code, chat, math, translation).

    Attributes
    ----------
    n_explicit : int
        Size of each state's explicit set (its most probable token ids).
    target_gap, target_gap_spread : tuple of float
        Per family: median confidence gap g (nats between the target's top token and the next)
        and its per-state spread (g = gap + spread·z, z unit-variance logistic; capped at
        ``gap_max``). A larger gap peaks the law more sharply.
    target_slope : tuple of float
        Per family: median slope β of the power-law shoulder ``−g − β·log k`` (per state
        β = slope·exp(slope_spread·z)). A flatter shoulder leaves more small candidates, which is
        what coarse dyadic quantization of q destroys.
    draft_hazard : tuple of float
        Per family: miss hazard at position 1 on short contexts (its difficulty); a miss promotes
        one of the target's next ``miss_ranks`` tokens above the draft's top by
        ``miss_margin·[0.5, 1.5)`` nats.
    draft_sigma, draft_kappa : tuple of float
        Per family: draft logit noise scale (per state ×exp(sigma_spread·z)) and the draft's
        logit scale κ (κ < 1: a flatter, less confident drafter; κ/T ≈ 1 makes the tempered q
        track p in the shoulder).
    target_tail_floor, draft_tail_floor : float
        ``rho`` of each law: weight of the first tail token relative to the least explicit one.
    tail_scale, tail_exponent : float
        ``c`` and ``a`` of the tail ``G(x) = (1 + x/c)^(−a)``.
    position_growth, context_growth, context_ref : float
        Growth of the draft difficulty (hazard and noise) per position after the first, and per
        doubling of the context beyond ``context_ref``.
    surprise_growth, surprise_cap : float
        Growth of the draft difficulty per nat of drafted-prefix surprise, and its cap.
    gap_max : float
        Cap on a state's confidence gap (keeps every explicit probability far from underflow).
    """

    n_explicit: int = 64
    target_gap: tuple[float, float, float, float] = (6.3, 4.8, 5.8, 5.3)
    target_gap_spread: tuple[float, float, float, float] = (0.7, 0.7, 0.7, 0.7)
    target_slope: tuple[float, float, float, float] = (0.7, 0.5, 0.6, 0.55)
    draft_hazard: tuple[float, float, float, float] = (0.17, 0.22, 0.2, 0.295)
    draft_sigma: tuple[float, float, float, float] = (0.15, 0.15, 0.15, 0.15)
    draft_kappa: tuple[float, float, float, float] = (0.7, 0.7, 0.7, 0.7)
    slope_spread: float = 0.3
    sigma_spread: float = 0.5
    miss_ranks: int = 8
    miss_margin: float = 3.5
    target_tail_floor: float = 0.3
    draft_tail_floor: float = 0.3
    tail_scale: float = 50.0
    tail_exponent: float = 0.6
    position_growth: float = 0.12
    context_growth: float = 0.07
    context_ref: float = 2048.0
    surprise_growth: float = 0.3
    surprise_cap: float = 8.0
    gap_max: float = 30.0
    _packed: tuple[NDArray[np.float64], NDArray[np.float64]] | None = field(
        default=None, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        n_fam = len(FAMILIES)
        for name in _FAMILY_FIELDS:
            if len(getattr(self, name)) != n_fam:
                raise ValueError(f"ToyPair.{name} needs one value per family {FAMILIES}")
        if not 2 <= self.n_explicit <= _MAX_EXPLICIT:
            raise ValueError(
                f"ToyPair.n_explicit must be in 2..{_MAX_EXPLICIT}, got {self.n_explicit}"
            )
        if not (0.0 < self.target_tail_floor <= 1.0 and 0.0 < self.draft_tail_floor <= 1.0):
            raise ValueError(
                "tail floors must be in (0, 1] so the explicit set is the top of a law"
            )
        if self.tail_scale <= 0.0 or self.tail_exponent <= 0.0:
            raise ValueError("tail_scale and tail_exponent must be positive")

    def packed(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Return the kernel form: ``fp`` float64 (len(FAMILIES), 4) and ``gp`` float64 (10,)."""
        if self._packed is None:
            fp = np.column_stack([getattr(self, f) for f in _FAMILY_FIELDS]).astype(np.float64)
            gp = np.zeros(_N_GLOBAL)
            gp[_G_RHO_T] = self.target_tail_floor
            gp[_G_RHO_D] = self.draft_tail_floor
            gp[_G_TAIL_C] = self.tail_scale
            gp[_G_TAIL_A] = self.tail_exponent
            gp[_G_POS] = self.position_growth
            gp[_G_CTX] = self.context_growth
            gp[_G_CTX_REF] = self.context_ref
            gp[_G_SURP] = self.surprise_growth
            gp[_G_SURP_CAP] = self.surprise_cap
            gp[_G_GAP_MAX] = self.gap_max
            gp[_G_SLOPE_SPREAD] = self.slope_spread
            gp[_G_SIGMA_SPREAD] = self.sigma_spread
            gp[_G_MISS_RANKS] = self.miss_ranks
            gp[_G_MISS_MARGIN] = self.miss_margin
            fp.setflags(write=False)
            gp.setflags(write=False)
            object.__setattr__(self, "_packed", (fp, gp))
        assert self._packed is not None
        return self._packed


@dataclass(frozen=True)
class RoundStart:
    """Where a round starts: family, context length and the last two emitted tokens."""

    family: str
    context_tokens: int
    history: tuple[int, int]


@dataclass(frozen=True)
class TargetLaw:
    """Target law of one state over the full vocabulary.

    Attributes
    ----------
    ids : int64 (n_explicit,)
        Explicit token ids (distinct), in rank order.
    probs : float64 (n_explicit,)
        Their probabilities.
    tail_scale : float
        Tail rank r (token ``rank_to_token(key, n_explicit + r)``) has probability
        ``tail_scale·(G(r) − G(r + 1))``, see :func:`tail_pmf`.
    tail_mass : float
        Total tail probability; ``probs.sum() + tail_mass == 1`` up to rounding.
    """

    ids: NDArray[np.int64]
    probs: NDArray[np.float64]
    tail_scale: float
    tail_mass: float


@dataclass(frozen=True)
class DraftLaw:
    """Draft law (temperature 1) of one position over the full vocabulary.

    Attributes
    ----------
    ids : int64 (n_explicit,)
        The same explicit ids as the target law of the state.
    probs, logprobs : float64 (n_explicit,)
        Draft probabilities of ``ids`` and their logs.
    tail_scale, tail_mass : float
        As in :class:`TargetLaw`, for the draft's own tail.
    candidates : int64 (n_explicit,)
        Indices into ``ids`` in decreasing draft probability (ties to the lower rank); the top
        ``n`` are the drafter's candidates.
    """

    ids: NDArray[np.int64]
    probs: NDArray[np.float64]
    logprobs: NDArray[np.float64]
    tail_scale: float
    tail_mass: float
    candidates: NDArray[np.int64]


@dataclass(frozen=True)
class LiveRound:
    """One round run live (see :func:`live_round`).

    Attributes
    ----------
    drafted : int64 (depth,)
        Drafted token ids at positions 1..depth (all drafted before verification).
    accepted : bool (depth,)
        The verifier's decisions; False after the first rejection.
    n_accepted : int
        A, the number of leading accepted positions.
    emitted : int64 (1 + A,)
        Accepted drafts then the correction (or bonus) token.
    next_start : RoundStart
        Start of the next round (context advanced by 1 + A).
    cand_ids, draft_logprobs, target_probs, q : list of arrays (depth entries, each (n_cand,))
        Per position: candidate ids (int64), their full-vocabulary draft log-probabilities,
        target probabilities, and the law the drafter sampled from.
    state_keys : uint64 (depth,)
        Target state key at each position (the archive's ``toy_state``).
    """

    drafted: NDArray[np.int64]
    accepted: NDArray[np.bool_]
    n_accepted: int
    emitted: NDArray[np.int64]
    next_start: RoundStart
    cand_ids: list[NDArray[np.int64]]
    draft_logprobs: list[NDArray[np.float64]]
    target_probs: list[NDArray[np.float64]]
    q: list[NDArray[np.float64]]
    state_keys: NDArray[np.uint64]


def family_index(family: str) -> int:
    """Return the index of ``family`` in :data:`FAMILIES` (ValueError if unknown)."""
    try:
        return FAMILIES.index(family)
    except ValueError:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}") from None


def state_key(family: str, context_tokens: int, history: tuple[int, int]) -> np.uint64:
    """Return the state key of (family, context length, last two tokens)."""
    t1, t2 = history
    return np.uint64(
        state_key_kernel(
            np.int64(family_index(family)), np.int64(context_tokens), np.int64(t1), np.int64(t2)
        )
    )


def _tail_mass(pair: ToyPair, tail_scale: float) -> float:
    _, one_m_gn = _tail_consts(
        np.int64(VOCAB_SIZE - pair.n_explicit), pair.tail_scale, pair.tail_exponent
    )
    return float(tail_scale * one_m_gn)


def target_law(pair: ToyPair, family: str, key: np.uint64) -> TargetLaw:
    """Return the target law of state ``key`` in ``family``."""
    fp, gp = pair.packed()
    ids, p, ts = target_law_alloc(
        np.uint64(key), np.int64(family_index(family)), np.int64(pair.n_explicit), fp, gp
    )
    return TargetLaw(ids=ids, probs=p, tail_scale=float(ts), tail_mass=_tail_mass(pair, float(ts)))


def draft_law(
    pair: ToyPair,
    family: str,
    key: np.uint64,
    *,
    context_tokens: int,
    position: int,
    surprise: float = 0.0,
) -> DraftLaw:
    """Return the draft law at a position of state ``key``.

    Parameters
    ----------
    pair : ToyPair
    family : str
    key : uint64
        Target state key of the position.
    context_tokens : int
        Context length at this position (round-start context + position − 1).
    position : int
        Position 1..d in the round.
    surprise : float
        Surprise of the drafted prefix (0 at position 1).
    """
    fp, gp = pair.packed()
    ids, q1, logq1, ts = _draft_law_alloc(
        np.uint64(key),
        np.int64(family_index(family)),
        np.int64(context_tokens),
        np.int64(position),
        float(surprise),
        np.int64(pair.n_explicit),
        fp,
        gp,
    )
    order = np.argsort(-logq1, kind="stable").astype(np.int64)
    return DraftLaw(
        ids=ids,
        probs=q1,
        logprobs=logq1,
        tail_scale=float(ts),
        tail_mass=_tail_mass(pair, float(ts)),
        candidates=order,
    )


def tail_pmf(pair: ToyPair, tail_scale: float, ranks: NDArray[np.int64]) -> NDArray[np.float64]:
    """Tail probabilities ``tail_scale·(G(r) − G(r + 1))`` of tail ranks (vectorised NumPy)."""
    r = np.asarray(ranks, dtype=np.float64)
    c, a = pair.tail_scale, pair.tail_exponent
    g_r = np.exp(-a * np.log1p(r / c))
    out: NDArray[np.float64] = tail_scale * g_r * -np.expm1(-a * np.log1p(1.0 / (c + r)))
    return out


def rank_to_token(key: np.uint64, ranks: NDArray[np.int64]) -> NDArray[np.int64]:
    """Token ids of vocabulary ranks of state ``key`` (ranks < n_explicit: the explicit set)."""
    out: NDArray[np.int64] = _ranks_to_tokens(np.uint64(key), np.asarray(ranks, dtype=np.int64))
    return out


def logging_law(
    temperature: float = 0.7, *, greedy: bool = False
) -> Callable[[NDArray[np.float64]], NDArray[np.float64]]:
    """Return the logging policy as a law callable: ``softmax(logprobs / T)`` or greedy.

    It is the replay's policy law (:func:`specreplay.sim.policy.policy_row`), as in the generator,
    so :func:`live_round` with it reproduces the generator bit for bit.
    """
    if not greedy and not temperature > 0.0:
        raise ValueError(f"temperature must be > 0 (use greedy), got {temperature}")
    t = float(temperature)

    def law(cand_logprobs: NDArray[np.float64]) -> NDArray[np.float64]:
        out: NDArray[np.float64] = _policy_q_alloc(
            np.ascontiguousarray(cand_logprobs, dtype=np.float64), greedy, t, 0
        )
        return out

    return law


def greedy_law(cand_logprobs: NDArray[np.float64]) -> NDArray[np.float64]:
    """Point mass on the highest draft log-probability (ties to the lower index)."""
    out: NDArray[np.float64] = _policy_q_alloc(
        np.ascontiguousarray(cand_logprobs, dtype=np.float64), True, 1.0, 0
    )
    return out


def _check_q(q: NDArray[np.float64], n: int, position: int) -> NDArray[np.float64]:
    if q.shape != (n,):
        raise ValueError(f"law returned shape {q.shape} at position {position}, expected ({n},)")
    if not np.all(np.isfinite(q)) or np.any(q < 0.0):
        raise ValueError(f"law returned a negative or non-finite value at position {position}")
    if abs(float(q.sum()) - 1.0) > 1e-9:
        raise ValueError(f"law sums to {float(q.sum())!r} at position {position}, expected 1")
    return q


@dataclass(frozen=True)
class _UniformKeys:
    """Keys of a live round's counter-based uniforms: (seed, request key, round)."""

    seed: np.uint64
    request_key: np.uint64
    round_index: np.int64

    def at(self, position: int, stream: np.int64) -> float:
        return float(
            uniform(self.seed, self.request_key, self.round_index, np.int64(position), stream)
        )


@dataclass
class _Drafted:
    """The positions of a live round as drafted (before verification); see :class:`LiveRound`."""

    drafted: NDArray[np.int64]
    keys: NDArray[np.uint64]
    cand_ids: list[NDArray[np.int64]] = field(default_factory=list)
    draft_lp: list[NDArray[np.float64]] = field(default_factory=list)
    target_p: list[NDArray[np.float64]] = field(default_factory=list)
    qs: list[NDArray[np.float64]] = field(default_factory=list)
    # per position: (explicit ids, target probs, candidate indices, target tail scale)
    laws: list[tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.int64], float]] = field(
        default_factory=list
    )
    x_idx: list[int] = field(default_factory=list)
    history: tuple[int, int] = (0, 0)  # the last two tokens after the drafted ones


def _draft_round(
    pair: ToyPair,
    start: RoundStart,
    law: Callable[[NDArray[np.float64]], NDArray[np.float64]],
    depth: int,
    n_candidates: int,
    uk: _UniformKeys,
) -> _Drafted:
    """Draft positions 1..depth autoregressively, each state built from the drafted prefix."""
    fp, gp = pair.packed()
    fam = np.int64(family_index(start.family))
    ctx0 = int(start.context_tokens)
    t1, t2 = int(start.history[0]), int(start.history[1])
    k_exp = pair.n_explicit
    out = _Drafted(drafted=np.empty(depth, dtype=np.int64), keys=np.empty(depth, dtype=np.uint64))
    surprise = 0.0
    for j in range(1, depth + 1):
        key = np.uint64(state_key_kernel(fam, np.int64(ctx0 + j - 1), np.int64(t1), np.int64(t2)))
        ids = np.empty(k_exp, dtype=np.int64)
        p = np.empty(k_exp)
        logq1 = np.empty(k_exp)
        cand = np.empty(n_candidates, dtype=np.int64)
        ts = float(
            position_laws(
                key, fam, np.int64(ctx0 + j - 1), np.int64(j), surprise, fp, gp, ids, p, logq1, cand
            )
        )
        c_lp = logq1[cand]
        q = _check_q(np.asarray(law(c_lp.copy()), dtype=np.float64), n_candidates, j)
        x = int(draw_cdf(q, uk.at(j, STREAM_DRAFT_I64)))
        tok = int(ids[cand[x]])
        surprise = float(surprise_step(surprise, c_lp[x], p[cand[x]]))
        out.drafted[j - 1] = tok
        out.keys[j - 1] = key
        out.cand_ids.append(ids[cand])
        out.draft_lp.append(c_lp)
        out.target_p.append(p[cand])
        out.qs.append(q)
        out.laws.append((ids, p, cand, ts))
        out.x_idx.append(x)
        t1, t2 = t2, tok
    out.history = (t1, t2)
    return out


def _verify(
    d: _Drafted, depth: int, uk: _UniformKeys, qv: list[NDArray[np.float64]]
) -> tuple[NDArray[np.bool_], int]:
    """Return the verifier's decisions (False after the first rejection) and A (qv: q^v laws)."""
    accepted = np.zeros(depth, dtype=np.bool_)
    n_acc = 0
    for j in range(1, depth + 1):
        v = uk.at(j, STREAM_ACCEPT_I64)
        x = d.x_idx[j - 1]
        # docs/methods.md#rounds-retained-tokens-and-r: accept when v·q^v(x) < p(x)
        if v * qv[j - 1][x] < d.target_p[j - 1][x]:
            accepted[j - 1] = True
            n_acc += 1
        else:
            break
    return accepted, n_acc


def _last_token(
    pair: ToyPair,
    start: RoundStart,
    d: _Drafted,
    depth: int,
    n_acc: int,
    uk: _UniformKeys,
    qv: list[NDArray[np.float64]],
) -> int:
    """Return the correction token at the first rejected position, or the bonus at depth + 1.

    The correction is drawn from ``max(0, p − q^v)`` (qv: the verifier's laws).
    """
    fp, gp = pair.packed()
    if n_acc < depth:
        j = n_acc + 1
        ids, p, cand, ts = d.laws[j - 1]
        u = uk.at(j, STREAM_RESIDUAL_I64)
        return int(sample_residual(ids, p, cand, qv[j - 1], ts, d.keys[j - 1], gp, u))
    fam = np.int64(family_index(start.family))
    t1, t2 = d.history
    ctx = np.int64(int(start.context_tokens) + depth)
    key = np.uint64(state_key_kernel(fam, ctx, np.int64(t1), np.int64(t2)))
    ids, p, ts_b = target_law_alloc(key, fam, np.int64(pair.n_explicit), fp, gp)
    u = uk.at(depth + 1, STREAM_RESIDUAL_I64)
    return int(
        sample_residual(ids, p, np.empty(0, dtype=np.int64), np.empty(0), float(ts_b), key, gp, u)
    )


def live_round(
    pair: ToyPair,
    start: RoundStart,
    law: Callable[[NDArray[np.float64]], NDArray[np.float64]],
    *,
    depth: int,
    seed: int,
    request_key: np.uint64,
    round_index: int,
    n_candidates: int = 32,
    verifier_law: Callable[[NDArray[np.float64]], NDArray[np.float64]] | None = None,
) -> LiveRound:
    """Run one round live from ``start`` with the drafter sampling from ``law``.

    Parameters
    ----------
    pair : ToyPair
    start : RoundStart
        Round-start state (family, context length, last two emitted tokens).
    law : callable
        ``law(cand_logprobs) -> q``: float64 (n_candidates,) draft log-probabilities of the
        candidates (decreasing) to the law over them the drafter samples from (sums to 1).
    depth : int
        Positions drafted (≥ 1).
    seed, request_key, round_index
        Keys of the counter-based uniforms; the same keys as the generator give the same uniforms.
    n_candidates : int
        Candidates per position (the drafter's top-k support, ≤ ``pair.n_explicit``).
    verifier_law : callable, optional
        The verifier's law q^v (same signature as ``law``) for an arm whose verifier quantizes
        differently from its sampler (docs/methods.md#arms-policy-and-quantizers, a mismatched arm):
        the accept test is then ``v·q^v(x) < p(x)`` and the correction is drawn from ``max(0, p −
        q^v)``. None (the default) verifies with ``law`` itself.

    Returns
    -------
    LiveRound
    """
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    if not 1 <= n_candidates <= pair.n_explicit:
        raise ValueError(f"n_candidates must be in 1..{pair.n_explicit}, got {n_candidates}")
    uk = _UniformKeys(np.uint64(seed), np.uint64(request_key), np.int64(round_index))
    d = _draft_round(pair, start, law, depth, n_candidates, uk)
    qv = d.qs
    if verifier_law is not None:
        qv = [
            _check_q(np.asarray(verifier_law(lp.copy()), dtype=np.float64), n_candidates, j + 1)
            for j, lp in enumerate(d.draft_lp)
        ]
    accepted, n_acc = _verify(d, depth, uk, qv)
    y = _last_token(pair, start, d, depth, n_acc, uk, qv)
    emitted = np.append(d.drafted[:n_acc], np.int64(y)).astype(np.int64)
    hist = (int(start.history[0]), int(start.history[1]), *(int(t) for t in emitted))
    next_start = RoundStart(
        family=start.family,
        context_tokens=int(start.context_tokens) + 1 + n_acc,
        history=(hist[-2], hist[-1]),
    )
    return LiveRound(
        drafted=d.drafted,
        accepted=accepted,
        n_accepted=n_acc,
        emitted=emitted,
        next_start=next_start,
        cand_ids=d.cand_ids,
        draft_logprobs=d.draft_lp,
        target_probs=d.target_p,
        q=d.qs,
        state_keys=d.keys,
    )

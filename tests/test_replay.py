"""Replay kernels (issue 3): closed forms, a slow reference, Monte Carlo vs analytic, invariance."""

from __future__ import annotations

import math
import statistics

import numba
import numpy as np
import pytest

from specreplay.replay.estimators.montecarlo import replay_rounds
from specreplay.sim.rng import STREAM_ACCEPT, STREAM_DRAFT, STREAMS_PER_REPLICATE, uniform_py


def _batch(laws: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]]) -> dict[str, np.ndarray]:
    """CSR arrays from rounds of positions (q_s, q_v, p) (same candidates in each)."""
    offs = [0]
    qs, qv, p, round_offsets = [], [], [], [0]
    for rnd in laws:
        for a, b, c in rnd:
            qs.extend(a)
            qv.extend(b)
            p.extend(c)
            offs.append(offs[-1] + len(a))
        round_offsets.append(round_offsets[-1] + len(rnd))
    n_rounds = len(laws)
    return {
        "offsets": np.array(offs, np.int64),
        "q_sampler": np.array(qs),
        "q_verifier": np.array(qv),
        "target_probs": np.array(p),
        "round_offsets": np.array(round_offsets, np.int64),
        "round_key": np.arange(n_rounds, dtype=np.uint64) * np.uint64(977) + np.uint64(5),
        "round_index": np.arange(n_rounds, dtype=np.int64),
        "drafted_idx": np.zeros(len(offs) - 1, np.int32),
    }


def _run(b: dict[str, np.ndarray], reps: int, depth: int, seed: int = 0, m=None, bits=0):  # type: ignore[no-untyped-def]
    return replay_rounds(
        offsets=b["offsets"], target_probs=b["target_probs"], q_sampler=b["q_sampler"],
        m_sampler=m, bits=bits, q_verifier=b["q_verifier"], drafted_idx=b["drafted_idx"],
        round_offsets=b["round_offsets"], round_key=b["round_key"],
        round_index=b["round_index"], seed=seed, replicates=reps, max_depth=depth,
    )  # fmt: skip


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.85, 1.0])
def test_constant_alpha_reproduces_leviathan(alpha: float) -> None:
    """q = (1/2, 1/2), p = (α/2, α/2) + p_other: Σ min(p, q) = α at every position, so
    E[1 + A] at depth d is (1 − α^{d+1}) / (1 − α) (Leviathan et al. 2023), d + 1 at α = 1."""
    pos = (np.array([0.5, 0.5]), np.array([0.5, 0.5]), np.array([alpha / 2, alpha / 2]))
    n_rounds = 4000
    b = _batch([[pos] * 5 for _ in range(n_rounds)])
    v = _run(b, reps=8, depth=5)
    an = _run(b, reps=0, depth=5)
    for d in range(1, 6):
        exact = d + 1 if alpha == 1.0 else (1 - alpha ** (d + 1)) / (1 - alpha)
        assert an.t[:, d - 1] == pytest.approx(np.full(n_rounds, exact), rel=1e-14)
        mc = v.t[:, d - 1].mean()
        # independent rounds: SE from the per-round replicate means; k = 4.5 (false fail ~7e-6)
        se = v.t[:, d - 1].std(ddof=1) / math.sqrt(n_rounds)
        assert abs(mc - exact) <= 4.5 * se + 1e-12
        assert an.surv[0, d - 1] == pytest.approx(alpha**d, rel=1e-14)


def _reference(b: dict[str, np.ndarray], reps: int, depth: int, seed: int, m=None, bits=0):  # type: ignore[no-untyped-def]
    """Slow pure-Python replay with the same counter-based uniforms (independent code)."""
    n_rounds = len(b["round_offsets"]) - 1
    t = np.full((n_rounds, depth), np.nan)
    an = np.full((n_rounds, depth), np.nan)
    for r in range(n_rounds):
        rows = range(b["round_offsets"][r], b["round_offsets"][r + 1])
        rows = list(rows)[:depth]
        prod, acc = 1.0, 1.0
        for j, row in enumerate(rows):
            sl = slice(b["offsets"][row], b["offsets"][row + 1])
            qs, qv, p = b["q_sampler"][sl], b["q_verifier"][sl], b["target_probs"][sl]
            a = np.where(p <= 0, 0.0, np.where(qv <= p, 1.0, p / np.where(qv > 0, qv, 1)))
            prod *= float((qs * a).sum())
            acc += prod
            an[r, j] = acc
        tot = np.zeros(len(rows))
        for rep in range(reps):
            big_a = len(rows)
            for j, row in enumerate(rows):
                sl = slice(b["offsets"][row], b["offsets"][row + 1])
                key, rnd = int(b["round_key"][r]), int(b["round_index"][r])
                u = uniform_py(seed, key, rnd, j + 1, STREAMS_PER_REPLICATE * rep + STREAM_DRAFT)
                if bits:
                    k = int(u * 2**53) >> (53 - bits)
                    x = int(np.searchsorted(np.cumsum(m[sl]), k, side="right"))
                else:
                    cs = np.cumsum(b["q_sampler"][sl])
                    x = int(np.searchsorted(cs, u, side="right"))
                    x = min(x, len(cs) - 1)
                v = uniform_py(seed, key, rnd, j + 1, STREAMS_PER_REPLICATE * rep + STREAM_ACCEPT)
                if not v * b["q_verifier"][sl][x] < b["target_probs"][sl][x]:
                    big_a = j
                    break
            tot += 1 + np.minimum(big_a, np.arange(1, len(rows) + 1))
        t[r, : len(rows)] = tot / reps
    return an, t


def _random_batch(seed: int, n_rounds: int, k: int, mismatched: bool, bits: int):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    rounds, ms = [], []
    for _ in range(n_rounds):
        depth = int(rng.integers(1, 6))
        rnd = []
        for _ in range(depth):
            p = rng.dirichlet(np.ones(k)) * rng.uniform(0.6, 1.0)
            q = rng.dirichlet(np.ones(k) * 0.5)
            if bits:
                mi = np.floor(q * 2**bits).astype(np.int64)
                mi[np.argmax(q)] += 2**bits - mi.sum()
                ms.append(mi)
                q = mi / 2**bits
            qv = rng.dirichlet(np.ones(k)) if mismatched else q
            rnd.append((q, qv, p))
        rounds.append(rnd)
    b = _batch(rounds)
    m = np.concatenate(ms) if bits else None
    return b, m


@pytest.mark.parametrize(("mismatched", "bits"), [(False, 0), (True, 0), (False, 8), (True, 12)])
def test_kernel_matches_slow_reference(mismatched: bool, bits: int) -> None:
    b, m = _random_batch(3, 40, 6, mismatched, bits)
    v = _run(b, reps=5, depth=5, seed=9, m=m, bits=bits)
    exact = _run(b, reps=0, depth=5, seed=9, m=m, bits=bits)
    an, t = _reference(b, 5, 5, 9, m, bits)
    np.testing.assert_allclose(exact.t, an, rtol=1e-12, equal_nan=True)
    assert (exact.var == 0).all()
    # same uniforms, same draws: the replicate totals are whole numbers and agree exactly
    np.testing.assert_array_equal(np.round(v.t * 5), np.round(t * 5))
    np.testing.assert_allclose(v.t, t, rtol=1e-14, equal_nan=True)


def test_same_values_with_one_and_two_threads() -> None:
    b, _ = _random_batch(4, 300, 8, True, 0)
    numba.set_num_threads(1)
    try:
        one = _run(b, reps=6, depth=5, seed=2)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    two = _run(b, reps=6, depth=5, seed=2)
    for name in ("depth", "t", "var", "surv", "offpath"):
        np.testing.assert_array_equal(getattr(one, name), getattr(two, name))


# -- Monte Carlo against a reference that shares no code or constant with specreplay --------------

_MASK64 = (1 << 64) - 1
_GOLDEN64 = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB
# The documented stream layout (sim/rng.py,
# docs/methods.md#the-importance-estimator-and-its-weight), hard-coded on purpose: replicate m draws
# the draft uniform u from stream 4·m + 0 and the accept uniform v from stream 4·m + 1.
_DRAFT, _ACCEPT, _STRIDE = 0, 1, 4


def _mix64_ref(z: int) -> int:
    """splitmix64's finaliser on Python ints (Steele, Lea & Flood 2014)."""
    z = ((z ^ (z >> 30)) * _MUL1) & _MASK64
    z = ((z ^ (z >> 27)) * _MUL2) & _MASK64
    return z ^ (z >> 31)


def _uniform_ref(seed: int, key: int, rnd: int, position: int, stream: int) -> float:
    """The 53-bit uniform of (seed, key, round, position, stream): a chain of splitmix64 folds."""
    h = _mix64_ref((seed + _GOLDEN64) & _MASK64)
    for k in (key, rnd, position, stream):
        h = _mix64_ref((h + _GOLDEN64 + k * _MUL1) & _MASK64)
    return (h >> 11) * 2.0**-53


def _draw_ref(q: np.ndarray, m: np.ndarray | None, bits: int, u: float) -> int:
    """CDF inversion: index of the drafted candidate, −1 when the law has no mass.

    See docs/methods.md#the-importance-estimator-and-its-weight.
    """
    if bits:
        k = int(u * 2**53) >> (53 - bits)
        return min(int(np.searchsorted(np.cumsum(m), k, side="right")), len(m) - 1)
    if not (q > 0).any():
        return -1
    x = int(np.searchsorted(np.cumsum(q), u, side="right"))  # first cumulative sum above u
    return x if x < len(q) else int(np.flatnonzero(q > 0)[-1])


def _mc_round_ref(b, m, bits, seed, reps, r, depth):  # type: ignore[no-untyped-def]
    """One round's accepted drafts A per replicate and its off-path counts summed over them."""
    rows = list(range(b["round_offsets"][r], b["round_offsets"][r + 1]))[:depth]
    key, rnd = int(b["round_key"][r]), int(b["round_index"][r])
    big_a, counts = [], np.zeros(4)  # accepted, accepted off-path, evaluated, evaluated off-path
    for rep in range(reps):
        a, off = len(rows), False
        for j, row in enumerate(rows):
            sl = slice(b["offsets"][row], b["offsets"][row + 1])
            u = _uniform_ref(seed, key, rnd, j + 1, _STRIDE * rep + _DRAFT)
            v = _uniform_ref(seed, key, rnd, j + 1, _STRIDE * rep + _ACCEPT)
            x = _draw_ref(b["q_sampler"][sl], None if m is None else m[sl], bits, u)
            counts[2:] += (1, off)
            if x >= 0 and v * b["q_verifier"][sl][x] < b["target_probs"][sl][x]:
                off = off or x != b["drafted_idx"][row]
                counts[:2] += (1, x != b["drafted_idx"][row])
            else:
                a = j
                break
        big_a.append(a)
    return big_a, counts


def _mc_reference(b, m, bits, seed, reps, depth):  # type: ignore[no-untyped-def]
    """Per-round Monte Carlo values: mean, variance of the mean and survival at every depth.

    With M a power of two every figure but the variance is an exact binary fraction, and the
    variance is the correctly rounded sample variance (statistics.variance is exact) over M."""
    n = len(b["round_offsets"]) - 1
    t, var, surv = (np.full((n, depth), np.nan) for _ in range(3))
    offpath = np.zeros((n, 4))
    for r in range(n):
        big_a, counts = _mc_round_ref(b, m, bits, seed, reps, r, depth)
        for d in range(1, min(depth, b["round_offsets"][r + 1] - b["round_offsets"][r]) + 1):
            kept = [1 + min(a, d) for a in big_a]  # retained tokens at depth d
            t[r, d - 1] = sum(kept) / reps
            var[r, d - 1] = statistics.variance(kept) / reps
            surv[r, d - 1] = sum(a >= d for a in big_a) / reps  # P(A ≥ d)
        offpath[r] = counts / reps
    return t, var, surv, offpath


@pytest.mark.parametrize(("mismatched", "bits"), [(True, 0), (False, 8), (True, 12)])
def test_monte_carlo_matches_an_independent_reference_bit_for_bit(
    mismatched: bool, bits: int
) -> None:
    """Same keyed uniforms, same draws: t, var, surv and off-path equal exactly (M = 8, a power
    of two, so means are exact; see :func:`_mc_reference`). Rounds of 1–5 positions replayed to
    depth 4 (some truncated), 64-bit request keys and seed, archived drafted tokens at random."""
    b, m = _random_batch(11, 30, 6, mismatched, bits)
    rng = np.random.default_rng(5)
    b["round_key"] = rng.integers(0, 2**64, 30, dtype=np.uint64)
    b["round_index"] = rng.integers(0, 500, 30).astype(np.int64)
    b["drafted_idx"] = rng.integers(0, 6, len(b["offsets"]) - 1).astype(np.int32)
    seed, reps, depth = 2**63 + 12345, 8, 4
    v = _run(b, reps=reps, depth=depth, seed=seed, m=m, bits=bits)
    t, var, surv, offpath = _mc_reference(b, m, bits, seed, reps, depth)
    np.testing.assert_array_equal(v.t, t)
    np.testing.assert_array_equal(v.var, var)
    np.testing.assert_array_equal(v.surv, surv)
    np.testing.assert_array_equal(v.offpath, offpath)
    # the batch exercises every branch: rejections, runs of 3+ accepts, truncated rounds, on- and
    # off-path accepts, positions reached through an off-path prefix
    assert (surv[:, 0] < 1).any() and (surv[:, 2] > 0).any()
    assert (np.diff(b["round_offsets"]) > depth).any()
    assert (offpath[:, 1] > 0).any() and (offpath[:, 1] < offpath[:, 0]).any()
    assert (offpath[:, 3] > 0).any()

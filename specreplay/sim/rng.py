"""Counter-based random numbers: a uniform is a pure function of its keys.

Every random draw of specreplay is ``uniform(seed, request_key, round, position, stream)``: no
state, so results do not depend on threads, batch sizes or shard layout
(docs/methods.md#randomness), and a test can recompute the exact uniform any kernel used. The mixer
is splitmix64 (Steele, Lea & Flood 2014, "Fast splittable pseudorandom number generators"); keys are
folded in one at a time, each through a full avalanche, so nearby keys give unrelated streams.

``stream`` separates the uses of one (request, round, position): for instance the draft draw u, the
accept draw v, and the residual/bonus draw. Every stream id is a named constant of this module,
listed in :data:`STREAMS` (draws of a round's positions and other keyed draws) or
:data:`START_STREAMS` (a request's starting state, at round 0, position 0, which no round uses);
no caller passes a bare number. Replicate m of a Monte Carlo replay uses
``stream = STREAMS_PER_REPLICATE * m + use`` with use :data:`STREAM_DRAFT` or :data:`STREAM_ACCEPT`,
so the replicates never reach an id ≡ 3 (mod 4): that is where the other keyed draws live.

All arithmetic is on ``uint64`` with every constant wrapped (numba types ``uint64 + int`` as int64).
"""

from __future__ import annotations

import hashlib

import numpy as np
from numba import njit, uint64
from numpy.typing import NDArray

from specreplay import use_numba_cache

__all__ = [
    "START_POSITION",
    "START_STREAMS",
    "STREAMS",
    "STREAMS_PER_REPLICATE",
    "STREAM_ACCEPT",
    "STREAM_BOOTSTRAP",
    "STREAM_DRAFT",
    "STREAM_LAW_POSITIONS",
    "STREAM_LIVE_REPLAY_SEED",
    "STREAM_LIVE_ROUNDS",
    "STREAM_LIVE_STARTS",
    "STREAM_REQUALIFY_SAMPLE",
    "STREAM_RESIDUAL",
    "STREAM_START_CONTEXT",
    "STREAM_START_FAMILY",
    "STREAM_START_TOKEN1",
    "STREAM_START_TOKEN2",
    "fold",
    "mix64",
    "request_key",
    "stream_bits",
    "stream_bits_each",
    "uniform",
    "uniform_bits",
    "uniform_py",
]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)

STREAM_DRAFT = 0
"""Draft draw u of a position (CDF inversion): sim.synth, sim.toy.live_round, the Monte Carlo
replay (use 0 of each replicate) and the law tests (stats.lawtest)."""
STREAM_ACCEPT = 1
"""Accept draw v of a position (accept when v·q^v(x) < p(x)): the same users as STREAM_DRAFT."""
STREAM_RESIDUAL = 2
"""Correction draw at the first rejected position, or bonus draw at position d + 1: sim.synth,
sim.toy.live_round and the law tests."""
STREAM_BOOTSTRAP = 7
"""Base of resample b's member draws in stats.bootstrap (key b, round = stratum, position 0)."""
STREAM_REQUALIFY_SAMPLE = 11
"""Rank of a request when commands.requalify samples requests (request key, round 0, position 0)."""
STREAM_LAW_POSITIONS = (1 << 62) + 3
"""Hash of (request key, round, position) choosing the law-test positions (replay.lawsample);
far above every Monte Carlo replicate's streams (STREAMS_PER_REPLICATE · M)."""
STREAM_LIVE_ROUNDS = (1 << 62) + 7
"""Hash of (seed, request key, round, START_POSITION) giving the seed of the live rounds run from
that archived round's start (specreplay_testing.livetruth): replicate m then draws
``uniform(that seed, request key, m, position, STREAM_DRAFT / STREAM_ACCEPT)``, independent of
the archive's own draws (a different seed)."""
STREAM_LIVE_REPLAY_SEED = (1 << 62) + 11
"""Hash of (seed, 0, 0, START_POSITION) giving the Monte Carlo replay seed of
specreplay_testing.livetruth, so its replicates never reuse the archive's draft and accept
uniforms."""
STREAM_LIVE_STARTS = (1 << 62) + 15
"""Ranks choosing specreplay_testing.livetruth's round starts: a request's rank at (request key,
round 0, START_POSITION), a round's rank within its request at (request key, round, position 1)."""
STREAMS: dict[str, int] = {
    "draft": STREAM_DRAFT,
    "accept": STREAM_ACCEPT,
    "residual": STREAM_RESIDUAL,
    "bootstrap": STREAM_BOOTSTRAP,
    "requalify-sample": STREAM_REQUALIFY_SAMPLE,
    "law-positions": STREAM_LAW_POSITIONS,
    "live-rounds": STREAM_LIVE_ROUNDS,
    "live-replay-seed": STREAM_LIVE_REPLAY_SEED,
    "live-starts": STREAM_LIVE_STARTS,
}
"""Streams of round positions and other keyed draws, name → id (ids distinct)."""
STREAMS_PER_REPLICATE = 4
"""Stride of the Monte Carlo replicates' stream ids (replicate m adds 4·m to its use's id)."""

START_POSITION = 0
"""Position of a request's starting-state draws (round 0): no round draws at position 0."""
STREAM_START_FAMILY = 0
"""sim.synth: a request's family (round 0, position 0)."""
STREAM_START_CONTEXT = 1
"""sim.synth: a request's starting context length (round 0, position 0)."""
STREAM_START_TOKEN1 = 2
"""sim.synth: the first of a request's two starting history tokens (round 0, position 0)."""
STREAM_START_TOKEN2 = 3
"""sim.synth: the second starting history token (round 0, position 0)."""
START_STREAMS: dict[str, int] = {
    "start-family": STREAM_START_FAMILY,
    "start-context": STREAM_START_CONTEXT,
    "start-token1": STREAM_START_TOKEN1,
    "start-token2": STREAM_START_TOKEN2,
}
"""Streams of a request's starting state, name → id. Drawn at :data:`START_POSITION`, where of
:data:`STREAMS` only the bootstrap, requalify and live-truth draws also occur (their ids differ from
these), so
these ids may coincide with the ids of the per-position streams."""

_M1 = uint64(0xBF58476D1CE4E5B9)
_M2 = uint64(0x94D049BB133111EB)
_GOLDEN = uint64(0x9E3779B97F4A7C15)
_INV_2_53 = 1.0 / 9007199254740992.0


@njit(inline="always", cache=True)
def mix64(z: np.uint64) -> np.uint64:
    """Return the splitmix64 finaliser of ``z`` (a bijection on uint64)."""
    z = (z ^ (z >> uint64(30))) * _M1
    z = (z ^ (z >> uint64(27))) * _M2
    return z ^ (z >> uint64(31))


@njit(inline="always", cache=True)
def fold(h: np.uint64, k: np.uint64) -> np.uint64:
    """Return the hash ``h`` with the key ``k`` folded in: ``mix64(h + golden + k·M1)``.

    One full splitmix64 avalanche per key, so nearby keys give unrelated hashes; the keyed
    uniforms below and the toy model's state hashes (:mod:`specreplay.sim.toy`) are chains of it.
    """
    return mix64(h + _GOLDEN + k * _M1)


@njit(inline="always", cache=True)
def uniform_bits(
    seed: np.uint64,
    key: np.uint64,
    rnd: int | np.int64,
    position: int | np.int64,
    stream: int | np.int64,
) -> np.uint64:
    """Return 64 random bits keyed by (seed, request key, round, position, stream)."""
    h = mix64(uint64(seed) + _GOLDEN)
    h = fold(h, uint64(key))
    h = fold(h, uint64(rnd))
    h = fold(h, uint64(position))
    return fold(h, uint64(stream))


@njit(inline="always", cache=True)
def stream_bits(base: np.uint64, counter: int | np.int64) -> np.uint64:
    """Return the ``counter``-th 64 random bits of the stream whose base is ``base``.

    ``base`` is a :func:`uniform_bits` value; this is splitmix64's own sequence started there,
    one multiply-add and one mix per draw, for loops that draw many numbers under one key.
    """
    return mix64(base + (uint64(counter) + uint64(1)) * _GOLDEN)


@njit(cache=True)
def stream_bits_each(bases: NDArray[np.uint64], counter: int) -> NDArray[np.uint64]:
    """Return :func:`stream_bits` of every base in ``bases`` at ``counter``: uint64 (n,)."""
    out = np.empty(bases.shape[0], np.uint64)
    for i in range(bases.shape[0]):
        out[i] = stream_bits(bases[i], counter)
    return out


@njit(inline="always", cache=True)
def uniform(
    seed: np.uint64,
    key: np.uint64,
    rnd: int | np.int64,
    position: int | np.int64,
    stream: int | np.int64,
) -> float:
    """Return a 53-bit uniform in [0, 1) keyed by (seed, request key, round, position, stream)."""
    return float(uniform_bits(seed, key, rnd, position, stream) >> uint64(11)) * _INV_2_53


@njit(cache=True)
def _uniform_one(seed: np.uint64, key: np.uint64, rnd: int, position: int, stream: int) -> float:
    return uniform(seed, key, rnd, position, stream)


def uniform_py(seed: int, key: int, rnd: int, position: int, stream: int) -> float:
    """Python entry point to :func:`uniform`, for tests and the live-round API."""
    return float(_uniform_one(np.uint64(seed), np.uint64(key), rnd, position, stream))


def request_key(request_id: str) -> np.uint64:
    """Return the stable 64-bit key of a request id.

    BLAKE2b with an 8-byte digest of the id's UTF-8 bytes, read little-endian: the same on every
    machine and Python run (never Python's salted ``hash``, never a file-order code;
    docs/methods.md#randomness).

    Examples
    --------
    >>> int(request_key("req-0"))
    9480165055676730190
    """
    digest = hashlib.blake2b(request_id.encode("utf-8"), digest_size=8).digest()
    return np.uint64(int.from_bytes(digest, "little"))

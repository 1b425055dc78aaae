"""Counter-based random numbers: a uniform is a pure function of its keys.

Every random draw of specreplay is ``uniform(seed, request_key, round, position, stream)``: no
state, so results do not depend on threads, batch sizes or shard layout (SPEC §3.2, §5), and a test
can recompute the exact uniform any kernel used. The mixer is splitmix64 (Steele, Lea & Flood 2014,
"Fast splittable pseudorandom number generators"); keys are folded in one at a time, each through a
full avalanche, so nearby keys give unrelated streams.

``stream`` separates the uses of one (request, round, position): for instance the draft draw u, the
accept draw v, and the residual/bonus draw. Replicate m of a Monte Carlo replay uses
``stream = STREAMS_PER_REPLICATE * m + use``.

All arithmetic is on ``uint64`` with every constant wrapped (numba types ``uint64 + int`` as int64).
"""

from __future__ import annotations

import hashlib

import numpy as np
from numba import njit, uint64

__all__ = [
    "STREAMS_PER_REPLICATE",
    "STREAM_ACCEPT",
    "STREAM_DRAFT",
    "STREAM_RESIDUAL",
    "mix64",
    "request_key",
    "stream_bits",
    "uniform",
    "uniform_bits",
    "uniform_py",
]

STREAM_DRAFT = 0
STREAM_ACCEPT = 1
STREAM_RESIDUAL = 2
STREAMS_PER_REPLICATE = 4

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
def _fold(h: np.uint64, k: np.uint64) -> np.uint64:
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
    h = _fold(h, uint64(key))
    h = _fold(h, uint64(rnd))
    h = _fold(h, uint64(position))
    return _fold(h, uint64(stream))


@njit(inline="always", cache=True)
def stream_bits(base: np.uint64, counter: int | np.int64) -> np.uint64:
    """Return the ``counter``-th 64 random bits of the stream whose base is ``base``.

    ``base`` is a :func:`uniform_bits` value; this is splitmix64's own sequence started there,
    one multiply-add and one mix per draw, for loops that draw many numbers under one key.
    """
    return mix64(base + (uint64(counter) + uint64(1)) * _GOLDEN)


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
    machine and Python run (never Python's salted ``hash``, never a file-order code; SPEC §3.2).

    Examples
    --------
    >>> int(request_key("req-0"))
    9480165055676730190
    """
    digest = hashlib.blake2b(request_id.encode("utf-8"), digest_size=8).digest()
    return np.uint64(int.from_bytes(digest, "little"))

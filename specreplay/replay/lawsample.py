"""Law-test positions chosen by a seeded hash, collected during the replay pass.

See docs/methods.md#law-tests.

Each position row (request key, round, position) gets 64 bits
``uniform_bits(seed, request key, round, position, STREAM_LAW_POSITIONS)``; the sample is the k rows
with the smallest (bits, request key, round, position). The choice depends on the rows alone, not on
files, shards or batches, and the rows' candidate data (draft log-probabilities, target
probabilities, position) is kept as the pass goes, so building the law-test cases needs no second
read: every batch and every shard keeps its k best, and :meth:`LawSample.merge` keeps the k best of
two samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from numpy.typing import NDArray

from specreplay import use_numba_cache
from specreplay.replay.archive.batch import RoundBatch
from specreplay.sim.rng import STREAM_LAW_POSITIONS, uniform_bits

__all__ = ["LawSample", "position_hashes"]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)


@njit(cache=True)
def _hashes(
    round_offsets: NDArray[np.int64],
    round_key: NDArray[np.uint64],
    round_index: NDArray[np.int64],
    position: NDArray[np.int64],
    seed: np.uint64,
    stream: np.int64,
    out: NDArray[np.uint64],
) -> None:
    """Write each position row's 64-bit hash into ``out`` (uint64, (n_pos,)).

    ``round_offsets`` int64 (n_rounds + 1,), ``round_key`` uint64 (n_rounds,), ``round_index``
    int64 (n_rounds,), ``position`` int64 (n_pos,).
    """
    for r in range(round_offsets.shape[0] - 1):
        for row in range(round_offsets[r], round_offsets[r + 1]):
            out[row] = uniform_bits(seed, round_key[r], round_index[r], position[row], stream)


def position_hashes(batch: RoundBatch, seed: int) -> NDArray[np.uint64]:
    """Return the law-test hash of every position row of ``batch`` (uint64, (n_pos,))."""
    out = np.empty(batch.n_positions, np.uint64)
    _hashes(
        batch.round_offsets,
        batch.round_key,
        batch.round_index,
        batch.position,
        np.uint64(seed),
        np.int64(STREAM_LAW_POSITIONS),
        out,
    )
    return out


@dataclass(frozen=True)
class LawSample:
    """Up to k position rows with the smallest hashes, in that order, with their candidates.

    Attributes
    ----------
    hash, request_key : uint64, (k,)
    round, position : int64, (k,)
    offsets : int64, (k + 1,)
        CSR offsets of the rows' candidates.
    draft_logprobs, target_probs : float64, (nnz,)
    """

    hash: NDArray[np.uint64]
    request_key: NDArray[np.uint64]
    round: NDArray[np.int64]
    position: NDArray[np.int64]
    offsets: NDArray[np.int64]
    draft_logprobs: NDArray[np.float64]
    target_probs: NDArray[np.float64]

    @property
    def size(self) -> int:
        """Rows held."""
        return int(self.hash.shape[0])

    @staticmethod
    def empty() -> LawSample:
        """Return a sample of no row."""
        u, i, f = np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0)
        return LawSample(u, u, i, i, np.zeros(1, np.int64), f, f)

    @staticmethod
    def from_batch(batch: RoundBatch, k: int, seed: int) -> LawSample:
        """Return the ``k`` rows of ``batch`` with the smallest hashes."""
        h = position_hashes(batch, seed)
        rows = np.arange(h.shape[0]) if h.shape[0] <= k else np.argpartition(h, k - 1)[:k]
        round_of_row = np.repeat(np.arange(batch.n_rounds), np.diff(batch.round_offsets))
        r = round_of_row[rows]
        return _gather(
            h[rows],
            batch.round_key[r],
            batch.round_index[r],
            batch.position[rows],
            batch.offsets,
            rows,
            batch.draft_logprobs,
            batch.target_probs,
            k,
        )

    @staticmethod
    def merge(a: LawSample, b: LawSample, k: int) -> LawSample:
        """Return the ``k`` rows of ``a`` and ``b`` smallest in (hash, key, round, position)."""
        if b.size == 0:
            return a
        if a.size == 0:
            return b
        lens = np.concatenate([np.diff(a.offsets), np.diff(b.offsets)])
        offsets = np.zeros(lens.shape[0] + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        return _gather(
            np.concatenate([a.hash, b.hash]),
            np.concatenate([a.request_key, b.request_key]),
            np.concatenate([a.round, b.round]),
            np.concatenate([a.position, b.position]),
            offsets,
            np.arange(lens.shape[0]),
            np.concatenate([a.draft_logprobs, b.draft_logprobs]),
            np.concatenate([a.target_probs, b.target_probs]),
            k,
        )


def _gather(
    h: NDArray[np.uint64],
    key: NDArray[np.uint64],
    rnd: NDArray[np.int64],
    pos: NDArray[np.int64],
    offsets: NDArray[np.int64],
    rows: NDArray[np.int64],
    lp: NDArray[np.float64],
    tp: NDArray[np.float64],
    k: int,
) -> LawSample:
    """Sort candidate rows by (hash, key, round, position), keep k, copy their candidates."""
    order = np.lexsort((pos, rnd, key, h))[:k]
    rows = rows[order]
    lens = (offsets[rows + 1] - offsets[rows]).astype(np.int64)
    out_off = np.zeros(rows.shape[0] + 1, np.int64)
    np.cumsum(lens, out=out_off[1:])
    idx = (
        np.concatenate([np.arange(offsets[r], offsets[r + 1]) for r in rows]).astype(np.int64)
        if rows.shape[0]
        else np.zeros(0, np.int64)
    )
    return LawSample(
        hash=h[order],
        request_key=key[order],
        round=rnd[order],
        position=pos[order],
        offsets=out_off,
        draft_logprobs=lp[idx],
        target_probs=tp[idx],
    )

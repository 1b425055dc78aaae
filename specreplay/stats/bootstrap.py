"""Paired cluster bootstrap of retained tokens per round, by family × context bucket.

See docs/methods.md#the-paired-bootstrap.

The input is the seam of the architecture: per request (the resampling unit) its family, and per
request × context bucket × arm the rounds n and retained tokens t (:class:`PairedSums`). Replicate
b draws, within each stratum (family, or one stratum for ``--stratify none``), as many requests as
the stratum has, with replacement; every cell (pooled, family, bucket, family × bucket) is a domain
estimate from the same resampled requests: R^arm = Σ t^arm / Σ n^arm over the cell's pieces.

One draw per run. The scheme (which requests, which strata, which replicates: a
:class:`Resampling`) is kept apart from what is resampled (tables of pieces): :func:`resample_sums`
draws each replicate's multiplicities once and weights every table by them, so the comparisons of
a run (candidate, reference, path bias, every depth) and its ``--by`` groupings, passed together,
come from the same joint replicates, and the draws are made once instead of once per comparison.
:func:`bootstrap_sums` is one table resampled on its own.

Randomness is counter-based (:mod:`specreplay.sim.rng`): the d-th draw of stratum s in replicate
b depends only on (seed, b, s, d), and requests are ordered within their stratum by their first
cell and their stable request key, so replicates are identical whatever the thread count and
whatever the input row order.

The kernel accumulates, per replicate, the sums (n_a, t_a, n_b, t_b) of every finest cell
(family × bucket code, ``unbucketed`` included) of every table; coarser cells are sums of finest
cells. Tables with the same pieces in the same cells (the comparisons of a run) share one layout,
whose distinct columns (the rounds, and each arm side's retained tokens) are summed once, eight at
a time. Sums are taken in a fixed order (by cell, then member), so they are bit-identical whatever
the threads and whichever tables are resampled together. This module depends on numpy and numba
only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit, prange, uint64
from numpy.typing import NDArray

from specreplay import use_numba_cache
from specreplay.sim.rng import STREAM_BOOTSTRAP, stream_bits, uniform_bits

__all__ = [
    "N_MOMENTS",
    "Moments",
    "PairedSums",
    "Resampling",
    "bootstrap_moments",
    "bootstrap_sums",
    "point_sums",
    "resample_sums",
    "resampling",
]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)


@dataclass(frozen=True)
class PairedSums:
    """Per (request, bucket) sufficient statistics of two arms a and b.

    Attributes
    ----------
    request_ids : tuple of str, (n,)
        Request ids, one per request.
    request_keys : uint64, (n,)
        Stable request keys (they order the requests for resampling).
    family : int32, (n,)
        Family code of each request (index into ``families``).
    piece_request : int64, (k,)
        Request index of each piece.
    piece_bucket : int32, (k,)
        Bucket code of each piece (index into ``buckets``).
    n_a, t_a, n_b, t_b : float64, (k,)
        Rounds and retained tokens of each arm in the piece (round counts may differ by arm).
    families : tuple of str
    buckets : tuple of str
        Bucket names by code; ``unbucketed`` pieces count in pooled and family cells only.
    unbucketed : int
        Code of the ``unbucketed`` bucket (−1 when there is none).
    depths : (int, int) or None
        Depths of arms a and b (the most tokens a round can accept beyond the first), None when
        either is unknown: the intervals are clamped to what such rounds can reach.
    tails : float64, (4, k), or None
        Per piece, Σ of the rounds' tail widths of a and their limits, then b's
        (:mod:`specreplay.replay.truncation`: a figure bounded over a truncated law, whose
        ``t`` sums the ranges' midpoints); None where both arms are exact.
    """

    request_ids: tuple[str, ...]
    request_keys: NDArray[np.uint64]
    family: NDArray[np.int32]
    piece_request: NDArray[np.int64]
    piece_bucket: NDArray[np.int32]
    n_a: NDArray[np.float64]
    t_a: NDArray[np.float64]
    n_b: NDArray[np.float64]
    t_b: NDArray[np.float64]
    families: tuple[str, ...]
    buckets: tuple[str, ...]
    unbucketed: int = -1
    depths: tuple[int, int] | None = None
    tails: NDArray[np.float64] | None = None

    @property
    def n_requests(self) -> int:
        """Number of requests (resampling units)."""
        return len(self.request_ids)


@njit(inline="always", cache=True)
def _count_draws(
    seed: np.uint64,
    b: int,
    strat_start: NDArray[np.int64],
    cnt: NDArray[np.uint8] | NDArray[np.int32],
) -> bool:
    """Count how often replicate b draws each member; return False if a count wrapped.

    A wrapped count loses a multiple of 256 (uint8) or 2³² (int32) draws, so a stratum whose
    counts do not add up to its size wrapped (checked only for strata larger than 255, the only
    ones where a uint8 count can wrap).
    """
    n_strata = strat_start.shape[0] - 1
    lo32 = uint64(0xFFFFFFFF)
    cnt[:] = 0
    for s in range(n_strata):
        lo = strat_start[s]
        m = strat_start[s + 1] - lo
        mu = uint64(m)
        base = uniform_bits(seed, uint64(b), s, 0, STREAM_BOOTSTRAP)
        seg = cnt[lo : lo + m]  # unsigned indices into a view: no negative-index checks
        for i in range(m // 2):
            bits = stream_bits(base, i)
            seg[((bits >> uint64(32)) * mu) >> uint64(32)] += 1
            seg[((bits & lo32) * mu) >> uint64(32)] += 1
        if m % 2 == 1:
            bits = stream_bits(base, m // 2)
            seg[((bits >> uint64(32)) * mu) >> uint64(32)] += 1
        if m > 255:
            total = np.int64(0)
            for j in range(m):
                total += np.int64(seg[j])
            if total != m:
                return False
    return True


@njit(inline="always", cache=True, fastmath={"contract"})
def _block(
    first: int,
    mem: NDArray[np.uint64],
    cnt: NDArray[np.uint8] | NDArray[np.int32],
    vals: NDArray[np.float64],
    lo: int,
    hi: int,
    v: int,
    out: NDArray[np.float64],
) -> None:
    """Write Σ count·vals[v + j, k], j = 0..3, over one cell's pieces k = lo..hi − 1 into ``out``.

    ``first`` ≥ 0: the cell's pieces are the consecutive members first, first + 1, … (their
    counts read as one run, no gather), else ``cnt[mem[k - lo]]`` is gathered. Four register
    accumulators, each adding its products in piece order (not reassociated: the same order in
    every process, freshly compiled or cached).
    """
    x0 = vals[v + 0, lo:hi]  # views indexed from 0: no negative-index checks
    x1 = vals[v + 1, lo:hi]
    x2 = vals[v + 2, lo:hi]
    x3 = vals[v + 3, lo:hi]
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    if first >= 0:
        run = cnt[first : first + (hi - lo)]
        for k in range(hi - lo):
            w = float(run[k])
            a0 += w * x0[k]
            a1 += w * x1[k]
            a2 += w * x2[k]
            a3 += w * x3[k]
    else:
        for k in range(hi - lo):
            w = float(cnt[mem[k]])  # unsigned indices: no negative-index checks
            a0 += w * x0[k]
            a1 += w * x1[k]
            a2 += w * x2[k]
            a3 += w * x3[k]
    out[v + 0] = a0
    out[v + 1] = a1
    out[v + 2] = a2
    out[v + 3] = a3


@njit(inline="always", cache=True, fastmath={"contract"})
def _block8(
    first: int,
    mem: NDArray[np.uint64],
    cnt: NDArray[np.uint8] | NDArray[np.int32],
    vals: NDArray[np.float64],
    lo: int,
    hi: int,
    v: int,
    out: NDArray[np.float64],
) -> None:
    """:func:`_block` over columns v..v + 7 at once: eight accumulators per count read.

    The additions into one accumulator wait for each other; eight independent chains keep the
    core busier than four (each still adds its products in piece order, so the sums are those of
    two :func:`_block` calls, to the bit).
    """
    x0 = vals[v + 0, lo:hi]  # views indexed from 0: no negative-index checks
    x1 = vals[v + 1, lo:hi]
    x2 = vals[v + 2, lo:hi]
    x3 = vals[v + 3, lo:hi]
    x4 = vals[v + 4, lo:hi]
    x5 = vals[v + 5, lo:hi]
    x6 = vals[v + 6, lo:hi]
    x7 = vals[v + 7, lo:hi]
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    a4 = 0.0
    a5 = 0.0
    a6 = 0.0
    a7 = 0.0
    if first >= 0:
        run = cnt[first : first + (hi - lo)]
        for k in range(hi - lo):
            w = float(run[k])
            a0 += w * x0[k]
            a1 += w * x1[k]
            a2 += w * x2[k]
            a3 += w * x3[k]
            a4 += w * x4[k]
            a5 += w * x5[k]
            a6 += w * x6[k]
            a7 += w * x7[k]
    else:
        for k in range(hi - lo):
            w = float(cnt[mem[k]])
            a0 += w * x0[k]
            a1 += w * x1[k]
            a2 += w * x2[k]
            a3 += w * x3[k]
            a4 += w * x4[k]
            a5 += w * x5[k]
            a6 += w * x6[k]
            a7 += w * x7[k]
    out[v + 0] = a0
    out[v + 1] = a1
    out[v + 2] = a2
    out[v + 3] = a3
    out[v + 4] = a4
    out[v + 5] = a5
    out[v + 6] = a6
    out[v + 7] = a7


@njit(inline="always", cache=True, fastmath={"contract"})
def _cell_columns(
    first: int,
    mem: NDArray[np.uint64],
    cnt: NDArray[np.uint8] | NDArray[np.int32],
    vals: NDArray[np.float64],
    lo: int,
    hi: int,
    ncol: int,
    out: NDArray[np.float64],
) -> None:
    """Write one cell's first ``ncol`` count-weighted column sums (a multiple of 4) into ``out``.

    Eight columns at a time (:func:`_block8`), then four (:func:`_block`).
    """
    v = 0
    while v + 8 <= ncol:
        _block8(first, mem, cnt, vals, lo, hi, v, out)
        v += 8
    if v < ncol:
        _block(first, mem, cnt, vals, lo, hi, v, out)


@njit(inline="always", cache=True, fastmath={"contract"})
def _cell_sums(
    b: int,
    cell_start: NDArray[np.int64],
    cell_first: NDArray[np.int64],
    cell_cols: NDArray[np.int64],
    piece_member: NDArray[np.uint64],
    piece_vals: NDArray[np.float64],
    cnt: NDArray[np.uint8] | NDArray[np.int32],
    out: NDArray[np.float64],
) -> None:
    """Write every cell's count-weighted column sums of replicate b into ``out[b]``."""
    for c in range(cell_start.shape[0] - 1):
        lo = cell_start[c]
        hi = cell_start[c + 1]
        mem = piece_member[lo:hi]
        _cell_columns(cell_first[c], mem, cnt, piece_vals, lo, hi, cell_cols[c], out[b, c])


@njit(parallel=True, cache=True, fastmath={"contract"})
def _boot_kernel(
    seed: np.uint64,
    n_boot: int,
    strat_start: NDArray[np.int64],
    cell_start: NDArray[np.int64],
    cell_first: NDArray[np.int64],
    cell_cols: NDArray[np.int64],
    piece_member: NDArray[np.uint64],
    piece_vals: NDArray[np.float64],
    out: NDArray[np.float64],
) -> None:
    """Fill ``out[b, c, v]`` with the resampled sum of column v over cell c in replicate b.

    Parameters
    ----------
    seed : uint64
    n_boot : int
        Number of replicates B.
    strat_start : int64, (S + 1,)
        Stratum s holds members ``strat_start[s] .. strat_start[s + 1] - 1``.
    cell_start : int64, (C + 1,)
        Cell c holds pieces ``cell_start[c] .. cell_start[c + 1] - 1`` (the cells of every
        layout of one :func:`resample_sums`, one layout after the other).
    cell_first : int64, (C,)
        The first member of a cell whose pieces are consecutive members, else −1.
    cell_cols : int64, (C,)
        The columns of ``piece_vals`` cell c sums (its layout's, a multiple of 4).
    piece_member : uint64, (k,)
        Member (resampling unit) of each piece; the pieces of a cell are in member order.
    piece_vals : float64, (V, k)
        The values of each piece: the distinct columns of the tables sharing its layout
        (n and t of each arm side), zero-padded.
    out : float64, (B, C, V)
        Output sums (columns past ``cell_cols[c]`` are left unwritten).

    Notes
    -----
    Replicate b counts how often each member is drawn once (the multiplicities live in a uint8
    array that stays in L2 cache; a replicate in which a count passes 255, possible only in
    strata of more members than that and then astronomically rare, is redone with int32
    counts), then sums every cell's columns weighted by their member's count
    (:func:`_cell_sums`): every cell of every table comes from the same multiplicities. Draws
    2i and 2i + 1 of stratum s use the high and low halves of
    ``stream_bits(uniform_bits(seed, b, s, 0, STREAM_BOOTSTRAP), i)``, each mapped to a member by
    the multiply-shift ``(half · m) >> 32`` (Lemire 2019; relative bias below m / 2³²).
    """
    n_members = strat_start[strat_start.shape[0] - 1]
    n_chunks = min(n_boot, 64)  # one count buffer per chunk of replicates, reused
    for ch in prange(n_chunks):
        cnt8 = np.empty(n_members, np.uint8)
        cnt32 = np.empty(0, np.int32)
        for b in range(ch, n_boot, n_chunks):
            if _count_draws(seed, b, strat_start, cnt8):
                _cell_sums(
                    b, cell_start, cell_first, cell_cols, piece_member, piece_vals, cnt8, out
                )
            else:  # a member drawn 256 times or more: redo with 32-bit counts
                if cnt32.shape[0] == 0:
                    cnt32 = np.empty(n_members, np.int32)
                _count_draws(seed, b, strat_start, cnt32)
                _cell_sums(
                    b, cell_start, cell_first, cell_cols, piece_member, piece_vals, cnt32, out
                )


def _member_order(ps: PairedSums, stratify: str) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Return the request of each member (draw order) and the strata's starts.

    Members are ordered by stratum, then the request's first cell, then request key (never input
    order); with one piece per request the (cell, member) piece order is then the member order
    itself.
    """
    n = ps.n_requests
    nb = len(ps.buckets)
    if stratify == "family":
        strata = ps.family.astype(np.int64)
    elif stratify == "none":
        strata = np.zeros(n, dtype=np.int64)
    else:
        raise ValueError(f"stratify must be 'family' or 'none', not {stratify!r}")
    n_cells = len(ps.families) * nb
    cell = ps.family[ps.piece_request].astype(np.int64) * nb + ps.piece_bucket
    first_cell = np.full(n, n_cells, dtype=np.int64)
    np.minimum.at(first_cell, ps.piece_request, cell)
    member_request = np.lexsort((ps.request_keys, first_cell, strata)).astype(np.int64)
    n_strata = int(strata.max()) + 1 if n else 0
    strat_start = np.zeros(n_strata + 1, dtype=np.int64)
    np.cumsum(np.bincount(strata, minlength=n_strata), out=strat_start[1:])
    return member_request, strat_start


@dataclass(frozen=True)
class Resampling:
    """The resampling units of a run in draw order, and its replicates: the one draw it shares.

    Replicate b draws, within each stratum, as many members as the stratum holds, with
    replacement; the d-th draw of stratum s depends only on (seed, b, s, d). Every table
    resampled with it (:func:`resample_sums`) weights its pieces by those multiplicities, so
    every comparison, cell and grouping of a run comes from the same joint replicates.

    Attributes
    ----------
    member_keys : uint64, (n,)
        Stable request key of each member (resampling unit), in draw order.
    member_ids : tuple of str, (n,)
        Request id of each member (it tells two requests apart should their keys collide).
    strat_start : int64, (S + 1,)
        Stratum s holds members ``strat_start[s] .. strat_start[s + 1] - 1``.
    n_boot : int
        Number of replicates B.
    seed : int
    """

    member_keys: NDArray[np.uint64]
    member_ids: tuple[str, ...]
    strat_start: NDArray[np.int64]
    n_boot: int
    seed: int


def resampling(ps: PairedSums, *, n_boot: int, seed: int, stratify: str = "family") -> Resampling:
    """Return the resampling of the requests of ``ps``, stratified by its families or not.

    The strata and the members' order are those of ``ps`` (its family codes, its first cells);
    a table on the same requests coded otherwise (``--by`` groups) is resampled with them.
    """
    member_request, strat_start = _member_order(ps, stratify)
    return Resampling(
        member_keys=ps.request_keys[member_request],
        member_ids=tuple(ps.request_ids[int(i)] for i in member_request),
        strat_start=strat_start,
        n_boot=n_boot,
        seed=seed,
    )


def _member_of(rs: Resampling, ps: PairedSums) -> NDArray[np.int64]:
    """Return the member of each request of ``ps`` (by key; by id should two keys collide).

    Raises
    ------
    ValueError
        A request of ``ps`` that is not among the members.
    """
    order = np.argsort(rs.member_keys, kind="stable")
    keys = rs.member_keys[order]
    if np.any(keys[1:] == keys[:-1]):
        index = {r: i for i, r in enumerate(rs.member_ids)}
        missing = [r for r in ps.request_ids if r not in index]
        at = np.array([index.get(r, 0) for r in ps.request_ids], np.int64)
    else:
        pos = np.minimum(np.searchsorted(keys, ps.request_keys), max(keys.shape[0] - 1, 0))
        hit = keys[pos] == ps.request_keys if keys.shape[0] else np.zeros(ps.n_requests, bool)
        missing = [ps.request_ids[int(i)] for i in np.flatnonzero(~hit)]
        at = order[pos] if keys.shape[0] else pos
    if missing:
        raise ValueError(f"request {missing[0]!r} is not among the resampled requests")
    return at.astype(np.int64)


@dataclass(frozen=True)
class _Table:
    """One table's pieces laid out for :func:`_boot_kernel` (see its parameters)."""

    cell_start: NDArray[np.int64]
    cell_first: NDArray[np.int64]
    piece_member: NDArray[np.uint64]
    piece_vals: NDArray[np.float64]


def _table(ps: PairedSums, member_of: NDArray[np.int64]) -> _Table:
    """Lay out the pieces of ``ps`` by (finest cell, member); ``member_of``: each request's."""
    nb = len(ps.buckets)
    n_cells = len(ps.families) * nb
    cell = ps.family[ps.piece_request].astype(np.int64) * nb + ps.piece_bucket
    pm = member_of[ps.piece_request]
    porder = np.lexsort((pm, cell))
    pm = pm[porder]
    cell_start = np.zeros(n_cells + 1, dtype=np.int64)
    np.cumsum(np.bincount(cell, minlength=n_cells), out=cell_start[1:])
    # a cell is one run of members when no piece inside it breaks the +1 step
    breaks = np.zeros(pm.shape[0], np.int64)
    np.cumsum(pm[1:] != pm[:-1] + 1, out=breaks[1:])
    lo, hi = cell_start[:-1], cell_start[1:]
    filled = np.flatnonzero(hi > lo)
    run = filled[breaks[hi[filled] - 1] == breaks[lo[filled]]]
    cell_first = np.full(n_cells, -1, np.int64)
    cell_first[run] = pm[lo[run]]
    vals = np.stack([ps.n_a, ps.t_a, ps.n_b, ps.t_b])[:, porder].astype(np.float64)
    return _Table(cell_start, cell_first, pm.astype(np.uint64), vals)


def _fingerprint(a: NDArray[np.generic]) -> bytes:
    """Return a cheap key of an array: its length and 64 evenly spaced entries."""
    step = max(1, a.shape[0] // 64)
    sample: bytes = np.ascontiguousarray(a[::step]).tobytes()
    return int(a.shape[0]).to_bytes(8, "little") + sample


@dataclass(frozen=True)
class _Shared:
    """The tables of one :func:`resample_sums` by layout, each layout with its distinct columns.

    Attributes
    ----------
    layouts : list of _Table
        One per layout (the same pieces in the same cells, in the same order): the first table
        of that layout.
    columns : list of list of float64 (k,)
        Per layout, its tables' distinct value columns, in layout order: an arm side in two
        comparisons (and the rounds, shared by every replayed arm) is summed once.
    picks : list of (int, list of int)
        Per table, its layout and the columns of its n_a, t_a, n_b, t_b.
    """

    layouts: list[_Table]
    columns: list[list[NDArray[np.float64]]]
    picks: list[tuple[int, list[int]]]


def _shared(parts: Sequence[_Table]) -> _Shared:
    """Group the tables by layout and their columns by value (see :class:`_Shared`)."""
    out = _Shared([], [], [])
    layout_at: dict[bytes, list[int]] = {}
    column_at: list[dict[bytes, list[int]]] = []
    for p in parts:
        key = _fingerprint(p.cell_start) + _fingerprint(p.piece_member)
        g = next(
            (
                i
                for i in layout_at.get(key, [])
                if np.array_equal(out.layouts[i].cell_start, p.cell_start)
                and np.array_equal(out.layouts[i].piece_member, p.piece_member)
            ),
            None,
        )
        if g is None:
            g = len(out.layouts)
            layout_at.setdefault(key, []).append(g)
            out.layouts.append(p)
            out.columns.append([])
            column_at.append({})
        cols, picks = out.columns[g], []
        for values in p.piece_vals:
            vkey = _fingerprint(values)
            j = next(
                (i for i in column_at[g].get(vkey, []) if np.array_equal(cols[i], values)), None
            )
            if j is None:
                j = len(cols)
                column_at[g].setdefault(vkey, []).append(j)
                cols.append(values)
            picks.append(j)
        out.picks.append((g, picks))
    return out


def resample_sums(rs: Resampling, tables: Sequence[PairedSums]) -> list[NDArray[np.float64]]:
    """Return each table's resampled sums, shape (n_boot, n_families, n_buckets, 4), in one draw.

    Every table is weighted by the same multiplicities of ``rs`` (drawn once per replicate):
    tables on the same requests (the comparisons of a run, a ``--by`` grouping of them) share
    their replicates. A table's own families and buckets give its cells; its requests must be
    among the members of ``rs``. Tables with the same pieces in the same cells share one layout,
    whose distinct columns are each summed once (:class:`_Shared`): a table's sums are those it
    has resampled alone, to the bit.
    """
    sh = _shared([_table(ps, _member_of(rs, ps)) for ps in tables])
    width = [-(-len(cols) // 4) * 4 for cols in sh.columns]  # columns, rounded up to 4
    piece_off = np.cumsum([0] + [t.piece_member.shape[0] for t in sh.layouts])
    cell_off = np.cumsum([0] + [t.cell_first.shape[0] for t in sh.layouts])
    vals = np.zeros((max(width, default=4), int(piece_off[-1])))
    for g, cols in enumerate(sh.columns):
        vals[: len(cols), piece_off[g] : piece_off[g + 1]] = np.stack(cols)
    out = np.empty((rs.n_boot, int(cell_off[-1]), vals.shape[0]), dtype=np.float64)
    _boot_kernel(
        np.uint64(rs.seed),
        rs.n_boot,
        rs.strat_start,
        np.concatenate(
            [t.cell_start[:-1] + piece_off[g] for g, t in enumerate(sh.layouts)] + [piece_off[-1:]]
        ).astype(np.int64),
        np.concatenate([t.cell_first for t in sh.layouts] + [np.empty(0, np.int64)]),
        np.concatenate(
            [
                np.full(t.cell_first.shape[0], w, np.int64)
                for t, w in zip(sh.layouts, width, strict=True)
            ]
            + [np.empty(0, np.int64)]
        ),
        np.concatenate([t.piece_member for t in sh.layouts] + [np.empty(0, np.uint64)]),
        vals,
        out,
    )
    shape = [(rs.n_boot, len(ps.families), len(ps.buckets), 4) for ps in tables]
    return [
        out[:, cell_off[g] : cell_off[g + 1]][:, :, cols].reshape(shape[i])
        for i, (g, cols) in enumerate(sh.picks)
    ]


@dataclass(frozen=True)
class _Layout:
    member_request: NDArray[np.int64]  # request index of each member (stratum-major, key order)
    strat_start: NDArray[np.int64]
    cell_start: NDArray[np.int64]
    piece_member: NDArray[np.uint64]
    piece_vals: NDArray[np.float64]
    n_cells: int
    member_family: NDArray[np.int64]  # family code of each member
    member_vals: NDArray[np.float64]  # (4, n): each member's totals over its pieces


def _layout(ps: PairedSums, stratify: str) -> _Layout:
    n = ps.n_requests
    member_request, strat_start = _member_order(ps, stratify)
    member_of = np.empty(n, dtype=np.int64)
    member_of[member_request] = np.arange(n)
    table = _table(ps, member_of)
    pm = member_of[ps.piece_request]
    totals = np.zeros((4, n))
    for v, arr in enumerate((ps.n_a, ps.t_a, ps.n_b, ps.t_b)):
        totals[v] = np.bincount(pm, weights=arr, minlength=n)
    return _Layout(
        member_request=member_request,
        strat_start=strat_start,
        cell_start=table.cell_start,
        piece_member=table.piece_member,
        piece_vals=np.ascontiguousarray(table.piece_vals),
        n_cells=len(ps.families) * len(ps.buckets),
        member_family=ps.family[member_request].astype(np.int64),
        member_vals=np.ascontiguousarray(totals),
    )


def bootstrap_sums(
    ps: PairedSums, *, n_boot: int, seed: int, stratify: str = "family"
) -> NDArray[np.float64]:
    """Return resampled sums, shape (n_boot, n_families, n_buckets, 4): n_a, t_a, n_b, t_b.

    One table resampled on its own (:func:`resample_sums` of :func:`resampling` of ``ps``).

    Examples
    --------
    >>> ps = PairedSums(("r0", "r1"), np.array([1, 2], np.uint64), np.zeros(2, np.int32),
    ...                 np.array([0, 1]), np.zeros(2, np.int32), np.array([2.0, 2.0]),
    ...                 np.array([5.0, 7.0]), np.array([2.0, 2.0]), np.array([6.0, 7.0]),
    ...                 ("code",), ("all",))
    >>> s = bootstrap_sums(ps, n_boot=3, seed=0)
    >>> s.shape, bool((s[:, 0, 0, 0] == 4.0).all())
    ((3, 1, 1, 4), True)
    """
    rs = resampling(ps, n_boot=n_boot, seed=seed, stratify=stratify)
    return resample_sums(rs, [ps])[0]


N_MOMENTS = 14
"""Per piece or request z = (n_a, n_b − n_a, e_a, d): its 4 values, then the 10 products z_u·z_v,
u ≤ v (row-major), where e_a = t_a − c·n_a and d = (t_b − t_a) − c·(n_b − n_a) for one constant c
(the pooled R_a): residual coordinates in which the linearised variance of Δ has no cancelling
terms when the arms are nearly equal (:mod:`specreplay.stats.studentized`)."""


@njit(inline="always", cache=True, fastmath={"contract"})
def _range_moments(
    z: NDArray[np.float64],
    member: NDArray[np.int64],
    cnt: NDArray[np.int32],
    lo: int,
    hi: int,
    out: NDArray[np.float64],
) -> None:
    """Write Σ w (z, z z^T) over columns lo..hi − 1 of ``z`` into ``out`` (14 values).

    w = ``cnt[member[k]]``; fourteen scalar accumulators (registers), written once at the end.
    """
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = a8 = a9 = a10 = a11 = a12 = a13 = 0.0
    for k in range(lo, hi):
        w = float(cnt[member[k]])
        z0 = z[0, k]
        z1 = z[1, k]
        z2 = z[2, k]
        z3 = z[3, k]
        w0 = w * z0
        w1 = w * z1
        w2 = w * z2
        a0 += w0
        a1 += w1
        a2 += w2
        a3 += w * z3
        a4 += w0 * z0
        a5 += w0 * z1
        a6 += w0 * z2
        a7 += w0 * z3
        a8 += w1 * z1
        a9 += w1 * z2
        a10 += w1 * z3
        a11 += w2 * z2
        a12 += w2 * z3
        a13 += w * z3 * z3
    out[0] = a0
    out[1] = a1
    out[2] = a2
    out[3] = a3
    out[4] = a4
    out[5] = a5
    out[6] = a6
    out[7] = a7
    out[8] = a8
    out[9] = a9
    out[10] = a10
    out[11] = a11
    out[12] = a12
    out[13] = a13


@njit(parallel=True, cache=True, fastmath={"contract"})
def _moment_kernel(
    seed: np.uint64,
    n_boot: int,
    strat_start: NDArray[np.int64],
    cell_start: NDArray[np.int64],
    piece_member: NDArray[np.int64],
    piece_z: NDArray[np.float64],
    family_start: NDArray[np.int64],
    family_member: NDArray[np.int64],
    family_z: NDArray[np.float64],
    piece_out: NDArray[np.float64],
    total_out: NDArray[np.float64],
) -> None:
    """Fill the count-weighted moments of replicate b (the draws of :func:`_boot_kernel`).

    ``piece_out[b, c, :]`` = Σ w_i (z, z z^T) over the pieces of finest cell c and
    ``total_out[b, f, :]`` the same over the requests of family f with their totals z (columns
    of ``family_z``, requests ``family_member`` grouped by family); w_i the request's count.
    """
    n_members = strat_start[strat_start.shape[0] - 1]
    n_chunks = min(n_boot, 64)
    for ch in prange(n_chunks):
        cnt = np.empty(n_members, np.int32)
        for b in range(ch, n_boot, n_chunks):
            _count_draws(seed, b, strat_start, cnt)
            for c in range(cell_start.shape[0] - 1):
                _range_moments(
                    piece_z, piece_member, cnt, cell_start[c], cell_start[c + 1], piece_out[b, c]
                )
            for f in range(family_start.shape[0] - 1):
                _range_moments(
                    family_z,
                    family_member,
                    cnt,
                    family_start[f],
                    family_start[f + 1],
                    total_out[b, f],
                )


@dataclass(frozen=True)
class Moments:
    """Moments of the resampled pieces and request totals in residual coordinates z.

    Attributes
    ----------
    center : float
        c of z (:data:`N_MOMENTS`): the pooled R_a of the observed sample.
    piece : float64, (B, n_families, n_buckets, 14)
        Per replicate and finest cell, Σ w (z, z z^T) over its pieces.
    total : float64, (B, n_families, 14)
        Per replicate and family, Σ w (z, z z^T) over its requests' totals.
    piece_point, total_point : float64, (n_families, n_buckets, 14) and (n_families, 14)
        The same with every weight 1 (the observed sample).
    stratum_size : int64, (S,)
        Requests per resampling stratum (the families, or one stratum for ``--stratify none``).
    stratified : bool
        Whether the strata are the families.
    """

    center: float
    piece: NDArray[np.float64]
    total: NDArray[np.float64]
    piece_point: NDArray[np.float64]
    total_point: NDArray[np.float64]
    stratum_size: NDArray[np.int64]
    stratified: bool


def _residuals(x: NDArray[np.float64], c: float) -> NDArray[np.float64]:
    """Return z = (n_a, n_b − n_a, t_a − c n_a, (t_b − t_a) − c (n_b − n_a)) of rows x.

    ``x`` holds (n_a, t_a, n_b, t_b) in its rows.
    """
    return np.ascontiguousarray(
        np.stack([x[0], x[2] - x[0], x[1] - c * x[0], (x[3] - x[1]) - c * (x[2] - x[0])])
    )


def _point_moments(z: NDArray[np.float64], group: NDArray[np.int64], n: int) -> NDArray[np.float64]:
    out = np.zeros((n, N_MOMENTS))
    for u in range(4):
        out[:, u] = np.bincount(group, weights=z[u], minlength=n)
    j = 4
    for u in range(4):
        for v in range(u, 4):
            out[:, j] = np.bincount(group, weights=z[u] * z[v], minlength=n)
            j += 1
    return out


def bootstrap_moments(
    ps: PairedSums, *, n_boot: int, seed: int, stratify: str = "family"
) -> Moments:
    """Return the moments of the replicates :func:`bootstrap_sums` draws (same seed, same draws)."""
    lay = _layout(ps, stratify)
    nf, nb = len(ps.families), len(ps.buckets)
    total_na = float(lay.member_vals[0].sum())
    c = float(lay.member_vals[1].sum()) / total_na if total_na > 0 else 0.0
    piece_z, member_z = _residuals(lay.piece_vals, c), _residuals(lay.member_vals, c)
    by_family = np.argsort(lay.member_family, kind="stable")  # members grouped by family
    family_start = np.zeros(nf + 1, np.int64)
    np.cumsum(np.bincount(lay.member_family, minlength=nf), out=family_start[1:])
    piece = np.empty((n_boot, lay.n_cells, N_MOMENTS))
    total = np.empty((n_boot, nf, N_MOMENTS))
    _moment_kernel(
        np.uint64(seed),
        n_boot,
        lay.strat_start,
        lay.cell_start,
        lay.piece_member.astype(np.int64),
        piece_z,
        family_start,
        by_family.astype(np.int64),
        np.ascontiguousarray(member_z[:, by_family]),
        piece,
        total,
    )
    cell = np.repeat(np.arange(lay.n_cells), np.diff(lay.cell_start))
    return Moments(
        center=c,
        piece=piece.reshape(n_boot, nf, nb, N_MOMENTS),
        total=total,
        piece_point=_point_moments(piece_z, cell, lay.n_cells).reshape(nf, nb, N_MOMENTS),
        total_point=_point_moments(member_z, lay.member_family, nf),
        stratum_size=np.diff(lay.strat_start),
        stratified=stratify == "family",
    )


def point_sums(ps: PairedSums) -> NDArray[np.float64]:
    """Return the observed sums, shape (n_families, n_buckets, 4)."""
    nb = len(ps.buckets)
    cell = ps.family[ps.piece_request].astype(np.int64) * nb + ps.piece_bucket
    out = np.zeros((len(ps.families) * nb, 4))
    for v, arr in enumerate((ps.n_a, ps.t_a, ps.n_b, ps.t_b)):
        out[:, v] = np.bincount(cell, weights=arr, minlength=out.shape[0])
    return out.reshape(len(ps.families), nb, 4)

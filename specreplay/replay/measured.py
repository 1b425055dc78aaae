"""MEASURED accumulation: the archive's ``accepted`` column summed per (request, bucket).

Fills :class:`~specreplay.stats.measured.MeasuredArchive` from batches of whole rounds
(docs/inputs.md#position-traces-schema-v1: MEASURED A of a round = the number of leading True values
of ``accepted``). :func:`reindex_measured` moves a shard's figures onto another request and family
table, and :func:`coarsen_measured` pools families into coarser groups (``--by``), and
:func:`merge_measured` adds two shards' figures (counts exactly; sums of whole numbers, exact too)
with the per-(request, bucket) rows in canonical order (request index, then bucket).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from specreplay.replay.archive.batch import RoundBatch
from specreplay.stats.measured import MeasuredArchive, RequestSums

__all__ = ["MeasuredAccumulator", "coarsen_measured", "merge_measured", "reindex_measured"]


class MeasuredAccumulator:
    """Accumulate MEASURED per-(request, bucket) sums and survival counts over batches.

    Parameters
    ----------
    n_buckets : int
        Number of bucket codes (user buckets + ``unbucketed`` + ``unknown``).
    """

    def __init__(self, n_buckets: int) -> None:
        self.nb = n_buckets
        self._n = np.zeros(0, dtype=np.int64)
        self._t = np.zeros(0, dtype=np.float64)
        self._fam = np.full(0, -1, dtype=np.int32)
        self._hits = np.zeros((0, n_buckets, 1), dtype=np.int64)
        self._cover = np.zeros((0, n_buckets, 1), dtype=np.int64)
        self._mind = np.zeros((0, n_buckets), dtype=np.int64)
        self._maxd = np.zeros((0, n_buckets), dtype=np.int64)
        self._positions = 0
        self.has_accepted = True

    def add(self, batch: RoundBatch) -> None:
        """Add a batch of whole rounds."""
        if batch.n_rounds == 0:
            return
        self._positions += batch.n_positions
        a = batch.measured_accepted.astype(np.int64)
        if (a < 0).any():
            self.has_accepted = False
            a = np.zeros_like(a)
        key = batch.round_request * self.nb + batch.round_bucket
        size = int(key.max()) + 1
        if size > self._n.shape[0]:
            grow = max(size, 2 * self._n.shape[0])
            self._n = np.concatenate([self._n, np.zeros(grow - self._n.shape[0], np.int64)])
            self._t = np.concatenate([self._t, np.zeros(grow - self._t.shape[0], np.float64)])
            self._fam = np.concatenate(
                [self._fam, np.full(grow - self._fam.shape[0], -1, np.int32)]
            )
        self._n += np.bincount(key, minlength=self._n.shape[0])
        self._t += np.bincount(key, weights=(1 + a).astype(np.float64), minlength=self._t.shape[0])
        self._fam[key] = batch.round_family
        fam = batch.round_family.astype(np.int64)
        depth = batch.round_depth.astype(np.int64)
        n_fam = int(fam.max()) + 1
        d_max = int(depth.max())
        self._grow(n_fam, d_max)
        cell = fam * self.nb + batch.round_bucket
        nd = self._hits.shape[2]
        hits = self._hits.reshape(-1, nd)
        cover = self._cover.reshape(-1, nd)
        for j in range(1, d_max + 1):
            hits[:, j] += np.bincount(cell, weights=(a >= j), minlength=hits.shape[0]).astype(
                np.int64
            )
            cover[:, j] += np.bincount(cell, weights=(depth >= j), minlength=hits.shape[0]).astype(
                np.int64
            )
        mind = self._mind.reshape(-1)
        maxd = self._maxd.reshape(-1)
        cur_min = np.full(mind.shape[0], np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(cur_min, cell, depth)
        seen = cur_min < np.iinfo(np.int64).max
        mind[seen] = np.where(mind[seen] == 0, cur_min[seen], np.minimum(mind[seen], cur_min[seen]))
        np.maximum.at(maxd, cell, depth)

    def _grow(self, n_fam: int, d_max: int) -> None:
        f0, _, d0 = self._hits.shape
        f1, d1 = max(f0, n_fam), max(d0, d_max + 1)
        if (f1, d1) == (f0, d0):
            return
        for name in ("_hits", "_cover"):
            old = getattr(self, name)
            new = np.zeros((f1, self.nb, d1), dtype=np.int64)
            new[:f0, :, :d0] = old
            setattr(self, name, new)
        for name in ("_mind", "_maxd"):
            old = getattr(self, name)
            new = np.zeros((f1, self.nb), dtype=np.int64)
            new[:f0] = old
            setattr(self, name, new)

    def result(self) -> MeasuredArchive:
        """Return the accumulated MEASURED figures."""
        keys = np.flatnonzero(self._n)
        sums = RequestSums(
            request=(keys // self.nb).astype(np.int64),
            bucket=(keys % self.nb).astype(np.int32),
            family=self._fam[keys],
            n=self._n[keys],
            t=self._t[keys],
        )
        return MeasuredArchive(
            sums=sums,
            survival_hits=self._hits,
            survival_rounds=self._cover,
            positions=self._positions,
            min_depth=self._mind,
            max_depth=self._maxd,
        )


def _sorted_sums(sums: RequestSums) -> RequestSums:
    order = np.lexsort((sums.bucket, sums.request))
    return RequestSums(
        request=sums.request[order],
        bucket=sums.bucket[order],
        family=sums.family[order],
        n=sums.n[order],
        t=sums.t[order],
    )


def _pad(x: NDArray[np.int64], shape: tuple[int, ...]) -> NDArray[np.int64]:
    out = np.zeros(shape, np.int64)
    out[tuple(slice(0, s) for s in x.shape)] = x
    return out


def reindex_measured(
    m: MeasuredArchive,
    request: NDArray[np.int64],
    family: NDArray[np.int64],
    n_families: int,
) -> MeasuredArchive:
    """Return ``m`` on new tables: request code c becomes ``request[c]``, family f ``family[f]``.

    The per-(request, bucket) rows come out sorted by (new request index, bucket).
    """
    s = m.sums
    sums = RequestSums(
        request=request[s.request].astype(np.int64),
        bucket=s.bucket,
        family=family[s.family].astype(np.int32) if s.family.shape[0] else s.family,
        n=s.n,
        t=s.t,
    )
    nf = m.survival_hits.shape[0]
    moved: dict[str, NDArray[np.int64]] = {}
    for name in ("survival_hits", "survival_rounds", "min_depth", "max_depth"):
        old = getattr(m, name)
        new = np.zeros((n_families, *old.shape[1:]), np.int64)
        new[family[:nf]] = old
        moved[name] = new
    return MeasuredArchive(sums=_sorted_sums(sums), positions=m.positions, **moved)


def merge_measured(a: MeasuredArchive, b: MeasuredArchive) -> MeasuredArchive:
    """Add two MEASURED figures on the same tables (``a`` first; a row in both is a + b)."""
    rows = {
        f: np.concatenate([getattr(a.sums, f), getattr(b.sums, f)])
        for f in ("request", "bucket", "family", "n", "t")
    }
    order = np.lexsort((rows["bucket"], rows["request"]))  # stable: a before b
    req, bkt = rows["request"][order], rows["bucket"][order]
    new = np.ones(order.shape[0], bool)
    new[1:] = (req[1:] != req[:-1]) | (bkt[1:] != bkt[:-1])
    starts = np.flatnonzero(new)
    add = (lambda v: np.add.reduceat(v, starts)) if starts.shape[0] else (lambda v: v)
    sums = RequestSums(
        request=req[starts],
        bucket=bkt[starts],
        family=rows["family"][order][starts],
        n=add(rows["n"][order]).astype(np.int64),
        t=add(rows["t"][order]).astype(np.float64),
    )
    sa, sb = a.survival_hits.shape, b.survival_hits.shape
    shape = tuple(max(x, y) for x, y in zip(sa, sb, strict=True))
    cell = shape[:2]
    amin, bmin = _pad(a.min_depth, cell), _pad(b.min_depth, cell)
    mind = np.where(amin == 0, bmin, np.where(bmin == 0, amin, np.minimum(amin, bmin)))
    return MeasuredArchive(
        sums=sums,
        survival_hits=_pad(a.survival_hits, shape) + _pad(b.survival_hits, shape),
        survival_rounds=_pad(a.survival_rounds, shape) + _pad(b.survival_rounds, shape),
        positions=a.positions + b.positions,
        min_depth=mind,
        max_depth=np.maximum(_pad(a.max_depth, cell), _pad(b.max_depth, cell)),
    )


def coarsen_measured(
    m: MeasuredArchive, family: NDArray[np.int64], n_families: int
) -> MeasuredArchive:
    """Return ``m`` with family f pooled into ``family[f]`` (many to one; request rows kept).

    Survival counts are added (exact: whole numbers), the fewest and most positions of a round
    are the minimum and maximum over the pooled cells (0 where a pooled cell is empty).
    """
    s = m.sums
    sums = RequestSums(
        request=s.request,
        bucket=s.bucket,
        family=family[s.family].astype(np.int32) if s.family.shape[0] else s.family,
        n=s.n,
        t=s.t,
    )
    nf = m.survival_hits.shape[0]
    to = family[:nf]
    counts = {}
    for name in ("survival_hits", "survival_rounds"):
        old = getattr(m, name)
        new = np.zeros((n_families, *old.shape[1:]), np.int64)
        np.add.at(new, to, old)
        counts[name] = new
    big = np.iinfo(np.int64).max
    mind = np.full((n_families, *m.min_depth.shape[1:]), big, np.int64)
    np.minimum.at(mind, to, np.where(m.min_depth == 0, big, m.min_depth))
    maxd = np.zeros((n_families, *m.max_depth.shape[1:]), np.int64)
    np.maximum.at(maxd, to, m.max_depth)
    return MeasuredArchive(
        sums=sums,
        positions=m.positions,
        min_depth=np.where(mind == big, 0, mind),
        max_depth=maxd,
        **counts,
    )

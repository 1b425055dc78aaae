"""The largest policy ratios per finest cell and depth: what the Pareto k̂ needs.

See docs/methods.md#tail-diagnostics-ess-and-pareto-k-hat.

Terms. The **policy ratio** r_k of a round (:attr:`RoundValues.ratio
<specreplay.replay.estimators.base.RoundValues>`) is Π_{j≤k} q^s_j(x_j)/q^L_j(x_j); a **finest
cell** is one (family code, bucket code); a **group** is one finest cell at one depth; its
**tail** at depth k is its K largest r_k (:data:`TAIL_CAP`), each with the stable key of the
request it came from, and its **dropped** value the largest r_k not kept (−inf while nothing was
dropped).

Why this is enough. PSIS fits the generalised Pareto law to the M largest of S ratios above the
(M + 1)-th largest, the cutoff (M = ⌊3√S⌋ when S > 225, else ⌊S/5⌋, with r_eff = 1; Vehtari et
al. 2024, JMLR 25, §3), and nothing else of the sample enters k̂. Ratios are ≥ 0, so the tail
padded with zeros to S values has the same M + 1 largest values as the full sample whenever the
tail holds them, i.e. whenever its (M + 1)-th largest value is ≥ every dropped value
(:func:`specreplay.stats.importance_diag.pareto_khat_of_tail` checks it). With K = 4096 a finest
cell is exact up to ⌊3√S⌋ + 1 ≤ K, S ≤ 1.86 million rounds; a coarser cell merges its finest
cells' tails and is exact under the same check (beyond it, k̂ is null with the reason).

Determinism. The **canonical order** is (family, bucket, depth, value descending, request key),
and a tail keeps the first K of each group in it: the top K of a union is the top K of the
parts' top K, so the kept (value, key) pairs and the dropped values do not depend on batches,
threads, shards or the shape of the fold. Keeping them needs no order: a group's K-th (value,
key) is found by selection, in linear time, and the group's entries are kept against it
(:mod:`specreplay.replay.topk`), when a shard's batches are added (:class:`TailAccumulator`)
and when two tails are merged (:meth:`RatioTail.merge`). So a tail's entries are grouped by
(family, bucket, depth), ascending, but within a group in an order that depends on how they
came (batches, shards, fold): nothing reads that order (k̂ sorts a cell's values itself), and
:meth:`RatioTail.ordered` gives the canonical one, the same whatever the route. Entries equal
in value and key are interchangeable: which of them a cap keeps changes no array. Filtering
requests afterwards (``--sample-requests``) keeps, of the selected requests, every ratio above
the dropped value, so the same check stays exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from specreplay import use_numba_cache
from specreplay.replay.topk import admit, merge_top, select_top

__all__ = ["TAIL_CAP", "RatioTail", "TailAccumulator"]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)

TAIL_CAP = 4096
"""K: ratios kept per finest cell and depth (exact k̂ up to 1.86 million rounds per cell)."""


@dataclass(frozen=True)
class RatioTail:
    """The kept largest policy ratios of one arm (see the module docstring).

    Attributes
    ----------
    family, bucket : int32, (m,)
        Finest cell of each entry (family index into the owner's family table).
    depth : int32, (m,)
        k − 1 (column of the ratio).
    request_key : uint64, (m,)
        Stable key of the request the round belongs to.
    value : float64, (m,)
        r_k; grouped by (family, bucket, depth) ascending; within a group in no particular
        order (:meth:`ordered` sorts each group by value descending, then request key).
    dropped : float64, (n_families, n_buckets, D)
        Largest r_k not kept per finest cell and depth (−inf where none was dropped).
    """

    family: NDArray[np.int32]
    bucket: NDArray[np.int32]
    depth: NDArray[np.int32]
    request_key: NDArray[np.uint64]
    value: NDArray[np.float64]
    dropped: NDArray[np.float64]

    @staticmethod
    def empty(n_families: int, n_buckets: int, max_depth: int) -> RatioTail:
        """Return a tail holding nothing."""
        i = np.zeros(0, np.int32)
        return RatioTail(
            i,
            i,
            i,
            np.zeros(0, np.uint64),
            np.zeros(0),
            np.full((n_families, n_buckets, max_depth), -np.inf),
        )

    def _with(
        self, rows: NDArray[np.int64] | NDArray[np.bool_], dropped: NDArray[np.float64]
    ) -> RatioTail:
        return RatioTail(
            self.family[rows],
            self.bucket[rows],
            self.depth[rows],
            self.request_key[rows],
            self.value[rows],
            dropped,
        )

    def _codes(self) -> NDArray[np.int64]:
        """Each entry's group: (family · n_buckets + bucket) · D + depth, int64 (m,)."""
        nb, d = self.dropped.shape[1], self.dropped.shape[2]
        code: NDArray[np.int64] = (self.family.astype(np.int64) * nb + self.bucket) * d
        return code + self.depth

    def keep_requests(self, keys: NDArray[np.uint64]) -> RatioTail:
        """Return the entries of the requests whose keys are in ``keys`` (dropped unchanged)."""
        return self._with(np.isin(self.request_key, keys), self.dropped)

    def with_families(self, index: NDArray[np.int64], n_families: int) -> RatioTail:
        """Return the tail on another family table: family f becomes ``index[f]``."""
        nf = self.dropped.shape[0]
        if n_families == nf and np.array_equal(index[:nf], np.arange(nf)):
            return self  # the same table (every shard of most archives holds every family)
        dropped = np.full((n_families, *self.dropped.shape[1:]), -np.inf)
        dropped[index[:nf]] = self.dropped
        fam = index[self.family].astype(np.int32) if self.family.shape[0] else self.family
        out = RatioTail(fam, self.bucket, self.depth, self.request_key, self.value, dropped)
        if np.all(np.diff(index) > 0):  # an increasing map keeps the order
            return out
        # within a family the order stands: a stable sort on the new family codes (contiguous
        # runs, which the stable sort finds in one pass) restores the grouping and any order
        return out._with(np.argsort(fam, kind="stable"), dropped)

    def coarsened(
        self, index: NDArray[np.int64], n_families: int, cap: int | None = None
    ) -> RatioTail:
        """Return the tail on a coarser family table: family f joins ``index[f]`` (many to one).

        The top K of a union is the top K of its parts' top K, and the largest value not kept
        is the largest of the parts' dropped values and of those the cap now cuts: the result
        equals the tail accumulated with the coarse codes from the start (same kept values and
        keys, same ``dropped``; :meth:`ordered` puts both in one order). ``--by`` replays at
        family × value and coarsens to each level. ``cap``: K, default :data:`TAIL_CAP` (the
        accumulator's).
        """
        nf = self.dropped.shape[0]
        dropped = np.full((n_families, *self.dropped.shape[1:]), -np.inf)
        np.maximum.at(dropped, index[:nf], self.dropped)
        fam = index[self.family].astype(np.int32) if self.family.shape[0] else self.family
        out = RatioTail(fam, self.bucket, self.depth, self.request_key, self.value, dropped)
        return out._select(TAIL_CAP if cap is None else cap)[0]

    @staticmethod
    def merge(a: RatioTail, b: RatioTail, cap: int | None = None) -> RatioTail:
        """Return the top ``cap`` (default :data:`TAIL_CAP`) of both per finest cell and depth.

        Both must be on the same family table and grouped (every tail is). One walk over the
        groups of both (:func:`~specreplay.replay.topk.merge_top`; a group's end is found by
        binary search): a group whose two parts hold at most K entries together is copied
        (``a``'s, then ``b``'s); a larger one is cut at its K-th (value, key), which a sampled
        bracket and a selection among the few values inside it find, both parts read where
        they lie. A merge writes at most K entries per group, sorts nothing and copies no
        union; within a group the result is in no particular order (:meth:`ordered` sorts it).
        """
        if a.dropped.shape != b.dropped.shape:
            raise ValueError(f"tails on different tables: {a.dropped.shape} ≠ {b.dropped.shape}")
        dropped = np.maximum(a.dropped, b.dropped)
        nb, d = dropped.shape[1], dropped.shape[2]
        fam, bkt, dep, key, val = merge_top(
            (a.family, a.bucket, a.depth, a.request_key, a.value),
            (b.family, b.bucket, b.depth, b.request_key, b.value),
            dropped.reshape(-1),
            nb,
            d,
            TAIL_CAP if cap is None else cap,
        )
        return RatioTail(fam, bkt, dep, key, val, dropped)

    def ordered(self) -> RatioTail:
        """Return the same entries in canonical order: the same arrays whatever the route."""
        if self.value.shape[0] < 2:
            return self
        return self._with(
            _canonical_order(self._codes(), self.value, self.request_key), self.dropped
        )

    def _select(self, cap: int) -> tuple[RatioTail, NDArray[np.float64]]:
        """Keep the first ``cap`` of each group, grouped; also return :meth:`thresholds`."""
        dropped = self.dropped.copy()
        if self.value.shape[0] == 0:
            i = np.zeros(0, np.int32)
            empty = RatioTail(i, i, i, np.zeros(0, np.uint64), np.zeros(0), dropped)
            return empty, np.full(dropped.shape, -np.inf)
        nb, d = dropped.shape[1], dropped.shape[2]
        fam, bkt, dep, key, val, thr = select_top(
            (self.family, self.bucket, self.depth, self.request_key, self.value),
            cap,
            dropped.reshape(-1),
            nb,
            d,
        )
        return RatioTail(fam, bkt, dep, key, val, dropped), thr.reshape(dropped.shape)

    def thresholds(self, cap: int) -> NDArray[np.float64]:
        """Per finest cell and depth, the smallest kept value of a full group (−inf otherwise).

        A group is full when it holds ``cap`` entries or more; a ratio below its threshold
        cannot enter the group's top ``cap``.
        """
        thr = np.full(self.dropped.shape, -np.inf)
        if self.value.shape[0] < cap:
            return thr
        code = self._codes()
        counts = np.bincount(code, minlength=thr.size)
        low = np.full(thr.size, np.inf)
        np.minimum.at(low, code, self.value)
        full = counts >= cap
        thr.reshape(-1)[full] = low[full]
        return thr

    def cell(
        self, fam_idx: tuple[int, ...], bucket_idx: tuple[int, ...], depth: int
    ) -> tuple[NDArray[np.float64], float]:
        """Return a cell's kept r_depth (its finest cells' tails merged) and its dropped max."""
        values = np.concatenate(
            [self.value[a:b] for a, b in self._runs(fam_idx, bucket_idx, depth - 1)]
            or [np.zeros(0)]
        )
        fams = [f for f in fam_idx if f < self.dropped.shape[0]]
        drop = self.dropped[np.ix_(fams, list(bucket_idx), [depth - 1])]
        return values.astype(np.float64), float(drop.max()) if drop.size else -np.inf

    def _runs(
        self, fam_idx: tuple[int, ...], bucket_idx: tuple[int, ...], depth: int
    ) -> list[tuple[int, int]]:
        """Return [lo, hi) of each finest cell's entries at column ``depth``, by binary search.

        Entries are sorted by (family, bucket, depth), so each finest cell and depth is one
        contiguous run: found by searching the families, then the buckets within a family's
        run, then the depths within a bucket's, without a pass over all the entries (a cell's
        checks ask for each of its depths, and a run checks every arm in every cell).
        """
        fams = np.asarray(fam_idx, np.int32)
        f_lo = np.searchsorted(self.family, fams, side="left")
        f_hi = np.searchsorted(self.family, fams, side="right")
        buckets = np.asarray(bucket_idx, np.int32)
        want = np.int32(depth)
        out = []
        for a, b in zip(f_lo.tolist(), f_hi.tolist(), strict=True):
            bkt = self.bucket[a:b]
            b_lo = np.searchsorted(bkt, buckets, side="left").tolist()
            b_hi = np.searchsorted(bkt, buckets, side="right").tolist()
            for c, e in zip(b_lo, b_hi, strict=True):
                dep = self.depth[a + c : a + e]
                lo = int(np.searchsorted(dep, want, side="left"))
                out.append((a + c + lo, a + c + int(np.searchsorted(dep, want, side="right"))))
        return out


def _canonical_order(
    code: NDArray[np.int64], value: NDArray[np.float64], key: NDArray[np.uint64]
) -> NDArray[np.int64]:
    """Return ``np.lexsort((key, -value, code))``: sort by (code, value ↓), then ties by key.

    A counting sort on the codes (stable: each group keeps its index order), then per group a
    stable sort by value descending and, within a run of equal values, a stable sort by key
    (:func:`_order_kernel`): the same permutation as the three-key sort (whose every key is
    stable, so equal triples keep their index order). Only :meth:`RatioTail.ordered` sorts.
    """
    if code.shape[0] == 0:
        return np.zeros(0, np.int64)
    lo = int(code.min())
    out: NDArray[np.int64] = _order_kernel(code - lo, int(code.max()) - lo + 1, value, key)
    return out


@njit(cache=True)
def _order_kernel(
    code: NDArray[np.int64], n_codes: int, value: NDArray[np.float64], key: NDArray[np.uint64]
) -> NDArray[np.int64]:
    """See :func:`_canonical_order` (``code`` shifted to start at 0)."""
    m = code.shape[0]
    start = np.zeros(n_codes + 1, np.int64)
    for i in range(m):
        start[code[i] + 1] += 1
    for c in range(n_codes):
        start[c + 1] += start[c]
    fill = start[:-1].copy()
    order = np.empty(m, np.int64)
    for i in range(m):
        order[fill[code[i]]] = i
        fill[code[i]] += 1
    for c in range(n_codes):
        a, b = start[c], start[c + 1]
        if b - a < 2:
            continue
        grp = order[a:b]
        by_value = grp[np.argsort(-value[grp], kind="mergesort")]
        i = 0
        while i < b - a:  # runs of equal values: stable by key
            j = i + 1
            while j < b - a and value[by_value[j]] == value[by_value[i]]:
                j += 1
            if j - i > 1:
                run = by_value[i:j]
                by_value[i:j] = run[np.argsort(key[run], kind="mergesort")]
            i = j
        order[a:b] = by_value
    return order


class TailAccumulator:
    """Streaming :class:`RatioTail` of one arm over batches (family codes of the reader).

    A batch's ratios below their group's current K-th largest are dropped at once
    (:func:`~specreplay.replay.topk.admit`, one pass); the others wait in a buffer, and once
    the buffer holds twice as many entries as the tail, and at least 2^20 (about 28 MB), tail
    and buffer are cut to the top K of each group (:func:`~specreplay.replay.topk.select_top`:
    a counting sort by group, then a linear selection in each group larger than K), so the work
    stays proportional to the entries that enter. :attr:`tail` is grouped, in no order within
    a group.
    """

    _FLUSH = 1 << 20

    def __init__(self, n_buckets: int, max_depth: int, cap: int | None = None) -> None:
        self.cap = TAIL_CAP if cap is None else cap
        self._tail = RatioTail.empty(0, n_buckets, max_depth)
        self._thr = self._tail.dropped.copy()
        self._dropped = self._tail.dropped.copy()
        self._pending: list[RatioTail] = []
        self._n_pending = 0

    @property
    def tail(self) -> RatioTail:
        """The tail of every ratio added so far (grouped; :meth:`RatioTail.ordered` sorts it)."""
        self._flush()
        return self._tail

    def _flush(self) -> None:
        t = self._tail
        if not self._pending:  # only values below the thresholds came: the tail stands
            self._tail = RatioTail(
                t.family, t.bucket, t.depth, t.request_key, t.value, self._dropped.copy()
            )
            return
        parts = [p for p in (t, *self._pending) if p.value.shape[0]] or [t]

        def cat(name: str) -> NDArray[Any]:
            return np.concatenate([getattr(p, name) for p in parts])

        if len(parts) == 1:  # one batch, or entries of one only: no copy
            p = parts[0]
            both = RatioTail(p.family, p.bucket, p.depth, p.request_key, p.value, self._dropped)
        else:
            both = RatioTail(
                cat("family"),
                cat("bucket"),
                cat("depth"),
                cat("request_key"),
                cat("value"),
                self._dropped,
            )
        self._tail, self._thr = both._select(self.cap)
        self._dropped = self._tail.dropped.copy()
        self._pending, self._n_pending = [], 0

    def _grow(self, nf: int) -> None:
        pad = nf - self._dropped.shape[0]
        if pad <= 0:
            return
        more = np.full((pad, *self._dropped.shape[1:]), -np.inf)
        self._dropped = np.concatenate([self._dropped, more])
        self._thr = np.concatenate([self._thr, more])
        t = self._tail
        self._tail = RatioTail(
            t.family, t.bucket, t.depth, t.request_key, t.value, np.concatenate([t.dropped, more])
        )

    def add(
        self,
        family: NDArray[np.int32],
        bucket: NDArray[np.int32],
        key: NDArray[np.uint64],
        depth: NDArray[np.int32],
        ratio: NDArray[np.float64],
    ) -> None:
        """Add a batch's rounds: per round its codes (n,) each, its depth and r (n, D)."""
        if family.shape[0] == 0:
            return
        self._grow(int(family.max()) + 1)
        nb, d = self._dropped.shape[1], self._dropped.shape[2]
        # only a value ≥ its group's K-th largest so far can enter (ties may win on the key)
        fam, bkt, dep, k, val = admit(
            np.ascontiguousarray(family, np.int32),
            np.ascontiguousarray(bucket, np.int32),
            np.ascontiguousarray(key, np.uint64),
            np.ascontiguousarray(depth, np.int64),
            np.ascontiguousarray(ratio, np.float64),
            self._thr.reshape(-1),
            self._dropped.reshape(-1),
            nb,
            d,
        )
        self._pending.append(RatioTail(fam, bkt, dep, k, val, self._dropped))
        self._n_pending += val.shape[0]
        if self._n_pending >= max(2 * self._tail.value.shape[0], self._FLUSH):
            self._flush()

"""Top K per group by selection: the kernels behind the ratio tails (:mod:`.tails`).

Terms. A **group** is one finest cell at one depth, named by its code (family · n_buckets +
bucket) · D + depth; a group's **canonical order** is value descending, then request key
ascending; its **cut** at K is its K-th (value, key) in that order, and the group keeps the
entries at or before the cut (the first K). Nothing here sorts a group: the cut is found by
selection, in time linear in the group (:func:`kth_smallest`, :func:`_cutoff`), and the kept
entries are written in the order they came.

- :func:`admit`: a batch's entries that can still enter (value ≥ the group's threshold);
- :func:`select_top`: any entries → grouped, each group cut at K (a counting sort, then a
  selection per group larger than K);
- :func:`merge_top`: two grouped tails → grouped, each group cut at K, both read in place;
- :func:`kth_smallest`: quickselect, for float64 and uint64.

Every function is a Numba kernel over contiguous arrays (no Python objects); ``dropped``
arguments are flat views raised in place.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from specreplay import use_numba_cache

__all__ = ["admit", "kth_smallest", "merge_top", "select_top"]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)

_NO_GROUP = np.iinfo(np.int64).max  # the group code past the end of a tail


@njit(cache=True)
def _raise(dropped: NDArray[np.float64], g: int, v: float) -> None:
    """``dropped[g] = np.maximum(dropped[g], v)`` (NaN propagates, as in NumPy)."""
    if v > dropped[g] or v != v:
        dropped[g] = v


@njit(cache=True)
def admit(
    family: NDArray[np.int32],
    bucket: NDArray[np.int32],
    key: NDArray[np.uint64],
    depth: NDArray[np.int64],
    ratio: NDArray[np.float64],
    thr: NDArray[np.float64],
    dropped: NDArray[np.float64],
    n_buckets: int,
    max_depth: int,
) -> tuple[
    NDArray[np.int32], NDArray[np.int32], NDArray[np.int32], NDArray[np.uint64], NDArray[np.float64]
]:
    """Return a batch's entries that may enter the tail; raise ``dropped`` by the others.

    family, bucket : int32 (n,); key : uint64 (n,); depth : int64 (n,), the depths a round
    recorded; ratio : float64 (n, ≥ 1), r_k in column k − 1; thr, dropped : float64
    (n_families · n_buckets · max_depth,), flat, indexed by the group code (family · n_buckets
    + bucket) · max_depth + k − 1 (``dropped`` is raised in place). An entry enters when its
    value is ≥ its group's threshold (never a NaN). Entries come out round by round, depth by
    depth.
    """
    n = family.shape[0]
    cols = min(ratio.shape[1], max_depth)
    count = 0
    for r in range(n):
        g0 = (np.int64(family[r]) * n_buckets + bucket[r]) * max_depth
        for k in range(min(depth[r], cols)):
            v = ratio[r, k]
            if v >= thr[g0 + k]:
                count += 1
            else:
                _raise(dropped, g0 + k, v)
    out_f = np.empty(count, np.int32)
    out_b = np.empty(count, np.int32)
    out_d = np.empty(count, np.int32)
    out_k = np.empty(count, np.uint64)
    out_v = np.empty(count, np.float64)
    at = 0
    for r in range(n):
        g0 = (np.int64(family[r]) * n_buckets + bucket[r]) * max_depth
        for k in range(min(depth[r], cols)):
            v = ratio[r, k]
            if v >= thr[g0 + k]:
                out_f[at] = family[r]
                out_b[at] = bucket[r]
                out_d[at] = k
                out_k[at] = key[r]
                out_v[at] = v
                at += 1
    return out_f, out_b, out_d, out_k, out_v


@njit(cache=True)
def _median3(a: Any, b: Any, c: Any) -> Any:
    """Return the median of three values (of one type)."""
    if a < b:
        return b if b < c else (c if a < c else a)
    return a if a < c else (c if b < c else b)


@njit(cache=True)
def kth_smallest(x: NDArray[Any], n: int, k: int) -> Any:
    """Return the k-th smallest (0-based) of ``x[:n]``, reordering ``x[:n]`` in place.

    x : float64 or uint64, (≥ n,). Quickselect (Hoare 1961) with a median-of-three pivot and a
    three-way partition, so a run of equal values costs one pass, not a quadratic walk; after
    2·log2(n) + 8 rounds that did not converge it sorts what is left (O(n log n) at worst).
    Ranges of 16 or fewer are insertion-sorted. The value returned does not depend on how the
    pivots fall, only on ``x[:n]``.
    """
    lo, hi = 0, n
    budget, w = 8, n
    while w > 1:
        budget += 2
        w >>= 1
    while hi - lo > 16:
        if budget == 0:
            x[lo:hi].sort()
            return x[k]
        budget -= 1
        p = _median3(x[lo], x[(lo + hi) >> 1], x[hi - 1])
        lt, i, gt = lo, lo, hi  # x[lo:lt] < p, x[lt:i] == p, x[gt:hi] > p
        while i < gt:
            v = x[i]
            if v < p:
                x[i] = x[lt]
                x[lt] = v
                lt += 1
                i += 1
            elif p < v:
                gt -= 1
                x[i] = x[gt]
                x[gt] = v
            else:
                i += 1
        if k < lt:
            hi = lt
        elif k >= gt:
            lo = gt
        else:
            return p
    for i in range(lo + 1, hi):
        v = x[i]
        j = i - 1
        while j >= lo and v < x[j]:
            x[j + 1] = x[j]
            j -= 1
        x[j + 1] = v
    return x[k]


_SAMPLE = 512  # values sampled to bracket a group's cut (_cutoff)


@njit(cache=True)
def _bracket(
    v: NDArray[np.float64],
    k: NDArray[np.uint64],
    lo: float,
    hi: float,
    mid: tuple[NDArray[np.float64], NDArray[np.uint64]],
    counts: tuple[int, int],
) -> tuple[int, int]:
    """Count the values below ``lo``; append those in [lo, hi] (and keys) to ``mid``.

    ``counts``: (below, m) so far, updated and returned; the values and keys in the bracket go
    to ``mid`` at m, m + 1, …. Branch-free: every entry is written at m, which advances only
    for one in the bracket (``mid`` needs one slot of room past the last).
    """
    mid_v, mid_k = mid
    below, m = counts
    for t in range(v.shape[0]):
        x = v[t]
        below += x < lo
        mid_v[m] = x
        mid_k[m] = k[t]
        m += (x >= lo) & (x <= hi)
    return below, m


@njit(cache=True)
def _largest_below(v: NDArray[np.float64], bound: float, top: float) -> float:
    """Return the largest of ``top`` and the values of ``v`` below ``bound``."""
    for t in range(v.shape[0]):
        top = max(top, v[t] if v[t] < bound else -np.inf)
    return top


@njit(cache=True)
def _cutoff(
    v1: NDArray[np.float64],
    k1: NDArray[np.uint64],
    v2: NDArray[np.float64],
    k2: NDArray[np.uint64],
    cap: int,
    scratch: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.uint64]],
) -> tuple[float, int, int, float]:
    """Return the group's cut (v*, k*, room) and the largest value it drops.

    The group is the n > cap entries of both pieces (v1, k1) and (v2, k2); its cut is its
    cap-th (value, key) in canonical order. v* is the (n − cap)-th smallest value: a strided
    sample of s = :data:`_SAMPLE` values brackets it (Floyd & Rivest 1975) between its sample
    ranks r ± (1.5·√s + 4), r = ⌊(n − cap)·s/n⌋ (three standard deviations of the sample rank
    or more); one pass counts the values below the bracket and gathers those inside (about a
    seventh of n), and :func:`kth_smallest` selects v* among them. A miss (rare) redoes the
    pass with an unbounded bracket: the result never depends on the sample. k* is the
    (cap − #{v > v*})-th smallest key among the entries of value v*, and ``room`` the number
    of entries equal to (v*, k*) that the cap keeps. The largest value dropped is v* when an
    entry of value v* is cut, else the largest value below v*. scratch (tv, tw, tk) : float64,
    float64, uint64, (≥ n + 1,) each.
    """
    tv, tw, tk = scratch
    n1 = v1.shape[0]
    n = n1 + v2.shape[0]
    q = n - cap
    s = min(n, _SAMPLE)
    for t in range(s):
        at = (t * n) // s
        tw[t] = v1[at] if at < n1 else v2[at - n1]
    r = (q * s) // n
    margin = int(1.5 * np.sqrt(s)) + 4
    j = max(r - margin, 0)
    lo = kth_smallest(tw, s, j) if j > 0 else -np.inf  # leaves tw[j:] ≥ lo
    hi = kth_smallest(tw[j:], s - j, r + margin - j) if r + margin < s - 1 else np.inf
    below, m = _bracket(v2, k2, lo, hi, (tv, tk), _bracket(v1, k1, lo, hi, (tv, tk), (0, 0)))
    if not below <= q < below + m:
        below, m = _bracket(v1, k1, -np.inf, np.inf, (tv, tk), (0, 0))
        below, m = _bracket(v2, k2, -np.inf, np.inf, (tv, tk), (below, m))
    tw[:m] = tv[:m]
    v_star = kth_smallest(tw, m, q - below)
    above = n - below - m
    e = 0
    for t in range(m):  # the keys of value v*, compacted in place
        x = tv[t]
        above += x > v_star
        tk[e] = tk[t]
        e += x == v_star
    need = cap - above  # 1 ≤ need ≤ e: at least one entry of value v* is kept
    k_star = kth_smallest(tk, e, need - 1)
    below_k = 0
    for t in range(e):
        below_k += tk[t] < k_star
    if e > need:
        return v_star, k_star, need - below_k, v_star
    top = _largest_below(tv[:m], v_star, -np.inf)
    if top == -np.inf and below > 0:  # v* is the bracket's smallest: look below it (rare)
        top = _largest_below(v2, v_star, _largest_below(v1, v_star, top))
    return v_star, k_star, need - below_k, top


@njit(cache=True)
def _write_kept(
    v: NDArray[np.float64],
    k: NDArray[np.uint64],
    cut: tuple[float, int, int],
    out: tuple[NDArray[np.uint64], NDArray[np.float64]],
    at: int,
    limit: int,
) -> tuple[int, int]:
    """Write the entries of one piece that the cut (v*, k*, room) keeps, at ``at`` onwards.

    Branch-free but for entries of value v*: every entry is written at ``at`` (never past
    ``limit``, the slot after the group's last), which advances only for a kept one. Returns
    (at, room left).
    """
    out_k, out_v = out
    v_star, k_star, room = cut
    for t in range(v.shape[0]):
        x = v[t]
        keep = x > v_star
        if x == v_star:
            if k[t] < k_star:
                keep = True
            elif k[t] == k_star and room > 0:
                keep = True
                room -= 1
        out_k[min(at, limit)] = k[t]
        out_v[min(at, limit)] = x
        at += keep
    return at, room


@njit(cache=True)
def _keep_group(
    v1: NDArray[np.float64],
    k1: NDArray[np.uint64],
    v2: NDArray[np.float64],
    k2: NDArray[np.uint64],
    cap: int,
    scratch: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.uint64]],
    out_k: NDArray[np.uint64],
    out_v: NDArray[np.float64],
    at: int,
) -> tuple[int, float, float]:
    """Write the first ``cap`` of one group in canonical order, each piece in its order.

    The group is the entries of (v1, k1) then (v2, k2) (float64 and uint64 each); ``scratch``
    (tv, tw, tk) for :func:`_cutoff`; the kept entries are written to ``out_k``, ``out_v`` at
    ``at``, ``at + 1``, … (one slot of room past the last). A group of at most ``cap`` entries
    is copied; a larger one keeps exactly ``cap`` (else RuntimeError: a broken cut, never
    written past its slots). Returns (the next ``at``, the group's threshold: its smallest kept
    value when it holds ``cap`` entries, else −inf; the largest value not kept, −inf when
    none).
    """
    n1, n2 = v1.shape[0], v2.shape[0]
    if n1 + n2 <= cap:
        out_k[at : at + n1] = k1
        out_v[at : at + n1] = v1
        out_k[at + n1 : at + n1 + n2] = k2
        out_v[at + n1 : at + n1 + n2] = v2
        thr = -np.inf
        if n1 + n2 == cap:
            thr = min(v1.min() if n1 else np.inf, v2.min() if n2 else np.inf)
        return at + n1 + n2, thr, -np.inf
    v_star, k_star, room, drop = _cutoff(v1, k1, v2, k2, cap, scratch)
    end = _write_kept(v1, k1, (v_star, k_star, room), (out_k, out_v), at, at + cap)
    end = _write_kept(v2, k2, (v_star, k_star, end[1]), (out_k, out_v), end[0], at + cap)
    if end[0] != at + cap:  # by construction never; a broken cut fails here, not in memory
        raise RuntimeError("a tail group's cut kept other than K entries")
    return end[0], v_star, drop


@njit(cache=True)
def _scratch(
    n: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.uint64]]:
    """Scratch of :func:`_keep_group` for groups of up to ``n`` entries."""
    return np.empty(n + 1), np.empty(n + 1), np.empty(n + 1, np.uint64)


@njit(cache=True)
def select_top(
    tail: tuple[
        NDArray[np.int32],
        NDArray[np.int32],
        NDArray[np.int32],
        NDArray[np.uint64],
        NDArray[np.float64],
    ],
    cap: int,
    dropped: NDArray[np.float64],
    nb: int,
    nd: int,
) -> tuple[
    NDArray[np.int32],
    NDArray[np.int32],
    NDArray[np.int32],
    NDArray[np.uint64],
    NDArray[np.float64],
    NDArray[np.float64],
]:
    """Keep the first ``cap`` entries of each group (:func:`_keep_group`), grouped by code.

    tail : (family, bucket, depth, request_key, value) (m,) each, in any order, every group
    code (family · nb + bucket) · nd + depth in [0, dropped.size); dropped : float64
    (n_codes,), flat, raised in place by the entries cut. A counting sort groups the entries
    (stable: a group keeps its index order); when no group holds more than ``cap`` that is all
    (a shard's groups are smaller than K), else each group is kept in one selection. Returns
    the kept family, bucket, depth, key and value, groups ascending, and each group's threshold
    (float64 (n_codes,)).
    """
    fam, bkt, dep, key, value = tail
    n_codes, m = dropped.shape[0], value.shape[0]
    code = (fam.astype(np.int64) * nb + bkt) * nd + dep
    start = np.zeros(n_codes + 1, np.int64)
    for i in range(m):
        start[code[i] + 1] += 1
    total = widest = 0
    for c in range(n_codes):
        total += min(start[c + 1], cap)
        widest = max(widest, start[c + 1])
        start[c + 1] += start[c]
    direct = widest <= cap  # nothing to cut: the counting sort writes the result
    sv = np.empty(total + 1 if direct else m)
    sk = np.empty(total + 1 if direct else m, np.uint64)
    fill = start[:-1].copy()
    for i in range(m):
        sv[fill[code[i]]] = value[i]
        sk[fill[code[i]]] = key[i]
        fill[code[i]] += 1
    if direct:
        out_k, out_v, scratch = sk, sv, _scratch(0)
    else:
        out_k, out_v = np.empty(total + 1, np.uint64), np.empty(total + 1)
        scratch = _scratch(widest)
    out_f = np.empty(total, np.int32)
    out_b = np.empty(total, np.int32)
    out_d = np.empty(total, np.int32)
    thr = np.full(n_codes, -np.inf)
    at = 0
    for c in range(n_codes):
        a, b = start[c], start[c + 1]
        if a == b:
            continue
        if direct:
            end = b
            if b - a == cap:
                thr[c] = sv[a:b].min()
        else:
            end, low, drop = _keep_group(
                sv[a:b], sk[a:b], sv[:0], sk[:0], cap, scratch, out_k, out_v, at
            )
            thr[c] = low
            _raise(dropped, c, drop)
        out_f[at:end] = c // (nb * nd)
        out_b[at:end] = (c // nd) % nb
        out_d[at:end] = c % nd
        at = end
    return out_f, out_b, out_d, out_k[:total], out_v[:total], thr


@njit(cache=True)
def _run_end(f: NDArray[np.int32], b: NDArray[np.int32], d: NDArray[np.int32], i: int) -> int:
    """Return the end of the run of rows equal to row ``i`` in (family, bucket, depth).

    Runs are contiguous (a tail is grouped): a galloping then binary search, O(log run).
    """
    n = f.shape[0]
    fi, bi, di = f[i], b[i], d[i]
    lo, step = i, 1  # row lo is in the run
    hi = i + 1
    while hi < n and f[hi] == fi and b[hi] == bi and d[hi] == di:
        lo = hi
        step *= 2
        hi = lo + step
    hi = min(hi, n)
    while hi - lo > 1:  # row lo in the run, row hi past it (or the end)
        mid = (lo + hi) >> 1
        if f[mid] == fi and b[mid] == bi and d[mid] == di:
            lo = mid
        else:
            hi = mid
    return int(hi)


@njit(cache=True)
def _code_at(
    f: NDArray[np.int32], b: NDArray[np.int32], d: NDArray[np.int32], i: int, nb: int, nd: int
) -> int:
    """Return the group code of row ``i`` (max int64 past the end)."""
    if i >= f.shape[0]:
        return _NO_GROUP
    return int((np.int64(f[i]) * nb + b[i]) * nd + d[i])


@njit(cache=True)
def merge_top(
    a: tuple[
        NDArray[np.int32],
        NDArray[np.int32],
        NDArray[np.int32],
        NDArray[np.uint64],
        NDArray[np.float64],
    ],
    b: tuple[
        NDArray[np.int32],
        NDArray[np.int32],
        NDArray[np.int32],
        NDArray[np.uint64],
        NDArray[np.float64],
    ],
    dropped: NDArray[np.float64],
    nb: int,
    nd: int,
    cap: int,
) -> tuple[
    NDArray[np.int32], NDArray[np.int32], NDArray[np.int32], NDArray[np.uint64], NDArray[np.float64]
]:
    """Merge two grouped tails, keeping the first ``cap`` entries of each group.

    a, b : (family, bucket, depth, request_key, value) of each tail, (m_a,) and (m_b,), grouped
    by code ascending; dropped : float64 (n_codes,), flat, raised in place. Two walks over the
    groups of both (each group's end found by :func:`_run_end`): the first sizes the result
    (Σ min(cap, n_a + n_b) over groups), the second keeps each group from its two pieces in
    place (:func:`_keep_group`: copied when they hold ≤ cap together). Returns the kept family,
    bucket, depth, key and value.
    """
    fa, ba, da, ka, va = a
    fb, bb, db, kb, vb = b
    total = widest = 0
    i = j = 0
    while i < fa.shape[0] or j < fb.shape[0]:
        ca, cb = _code_at(fa, ba, da, i, nb, nd), _code_at(fb, bb, db, j, nb, nd)
        ea = _run_end(fa, ba, da, i) if ca <= cb else i
        eb = _run_end(fb, bb, db, j) if cb <= ca else j
        total += min(ea - i + eb - j, cap)
        widest = max(widest, ea - i + eb - j)
        i, j = ea, eb
    scratch = _scratch(widest)
    out_f = np.empty(total, np.int32)
    out_b = np.empty(total, np.int32)
    out_d = np.empty(total, np.int32)
    out_k = np.empty(total + 1, np.uint64)
    out_v = np.empty(total + 1)
    at = i = j = 0
    while i < fa.shape[0] or j < fb.shape[0]:
        ca, cb = _code_at(fa, ba, da, i, nb, nd), _code_at(fb, bb, db, j, nb, nd)
        ea = _run_end(fa, ba, da, i) if ca <= cb else i
        eb = _run_end(fb, bb, db, j) if cb <= ca else j
        end, _, drop = _keep_group(
            va[i:ea], ka[i:ea], vb[j:eb], kb[j:eb], cap, scratch, out_k, out_v, at
        )
        g = min(ca, cb)
        out_f[at:end] = g // (nb * nd)
        out_b[at:end] = (g // nd) % nb
        out_d[at:end] = g % nd
        _raise(dropped, g, drop)
        at, i, j = end, ea, eb
    return out_f, out_b, out_d, out_k[:total], out_v[:total]

"""Sort-free ratio tails (issue 13 item 2) against a plain reference.

The reference is written here, as the module docstring of :mod:`specreplay.replay.tails`
defines a tail: every ratio of every round, sorted by np.lexsort on (group, value descending,
request key), the first K of each group kept, and ``dropped`` the largest value of the rest.
The tails under test are built the way a run builds them: rounds added in batches to one
accumulator per shard (flushing early or late), each shard on its own family table, the shards
folded in any order and shape (:meth:`RatioTail.merge` is the top K of a union, whatever the
order), then sorted once (:meth:`RatioTail.ordered`). Kept entries and ``dropped`` must equal
the reference's bit for bit. Inputs have heavy ties on purpose: values from a handful of levels
(zeros included), keys from a handful of requests, so a cap often falls inside a run of equal
values and inside a run of equal (value, key) pairs, and K is small so groups are both larger
and smaller than K.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specreplay.replay.tails import RatioTail, TailAccumulator
from specreplay.replay.topk import kth_smallest

SETTINGS = settings(deadline=None, derandomize=True, database=None, max_examples=200)


@dataclass(frozen=True)
class Rounds:
    """Rounds as the replay pass hands them to a tail accumulator (global family codes)."""

    family: np.ndarray
    bucket: np.ndarray
    key: np.ndarray
    depth: np.ndarray
    ratio: np.ndarray
    shape: tuple[int, int, int]  # (families, buckets, D)

    def part(self, s: slice | np.ndarray) -> Rounds:
        return Rounds(
            self.family[s], self.bucket[s], self.key[s], self.depth[s], self.ratio[s], self.shape
        )


def _rounds(rng: np.random.Generator, n: int, shape: tuple[int, int, int], levels: int) -> Rounds:
    """``n`` rounds; values from ``levels`` levels (a quarter zeros), keys from few requests."""
    nf, nb, d = shape
    ratio = rng.integers(0, levels, (n, d)).astype(np.float64) / 4
    ratio[rng.random((n, d)) < 0.25] = 0.0
    return Rounds(
        rng.integers(0, nf, n).astype(np.int32),
        rng.integers(0, nb, n).astype(np.int32),
        rng.integers(0, max(2, n // 8), n).astype(np.uint64),
        rng.integers(0, d + 1, n).astype(np.int32),  # depth 0: a round that recorded none
        ratio,
        shape,
    )


def _reference(r: Rounds, cap: int) -> tuple[list[np.ndarray], np.ndarray]:
    """The first ``cap`` of each group of a three-key lexsort of every ratio; dropped maxima."""
    _, nb, d = r.shape
    rr, dd = np.nonzero(np.arange(d)[None, :] < r.depth[:, None])
    fam, bkt, key, val = r.family[rr], r.bucket[rr], r.key[rr], r.ratio[rr, dd]
    code = (fam.astype(np.int64) * nb + bkt) * d + dd
    order = np.lexsort((key, -val, code))
    rank = np.zeros(order.shape[0], np.int64)
    for i in range(1, order.shape[0]):
        same = code[order[i]] == code[order[i - 1]]
        rank[i] = rank[i - 1] + 1 if same else 0
    kept, cut = order[rank < cap], order[rank >= cap]
    dropped = np.full(r.shape, -np.inf)
    for i in cut.tolist():
        dropped[fam[i], bkt[i], dd[i]] = max(dropped[fam[i], bkt[i], dd[i]], val[i])
    arrays = [fam[kept], bkt[kept], dd[kept].astype(np.int32), key[kept], val[kept]]
    return arrays, dropped


def _assert_is_reference(tail: RatioTail, r: Rounds, cap: int) -> None:
    want, dropped = _reference(r, cap)
    t = tail.ordered()
    got = [t.family, t.bucket, t.depth, t.request_key, t.value]
    names = ["family", "bucket", "depth", "request_key", "value"]
    for name, x, y in zip(names, got, want, strict=True):
        assert x.dtype == y.dtype, name
        # bit for bit: values compared as their 64-bit patterns
        assert np.array_equal(x.view(np.uint64) if name == "value" else x,
                              y.view(np.uint64) if name == "value" else y), name  # fmt: skip
    assert np.array_equal(t.dropped.view(np.uint64), dropped.view(np.uint64)), "dropped"


def _accumulate(r: Rounds, cap: int, cuts: list[int], flush: int) -> RatioTail:
    """One accumulator over ``r`` in batches split at ``cuts`` (flushing at ``flush``)."""
    acc = TailAccumulator(r.shape[1], r.shape[2], cap=cap)
    acc._FLUSH = flush  # small: the thresholds of earlier batches filter later ones
    bounds = [0, *cuts, r.family.shape[0]]
    for lo, hi in itertools.pairwise(bounds):
        acc.add(*(x[lo:hi] for x in (r.family, r.bucket, r.key, r.depth)), r.ratio[lo:hi])
    tail = acc.tail
    nf = r.shape[0]
    if tail.dropped.shape[0] < nf:  # families no round of this shard had
        tail = tail.with_families(np.arange(tail.dropped.shape[0], dtype=np.int64), nf)
    return tail


def _shard_tail(rng: np.random.Generator, r: Rounds, cap: int) -> RatioTail:
    """A shard's tail as ``replay_shard`` builds it: reader codes, then the shard's table."""
    nf = r.shape[0]
    local_of = rng.permutation(nf)  # the reader numbers families in its own order
    to_global = np.argsort(local_of).astype(np.int64)
    local = Rounds(local_of[r.family].astype(np.int32), r.bucket, r.key, r.depth, r.ratio,
                   r.shape)  # fmt: skip
    n = r.family.shape[0]
    cuts = sorted(rng.choice(np.arange(1, n), size=min(n - 1, rng.integers(0, 4)), replace=False))
    acc_tail = _accumulate(local, cap, [int(c) for c in cuts], int(rng.integers(1, 40)))
    return acc_tail.with_families(to_global[: acc_tail.dropped.shape[0]], nf)


def _fold(rng: np.random.Generator, parts: list[RatioTail], cap: int) -> RatioTail:
    """Merge ``parts`` in a random tree: any two, in either argument order."""
    parts = list(parts)
    while len(parts) > 1:
        i, j = sorted(rng.choice(len(parts), 2, replace=False).tolist())
        a, b = parts.pop(j), parts.pop(i)
        parts.append(
            RatioTail.merge(a, b, cap) if rng.random() < 0.5 else RatioTail.merge(b, a, cap)
        )
    return parts[0]


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 400),
    cap=st.integers(1, 9),
    shape=st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(1, 4)),
    levels=st.integers(1, 12),
    shards=st.integers(1, 7),
)
def test_folded_tails_are_the_reference_top_k(
    seed: int, n: int, cap: int, shape: tuple[int, int, int], levels: int, shards: int
) -> None:
    """Any batches, flushes, shard split, family tables and fold order: the reference, to the
    bit (kept values, keys and their cells; dropped maxima)."""
    rng = np.random.default_rng(seed)
    r = _rounds(rng, n, shape, levels)
    split = np.sort(rng.integers(0, shards, n))  # shards of consecutive rounds, some empty
    parts = [_shard_tail(rng, r.part(split == s), cap) for s in range(shards) if (split == s).any()]
    _assert_is_reference(_fold(rng, parts, cap), r, cap)


@pytest.mark.parametrize("seed", range(4))
def test_merge_order_and_shard_layout_do_not_move_a_bit(seed: int) -> None:
    """Realistic groups (hundreds of entries, K = 64, ties at zero and on rounded values): a
    left fold, a right fold and a balanced tree of 16 shards, and one accumulator over every
    round in one batch, all equal the reference; every group larger than K was cut."""
    rng = np.random.default_rng(seed)
    shape, n, cap = (3, 2, 5), 6000, 64
    r = _rounds(rng, n, shape, 40)
    r.ratio[:] = np.where(r.ratio > 0, np.round(rng.lognormal(0, 1.5, r.ratio.shape), 2), 0.0)
    cut = np.linspace(0, n, 17).astype(int)
    parts = [_accumulate(r.part(slice(a, b)), cap, [], 1 << 20) for a, b in itertools.pairwise(cut)]
    left = parts[0]
    for p in parts[1:]:
        left = RatioTail.merge(left, p, cap)
    right = parts[-1]
    for p in parts[-2::-1]:
        right = RatioTail.merge(p, right, cap)
    level = parts
    while len(level) > 1:
        level = [RatioTail.merge(a, b, cap) for a, b in zip(level[::2], level[1::2], strict=True)]
    for tail in (left, right, level[0], _accumulate(r, cap, [], 1 << 20)):
        _assert_is_reference(tail, r, cap)
    assert np.isfinite(left.dropped).all()  # every group was cut


def test_a_merge_writes_at_most_k_per_group_and_copies_small_groups() -> None:
    """Groups whose parts hold ≤ K together are copied (a's entries, then b's, in their
    order); a group beyond K keeps its top K; nothing is written past K per group."""
    z = np.zeros(3, np.int32)
    a = RatioTail(z, z, np.array([0, 0, 1], np.int32), np.array([5, 6, 7], np.uint64),
                  np.array([1.0, 3.0, 2.0]), np.full((1, 1, 2), -np.inf))  # fmt: skip
    b = RatioTail(z[:2], z[:2], np.array([0, 1], np.int32), np.array([8, 9], np.uint64),
                  np.array([2.0, 4.0]), np.full((1, 1, 2), -np.inf))  # fmt: skip
    m = RatioTail.merge(a, b, cap=2)
    assert m.depth.tolist() == [0, 0, 1, 1]
    assert m.value.tolist() == [3.0, 2.0, 2.0, 4.0]  # group 0 cut to 2; group 1 copied
    assert m.request_key.tolist() == [6, 8, 7, 9]
    assert m.dropped.tolist() == [[[1.0, -np.inf]]]
    assert RatioTail.merge(a, b, cap=3).value.tolist() == [1.0, 3.0, 2.0, 2.0, 4.0]


def test_ties_on_the_cap_keep_the_smallest_keys_and_drop_the_value() -> None:
    """Six entries of value 1 (keys 4, 2, 2, 9, 2, 0) and one of 5, K = 4: 5 then keys 0, 2, 2
    are kept (one (1, 2) of three cut), so 1 is dropped though a (1, 2) pair is kept."""
    z = np.zeros(7, np.int32)
    key = np.array([4, 2, 2, 9, 2, 0, 7], np.uint64)
    val = np.array([1, 1, 1, 1, 1, 1, 5], np.float64)
    acc = TailAccumulator(1, 1, cap=4)
    acc.add(z, z, key, np.ones(7, np.int32), val[:, None])
    t = acc.tail.ordered()
    assert t.value.tolist() == [5.0, 1.0, 1.0, 1.0] and t.request_key.tolist() == [7, 0, 2, 2]
    assert t.dropped.tolist() == [[[1.0]]]
    assert acc.tail.thresholds(4).tolist() == [[[1.0]]]


@pytest.mark.parametrize("dtype", [np.float64, np.uint64])
@pytest.mark.parametrize(
    "pattern", ["random", "few", "equal", "sorted", "reversed", "organ", "saw", "two"]
)
def test_kth_smallest_is_the_sorted_value(dtype: type, pattern: str) -> None:
    """Quickselect against np.sort at every rank of sizes around the insertion-sort cutoff and
    beyond, on orders that defeat naive pivots (sorted, reversed, organ pipe, all equal)."""
    rng = np.random.default_rng(5)
    for n in (1, 2, 16, 17, 40, 257, 1000):
        base = {
            "random": rng.integers(0, 10**6, n),
            "few": rng.integers(0, 3, n),
            "equal": np.full(n, 7),
            "sorted": np.arange(n),
            "reversed": np.arange(n)[::-1],
            "organ": np.concatenate([np.arange(n // 2), np.arange(n - n // 2)[::-1]]),
            "saw": np.arange(n) % 7,
            "two": (np.arange(n) % 2) * 10**6,
        }[pattern].astype(dtype)
        want = np.sort(base)
        for k in sorted({0, 1, n // 3, n // 2, n - 2, n - 1} & set(range(n))):
            x = np.concatenate([base, np.full(3, 99, dtype)])  # past n: never read
            assert kth_smallest(x, n, k) == want[k], (n, k)
            assert np.array_equal(np.sort(x[:n]), want)  # reordered, not altered
            assert (x[n:] == 99).all()


def _one_group(value: np.ndarray, key: np.ndarray) -> Rounds:
    """Rounds of one finest cell, each with one depth: one group, entries in this order."""
    n = value.shape[0]
    z = np.zeros(n, np.int32)
    return Rounds(z, z, key.astype(np.uint64), np.ones(n, np.int32), value[:, None], (1, 1, 1))


@pytest.mark.parametrize("kind", ["lognormal", "levels", "equal"])
@pytest.mark.parametrize("cap", [1, 300, 700, 2047])
def test_groups_larger_than_the_sample_are_cut_exactly(kind: str, cap: int) -> None:
    """Groups of 600 to 4,800 entries (the bracket samples 512 of them): one accumulator and
    folds of 4 and 8 shards equal the reference, for continuous values, 6 tied levels, and all
    values equal (the key alone decides, with repeated keys)."""
    rng = np.random.default_rng(cap)
    n = 4800
    value = {
        "lognormal": rng.lognormal(0.0, 1.5, n),
        "levels": rng.integers(0, 6, n).astype(np.float64),
        "equal": np.ones(n),
    }[kind]
    r = _one_group(value, rng.integers(0, 900, n))
    for shards in (1, 4, 8):
        cut = np.linspace(0, n, shards + 1).astype(int)
        parts = [
            _accumulate(r.part(slice(a, b)), cap, [], 1 << 20) for a, b in itertools.pairwise(cut)
        ]
        _assert_is_reference(_fold(rng, parts, cap), r, cap)


def test_a_sample_that_misses_the_cut_still_cuts_exactly() -> None:
    """The bracket is drawn from every other entry of a 1,024-entry group (positions
    ⌊t·1024/512⌋): zeros there, distinct large values between. The sample then brackets [0, 0],
    which holds 512 entries below the cut's rank 924, so the bracket misses and the selection
    runs on the whole group; the result is still the reference's (the 100 largest, and the
    101st dropped)."""
    n, cap = 1024, 100
    value = np.zeros(n)
    value[1::2] = np.arange(1, n // 2 + 1) * 1.5
    r = _one_group(value, np.arange(n))
    tail = _accumulate(r, cap, [], 1 << 20)
    _assert_is_reference(tail, r, cap)
    assert tail.dropped.tolist() == [[[(n // 2 - cap) * 1.5]]]
    # the same group from two tails of 512 (zeros in one, the large values in the other)
    a = _accumulate(_one_group(value[::2], np.arange(0, n, 2)), 512, [], 1 << 20)
    b = _accumulate(_one_group(value[1::2], np.arange(1, n, 2)), 512, [], 1 << 20)
    _assert_is_reference(RatioTail.merge(a, b, cap), r, cap)


def test_the_largest_dropped_value_below_the_bracket_is_found() -> None:
    """The cut's value v* is the bracket's lower end and every entry of value v* is kept, so
    the largest value dropped lies below the bracket and needs a pass of its own. 1,024
    entries, K = 424 (the cut at ascending rank 600); the bracket is drawn from the even
    positions: 263 small values and 249 large ones there, v* = 10 the smallest large one, so
    the sample's rank 600·512/1024 − 37 = 263 is v* itself; the odd positions hold 337 small
    values, up to 0.95, and 175 large ones. The dropped maximum is 0.95."""
    n, cap = 1024, 424
    rng = np.random.default_rng(11)
    small = rng.permutation(np.linspace(0.0, 0.95, 600))
    large = 10.0 + np.arange(cap) / 4  # 10, 10.25, …: v* = 10, at an even position
    large[1:] = rng.permutation(large[1:])
    even = np.concatenate([small[:263], large[:249]])
    odd = np.concatenate([small[263:], large[249:]])
    value = np.empty(n)
    value[0::2], value[1::2] = rng.permutation(even), rng.permutation(odd)
    r = _one_group(value, np.arange(n))
    tail = _accumulate(r, cap, [], 1 << 20)
    _assert_is_reference(tail, r, cap)
    assert tail.dropped.tolist() == [[[0.95]]]


def test_tails_on_different_tables_do_not_merge() -> None:
    """Merging needs one family table (``merge_shards`` maps both first); else ValueError."""
    with pytest.raises(ValueError, match=r"tails on different tables: \(2, 1, 1\) ≠ \(3, 1, 1\)"):
        RatioTail.merge(RatioTail.empty(2, 1, 1), RatioTail.empty(3, 1, 1))

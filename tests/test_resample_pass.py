"""One resample pass per run (issue 13, item 1): every table of a run from the same multiplicities.

:func:`~specreplay.stats.bootstrap.resample_sums` draws each replicate's request multiplicities
once and weights every table by them. The references here recompute each table's replicates from
the multiplicities alone: replicate b's count of every member from ``_count_draws`` (the draw
itself, keyed by (seed, b, stratum, draw)), mapped to requests through the run's member order,
then Σ count × value per cell with numpy. The data are whole numbers, so every sum is exact in
float64 whatever its order, and the comparisons are to the bit.
"""

from __future__ import annotations

from dataclasses import replace

import numba
import numpy as np
import pytest

from specreplay.stats.bootstrap import (
    PairedSums,
    _count_draws,
    _member_order,
    _shared,
    _Table,
    bootstrap_sums,
    resample_sums,
    resampling,
)

N_BOOT = 120
SEED = 20261213


def _tables(n: int, seed: int) -> tuple[PairedSums, PairedSums, PairedSums]:
    """Three tables on the same n requests (whole-number values).

    ``main``: 3 families × 4 buckets, most requests one piece, a third two (so some cells are one
    run of consecutive members and others are not); ``other``: the same pieces with other values
    (another comparison of the run); ``grouped``: the same pieces coded by 5 groups that cut
    across the families (a ``--by`` grouping).
    """
    rng = np.random.default_rng(seed)
    fam = rng.integers(0, 3, n).astype(np.int32)
    first = rng.integers(0, 4, n)
    two = rng.random(n) < 0.35
    req = np.concatenate([np.arange(n), np.flatnonzero(two)])
    bucket = np.concatenate([first, (first[two] + rng.integers(1, 4, two.sum())) % 4])
    order = np.lexsort((bucket, req))
    req, bucket = req[order], bucket[order].astype(np.int32)
    k = req.shape[0]

    def vals() -> tuple[np.ndarray, ...]:
        na = rng.integers(1, 40, k).astype(np.float64)
        return na, na + rng.integers(0, 150, k), na.copy(), na + rng.integers(0, 150, k)

    ids = tuple(f"req-{i:04d}" for i in range(n))
    keys = rng.integers(0, 2**63, n).astype(np.uint64)
    main = PairedSums(ids, keys, fam, req, bucket, *vals(), ("a", "b", "c"),
                      ("b0", "b1", "b2", "b3"))  # fmt: skip
    other = replace(main, **dict(zip(("n_a", "t_a", "n_b", "t_b"), vals(), strict=True)))
    group = rng.integers(0, 5, n).astype(np.int32)
    grouped = replace(main, family=group, families=tuple(f"g{i}" for i in range(5)))
    return main, other, grouped


def _multiplicities(ps: PairedSums, n_boot: int, seed: int, stratify: str) -> np.ndarray:
    """(n_boot, n_requests) counts of each request of ``ps`` (the units) per replicate."""
    member_request, strat_start = _member_order(ps, stratify)
    w = np.zeros((n_boot, ps.n_requests))
    for b in range(n_boot):
        cnt = np.zeros(ps.n_requests, np.int32)
        _count_draws(np.uint64(seed), b, strat_start, cnt)
        w[b, member_request] = cnt
    return w


def _recomputed(ps: PairedSums, w: np.ndarray) -> np.ndarray:
    """Σ count × value per (family, bucket) cell of ``ps`` and replicate (counts per request)."""
    nf, nb = len(ps.families), len(ps.buckets)
    cell = ps.family[ps.piece_request].astype(np.int64) * nb + ps.piece_bucket
    out = np.zeros((w.shape[0], nf * nb, 4))
    for v, arr in enumerate((ps.n_a, ps.t_a, ps.n_b, ps.t_b)):
        for b in range(w.shape[0]):
            out[b, :, v] = np.bincount(cell, weights=w[b, ps.piece_request] * arr,
                                       minlength=nf * nb)  # fmt: skip
    return out.reshape(w.shape[0], nf, nb, 4)


@pytest.mark.parametrize("stratify", ["family", "none"])
def test_every_table_is_weighted_by_the_units_multiplicities(stratify: str) -> None:
    """Each table's replicates, a grouping coded across the strata included, equal Σ count ×
    value with the counts of the first table's units (drawing a table on its own strata, as
    before issue 13, gives the grouped table other counts and fails here)."""
    main, other, grouped = _tables(700, seed=1)
    mixed = replace(main, t_b=other.t_b)  # one column of each: shared with both
    rs = resampling(main, n_boot=N_BOOT, seed=SEED, stratify=stratify)
    got = resample_sums(rs, [main, other, grouped, mixed])
    w = _multiplicities(main, N_BOOT, SEED, stratify)
    for table, sums in zip((main, other, grouped, mixed), got, strict=True):
        assert sums.shape == (N_BOOT, len(table.families), 4, 4)
        np.testing.assert_array_equal(sums, _recomputed(table, w))
    # the grouping's cells hold the same resampled requests as the main cells: equal totals
    np.testing.assert_array_equal(got[2].sum(axis=1), got[0].sum(axis=1))
    if stratify == "family":  # drawn within its own groups the grouping resamples otherwise
        alone = bootstrap_sums(grouped, n_boot=N_BOOT, seed=SEED, stratify=stratify)
        assert not np.array_equal(alone, got[2])


def test_a_table_alone_and_in_a_run_agree_to_the_bit() -> None:
    """Non-integer values: the main table's replicates in a pass with others are bit-identical
    to the table resampled alone (``bootstrap_sums``, what each comparison drew before), so only
    groupings coded across the strata move."""
    main, other, grouped = _tables(500, seed=2)
    rng = np.random.default_rng(3)
    main = replace(main, t_a=main.t_a * rng.random(main.t_a.shape[0]), t_b=main.t_b / 3.0)
    got = resample_sums(resampling(main, n_boot=N_BOOT, seed=SEED), [grouped, main, other])
    np.testing.assert_array_equal(got[1], bootstrap_sums(main, n_boot=N_BOOT, seed=SEED))
    np.testing.assert_array_equal(got[2], bootstrap_sums(other, n_boot=N_BOOT, seed=SEED))


def test_columns_and_layouts_equal_only_in_their_sampled_entries_stay_apart() -> None:
    """Tables are grouped by layout and their columns by value through a key of 64 sampled
    entries; two arrays equal there but not everywhere (a value, a piece's member) are two."""
    k = 1000  # the key samples every 15th entry: index 1 is never sampled
    rng = np.random.default_rng(9)
    vals = rng.integers(1, 50, (4, k)).astype(np.float64)
    start, first = np.array([0, 600, k]), np.array([0, -1])
    member = np.arange(k, dtype=np.uint64)
    a = _Table(start, first, member, vals)
    b = _Table(start, first, member, vals.copy())
    b.piece_vals[1, 1] += 1.0
    moved = member.copy()
    moved[1] = k + 5
    c = _Table(start, first, moved, vals)
    got = _shared([a, b, c])
    assert [g for g, _ in got.picks] == [0, 0, 1]
    assert got.picks[0][1] == [0, 1, 2, 3] and got.picks[1][1] == [0, 4, 2, 3]
    assert len(got.columns[0]) == 5


def test_a_cell_whose_members_jump_once_is_gathered() -> None:
    """Requests 0–4 and 7–9 hold rounds in bucket b0 only, 5–6 in b0 and b1, 10–14 in b1 only
    (keys in that order): members 0–9 start in b0, 10–14 in b1, so cell b1 holds members 5, 6,
    10, …, 14, one run with one jump (read as one run it would weight 10–14's pieces by the
    counts of 7–11)."""
    n = 15
    two = [5, 6]
    req = np.array([*range(10), *two, *range(10, n)])
    bucket = np.array([0] * 10 + [1] * (len(two) + 5), np.int32)
    order = np.lexsort((bucket, req))
    req, bucket = req[order], bucket[order]
    rng = np.random.default_rng(10)
    k = req.shape[0]
    na = rng.integers(1, 9, k).astype(np.float64)
    ps = PairedSums(tuple(f"q{i:02d}" for i in range(n)), np.arange(1, n + 1, dtype=np.uint64),
                    np.zeros(n, np.int32), req, bucket, na, na + rng.integers(0, 30, k),
                    na.copy(), na + rng.integers(0, 30, k), ("f",), ("b0", "b1"))  # fmt: skip
    (got,) = resample_sums(resampling(ps, n_boot=N_BOOT, seed=SEED), [ps])
    np.testing.assert_array_equal(got, _recomputed(ps, _multiplicities(ps, N_BOOT, SEED, "family")))


def test_the_units_are_matched_by_request_not_by_position() -> None:
    """A table listing the same requests in another order (and its pieces reversed) gets the
    same replicates: members are found by request key, never by row."""
    main, other, _ = _tables(300, seed=4)
    perm = np.random.default_rng(5).permutation(main.n_requests)
    inv = np.argsort(perm)
    shuffled = replace(
        other,
        request_ids=tuple(other.request_ids[i] for i in perm),
        request_keys=other.request_keys[perm],
        family=other.family[perm],
        piece_request=inv[other.piece_request][::-1],
        piece_bucket=other.piece_bucket[::-1],
        n_a=other.n_a[::-1], t_a=other.t_a[::-1], n_b=other.n_b[::-1], t_b=other.t_b[::-1],
    )  # fmt: skip
    rs = resampling(main, n_boot=N_BOOT, seed=SEED)
    a, b = resample_sums(rs, [other, shuffled])
    np.testing.assert_array_equal(a, b)


def test_colliding_request_keys_are_told_apart_by_id() -> None:
    """Two requests sharing a 64-bit key (forced here) are still two members."""
    main, other, _ = _tables(200, seed=6)
    keys = main.request_keys.copy()
    keys[7] = keys[3]
    main, other = replace(main, request_keys=keys), replace(other, request_keys=keys)
    got = resample_sums(resampling(main, n_boot=N_BOOT, seed=SEED), [main, other])
    w = _multiplicities(main, N_BOOT, SEED, "family")
    np.testing.assert_array_equal(got[1], _recomputed(other, w))


def test_a_request_outside_the_units_is_refused() -> None:
    main, _, _ = _tables(100, seed=7)
    keep = main.piece_request < 50
    fewer = replace(
        main,
        request_ids=main.request_ids[:50],
        request_keys=main.request_keys[:50],
        family=main.family[:50],
        piece_request=main.piece_request[keep],
        piece_bucket=main.piece_bucket[keep],
        n_a=main.n_a[keep], t_a=main.t_a[keep], n_b=main.n_b[keep], t_b=main.t_b[keep],
    )  # fmt: skip
    rs = resampling(fewer, n_boot=10, seed=SEED)
    with pytest.raises(ValueError, match=r"request 'req-00\d\d' is not among the resampled"):
        resample_sums(rs, [main])


def test_one_pass_is_the_same_with_one_and_two_threads() -> None:
    main, other, grouped = _tables(400, seed=8)
    rs = resampling(main, n_boot=N_BOOT, seed=SEED)
    numba.set_num_threads(1)
    try:
        one = resample_sums(rs, [main, other, grouped])
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    two = resample_sums(rs, [main, other, grouped])
    for x, y in zip(one, two, strict=True):
        np.testing.assert_array_equal(x, y)

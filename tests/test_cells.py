"""Tests of the one cell layout (:func:`specreplay.stats.cells.cell_layout`) and its users."""

from __future__ import annotations

import numpy as np

from specreplay.results.from_stats import comparison_cell
from specreplay.stats.bootstrap import PairedSums
from specreplay.stats.cells import Cell, cell_layout
from specreplay.stats.compare import compare

FAMILIES = ("code", "chat")
BUCKETS = ("short", "long", "unbucketed", "unknown")  # codes 0, 1, 2, 3


def test_cell_layout_by_hand() -> None:
    cells = cell_layout(FAMILIES, BUCKETS, bucket_cells=[1, 3], pooled_buckets=[0, 1, 2, 3])
    every_b = (0, 1, 2, 3)
    assert cells == [
        Cell("pooled", None, None, (0, 1), every_b),
        Cell("family", "code", None, (0,), every_b),
        Cell("family", "chat", None, (1,), every_b),
        Cell("bucket", None, "long", (0, 1), (1,)),
        Cell("bucket", None, "unknown", (0, 1), (3,)),
        Cell("family×bucket", "code", "long", (0,), (1,)),
        Cell("family×bucket", "code", "unknown", (0,), (3,)),
        Cell("family×bucket", "chat", "long", (1,), (1,)),
        Cell("family×bucket", "chat", "unknown", (1,), (3,)),
    ]


def test_cell_mask_selects_the_items_of_the_cell() -> None:
    fam = np.array([0, 1, 1, 0, 1])
    bkt = np.array([2, 1, 0, 1, 3])
    pooled, code, _, long, unknown, code_long, *_ = cell_layout(
        FAMILIES, BUCKETS, bucket_cells=[1, 3], pooled_buckets=[0, 1, 2, 3]
    )
    np.testing.assert_array_equal(pooled.mask(fam, bkt), [True] * 5)
    np.testing.assert_array_equal(code.mask(fam, bkt), [True, False, False, True, False])
    np.testing.assert_array_equal(long.mask(fam, bkt), [False, True, False, True, False])
    np.testing.assert_array_equal(unknown.mask(fam, bkt), [False, False, False, False, True])
    np.testing.assert_array_equal(code_long.mask(fam, bkt), [False, False, False, True, False])


def test_compare_layout_keeps_its_cells() -> None:
    # 4 requests, pieces in buckets short (0) and unbucketed (2); 'long' (1) holds no round, so
    # the comparison has no bucket cell for it, and never one for 'unbucketed'.
    buckets = ("short", "long", "unbucketed")
    ones = np.ones(6)
    ps = PairedSums(
        request_ids=("r0", "r1", "r2", "r3"),
        request_keys=np.array([11, 22, 33, 44], dtype=np.uint64),
        family=np.array([0, 1, 0, 1], dtype=np.int32),
        piece_request=np.array([0, 1, 2, 3, 0, 1]),
        piece_bucket=np.array([0, 0, 0, 0, 2, 2], dtype=np.int32),
        n_a=ones, t_a=2.0 * ones, n_b=ones, t_b=2.5 * ones,
        families=FAMILIES, buckets=buckets, unbucketed=2,
    )  # fmt: skip
    comp = compare(ps, arm_a="a", arm_b="b", n_boot=50, seed=1, min_requests=1)
    every_b = (0, 1, 2)
    assert comp.layout == [
        Cell("pooled", None, None, (0, 1), every_b),
        Cell("family", "code", None, (0,), every_b),
        Cell("family", "chat", None, (1,), every_b),
        Cell("bucket", None, "short", (0, 1), (0,)),
        Cell("family×bucket", "code", "short", (0,), (0,)),
        Cell("family×bucket", "chat", "short", (1,), (0,)),
    ]
    cells = [comparison_cell(c) for c in comp.cells]  # as results.json lists them
    assert [(c.level, c.family, c.bucket) for c in cells] == [
        (c.level, c.family, c.bucket) for c in comp.layout
    ]

"""The per-row kernel's duplicate and negative cand_id rules against a set-based reference."""

from __future__ import annotations

import numpy as np
import pytest

from specreplay.replay.archive import rowcheck

V1 = np.zeros((2, 0))  # no tail columns (schema v1)


def _reference(ids: list[int]) -> int:
    if len(set(ids)) < len(ids):
        return rowcheck.DUP_CAND
    if min(ids) < 0:
        return rowcheck.NEG_CAND
    return rowcheck.OK


@pytest.mark.parametrize("width", [1, 2, 32, 64, 65, 300])
def test_duplicates_and_negatives_match_a_set(width: int) -> None:
    """Rows of ``width`` ids from a small pool (so repeats and signature collisions abound)."""
    rng = np.random.default_rng(width)
    n = 4000
    pool = max(2 * width, 8)
    rows = [rng.integers(-1, pool, width) if i % 3 == 0 else rng.permutation(pool)[:width]
            for i in range(n)]  # fmt: skip
    rows += [np.arange(width) * (1 << 40) + (1 << 33)]  # huge ids, all distinct
    rows += [np.array([7] * width)]
    cand = np.concatenate(rows).astype(np.int64)
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    nnz = cand.shape[0]
    lp = np.full(nnz, np.log(1 / (2 * width)))
    tp = np.full(nnz, 1 / (2 * width))
    code = np.empty(len(rows), np.int8)
    detail = np.empty(len(rows))
    didx = np.empty(len(rows), np.int32)
    rowcheck.check_rows(offsets, cand, lp, tp, np.zeros(0), np.zeros(0, np.int64), False, False,
                        code, detail, didx, V1)  # fmt: skip
    want = np.array([_reference(r.tolist()) for r in rows], np.int8)
    assert want.tolist() == code.tolist()
    if width > 1:  # the case is not vacuous
        assert (want == rowcheck.DUP_CAND).sum() > 100
        assert (want == rowcheck.OK).sum() > 100

"""The row rules: the duplicate and negative cand_id rules against a set-based reference, and the
two-stage check (:func:`rowcheck.validate_rows`: a screen, then the exact rules on the rows it
flags) against the exact rules on every row (:func:`rowcheck.check_rows`), to the bit."""

from __future__ import annotations

from typing import Any

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


CHECKS = [rowcheck.check_rows, rowcheck.validate_rows]


@pytest.mark.parametrize("check", CHECKS, ids=["rules", "two-stage"])
@pytest.mark.parametrize("width", [1, 2, 32, 64, 65, 300])
def test_duplicates_and_negatives_match_a_set(width: int, check: Any) -> None:
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
    check(offsets, cand, lp, tp, np.zeros(0), np.zeros(0, np.int64), False, False,
                        code, detail, didx, V1)  # fmt: skip
    want = np.array([_reference(r.tolist()) for r in rows], np.int8)
    assert want.tolist() == code.tolist()
    if width > 1:  # the case is not vacuous
        assert (want == rowcheck.DUP_CAND).sum() > 100
        assert (want == rowcheck.OK).sum() > 100


def _near(t: float, k: int) -> list[float]:
    """Floats within ``k`` ulps of ``t``, each side."""
    out = [t]
    lo = hi = t
    for _ in range(k):
        lo, hi = float(np.nextafter(lo, -np.inf)), float(np.nextafter(hi, np.inf))
        out += [lo, hi]
    return out


def _summing_to(t: float, rng: np.random.Generator) -> list[float]:
    """21 positive floats whose sum, added left to right as the rules add, is ``t``."""
    p = list(rng.dirichlet(np.ones(21)) * t)
    head = 0.0
    for x in p[:-1]:
        head += x
    p[-1] = t - head
    assert sum(p) == t or abs(sum(p) - t) <= 2 * np.spacing(t)
    return p


def _rows(rng: np.random.Generator) -> tuple[list[list[float]], ...]:
    """Rows (cand, lp, tp, eq, tails) that break each rule, pass it, or sit at its threshold.

    The sums that decide a rule are put within a few ulps of its threshold (halves of a float
    add back to it exactly), where the screen must hand the row to the rules.
    """
    cand, lp, tp, eq, dt, tt = [], [], [], [], [], []

    def add(
        p: list[float],
        q: list[float] | None = None,
        e: list[float] | None = None,
        tails: tuple[float, float] = (np.nan, np.nan),
        ids: list[int] | None = None,
    ) -> None:
        k = len(p)
        cand.append(ids if ids is not None else list(rng.permutation(10 * k + 10)[:k]))
        with np.errstate(divide="ignore", invalid="ignore"):
            lp.append(list(np.log(q if q is not None else p)))
            eq.append(e if e is not None else list(np.array(p) / max(sum(p), 1e-300)))
        tp.append(p)
        dt.append(tails[0])
        tt.append(tails[1])  # fmt: skip

    tol = rowcheck.TOL
    for t in _near(1.0 + tol, 3) + _near(1.0 - tol, 3) + _near(1.0, 2):
        add([t / 2, t / 2])  # Σ target_probs at the threshold
        add([0.25, 0.25], q=[t / 2, t / 2])  # Σ exp(draft_logprobs)
        add([0.25, 0.25], e=[t / 2, t / 2])  # Σ emitted_q = 1 within TOL
        add([0.25, 0.25], tails=(1.0 - t / 2 - 0.25, 0.5 + t - 1.0))  # kept + tail = 1
        add([0.25, 0.25], e=[t / 4, t / 4], tails=(np.nan, np.nan))
    for t in _near(1.0 + tol, 6) + _near(1.0 - tol, 6):
        p = _summing_to(t, rng)  # 21 terms: the screen's eight lanes add them in another order
        add(p)
        add(list(np.full(21, 0.01)), q=p)
        add(list(np.full(21, 0.01)), e=p)
    for bad in (np.nan, np.inf, -np.inf, -0.0, 0.0, -1e-300, 1.0, 1.5, -0.5):
        add([0.5, bad])
        add([0.5, 0.25], q=[0.5, bad])
        add([0.5, 0.25], e=[2 / 3, bad])
        add([0.5, 0.25], tails=(bad, 0.25))
        add([0.5, 0.25], tails=(0.25, bad))
    add([0.5, 0.5], q=[np.exp(-800.0), 0.0])  # exp underflows: finite, yet Σ exp = 0
    add([0.5, 0.5], q=[0.0, 0.0])  # every log-probability −inf
    add([0.5, 0.5], ids=[-3, 4])
    add([0.5, 0.5], ids=[4, 4])
    add([], q=[], e=[])  # no candidate
    wide = list(rng.dirichlet(np.ones(rowcheck.SCREEN_WIDTH + 5)))
    add(wide)
    for _ in range(300):  # ordinary rows, some of them broken
        p = list(rng.dirichlet(np.ones(int(rng.integers(1, 40)))) * rng.choice([1.0, 0.9]))
        if rng.random() < 0.1:
            p[int(rng.integers(len(p)))] = float(rng.choice([np.nan, -0.1, 2.0]))
        add(p)
    return cand, lp, tp, eq, dt, tt


@pytest.mark.parametrize("has_eq", [False, True])
@pytest.mark.parametrize("has_drafted", [False, True])
@pytest.mark.parametrize("has_tails", [False, True])
def test_two_stage_check_equals_the_rules(has_eq: bool, has_drafted: bool, has_tails: bool) -> None:
    """Every row's code, detail and drafted index: validate_rows equals check_rows to the bit."""
    rng = np.random.default_rng(7)
    cand, lp, tp, eq, dt, tt = _rows(rng)
    n = len(cand)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum([len(c) for c in cand], out=offsets[1:])
    flat = [np.array([x for row in col for x in row], dtype) for col, dtype in
            ((cand, np.int64), (lp, np.float64), (tp, np.float64), (eq, np.float64))]  # fmt: skip
    drafted = np.array([row[int(rng.integers(len(row)))] if row and rng.random() < 0.95 else 99
                        for row in cand], np.int64)  # fmt: skip
    tails = np.array([dt, tt]) if has_tails else V1
    args = (offsets, flat[0], flat[1], flat[2], flat[3] if has_eq else np.zeros(0),
            drafted if has_drafted else np.zeros(0, np.int64), has_eq, has_drafted)  # fmt: skip
    out = []
    for check in CHECKS:
        code, detail, didx = np.empty(n, np.int8), np.empty(n), np.empty(n, np.int32)
        check(*args, code, detail, didx, tails)
        out.append((code, detail, didx))
    (c0, d0, i0), (c1, d1, i1) = out
    assert c0.tolist() == c1.tolist()
    assert np.array_equal(d0, d1, equal_nan=True)
    assert i0.tolist() == i1.tolist()
    assert len(set(c0.tolist())) >= 8  # many rules fire: the comparison is not vacuous


def test_the_screen_passes_clean_rows_without_the_rules() -> None:
    """A clean batch (synth's rows) sends no row to the exact rules: the fast path is taken."""
    rng = np.random.default_rng(3)
    n, k = 2000, 32
    p = rng.dirichlet(np.ones(k), n) * 0.98
    cand = np.stack([rng.permutation(50_000)[:k] for _ in range(n)]).ravel()
    offsets = np.arange(n + 1, dtype=np.int64) * k
    q = rng.dirichlet(np.ones(k), n)
    drafted = cand.reshape(n, k)[np.arange(n), rng.integers(0, k, n)].copy()
    code, detail, didx = np.empty(n, np.int8), np.empty(n), np.empty(n, np.int32)
    sent = rowcheck.validate_rows(offsets, cand, np.log(q).ravel(), p.ravel(), q.ravel(), drafted,
                                  True, True, code, detail, didx, V1)  # fmt: skip
    assert sent == 0
    assert (code == rowcheck.OK).all()
    assert (cand[offsets[:-1] + didx] == drafted).all()

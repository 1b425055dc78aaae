"""Typed tail diagnostics of an importance replay, per cell, arm and depth.

See docs/methods.md#tail-diagnostics-ess-and-pareto-k-hat.

For each arm replayed with the importance estimator and each depth k = 1..its D, a cell's
:class:`~specreplay.results.model.ImportanceDiagnostic` comes from the replay's per-(request,
bucket) sums of the policy ratio r_k (Σ r, Σ r², min, max: the ESS; the largest exact
per-round bound and second-moment bound: bound/mean, second moment/mean²) and from its kept
largest ratios per finest cell (:mod:`specreplay.replay.tails`: the Pareto k̂), through
:func:`specreplay.replay.choice.cell_checks`. Other estimators produce none (empty tuple).

``--estimator auto`` reads the same checks per comparison (:func:`with_auto_diagnostics`): in
every cell, a delta that has a verdict becomes INCONCLUSIVE, with the figures in its
``verdict_reason``, when the tail of either of its arms fails at some depth; its Δ figures stay.
:func:`with_estimators` writes on every delta the estimator its SIMULATED sides used.

The checks of one arm over one cell are computed once per replay (:func:`_checks_once`): the
diagnostics and auto's rule read the same ones (a requalification asked for 150 of them, 60
twice: a fifth of its "comparisons and law tests" stage at 2 M positions, issue 18).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import weakref
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from specreplay.replay.choice import BOUND_MAX, DepthCheck, cell_checks, first_failure
from specreplay.replay.engine import ReplayResult
from specreplay.results.model import Cell, Delta, ImportanceDiagnostic, Label, Role
from specreplay.sim.arms import Arm
from specreplay.stats.cells import Cell as CellSpec

__all__ = [
    "AUTO_ACCEPTED",
    "AUTO_FAILS",
    "auto_summary",
    "cell_specs",
    "comparison_failure",
    "importance_diagnostics",
    "path_estimator",
    "with_auto_diagnostics",
    "with_estimators",
]


AUTO_FAILS = "--estimator auto: the importance tail fails in this cell"
"""How a verdict reason starts (or its part after "; ") where auto's tail rule failed."""
AUTO_ACCEPTED = "--estimator auto: k̂ above its threshold, accepted only because"
"""How it starts where k̂ exceeded its threshold and the exact second moment accepted it."""


def cell_specs(res: ReplayResult, cells: Sequence[Cell]) -> list[CellSpec]:
    """Per cell, where it sits in the replay's own family and bucket tables.

    Family and bucket names are looked up in the replay's own tables (a cell's family or bucket
    is None where it spans all of them, ``unbucketed`` included: pooled and family cells count
    every round, bucket cells one bucket).
    """
    all_f = tuple(range(len(res.families)))
    all_b = tuple(range(len(res.buckets.names)))
    specs = []
    for c in cells:
        fam = (res.families.index(c.family),) if c.family is not None else all_f
        bkt = (res.buckets.names.index(c.bucket),) if c.bucket is not None else all_b
        specs.append(CellSpec(c.level.value, c.family, c.bucket, fam, bkt))
    return specs


_CheckKey = tuple[str, int, tuple[int, ...], tuple[int, ...], bytes]
_memo: dict[int, tuple[weakref.ref[ReplayResult], dict[_CheckKey, tuple[DepthCheck, ...]]]] = {}
_memo_lock = threading.Lock()


def _forget(key: int) -> Callable[[weakref.ref[ReplayResult]], None]:
    """Return the callback that drops replay ``key``'s memo when the replay is freed."""

    def drop(_: weakref.ref[ReplayResult]) -> None:
        # no lock: a collection inside the locked block may run this (one dict pop is atomic)
        _memo.pop(key, None)

    return drop


def _checks_once(
    res: ReplayResult,
    arm: Arm,
    mask: NDArray[np.bool_],
    fam_idx: tuple[int, ...],
    bucket_idx: tuple[int, ...],
) -> tuple[DepthCheck, ...]:
    """Return :func:`cell_checks` of ``arm`` over one cell of ``res``, computed once per replay.

    The memo lives as long as ``res`` (a weak reference drops it with the replay) and is keyed
    by everything the checks read besides ``res``: the arm, its depth, the cell's finest cells
    and its rows (``mask``).
    """
    with _memo_lock:
        entry = _memo.get(id(res))
        if entry is None or entry[0]() is not res:
            ref = weakref.ref(res, _forget(id(res)))
            entry = _memo[id(res)] = (ref, {})
    memo = entry[1]
    key = (arm.canonical, arm.depth, fam_idx, bucket_idx, mask.tobytes())
    got = memo.get(key)
    if got is None:
        got = memo[key] = cell_checks(
            res.sums[arm.canonical], res.tails[arm.canonical], arm, mask, fam_idx, bucket_idx
        )
    return got


def _checks(res: ReplayResult, arm: Arm, spec: CellSpec) -> tuple[DepthCheck, ...]:
    s = res.sums[arm.canonical]
    return _checks_once(res, arm, spec.mask(s.family, s.bucket), spec.fam_idx, spec.bucket_idx)


def _finite(x: float | None) -> float | None:
    """``x``, or None past float64's range (a logging probability too small for its ratio)."""
    return x if x is not None and math.isfinite(x) else None


def importance_diagnostics(
    res: ReplayResult,
    arm: Arm,
    mask: NDArray[np.bool_],
    fam_idx: tuple[int, ...],
    bucket_idx: tuple[int, ...],
) -> tuple[ImportanceDiagnostic, ...]:
    """Return the diagnostics of ``arm`` at depths 1..D over one cell (empty unless importance).

    Parameters
    ----------
    res : ReplayResult
    arm : Arm
    mask : bool, (k,)
        The cell's rows of the arm's (request, bucket) sums.
    fam_idx, bucket_idx : tuple of int
        The finest cells the cell pools (family and bucket codes of ``res``).
    """
    if res.estimator != "importance":
        return ()
    checks = _checks_once(res, arm, mask, fam_idx, bucket_idx)
    return tuple(
        ImportanceDiagnostic(
            arm=arm.canonical,
            depth=c.depth,
            rounds=c.diagnostic.rounds,
            ess=c.diagnostic.ess,
            ess_share=c.diagnostic.ess_share,
            pareto_k=c.diagnostic.pareto_k,
            khat_threshold=c.diagnostic.khat_threshold,
            warning=c.diagnostic.warning,
            label=Label.SIMULATED,
            null_reason=c.diagnostic.null_reason,
            bound_ratio=_finite(c.bound_ratio),
            moment_ratio=_finite(c.moment_ratio),
        )
        for c in checks
    )


def comparison_failure(
    res: ReplayResult, a: Arm, b: Arm, spec: CellSpec
) -> tuple[DepthCheck | None, tuple[DepthCheck, ...]]:
    """Return the first failing tail of arms ``a`` then ``b`` in one cell, and the checks.

    Every depth 1..each arm's depth over the cell's rounds (:func:`cell_checks`); the checks
    are those of ``a`` then ``b``.
    """
    checks = _checks(res, a, spec) + _checks(res, b, spec)
    return first_failure(checks), checks


def _reason(fail: DepthCheck | None, checks: Sequence[DepthCheck]) -> str | None:
    """Return the auto verdict reason of one comparison in one cell (None: nothing to say)."""
    if fail is not None:
        return (
            f"{AUTO_FAILS}: {fail.figures()} "
            f"({fail.fails}); Δ kept, verdict INCONCLUSIVE (never moved to the path-biased "
            "analytic estimator)"
        )
    by_bound = [c.figures() for c in checks if c.khat_by_bound]
    if not by_bound:
        return None
    return f"{AUTO_ACCEPTED} the exact second moment/mean² ≤ {BOUND_MAX:g}: " + "; ".join(by_bound)


def _joined(old: str | None, new: str) -> str:
    return new if not old else f"{old}; {new}"


def with_auto_diagnostics(
    cells: Sequence[Cell], res: ReplayResult, arms: Sequence[Arm]
) -> tuple[Cell, ...]:
    """Apply ``--estimator auto``'s per-cell tail rule to every delta that has a verdict.

    ``res`` is the run's pass (importance: otherwise the cells are returned as they are);
    ``arms`` the replayed arms by which the deltas' sides are named. A delta whose arms' tails
    fail in its cell (:mod:`specreplay.replay.choice`) gets verdict INCONCLUSIVE and the
    figures in ``verdict_reason``; one where k̂ exceeded its threshold and was accepted by the
    exact bound says so there. Deltas without a verdict are left as they are.
    """
    if res.estimator != "importance":
        return tuple(cells)
    by_name = {a.canonical: a for a in arms}
    out = []
    for c, spec in zip(cells, cell_specs(res, cells), strict=True):
        deltas = []
        for d in c.deltas:
            a, b = by_name.get(d.a), by_name.get(d.b)
            if d.verdict is None or a is None or b is None:
                deltas.append(d)
                continue
            fail, checks = comparison_failure(res, a, b, spec)
            why = _reason(fail, checks)
            if why is not None:
                verdict = "INCONCLUSIVE" if fail is not None else d.verdict
                # a verdict the tails overturn loses the reason that explained it (a small
                # cell's "DIFFERENT because …", a hull's EQUIVALENT): the tails' reason alone
                kept = d.verdict_reason if verdict == d.verdict else None
                d = dataclasses.replace(d, verdict=verdict, verdict_reason=_joined(kept, why))
            deltas.append(d)
        out.append(dataclasses.replace(c, deltas=tuple(deltas)))
    return tuple(out)


def auto_summary(cells: Sequence[Cell]) -> str:
    """Count, over the cells, the comparisons auto's tail rule made INCONCLUSIVE or accepted."""
    ruled = [d for c in cells for d in c.deltas if d.verdict is not None]
    failed = sum(AUTO_FAILS in (d.verdict_reason or "") for d in ruled)
    accepted = sum(AUTO_ACCEPTED in (d.verdict_reason or "") for d in ruled)
    return (
        f"per cell: {failed} of {len(ruled)} comparisons with a verdict INCONCLUSIVE by their "
        f"tails; in {accepted}, k̂ exceeded its threshold somewhere and was accepted only "
        f"because the exact second moment/mean² ≤ {BOUND_MAX:g} (each delta's verdict_reason)"
    )


def _estimator_of(d: Delta, res: ReplayResult) -> str:
    """Return the estimator of a delta's SIMULATED sides (the run's, but for the diagnostic)."""
    path = path_estimator(res)
    if d.role is Role.PATH_BIAS_IMPORTANCE and path is not None:
        return f"{path} − importance"
    return res.estimator


def path_estimator(res: ReplayResult) -> str | None:
    """Return the path-assumption estimator replayed beside importance (None: no such pair).

    The ``path-bias-importance`` diagnostic compares the two entries of ``res.replays``.
    """
    if "importance" not in res.replays or len(res.replays) < 2:
        return None
    return next(e for e in res.replays if e != "importance")


def with_estimators(cells: Sequence[Cell], res: ReplayResult) -> tuple[Cell, ...]:
    """Write on every delta the replay estimator its SIMULATED sides used."""
    return tuple(
        dataclasses.replace(
            c,
            deltas=tuple(dataclasses.replace(d, estimator=_estimator_of(d, res)) for d in c.deltas),
        )
        for c in cells
    )

"""cells.parquet: every figure of a result's cells as one long table (docs/outputs.md#cellsparquet).

Arms are plain names (``arm``, ``arm_a``, ``arm_b``): what results.json's arm keys say in a suffix
(``ARM (MEASURED)``, ``ARM (analytic)``, ``ARM@D (reference depth)``,
:mod:`specreplay.results.armkeys`) is in the ``label``, ``estimator`` and ``role`` columns. An
``R``, ``n_rounds`` or MEASURED ``survival`` row of a companion figure carries the ``role`` of
the delta it belongs to (``path-bias`` for the MEASURED logging arm, ``path-bias-importance``
for another estimator's replay; null for the run's own arms) and the replay ``estimator``; a
``delta`` row the delta's ``estimator`` (``analytic − importance``: b's − a's).

One row per figure: ``kind`` is ``R``, ``n_rounds``, ``survival`` (``depth`` = position j),
``delta`` (``arm_a``, ``arm_b``, ``role``, interval ``lo``/``hi``, ``method``, ``level_conf``, the
``verdict`` and ``verdict_reason`` where a rule forced it, the t interval's ``df``, the requests
that differ between the arms ``n_differing``, ``small_sample`` and the study's coverage at the
cell's size ``coverage_at_size``) or, for an importance replay, ``ess_share`` and ``pareto_k``
(``depth`` = k: the tail diagnostics of the policy ratio), per depth figure ``R_at_depth``,
``tokens_per_s``, ``gain`` (``lo``/``hi``: the interval or, for the screen, the assumption envelope)
and ``rank``, or, for a budget, ``break_even_ms`` and ``remaining_ms``
(docs/methods.md#the-budget-break-even-cost); every row carries its cell (level, family, bucket,
``n_requests``, and for ``screen`` cells ``batch``, ``context``, ``worker``; for ``--by`` cells
``group``, ``COLUMN=value``), ``label`` and ``null_reason``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from specreplay.results.armkeys import ArmKey, arm_splitter
from specreplay.results.model import Cell, Label, Result

__all__ = ["CELLS_SCHEMA", "cells_frame"]

CELLS_SCHEMA: dict[str, pl.DataType] = {
    "level": pl.String(),
    "family": pl.String(),
    "bucket": pl.String(),
    "n_requests": pl.Int64(),
    "kind": pl.String(),
    "arm": pl.String(),
    "arm_a": pl.String(),
    "arm_b": pl.String(),
    "role": pl.String(),
    "depth": pl.Int64(),
    "value": pl.Float64(),
    "lo": pl.Float64(),
    "hi": pl.Float64(),
    "method": pl.String(),
    "level_conf": pl.Float64(),
    "verdict": pl.String(),
    "label": pl.String(),
    "null_reason": pl.String(),
    "batch": pl.Int64(),
    "context": pl.Int64(),
    "worker": pl.String(),
    "group": pl.String(),
    "df": pl.Float64(),
    "n_differing": pl.Int64(),
    "small_sample": pl.Boolean(),
    "coverage_at_size": pl.Float64(),
    "verdict_reason": pl.String(),
    "estimator": pl.String(),
}


def _base(cell: Cell) -> dict[str, Any]:
    """Return the columns every row of ``cell`` shares."""
    return {
        "level": cell.level.value,
        "family": cell.family,
        "bucket": cell.bucket,
        "n_requests": cell.n_requests,
        "batch": cell.batch,
        "context": cell.context,
        "worker": cell.worker,
        "group": None
        if cell.group is None
        else ",".join(f"{k}={v}" for k, v in cell.group.items()),
    }


def _arm_rows(cell: Cell, split: Callable[[str], ArmKey], method: str) -> list[dict[str, Any]]:
    """Return R (with its ``method`` interval) and n_rounds per arm, the arm key split up."""
    rows: list[dict[str, Any]] = []
    for key, v in cell.arms.items():
        k = split(key)
        role = k.role.value if k.role is not None else None
        arm = {"arm": k.arm, "role": role, "estimator": k.estimator or v.estimator}
        rows.append(
            arm
            | {
                "kind": "R",
                "value": v.R,
                "lo": v.lo,
                "hi": v.hi,
                "method": None if v.lo is None else method,
                "level_conf": v.level,
                "label": v.label.value,
                "null_reason": v.null_reason,
            }
        )
        rows.append(
            arm | {"kind": "n_rounds", "value": float(v.n_rounds), "label": Label.MEASURED.value}
        )
    return rows


def _survival_rows(cell: Cell, split: Callable[[str], ArmKey]) -> list[dict[str, Any]]:
    """Return P(A ≥ j) per arm and position, the arm key split up.

    ``ARM (MEASURED)``: the archive's own survival, a plain arm with the MEASURED label and the
    path-bias role.
    """
    rows = []
    for s in cell.survival:
        k = split(s.arm)
        rows.append(
            {
                "kind": "survival",
                "arm": k.arm,
                "role": k.role.value if k.role is not None else None,
                "depth": s.position,
                "value": s.value,
                "label": s.label.value,
                "null_reason": s.null_reason,
            }
        )
    return rows


def _delta_rows(cell: Cell, split: Callable[[str], ArmKey]) -> list[dict[str, Any]]:
    """Return one row per delta, with its interval, verdict and the rule's fields."""
    rows = []
    for d in cell.deltas:
        cov = d.coverage_at_size
        rows.append(
            {
                "kind": "delta",
                "arm_a": split(d.a).arm,
                "arm_b": split(d.b).arm,
                "role": d.role.value,
                "estimator": d.estimator,
                "depth": d.depth,
                "value": d.point,
                "lo": d.lo,
                "hi": d.hi,
                "method": d.method,
                "level_conf": d.level,
                "verdict": d.verdict,
                "label": d.label.value,
                "null_reason": d.null_reason,
                "df": d.df,
                "n_differing": d.n_differing,
                "small_sample": d.small_sample,
                "coverage_at_size": None if cov is None else cov.coverage,
                "verdict_reason": d.verdict_reason,
            }
        )
    return rows


def _depth_rows(cell: Cell) -> list[dict[str, Any]]:
    """Return R, tokens/s, gain and rank per arm and fixed depth (a sweep's or a screen's)."""
    rows = []
    for f in cell.depths:
        for kind, value, lo, hi in (
            ("R_at_depth", f.R, f.lo, f.hi),
            ("tokens_per_s", f.tokens_per_s, f.tokens_per_s_lo, f.tokens_per_s_hi),
            ("gain", f.gain, f.gain_lo, f.gain_hi),
            ("rank", None if f.rank is None else float(f.rank), None, None),
        ):
            rows.append(
                {
                    "kind": kind,
                    "arm": f.arm,
                    "depth": f.depth,
                    "value": value,
                    "lo": lo,
                    "hi": hi,
                    "label": f.label.value,
                    "null_reason": f.null_reason,
                }
            )
    return rows


def _other_rows(cell: Cell) -> list[dict[str, Any]]:
    """Return the importance tail diagnostics per arm and depth, and the budget's figures."""
    rows = []
    for g in cell.importance:
        for kind, value in (("ess_share", g.ess_share), ("pareto_k", g.pareto_k)):
            why = g.null_reason if value is None else None
            rows.append(
                {
                    "kind": kind,
                    "arm": g.arm,
                    "depth": g.depth,
                    "value": value,
                    "label": g.label.value,
                    "null_reason": why,
                }
            )
    b = cell.budget
    if b is not None:
        for kind, value in (("break_even_ms", b.break_even_ms), ("remaining_ms", b.remaining_ms)):
            rows.append(
                {
                    "kind": kind,
                    "value": value,
                    "label": b.label.value,
                    "null_reason": b.null_reason,
                }
            )
    return rows


def _rows(cell: Cell, split: Callable[[str], ArmKey], method: str) -> list[dict[str, Any]]:
    """Return every row of one cell: its shared columns, then each figure's."""
    base = _base(cell)
    parts = (
        _arm_rows(cell, split, method),
        _survival_rows(cell, split),
        _delta_rows(cell, split),
        _depth_rows(cell),
        _other_rows(cell),
    )
    return [base | row for part in parts for row in part]


def cells_frame(result: Result) -> pl.DataFrame:
    """Flatten the result's cells into one long table, one row per figure.

    See docs/outputs.md#cellsparquet.
    """
    split = arm_splitter(result)
    # an arm's R interval is the run's default interval; runs before it was recorded: studentized
    method = result.interval_method.method if result.interval_method else "studentized"
    rows = [r for c in result.cells for r in _rows(c, split, method)]
    return pl.DataFrame(
        [{k: r.get(k) for k in CELLS_SCHEMA} for r in rows], schema=pl.Schema(CELLS_SCHEMA)
    )

"""Tabular views of a result as polars frames: ``Result.to_polars(view)`` (the Python API).

Each view is one row per figure of one kind, with the cell it belongs to; the frame's columns are
the figure's scalar fields as results.json names them (nested objects, such as a delta's ``bca``
or ``tost``, stay in the typed result), so a notebook filters and joins without walking the
dataclasses. Every figure column keeps its ``label`` (MEASURED / SIMULATED / ESTIMATED) and its
``null_reason``; a figure that cannot be computed is null, never NaN.

Views (``VIEWS``):

``cells``
    cells.parquet, exactly (:func:`~specreplay.results.cells_table.cells_frame`): one row per
    figure, ``kind`` saying which.
``arms``
    One row per cell × arm figure: ``arm`` (the plain arm), ``role`` (null for the run's own
    arms; for a companion figure the delta it belongs to: ``path-bias`` for the MEASURED logging
    arm, ``path-bias-importance`` for the arm replayed by another estimator), R (retained tokens
    per round), ``n_rounds``, ``label``, ``mcse``, ``null_reason``, ``estimator`` (the replay
    estimator; for a companion, the one its results.json key names).
``deltas``
    One row per cell × delta: ``a``, ``b`` (plain arms), ``role``, ``point`` (Δ = R_b − R_a),
    ``rel``, ``lo``/``hi`` and ``rel_lo``/``rel_hi`` (the interval), ``method``, ``level_conf`` (the
    delta's confidence level; ``level`` is the cell's), ``adjusted``, ``p_difference``,
    ``p_equivalence``, ``verdict``, ``smallest_equivalent_margin``, ``requests_for_margin``,
    ``n_boot``, ``n_boot_valid``, ``warning``, ``label``, ``null_reason`` and the remaining
    scalar fields of :class:`~specreplay.results.model.Delta` (``depth`` for a sweep), then
    each side's ``label_a``/``label_b`` and ``estimator_a``/``estimator_b`` (``estimator`` is
    the delta's, ``analytic − importance`` for b's − a's).
``depths``
    One row per cell × arm × depth (``sweep``, ``screen``): ``arm``, ``depth``, ``R``,
    ``lo``/``hi``, ``label``, ``supported``, ``null_reason``, ``tokens_per_s`` (``_lo``/``_hi``),
    ``p_best``, ``round_ms``, ``rank``, ``gain`` (``_lo``/``_hi``).
``policies``
    One row per cell × arm × policy (``sweep --policy``): ``arm``, ``policy``, ``E_L``, ``R``,
    ``lo``/``hi``, ``label``, ``supported``, ``null_reason``, ``tokens_per_s`` (``_lo``/``_hi``),
    ``p_best``, ``round_ms``, ``tokens_per_s_null_reason``.
``survival``
    One row per cell × arm × position: ``arm``, ``position``, ``value`` = P(A ≥ j), ``label``,
    ``null_reason``, ``rounds``.
``law_tests``
    One row per law test (no cell columns): ``arm``, ``position``, ``tv``, ``p_adj``,
    ``passed``, ``label``, ``null_reason``, ``alpha``, ``draws``, ``statistic``, ``df``,
    ``p_value``, ``power``, ``underpowered``, ``categories``, ``method``, ``draws_rule``.

Every view but ``cells`` and ``law_tests`` starts with the cell columns ``level``, ``family``,
``bucket``, ``n_requests``, ``batch``, ``context``, ``worker`` (as in cells.parquet). A view whose
figures a command does not make is an empty frame with the same columns.

Arms are plain names in every view: results.json's companion keys (``ARM (MEASURED)``, ``ARM
(analytic)``, ``ARM@D (reference depth)``) are split by :mod:`specreplay.results.armkeys`, their
suffix going to the ``label``, ``estimator`` and ``role`` columns; results.json keeps its keys.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any

import polars as pl

from specreplay.results import model
from specreplay.results.armkeys import ArmKey, arm_splitter
from specreplay.results.cells_table import cells_frame
from specreplay.results.model import (
    VIEWS,
    ArmFigure,
    Cell,
    Delta,
    DepthFigure,
    Label,
    LawTest,
    PolicyFigure,
    Result,
    Survival,
)

__all__ = ["CELL_COLUMNS", "view_schema"]

CELL_COLUMNS: dict[str, pl.DataType] = {
    "level": pl.String(),
    "family": pl.String(),
    "bucket": pl.String(),
    "n_requests": pl.Int64(),
    "batch": pl.Int64(),
    "context": pl.Int64(),
    "worker": pl.String(),
}
"""The columns naming a row's cell (the same as cells.parquet's)."""

_RENAMED = {"level": "level_conf"}  # a delta's confidence level; ``level`` is the cell's
_POLARS: dict[type, pl.DataType] = {
    str: pl.String(),
    int: pl.Int64(),
    float: pl.Float64(),
    bool: pl.Boolean(),
}


def _scalar(tp: Any) -> pl.DataType | None:
    """Return the polars type of a scalar field type (``X | None`` too); None for the rest."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) is not None and len(args) == 1:
        tp = args[0]
    if isinstance(tp, type) and issubclass(tp, Enum):
        return pl.String()
    return _POLARS.get(tp) if isinstance(tp, type) else None


def view_schema(cls: type[Any]) -> dict[str, pl.DataType]:
    """Return the columns of a figure class: its scalar fields, in order, renamed on a clash."""
    hints = typing.get_type_hints(cls, vars(model))
    out: dict[str, pl.DataType] = {}
    for f in dataclasses.fields(cls):
        dtype = _scalar(hints[f.name])
        if dtype is not None:
            out[_RENAMED.get(f.name, f.name)] = dtype
    return out


def _value(x: Any) -> Any:
    return x.value if isinstance(x, Enum) else x


def _frame(
    figures: Iterable[tuple[dict[str, Any], Any]],
    cls: type[Any],
    first: dict[str, pl.DataType],
    last: dict[str, pl.DataType] | None = None,
) -> pl.DataFrame:
    """Return one row per (own columns, figure): ``first``, the figure's scalar fields, ``last``.

    A figure field the own columns also name (a plain ``arm``) takes the own column's value.
    """
    fields = view_schema(cls)
    names = {_RENAMED.get(f.name, f.name): f.name for f in dataclasses.fields(cls)}
    schema = {**first, **fields, **(last or {})}
    rows = [
        {**{col: _value(getattr(fig, names[col])) for col in fields}, **own} for own, fig in figures
    ]
    return pl.DataFrame([{k: r.get(k) for k in schema} for r in rows], schema=pl.Schema(schema))


def _cell_key(cell: Cell) -> dict[str, Any]:
    return {k: _value(getattr(cell, k)) for k in CELL_COLUMNS}


Split = Callable[[str], ArmKey]


def _per_cell(
    cls: type[Any],
    items: Callable[[Cell, Split], Iterable[tuple[dict[str, Any], Any]]],
    lead: dict[str, pl.DataType],
    last: dict[str, pl.DataType] | None = None,
) -> Callable[[Result], pl.DataFrame]:
    def make(result: Result) -> pl.DataFrame:
        split = arm_splitter(result)
        figures = ((_cell_key(c) | own, fig) for c in result.cells for own, fig in items(c, split))
        return _frame(figures, cls, {**CELL_COLUMNS, **lead}, last)

    return make


def _law_tests(result: Result) -> pl.DataFrame:
    return _frame(((({}), t) for t in result.law_tests), LawTest, {})


def _arm_rows(c: Cell, split: Split) -> Iterable[tuple[dict[str, Any], ArmFigure]]:
    """Per arm figure: the plain arm, the role of a companion and the estimator its key names."""
    for key, fig in c.arms.items():
        k = split(key)
        yield {"arm": k.arm, "role": _value(k.role), "estimator": k.estimator or fig.estimator}, fig


def _sides(d: Delta, split: Split) -> dict[str, Any]:
    """Return the plain arms of a delta and each side's label and estimator.

    A side's suffix names them (``(MEASURED)``, ``(analytic)``…); otherwise the side has the
    delta's label and estimator, or its half of a two-estimator delta (``b's − a's``).
    """
    parts = (d.estimator or "").split(" − ")
    out: dict[str, Any] = {}
    for side, key, half in (("a", d.a, parts[-1]), ("b", d.b, parts[0])):
        k = split(key)
        if k.estimator is not None or k.label == Label.MEASURED:
            estimator = k.estimator
        else:
            estimator = half if len(parts) == 2 else d.estimator
        out |= {
            side: k.arm,
            f"label_{side}": (k.label or d.label).value,
            f"estimator_{side}": estimator,
        }
    return out


_SIDES: dict[str, pl.DataType] = {
    "label_a": pl.String(),
    "label_b": pl.String(),
    "estimator_a": pl.String(),
    "estimator_b": pl.String(),
}


VIEWS.update(
    {
        "cells": cells_frame,
        "arms": _per_cell(ArmFigure, _arm_rows, {"arm": pl.String(), "role": pl.String()}),
        "deltas": _per_cell(
            Delta, lambda c, split: ((_sides(d, split), d) for d in c.deltas), {}, _SIDES
        ),
        "depths": _per_cell(DepthFigure, lambda c, _: (({}, d) for d in c.depths), {}),
        "policies": _per_cell(PolicyFigure, lambda c, _: (({}, p) for p in c.policies), {}),
        "survival": _per_cell(Survival, lambda c, _: (({}, s) for s in c.survival), {}),
        "law_tests": _law_tests,
    }
)

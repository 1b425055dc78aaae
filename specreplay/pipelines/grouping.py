"""Cells by a carried column (``--by COLUMN``): further columns are grouping keys.

See docs/inputs.md#position-traces-schema-v1.

A position-trace archive may carry columns beyond schema v1 (worker, run, suite, …). With
``--by COLUMN`` a command adds two levels of cells to its result:

``by``
    One cell per value of the column, pooled over families and buckets (e.g. per worker).
``family×bucket×by``
    One cell per family × context bucket × value.

Both name their value in :attr:`~specreplay.results.model.Cell.group` (``{COLUMN: value}``).

Design decisions
----------------
- The column must be constant within a request: requests stay the bootstrap unit
  (docs/methods.md#the-paired-bootstrap), and a request split between two values could not be
  resampled whole. A request whose value changes is the reader's one-line error (file and row), as a
  family change is. Round-level columns (a serving batch) are therefore not grouping keys here.
- The extra cells come from the command's one replay pass. Under ``--by`` the pass codes requests
  by family × value (the reader's ``group``) and records each request's value; the result is
  put on the family table (exactly the figures of a pass coded by family:
  :class:`~specreplay.replay.engine.ReplayResult`), and
  :meth:`~specreplay.replay.engine.ReplayResult.grouped` moves the same sums onto the values
  (``by`` cells) or the family × value names (``family×bucket×by`` cells): every figure of a
  request is a function of its request key, never of its family, and the ratio tails and
  MEASURED survival counts pool exactly per group. Each cell is then built by the same code as a
  family (× bucket) cell, so every figure, interval and verdict of the command is there too.
  Until issue 11 the cells came from two more full replay passes over the archive; they cost a
  pass each (``bench/by_passes.py`` measures what one pass saves). The pooled, family and
  bucket cells are those of the main pass, untouched.
- The bootstrap replicates of those cells come from the run's one resample pass
  (:mod:`specreplay.pipelines.resample`): the comparisons of both groupings are planned with
  the run's own and weighted by the same multiplicities, drawn within the run's strata (the
  families under ``--stratify family``), so a ``by`` cell is a domain estimate of the run's
  resamples, as a bucket cell is (until issue 13 each grouping was resampled within its own
  groups). A grouping's result built on its own (``requalify_result`` of
  :meth:`~specreplay.replay.engine.ReplayResult.grouped` without a plan) still draws within its
  groups: the draws of a pass coded by those columns. The Holm and Bonferroni families of a
  verdict are the cells of the same level. The cells use the run's own estimator only (no
  ``path-bias-importance`` diagnostic, whose other estimator the family cells carry).
- The column may not be a schema-v1 column (they are the archive's own fields; ``family`` is a
  level already), and must exist: the error lists the carried columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.reader import GROUP_SEP
from specreplay.replay.archive.schema import SCHEMA_V1
from specreplay.results.model import Cell, Level, Result

__all__ = ["BY_LEVELS", "check_by", "with_by_cells"]

BY_LEVELS: tuple[str, ...] = ("by", "family×by")
"""The groupings of the pass's requests behind the ``by`` and ``family×bucket×by`` cells
(:meth:`~specreplay.replay.engine.ReplayResult.grouped`)."""


def check_by(column: str | None) -> None:
    """Raise the one-line error of a ``--by`` value that names a schema-v1 column."""
    if column is None:
        return
    if not column or column in SCHEMA_V1:
        raise SpecReplayError(
            f"--by {column!r}: a schema-v1 column is not a grouping key; give a carried column "
            "(e.g. worker, run, suite)"
        )


def with_by_cells(result: Result, column: str, run: Callable[[str], Result]) -> Result:
    """Return ``result`` with the ``by`` and ``family×bucket×by`` cells of ``column`` appended.

    ``run(level)`` builds the command's result on the pass's requests grouped by ``level`` (one
    of :data:`BY_LEVELS`: the column's values, then family × value); only its family cells (the
    values) and family × bucket cells (family · value × bucket) are kept.
    """
    by_values, crossed = (run(level) for level in BY_LEVELS)
    cells = [
        _relabel(c, Level.BY, None, None, c.family, column)
        for c in by_values.cells
        if c.level == Level.FAMILY
    ]
    for c in crossed.cells:
        if c.level == Level.FAMILY_BUCKET:
            family, _, value = str(c.family).partition(GROUP_SEP)
            cells.append(_relabel(c, Level.FAMILY_BUCKET_BY, family, c.bucket, value, column))
    return replace(result, cells=(*result.cells, *cells))


def _relabel(
    c: Cell, level: Level, family: str | None, bucket: str | None, value: str | None, column: str
) -> Cell:
    return replace(c, level=level, family=family, bucket=bucket, group={column: str(value)})

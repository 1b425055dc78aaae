"""Cells: figures pooled, per family, per context bucket and per family × bucket.

See docs/outputs.md#resultsjson.

Bucket cells leave out rounds in ``unbucketed`` (they are counted in pooled and family cells and
reported under ``excluded``). A figure that cannot be computed is None with its ``null_reason``.
The figures are frozen dataclasses (:class:`ArmEstimate`, :class:`SurvivalEstimate`,
:class:`MeasuredCell`); :mod:`specreplay.results.from_stats` maps each onto the results model.

:func:`cell_layout` is the one place that lists the cells (levels in :data:`LEVELS` order, families
by code, buckets in the caller's order): each :class:`Cell` names its family and bucket and selects
the finest (family code, bucket code) cells it pools; :meth:`Cell.mask` turns that into a mask over
per-item code arrays. MEASURED cells (:func:`measured_cells`) and the paired comparison
(:mod:`specreplay.stats.compare`) both use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from numpy.typing import ArrayLike, NDArray

from specreplay.stats.buckets import UNBUCKETED, Buckets
from specreplay.stats.measured import MeasuredArchive

__all__ = [
    "LEVELS",
    "ArmEstimate",
    "Cell",
    "MeasuredCell",
    "SurvivalEstimate",
    "cell_layout",
    "measured_cells",
]

LEVELS = ("pooled", "family", "bucket", "family×bucket")


@dataclass(frozen=True)
class Cell:
    """Where a cell sits: its level, family and bucket names, and finest-cell selectors.

    Attributes
    ----------
    level : str
        One of :data:`LEVELS`.
    family, bucket : str or None
        The family and bucket names (None where the cell spans them all).
    fam_idx, bucket_idx : tuple of int
        Family codes and bucket codes the cell pools: it is the union of the finest cells
        (f, b) for f in ``fam_idx`` and b in ``bucket_idx``.
    """

    level: str
    family: str | None
    bucket: str | None
    fam_idx: tuple[int, ...]
    bucket_idx: tuple[int, ...]

    def mask(self, family_codes: ArrayLike, bucket_codes: ArrayLike) -> NDArray[np.bool_]:
        """Return which items fall in the cell, from their family and bucket codes (n,) each."""
        out: NDArray[np.bool_] = np.isin(family_codes, self.fam_idx) & np.isin(
            bucket_codes, self.bucket_idx
        )
        return out


@dataclass(frozen=True)
class ArmEstimate:
    """R (retained tokens per round) of one arm in one cell.

    Attributes
    ----------
    name : str
        The arm.
    R : float or None
        Σ retained tokens / Σ rounds over the cell; None with ``null_reason``.
    n_rounds : int
        Rounds of the arm in the cell.
    label : str
        ``MEASURED``, ``SIMULATED`` or ``ESTIMATED``.
    null_reason : str or None
        Why ``R`` is None.
    lo, hi : float or None
        R's default interval at ``level`` (None where the cell's delta is null, and for
        MEASURED cells, which compare nothing).
    level : float or None
        The interval's level (None without an interval).
    tail_width, tail_limit : float or None
        Where R is bounded over a truncated law (:mod:`specreplay.replay.truncation`): the mean
        over the cell's rounds of the width of the range their E[1 + A] can take whatever the
        mass outside the candidates does (R is the range's midpoint; ``lo``/``hi`` are widened
        by half of it), and of the most that width can be, Σ_j (d − j + 1)·min(1 − Σp_j,
        1 − Σq_j). None: R is exact given the laws.
    """

    name: str
    R: float | None
    n_rounds: int
    label: str
    null_reason: str | None
    lo: float | None = None
    hi: float | None = None
    level: float | None = None
    tail_width: float | None = None
    tail_limit: float | None = None


@dataclass(frozen=True)
class SurvivalEstimate:
    """MEASURED P(A ≥ j) of one arm at position j in one cell.

    Attributes
    ----------
    arm : str
    position : int
        j ≥ 1.
    value : float or None
        Rounds with A ≥ j / rounds (None with ``null_reason``, e.g. a round that did not
        record position j).
    rounds : int
        Rounds of the cell (those that recorded position 1).
    label : str
        ``MEASURED``.
    null_reason : str or None
    """

    arm: str
    position: int
    value: float | None
    rounds: int
    label: str
    null_reason: str | None


@dataclass(frozen=True)
class MeasuredCell:
    """The MEASURED figures of one cell: the archive arm's R and its survival curve.

    Attributes
    ----------
    spec : Cell
        Where the cell sits.
    n_requests : int
        Requests with rounds in the cell.
    arm : ArmEstimate
        The archive arm's R (no interval).
    survival : tuple of SurvivalEstimate
        P(A ≥ j) for j = 1..the deepest recorded position.
    null_reason : str or None
        ``no rounds in this cell`` for an empty cell.
    """

    spec: Cell
    n_requests: int
    arm: ArmEstimate
    survival: tuple[SurvivalEstimate, ...]
    null_reason: str | None


def cell_layout(
    families: Sequence[str],
    bucket_names: Sequence[str],
    *,
    bucket_cells: Iterable[int],
    pooled_buckets: Iterable[int],
) -> list[Cell]:
    """Return the cells: pooled, per family, per bucket, then per family × bucket.

    Parameters
    ----------
    families : sequence of str
        Family names by code; every family has a family cell.
    bucket_names : sequence of str
        Bucket names by code.
    bucket_cells : iterable of int
        Bucket codes with a bucket cell (and family × bucket cells), in output order; never
        ``unbucketed`` (docs/outputs.md#resultsjson), which the caller leaves out.
    pooled_buckets : iterable of int
        Bucket codes pooled by the pooled and family cells (``unbucketed`` included).

    Returns
    -------
    list of Cell
        Family × bucket cells run over families, then buckets.
    """
    all_f = tuple(range(len(families)))
    all_b = tuple(pooled_buckets)
    user_b = list(bucket_cells)
    cells = [Cell("pooled", None, None, all_f, all_b)]
    cells += [Cell("family", families[f], None, (f,), all_b) for f in all_f]
    cells += [Cell("bucket", None, bucket_names[b], all_f, (b,)) for b in user_b]
    cells += [
        Cell("family×bucket", families[f], bucket_names[b], (f,), (b,))
        for f in all_f
        for b in user_b
    ]
    return cells


def _bucket_codes(buckets: Buckets, present: set[int]) -> list[int]:
    """User buckets always; ``unknown`` only when it holds rounds; never ``unbucketed``."""
    codes = list(range(buckets.n_user))
    if buckets.unknown_code in present:
        codes.append(buckets.unknown_code)
    return codes


def measured_cells(
    m: MeasuredArchive,
    *,
    arm: str,
    families: list[str],
    buckets: Buckets,
    has_accepted: bool,
) -> list[MeasuredCell]:
    """Build the cells of MEASURED R and survival P(A ≥ j) for the archive's logging arm.

    Parameters
    ----------
    m : MeasuredArchive
        Accumulated sums and survival counts.
    arm : str
        Name under which the figures are reported (the logging arm, or ``"archive"``).
    families : list of str
        Family names by code.
    buckets : Buckets
        The bucket specification (names by code).
    has_accepted : bool
        Whether the archive records ``accepted`` (without it every R is null).
    """
    df = m.sums.frame()
    present = set(df.get_column("bucket").unique().to_list())
    bcodes = _bucket_codes(buckets, present)
    layout = cell_layout(
        families,
        buckets.names,
        bucket_cells=bcodes,
        pooled_buckets=[*bcodes, buckets.unbucketed_code],
    )
    cells: list[MeasuredCell] = []
    for cell in layout:
        sel = pl.lit(True)
        if cell.family is not None:
            sel = sel & (pl.col("family") == cell.fam_idx[0])
        if cell.bucket is not None:
            sel = sel & (pl.col("bucket") == cell.bucket_idx[0])
        part = df.filter(sel)
        n_rounds = int(part.get_column("n").sum())
        t = float(part.get_column("t").sum())
        n_req = int(part.get_column("request").n_unique())
        reason: str | None = None
        if n_rounds == 0:
            reason = "no rounds in this cell"
        elif not has_accepted:
            reason = "archive has no accepted column"
        R = None if reason else t / n_rounds
        survival = _survival(m, list(cell.fam_idx), list(cell.bucket_idx), arm, reason)
        cells.append(
            MeasuredCell(
                spec=cell,
                n_requests=n_req,
                arm=ArmEstimate(arm, R, n_rounds, "MEASURED", reason),
                survival=survival,
                null_reason="no rounds in this cell" if n_rounds == 0 else None,
            )
        )
    return cells


def _survival(
    m: MeasuredArchive, fams: list[int], bks: list[int], arm: str, reason: str | None
) -> tuple[SurvivalEstimate, ...]:
    nf = m.survival_hits.shape[0]
    fams = [f for f in fams if f < nf]
    depth = m.survival_hits.shape[2] - 1
    if not fams or depth < 1:
        return ()
    hits = m.survival_hits[np.ix_(fams, bks)].sum(axis=(0, 1))
    cover = m.survival_rounds[np.ix_(fams, bks)].sum(axis=(0, 1))
    rounds = int(cover[1])
    out: list[SurvivalEstimate] = []
    for j in range(1, depth + 1):
        why = reason
        if why is None and cover[j] < rounds:
            why = f"only {int(cover[j])} of {rounds} rounds recorded position {j}"
        value = None if why else float(hits[j]) / rounds
        out.append(SurvivalEstimate(arm, j, value, rounds, "MEASURED", why))
    return tuple(out)


def excluded_unbucketed(m: MeasuredArchive, buckets: Buckets) -> list[dict[str, Any]]:
    """Return the ``excluded`` entry for rounds outside every bucket (empty when there are none)."""
    sums = m.sums
    rounds = int(sums.n[sums.bucket == buckets.unbucketed_code].sum())
    if rounds == 0:
        return []
    return [
        {
            "reason": f"context in no bucket ({UNBUCKETED}): counted in pooled and family cells, "
            "left out of bucket cells",
            "rounds": rounds,
        }
    ]

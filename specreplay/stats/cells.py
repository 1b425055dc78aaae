"""Cells: figures pooled, per family, per context bucket and per family × bucket (SPEC §4.1).

A cell is the JSON object of the results contract. Bucket cells leave out rounds in
``unbucketed`` (they are counted in pooled and family cells and reported under ``excluded``).
A cell that cannot be computed keeps its keys with ``null`` values and a ``null_reason``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from specreplay.stats.buckets import UNBUCKETED, Buckets
from specreplay.stats.measured import MeasuredArchive

__all__ = ["LEVELS", "measured_cells"]

LEVELS = ("pooled", "family", "bucket", "family×bucket")


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
) -> list[dict[str, Any]]:
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
    unb = buckets.unbucketed_code
    cells: list[dict[str, Any]] = []
    keys: list[tuple[str, int | None, int | None]] = [("pooled", None, None)]
    keys += [("family", f, None) for f in range(len(families))]
    keys += [("bucket", None, b) for b in bcodes]
    keys += [("family×bucket", f, b) for f in range(len(families)) for b in bcodes]
    for level, f, b in keys:
        sel = pl.lit(True)
        if f is not None:
            sel = sel & (pl.col("family") == f)
        if b is not None:
            sel = sel & (pl.col("bucket") == b)
        elif level == "bucket":
            sel = sel & (pl.col("bucket") != unb)
        part = df.filter(sel)
        n_rounds = int(part.get_column("n").sum())
        t = float(part.get_column("t").sum())
        n_req = int(part.get_column("request").n_unique())
        fam_idx = [f] if f is not None else list(range(len(families)))
        b_idx = [b] if b is not None else [*bcodes, unb]
        reason: str | None = None
        if n_rounds == 0:
            reason = "no rounds in this cell"
        elif not has_accepted:
            reason = "archive has no accepted column"
        R = None if reason else t / n_rounds
        survival = _survival(m, fam_idx, b_idx, arm, reason)
        cells.append(
            {
                "level": level,
                "family": families[f] if f is not None else None,
                "bucket": buckets.names[b] if b is not None else None,
                "n_requests": n_req,
                "arms": {
                    arm: {
                        "R": R,
                        "n_rounds": n_rounds,
                        "label": "MEASURED",
                        "mcse": None,
                        "null_reason": reason,
                    }
                },
                "deltas": [],
                "depths": [],
                "survival": survival,
                "null_reason": "no rounds in this cell" if n_rounds == 0 else None,
            }
        )
    return cells


def _survival(
    m: MeasuredArchive, fams: list[int], bks: list[int], arm: str, reason: str | None
) -> list[dict[str, Any]]:
    nf = m.survival_hits.shape[0]
    fams = [f for f in fams if f < nf]
    depth = m.survival_hits.shape[2] - 1
    if not fams or depth < 1:
        return []
    hits = m.survival_hits[np.ix_(fams, bks)].sum(axis=(0, 1))
    cover = m.survival_rounds[np.ix_(fams, bks)].sum(axis=(0, 1))
    rounds = int(cover[1])
    out: list[dict[str, Any]] = []
    for j in range(1, depth + 1):
        why = reason
        if why is None and cover[j] < rounds:
            why = f"only {int(cover[j])} of {rounds} rounds recorded position {j}"
        out.append(
            {
                "arm": arm,
                "position": j,
                "value": None if why else float(hits[j]) / rounds,
                "rounds": rounds,
                "label": "MEASURED",
                "null_reason": why,
            }
        )
    return out


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

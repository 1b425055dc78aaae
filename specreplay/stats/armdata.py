"""ArmData: one arm's per-(request, bucket) rounds and retained tokens, from any observed source.

The seam of docs/design.md#layout: whatever the source (round traces, per-request sums, Spec-Bench
or FastChat/Medusa answer files, and later the replay engine), an arm reaches the statistics as the
rounds n and retained tokens t of each request in each context bucket, plus the request's family.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

__all__ = ["ARM_SCHEMA", "ArmData"]

ARM_SCHEMA: dict[str, pl.DataType] = {
    "request_id": pl.String(),
    "family": pl.String(),
    "bucket": pl.String(),
    "n": pl.Int64(),
    "t": pl.Float64(),
}
"""Columns of :attr:`ArmData.sums`: one row per (request, bucket) with n ≥ 1 rounds."""


@dataclass(frozen=True)
class ArmData:
    """One arm's sufficient statistics.

    Attributes
    ----------
    name : str
        Arm label shown in outputs (default: the input's file or folder name).
    kind : str
        Source format: ``round-traces``, ``request-sums``, ``spec-bench``, ``medusa`` or
        ``replay``.
    sums : polars.DataFrame
        Columns of :data:`ARM_SCHEMA`; (request_id, bucket) unique; the family is constant per
        request.
    label : str
        ``MEASURED`` for observed traces, ``SIMULATED`` for replays.
    files : list of (Path, int)
        Every input file read, with its row (line) count.
    notes : list of str
        Assumptions the source implies (e.g. context unknown, drafted depth unknown).
    excluded : list of dict
        Rows left out under an explicit option, ``{"reason": ..., "rows": ...}``.
    ignored : list of (Path, str)
        Entries of the input folder skipped by ``--ignore``, with the glob that matched.
    depth : int or None
        The most draft tokens a round of this arm can accept (its depth; the largest ``drafted``
        of round traces that record it in every round); None when unknown.
    """

    name: str
    kind: str
    sums: pl.DataFrame
    label: str = "MEASURED"
    files: list[tuple[Path, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    excluded: list[dict[str, object]] = field(default_factory=list)
    ignored: list[tuple[Path, str]] = field(default_factory=list)
    depth: int | None = None

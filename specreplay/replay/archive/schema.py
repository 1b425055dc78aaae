"""Position-trace archive, schemas v1 and v2: column names, roles and canonical dtypes.

See docs/inputs.md#position-traces-schema-v1.

Schema v2 (issue 15) is v1 plus optional columns; a v1 archive is a v2 archive without them.
``draft_tail`` and ``target_tail`` record, per position, the draft and target mass outside the
kept candidates (the engine's laws over its whole vocabulary; null: unknown). With them,
``emitted_q`` is the engine's law on the kept candidates, never renormalised: Σ emitted_q +
draft_tail = 1 and Σ target_probs + target_tail = 1. Without them (v1, or a null), ``emitted_q``
sums to 1 on the candidates and the target's missing mass is unknown. ``capped`` (issue 16), a
round-level mark repeated on each of its rows: True where the request's end or its token limit
capped the round's draft length (a recorder knows; null or absent: unknown). Issue 19 adds its
marks to the same version. ``SCHEMA_V1`` holds every known column of either version.

A **position trace** has one row per (request, round, position). Required columns describe what the
drafter proposed and what the target scored; optional columns record what the archived run did. Any
further column is carried through as an optional grouping key.
"""

from __future__ import annotations

from typing import Final

import polars as pl

__all__ = [
    "FLOAT_LIST_COLUMNS",
    "INT_COLUMNS",
    "LIST_COLUMNS",
    "MARK_COLUMNS",
    "OPTIONAL",
    "REQUIRED",
    "SCHEMA_V1",
    "TAIL_COLUMNS",
]

SCHEMA_V1: Final[dict[str, pl.DataType]] = {
    "request_id": pl.String(),
    "family": pl.String(),
    "context_tokens": pl.Int64(),
    "round": pl.Int64(),
    "position": pl.Int64(),
    "cand_ids": pl.List(pl.Int64()),
    "draft_logprobs": pl.List(pl.Float64()),
    "target_probs": pl.List(pl.Float64()),
    "drafted_id": pl.Int64(),
    "accepted": pl.Boolean(),
    "logging_arm": pl.String(),
    "emitted_q": pl.List(pl.Float64()),
    "draft_tail": pl.Float64(),
    "target_tail": pl.Float64(),
    "capped": pl.Boolean(),
}
"""Canonical dtype of every known column (schema v1, then v2's), in canonical order."""

REQUIRED: Final[tuple[str, ...]] = (
    "request_id",
    "family",
    "context_tokens",
    "round",
    "position",
    "cand_ids",
    "draft_logprobs",
    "target_probs",
)
OPTIONAL: Final[tuple[str, ...]] = (
    "drafted_id",
    "accepted",
    "logging_arm",
    "emitted_q",
    "draft_tail",
    "target_tail",
    "capped",
)
TAIL_COLUMNS: Final[tuple[str, ...]] = ("draft_tail", "target_tail")
"""Schema v2: the draft and target mass outside the kept candidates, per position."""
MARK_COLUMNS: Final[tuple[str, ...]] = ("capped",)
"""Schema v2's round marks: ``capped`` (issue 16), the round's draft length capped by the request's
end or token limit (read from the round's first row)."""
INT_COLUMNS: Final[tuple[str, ...]] = ("context_tokens", "round", "position", "drafted_id")
FLOAT_LIST_COLUMNS: Final[tuple[str, ...]] = ("draft_logprobs", "target_probs", "emitted_q")
LIST_COLUMNS: Final[tuple[str, ...]] = ("cand_ids", *FLOAT_LIST_COLUMNS)

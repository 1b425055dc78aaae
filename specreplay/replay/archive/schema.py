"""Position-trace archive, schema v1: column names, roles and canonical dtypes.

See docs/inputs.md#position-traces-schema-v1.

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
    "OPTIONAL",
    "REQUIRED",
    "SCHEMA_V1",
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
}
"""Canonical dtype of every schema-v1 column, in canonical order."""

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
OPTIONAL: Final[tuple[str, ...]] = ("drafted_id", "accepted", "logging_arm", "emitted_q")
INT_COLUMNS: Final[tuple[str, ...]] = ("context_tokens", "round", "position", "drafted_id")
FLOAT_LIST_COLUMNS: Final[tuple[str, ...]] = ("draft_logprobs", "target_probs", "emitted_q")
LIST_COLUMNS: Final[tuple[str, ...]] = ("cand_ids", *FLOAT_LIST_COLUMNS)

"""Small, valid position-trace archives as lists of row dicts, and writers for them.

See docs/inputs.md#position-traces-schema-v1.

``valid_rows`` builds requests × rounds × positions 1..depth with ``n_cand`` candidates each, every
optional column filled in (drafted_id, accepted, logging_arm, emitted_q). The laws are dyadic
(powers of two), so every sum the validator checks is exact in float64 and a test can move one
value across a tolerance knowingly. Tests copy the rows, break one, and write JSONL or Parquet.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from specreplay.replay.archive.schema import SCHEMA_V1

__all__ = ["FAMILIES", "LOGGING_ARM", "clone", "valid_rows", "write_jsonl", "write_parquet"]

LOGGING_ARM = "top4:t1@3"
FAMILIES = ("code", "chat", "math")

# Draft law over the 4 candidates: 1/2, 1/4, 1/8, 1/16 (mass 1/16 off-candidate): Σ q = 15/16.
_DRAFT_Q = np.array([0.5, 0.25, 0.125, 0.0625])
# Target law over the 4 candidates: Σ p = 7/8, p_other = 1/8.
_TARGET_P = np.array([0.25, 0.25, 0.25, 0.125])
# The law the engine sampled from: the draft law renormalised to the candidates, 8/15 … 1/15,
# stored as dyadic integers / 16 (Σ = 1 exactly): 8/16, 4/16, 2/16, 2/16.
_EMITTED_Q = np.array([0.5, 0.25, 0.125, 0.125])


def valid_rows(
    *,
    n_requests: int = 3,
    n_rounds: int = 2,
    depth: int = 3,
    n_cand: int = 4,
    seed: int = 20240611,
) -> list[dict[str, Any]]:
    """Return the rows of a valid archive in archive order (request, round, position).

    Candidate ids are distinct draws from [0, 1000); the laws are permuted per row so rows differ.
    ``accepted`` is a leading run of True then False (length drawn per round).
    """
    if n_cand != 4:
        raise ValueError("the dyadic laws are written for 4 candidates")
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    ctx = 100
    for r in range(n_requests):
        family = FAMILIES[r % len(FAMILIES)]
        for rnd in range(n_rounds):
            n_acc = int(rng.integers(0, depth + 1))
            ctx += int(rng.integers(1, depth + 2))
            for pos in range(1, depth + 1):
                cand = rng.choice(1000, size=n_cand, replace=False)
                perm = rng.permutation(n_cand)
                j = int(rng.integers(0, n_cand))
                rows.append(
                    {
                        "request_id": f"req-{r}",
                        "family": family,
                        "context_tokens": ctx,
                        "round": rnd,
                        "position": pos,
                        "cand_ids": [int(x) for x in cand],
                        "draft_logprobs": [math.log(x) for x in _DRAFT_Q[perm]],
                        "target_probs": [float(x) for x in _TARGET_P[perm]],
                        "drafted_id": int(cand[j]),
                        "accepted": pos <= n_acc,
                        "logging_arm": LOGGING_ARM,
                        "emitted_q": [float(x) for x in _EMITTED_Q[perm]],
                    }
                )
    return rows


def clone(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Deep copy, so a test can break one row without touching the shared fixture."""
    return copy.deepcopy(list(rows))


def write_jsonl(
    path: Path,
    rows: Sequence[dict[str, Any] | str],
    *,
    blank_before: dict[int, int] | None = None,
) -> Path:
    """Write rows as JSON Lines; a str item is written verbatim as one line.

    ``blank_before`` maps a row index to the number of blank lines written just before it.
    ``allow_nan`` writes NaN / Infinity / -Infinity the way Python and JavaScript do.
    """
    blank_before = blank_before or {}
    with path.open("w", encoding="utf-8") as fh:
        for i, row in enumerate(rows):
            fh.write("\n" * blank_before.get(i, 0))
            fh.write(row if isinstance(row, str) else json.dumps(row, allow_nan=True))
            fh.write("\n")
    return path


def write_parquet(
    path: Path,
    rows: Sequence[dict[str, Any]],
    *,
    schema_overrides: dict[str, pl.DataType] | None = None,
) -> Path:
    """Write rows as one Parquet file in canonical dtypes (or ``schema_overrides`` where given)."""
    cols = list(rows[0].keys())
    schema = {c: SCHEMA_V1[c] for c in cols if c in SCHEMA_V1}
    schema.update(schema_overrides or {})
    data = {c: [r.get(c) for r in rows] for c in cols}
    pl.DataFrame(data, schema=schema, strict=False).write_parquet(path)
    return path

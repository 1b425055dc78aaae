"""The synthetic archive as polars frames with the schema-v1 columns.

See docs/inputs.md#position-traces-schema-v1.

:mod:`specreplay.sim.synth` simulates the toy pair's logging run as arrays; this module lays
those arrays out as archive rows (plus the carried ``toy_state`` column) for the writer.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import polars as pl
from numpy.typing import NDArray

from specreplay.replay.archive.schema import MARK_COLUMNS, SCHEMA_V1, TAIL_COLUMNS
from specreplay.sim.synth import (
    SynthConfig,
    SynthShard,
    logging_arm_name,
    request_ids,
    simulate_shard,
)
from specreplay.sim.toy import FAMILIES

__all__ = ["FRAME_SCHEMA", "for_form", "shard_frame", "synth_frames"]

FRAME_SCHEMA: dict[str, pl.DataType] = {
    # whole laws, full rounds: no tail and no mark
    **{c: t for c, t in SCHEMA_V1.items() if c not in TAIL_COLUMNS and c not in MARK_COLUMNS},
    "toy_state": pl.UInt64(),
}


def _list_column(name: str, values: NDArray[np.generic], inner: pl.DataType) -> pl.Series:
    """Build a List column from a (rows, k) array (Array series, then cast: no per-row loop)."""
    return pl.Series(name, values).cast(pl.List(inner))


def shard_frame(cfg: SynthConfig, shard: SynthShard) -> pl.DataFrame:
    """Return a shard's archive rows, with exactly the columns and dtypes of FRAME_SCHEMA."""
    n = len(shard.request_ids)
    per_request = cfg.rounds * cfg.depth
    req_idx = np.repeat(np.arange(n), per_request)
    fam_names = pl.Series("family", FAMILIES, dtype=pl.String)
    return pl.DataFrame(
        [
            pl.Series("request_id", shard.request_ids, dtype=pl.String).gather(req_idx),
            fam_names.gather(np.repeat(shard.family, per_request)),
            pl.Series("context_tokens", np.repeat(shard.round_context, cfg.depth), dtype=pl.Int64),
            pl.Series(
                "round", np.tile(np.repeat(np.arange(cfg.rounds), cfg.depth), n), dtype=pl.Int64
            ),
            pl.Series(
                "position", np.tile(np.arange(1, cfg.depth + 1), n * cfg.rounds), dtype=pl.Int64
            ),
            _list_column("cand_ids", shard.cand_ids, pl.Int64()),
            _list_column("draft_logprobs", shard.draft_logprobs, pl.Float64()),
            _list_column("target_probs", shard.target_probs, pl.Float64()),
            pl.Series("drafted_id", shard.drafted_id, dtype=pl.Int64),
            pl.Series("accepted", shard.accepted, dtype=pl.Boolean),
            pl.repeat(logging_arm_name(cfg), n * per_request, dtype=pl.String, eager=True).alias(
                "logging_arm"
            ),
            _list_column("emitted_q", shard.emitted_q, pl.Float64()),
            pl.Series("toy_state", shard.toy_state, dtype=pl.UInt64),
        ]
    )


def for_form(frame: pl.DataFrame, form: str) -> pl.DataFrame:
    """Return ``frame`` as the archive ``form`` holds it: in JSON Lines, ``toy_state`` is a string.

    ``toy_state`` is a 64-bit key, often past int64, and the JSON Lines reader refuses integers past
    int64 (docs/inputs.md#position-traces-schema-v1), so a JSON Lines synthetic archive writes it as
    its decimal string. It is a carried column that no figure depends on.
    """
    if form != "jsonl":
        return frame
    return frame.with_columns(pl.col("toy_state").cast(pl.String))


def synth_frames(cfg: SynthConfig, seed: int) -> Iterator[pl.DataFrame]:
    """Yield the synthetic archive, one frame per shard of whole requests, in request order.

    Rows are in (request, round, position) order with the columns of :data:`FRAME_SCHEMA`. The
    frames are the same for any ``requests_per_shard`` once concatenated, and for any thread count.
    """
    ids = request_ids(cfg.n_requests)
    for lo in range(0, cfg.n_requests, cfg.requests_per_shard):
        shard = simulate_shard(cfg, seed, ids[lo : lo + cfg.requests_per_shard])
        yield shard_frame(cfg, shard)

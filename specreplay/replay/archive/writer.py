"""TraceWriter: write a position-trace archive (schema v1) the way a serving engine would log it.

A writer takes rows (dicts) or polars frames in archive order and writes one of the three input
forms of SPEC §2.1: a directory of Parquet shards (``part-00000.parquet`` …), one Parquet file, or
one JSON Lines file. Every file is written under a temporary name and renamed when complete, so a
reader never sees a half-written shard. Shards are cut only between rounds, so a round never spans
two files (the archive order rule). JSON Lines are written with Python's ``json`` so that a
draft log-probability of −inf is written ``-Infinity`` (and read back as −inf).

Examples
--------
>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> with TraceWriter(d / "a.jsonl") as w:
...     w.append({"request_id": "r", "family": "code", "context_tokens": 10, "round": 0,
...               "position": 1, "cand_ids": [5, 7], "draft_logprobs": [-0.1, float("-inf")],
...               "target_probs": [0.5, 0.25]})
>>> (d / "a.jsonl").read_text().count("-Infinity")
1
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import polars as pl

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.schema import SCHEMA_V1

__all__ = ["TraceWriter"]


class TraceWriter:
    """Append position rows; write Parquet shards, one Parquet file, or JSON Lines atomically.

    Parameters
    ----------
    path : Path
        A directory (``format="parquet-dir"``, the default when the path has no suffix), a
        ``.parquet`` file, or a ``.jsonl`` file.
    format : {"parquet-dir", "parquet", "jsonl"}, optional
        Inferred from the suffix when omitted.
    shard_rows : int
        Target rows per Parquet shard (cut at the next round boundary).
    """

    def __init__(self, path: Path, *, format: str | None = None, shard_rows: int = 500_000) -> None:
        self.path = Path(path)
        if format is None:
            format = {".parquet": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl"}.get(
                self.path.suffix, "parquet-dir"
            )
        if format not in ("parquet-dir", "parquet", "jsonl"):
            raise SpecReplayError(f"TraceWriter: unknown format {format!r}")
        self.format = format
        self.shard_rows = max(1, shard_rows)
        self.written: list[Path] = []
        self._frames: list[pl.DataFrame] = []
        self._rows: list[dict[str, Any]] = []
        self._n = 0
        self._shard = 0
        self._closed = False
        if format == "parquet-dir":
            self.path.mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()

    def append(self, row: Mapping[str, Any]) -> None:
        """Append one position row (a mapping of column name to value)."""
        self._rows.append(dict(row))
        self._n += 1
        if len(self._rows) >= 10_000:
            self._frames.append(self._rows_frame())
        self._maybe_flush()

    def append_frame(self, frame: pl.DataFrame) -> None:
        """Append a frame of position rows in archive order."""
        self._flush_rows()
        self._frames.append(_canonical(frame))
        self._n += frame.height
        self._maybe_flush()

    def end_shard(self) -> None:
        """Write everything buffered as one shard now (the caller ends it at a round boundary)."""
        if self.format != "parquet-dir":
            return
        self._flush_rows()
        if self._frames:
            frame = pl.concat(self._frames, how="vertical")
            self._frames = []
            self._n = 0
            if frame.height:
                self._write_shard(frame)

    def close(self) -> list[Path]:
        """Write what is buffered and return the files written."""
        if self._closed:
            return self.written
        self._flush_rows()
        frame = pl.concat(self._frames, how="vertical") if self._frames else None
        self._frames = []
        if self.format == "parquet-dir":
            if frame is not None and frame.height:
                self._write_shard(frame)
        elif self.format == "parquet":
            _atomic_parquet(frame if frame is not None else _empty(), self.path)
            self.written.append(self.path)
        else:
            _atomic_jsonl(frame if frame is not None else _empty(), self.path)
            self.written.append(self.path)
        self._closed = True
        return self.written

    # -- internals -------------------------------------------------------------------------

    def _rows_frame(self) -> pl.DataFrame:
        rows, self._rows = self._rows, []
        cols = list(rows[0].keys())
        schema = {c: SCHEMA_V1[c] for c in cols if c in SCHEMA_V1}
        data = {c: [r.get(c) for r in rows] for c in cols}
        return _canonical(pl.DataFrame(data, schema_overrides=schema, strict=False))

    def _flush_rows(self) -> None:
        if self._rows:
            self._frames.append(self._rows_frame())

    def _maybe_flush(self) -> None:
        if self.format != "parquet-dir" or self._n < self.shard_rows:
            return
        self._flush_rows()
        frame = pl.concat(self._frames, how="vertical")
        cut = _last_round_start(frame)
        if cut == 0:
            self._frames = [frame]
            return
        self._write_shard(frame.slice(0, cut))
        rest = frame.slice(cut)
        self._frames = [rest]
        self._n = rest.height

    def _write_shard(self, frame: pl.DataFrame) -> None:
        path = self.path / f"part-{self._shard:05d}.parquet"
        _atomic_parquet(frame, path)
        self.written.append(path)
        self._shard += 1


def _canonical(frame: pl.DataFrame) -> pl.DataFrame:
    """Order schema-v1 columns canonically (cast to their dtypes), then carried columns."""
    known = [c for c in SCHEMA_V1 if c in frame.columns]
    other = [c for c in frame.columns if c not in SCHEMA_V1]
    return frame.select([pl.col(c).cast(SCHEMA_V1[c]) for c in known] + [pl.col(c) for c in other])


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema={c: SCHEMA_V1[c] for c in list(SCHEMA_V1)[:8]})


def _last_round_start(frame: pl.DataFrame) -> int:
    rid = frame.get_column("request_id")
    rnd = frame.get_column("round")
    last = (rid == rid[-1]) & (rnd == rnd[-1])
    # rounds are contiguous: the last round is the trailing run of `last`
    idx = (~last).arg_true()
    return int(idx[-1]) + 1 if idx.len() else 0


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def _atomic_parquet(frame: pl.DataFrame, path: Path) -> None:
    tmp = _tmp(path)
    frame.write_parquet(tmp)
    os.replace(tmp, path)


def _atomic_jsonl(frame: pl.DataFrame, path: Path) -> None:
    tmp = _tmp(path)
    with tmp.open("w", encoding="utf-8") as fh:
        for row in frame.iter_rows(named=True):
            fh.write(json.dumps(row, allow_nan=True) + "\n")
    os.replace(tmp, path)

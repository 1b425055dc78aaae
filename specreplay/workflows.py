"""The Python API behind each CLI command: run a whole job, write its outputs, return its text.

Functions here compose the subpackages (``replay`` → ``stats`` → ``report``) and return the text the
terminal shows; they never print. ``progress(what, total)`` is a context-manager factory yielding
``advance(n)``; the CLI passes a rich progress bar on stderr.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import polars as pl

from specreplay.replay.buckets import Buckets
from specreplay.replay.stream import ArchiveReader
from specreplay.report import (
    cells_frame,
    input_records,
    output_dir,
    results_document,
    write_json,
)
from specreplay.stats.cells import excluded_unbucketed, measured_cells
from specreplay.stats.measured import MeasuredAccumulator, MeasuredArchive
from specreplay.tables import archive_summary, measured_tables

__all__ = ["ArchiveScan", "run_demo", "run_synth", "run_validate", "scan_archive"]

Progress = Callable[[str, int | None], AbstractContextManager[Callable[[int], None]]]

PATH_ASSUMPTION_NOTE = (
    "MEASURED figures count the archived verifier's decisions (`accepted`): A = leading True "
    "values of a round, retained tokens 1 + A, R = Σ(1 + A) / #rounds pooled over rounds."
)


def _no_progress(what: str, total: int | None) -> AbstractContextManager[Callable[[int], None]]:
    return nullcontext(lambda n: None)


class ArchiveScan:
    """Result of reading a whole archive once: reader tables plus MEASURED accumulations."""

    def __init__(self, reader: ArchiveReader, measured: MeasuredArchive, has_accepted: bool):
        self.reader = reader
        self.measured = measured
        self.has_accepted = has_accepted

    @property
    def arm(self) -> str:
        """Name the MEASURED figures are reported under: the logging arm, else ``archive``."""
        return self.reader.logging_arm or "archive"

    def cells(self) -> list[dict[str, Any]]:
        """MEASURED cells pooled, per family, per bucket and per family × bucket."""
        return measured_cells(
            self.measured,
            arm=self.arm,
            families=self.reader.families,
            buckets=self.reader.buckets,
            has_accepted=self.has_accepted,
        )


def _parquet_rows(path: Path) -> int | None:
    try:
        files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
        if not files or any(f.suffix != ".parquet" for f in files):
            return None
        return sum(int(pl.scan_parquet(f).select(pl.len()).collect().item()) for f in files)
    except Exception:
        return None


def scan_archive(
    path: Path,
    *,
    buckets: str,
    logging_arm: str | None = None,
    max_errors: int | None = 1,
    progress: Progress = _no_progress,
) -> ArchiveScan:
    """Read, validate and accumulate MEASURED figures of an archive in one streaming pass."""
    reader = ArchiveReader(
        path, buckets=Buckets.parse(buckets), logging_arm=logging_arm, max_errors=max_errors
    )
    acc = MeasuredAccumulator(len(reader.buckets.names))
    with progress(f"reading {path.name}", _parquet_rows(path)) as advance:
        for batch in reader:
            acc.add(batch)
            advance(batch.n_positions)
    return ArchiveScan(reader, acc.result(), "accepted" in reader.columns)


def run_synth(
    out: Path,
    *,
    n_requests: int,
    rounds: int,
    shard_requests: int,
    seed: int,
    force: bool,
    progress: Progress = _no_progress,
) -> str:
    """Generate the synthetic archive into ``out`` (Parquet shards + SYNTH.json manifest)."""
    t0 = time.perf_counter()
    with output_dir(out, force=force) as tmp:
        cfg, files = _write_synth(tmp, n_requests, rounds, shard_requests, seed, progress)
        rows = n_requests * rounds * cfg.depth
    return (
        f"wrote {n_requests:,} requests × {rounds} rounds × {cfg.depth} positions "
        f"({rows:,} rows) in {len(files)} shards to {out} "
        f"(logging arm {_arm(cfg)}, seed {seed}) in {time.perf_counter() - t0:.1f} s"
    )


def _arm(cfg: Any) -> str:
    from specreplay.sim.synth import logging_arm_name

    return logging_arm_name(cfg)


def _write_synth(
    folder: Path, n_requests: int, rounds: int, shard_requests: int, seed: int, progress: Progress
) -> tuple[Any, list[Path]]:
    from specreplay.replay.writer import TraceWriter
    from specreplay.sim.synth import SynthConfig, synth_frames

    cfg = SynthConfig(n_requests=n_requests, rounds=rounds, requests_per_shard=shard_requests)
    with (
        progress("synthesising requests", n_requests) as advance,
        TraceWriter(folder, format="parquet-dir") as writer,
    ):
        for frame in synth_frames(cfg, seed):
            writer.append_frame(frame)
            writer.end_shard()
            advance(frame.height // (rounds * cfg.depth))
    files = writer.written
    manifest = results_document(
        command="synth",
        seed=seed,
        inputs=[],
        options={
            "requests": n_requests,
            "rounds": rounds,
            "depth": cfg.depth,
            "shard_requests": shard_requests,
            "logging_arm": _arm(cfg),
        },
        assumptions=[
            "Synthetic archive logged from specreplay's toy draft/target model pair "
            "(specreplay.sim.toy); no real model was run.",
        ],
        excluded=[],
        arms=[_arm(cfg)],
        cells=[],
        outputs=input_records([(f, None) for f in files]),
    )
    write_json(folder / "SYNTH.json", manifest)
    return cfg, files


def _write_measured(
    folder: Path,
    scan: ArchiveScan,
    command: str,
    seed: int,
    options: dict[str, Any],
    rename: tuple[Path, Path] | None = None,
) -> str:
    """Write results.json, cells.parquet and TABLES.md of a MEASURED scan into ``folder``.

    ``rename = (tmp, final)`` rewrites input paths read from the temporary output folder.
    """
    cells = scan.cells()
    inputs = input_records([(f.path, f.rows) for f in scan.reader.files])
    if rename is not None:
        for rec in inputs:
            rec["path"] = rec["path"].replace(str(rename[0]), str(rename[1]), 1)
    doc = results_document(
        command=command,
        seed=seed,
        inputs=inputs,
        options=options,
        assumptions=[PATH_ASSUMPTION_NOTE],
        excluded=excluded_unbucketed(scan.measured, scan.reader.buckets),
        arms=[scan.arm],
        cells=cells,
    )
    write_json(folder / "results.json", doc)
    cells_frame(cells).write_parquet(folder / "cells.parquet")
    tables = measured_tables(cells, scan)
    (folder / "TABLES.md").write_text(tables)
    return tables


def run_validate(
    path: Path,
    *,
    max_errors: int | None,
    buckets: str,
    logging_arm: str | None,
    out: Path | None,
    force: bool,
    progress: Progress = _no_progress,
) -> tuple[bool, str]:
    """Validate an archive; return (valid, text): counts and MEASURED R, or the error lines."""
    scan = scan_archive(
        path, buckets=buckets, logging_arm=logging_arm, max_errors=max_errors, progress=progress
    )
    errors = scan.reader.errors
    if errors:
        more = " (stopped there; --all lists every one)" if scan.reader.truncated else ""
        return False, "\n".join([*errors, f"{len(errors)} error(s) in {path}{more}"])
    options = {"path": str(path), "buckets": buckets, "logging_arm": logging_arm}
    text = archive_summary(scan)
    if out is not None:
        with output_dir(out, force=force) as tmp:
            _write_measured(tmp, scan, "validate", 0, options)
    return True, text + "\n\n" + measured_tables(scan.cells(), scan)


def run_demo(
    out: Path,
    *,
    n_requests: int,
    seed: int,
    force: bool,
    progress: Progress = _no_progress,
) -> str:
    """Generate the built-in archive into ``out/archive`` and write its MEASURED story."""
    from specreplay.replay.buckets import DEFAULT_BUCKETS

    with output_dir(out, force=force) as tmp:
        archive = tmp / "archive"
        _write_synth(archive, n_requests, 64, 250, seed, progress)
        scan = scan_archive(archive, buckets=DEFAULT_BUCKETS, progress=progress)
        options = {"requests": n_requests, "archive": str(out / "archive")}
        tables = _write_measured(tmp, scan, "demo", seed, options, rename=(tmp, out))
    head = (
        f"specreplay demo: built-in synthetic archive, {n_requests:,} requests, seed {seed} "
        f"(written to {out}/archive)\n"
    )
    return (
        head
        + "\n"
        + archive_summary(scan, out / "archive")
        + "\n\n"
        + tables
        + f"\nOutputs: {out}/"
    )

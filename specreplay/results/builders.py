"""Output steps shared by several commands: the synthetic archive and MEASURED report files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specreplay.replay.scan import ArchiveScan, Progress
from specreplay.results.output import (
    cells_frame,
    input_records,
    results_document,
    write_json,
)
from specreplay.results.tables import measured_tables
from specreplay.stats.cells import excluded_unbucketed

__all__ = ["PATH_ASSUMPTION_NOTE", "synth_arm", "write_measured", "write_synth_archive"]

PATH_ASSUMPTION_NOTE = (
    "MEASURED figures count the archived verifier's decisions (`accepted`): A = leading True "
    "values of a round, retained tokens 1 + A, R = Σ(1 + A) / #rounds pooled over rounds."
)


def synth_arm(cfg: Any) -> str:
    """Return the logging arm of a synthetic archive configuration."""
    from specreplay.sim.synth import logging_arm_name

    return logging_arm_name(cfg)


def write_synth_archive(
    folder: Path, n_requests: int, rounds: int, shard_requests: int, seed: int, progress: Progress
) -> tuple[Any, list[Path]]:
    """Write the synthetic archive (Parquet shards and SYNTH.json) into ``folder``."""
    from specreplay.replay.archive.synthetic import synth_frames
    from specreplay.replay.archive.writer import TraceWriter
    from specreplay.sim.synth import SynthConfig

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
            "logging_arm": synth_arm(cfg),
        },
        assumptions=[
            "Synthetic archive logged from specreplay's toy draft/target model pair "
            "(specreplay.sim.toy); no real model was run.",
        ],
        excluded=[],
        arms=[synth_arm(cfg)],
        cells=[],
        outputs=input_records([(f, None) for f in files]),
    )
    write_json(folder / "SYNTH.json", manifest)
    return cfg, files


def write_measured(
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

"""Builders of typed results shared by several commands: the synthetic archive, MEASURED scans.

A builder turns what the lower layers computed (an :class:`~specreplay.replay.scan.ArchiveScan`,
the comparison cells of :mod:`specreplay.stats.compare`) into the typed model of
:mod:`specreplay.results.model`, once, through the mappings of
:mod:`specreplay.results.from_stats`; nothing edits the objects afterwards.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from specreplay.diskfull import writing
from specreplay.pipelines.document import excluded_entries, ignored_inputs, input_files, new_result
from specreplay.pipelines.options import SYNTH_DEPTH
from specreplay.replay.scan import ArchiveScan, MassStats, Progress
from specreplay.results.from_stats import comparison_cell, measured_cell
from specreplay.results.io import write_result
from specreplay.results.model import (
    ArchiveSummary,
    Cell,
    KeptMass,
    KeptMasses,
    Result,
    ShortRoundCounts,
)
from specreplay.results.output import WRITTEN_BY
from specreplay.sim.synth import SynthConfig, logging_arm_name
from specreplay.stats.cells import excluded_unbucketed
from specreplay.stats.compare import Comparison

__all__ = [
    "PATH_ASSUMPTION_NOTE",
    "archive_summary_of",
    "comparison_cells",
    "measured_result",
    "write_synth_archive",
]

PATH_ASSUMPTION_NOTE = (
    "MEASURED figures count the archived verifier's decisions (`accepted`): A = leading True "
    "values of a round, retained tokens 1 + A, R = Σ(1 + A) / #rounds pooled over rounds."
)


def comparison_cells(comp: Comparison) -> tuple[Cell, ...]:
    """Return the typed cells of a comparison, one delta each (HDI/ETI where ``hdi_eti`` ran)."""
    return tuple(comparison_cell(c) for c in comp.cells)


def write_synth_archive(
    folder: Path,
    n_requests: int,
    rounds: int,
    shard_requests: int,
    seed: int,
    progress: Progress,
    form: str = "parquet",
    compression: str | None = None,
    depth: int = SYNTH_DEPTH.default,
) -> tuple[SynthConfig, list[Path]]:
    """Write the synthetic archive (shards of ``form`` and its SYNTH.json manifest) into ``folder``.

    ``form``: parquet, ipc or jsonl; ``compression`` as the writer takes it (None: the form's
    default, lz4 for Parquet: see :data:`~specreplay.replay.archive.writer.COMPRESSIONS`). The
    manifest records both. ``depth``: positions the logging arm drafts per round (the built-in
    archive's 8 by default: :mod:`specreplay.sim.synth` says why).

    ``outputs`` of the manifest name the shards by their file names (the folder may still be a
    temporary one when this runs).
    """
    from specreplay.replay.archive.synthetic import for_form, synth_frames
    from specreplay.replay.archive.writer import TraceWriter

    cfg = SynthConfig(
        n_requests=n_requests, rounds=rounds, requests_per_shard=shard_requests, depth=depth
    )
    arm = logging_arm_name(cfg)
    with (
        progress("synthesising requests", n_requests) as advance,
        TraceWriter(
            folder,
            format=f"{form}-dir",
            compression=compression,
            manifest=False,  # synth stages the folder and writes SYNTH.json itself
        ) as writer,
    ):
        for frame in synth_frames(cfg, seed):
            writer.append_frame(for_form(frame, form))
            writer.end_shard()
            advance(frame.height // (rounds * cfg.depth))
    files = writer.written
    outputs = tuple(
        dataclasses.replace(f, path=Path(f.path).name)
        for f in input_files([(p, None) for p in files])
    )
    manifest = new_result(
        command="synth",
        seed=seed,
        inputs=(),
        options={
            "requests": n_requests,
            "rounds": rounds,
            "depth": cfg.depth,
            "shard_requests": shard_requests,
            "logging_arm": arm,
            "form": form,
            "compression": writer.compression,
        },
        assumptions=[
            "Synthetic archive logged from specreplay's toy draft/target model pair "
            "(specreplay.sim.toy); no real model was run.",
        ],
        arms=[arm],
        outputs=outputs,
        extra={"written_by": WRITTEN_BY},  # marks the folder as ours (results.output)
    )
    with writing(folder / "SYNTH.json"):
        write_result(folder / "SYNTH.json", manifest)
    return cfg, files


def archive_summary_of(scan: ArchiveScan) -> ArchiveSummary:
    """Return the shape of the scanned archive (counts, depth coverage, columns)."""
    r, m = scan, scan.measured
    fam_req = np.bincount(r.request_family, minlength=len(r.families))
    bucket_rounds = np.bincount(m.sums.bucket, weights=m.sums.n, minlength=len(r.buckets.names))
    filled = m.max_depth > 0
    return ArchiveSummary(
        files=len(r.files),
        rows=sum(f.rows for f in r.files),
        requests=r.n_requests,
        rounds=int(m.sums.n.sum()),
        positions=int(m.positions),
        requests_by_family={n: int(k) for n, k in zip(r.families, fam_req, strict=True)},
        rounds_by_bucket={n: int(k) for n, k in zip(r.buckets.names, bucket_rounds, strict=True)},
        min_depth=int(m.min_depth[filled].min()) if filled.any() else 0,
        max_depth=int(m.max_depth[filled].max()) if filled.any() else 0,
        logging_arm=r.logging_arm,
        optional_columns=tuple(sorted(r.columns)),
        carried_columns=r.carried,
        kept_mass=_kept_masses(scan),
        short_rounds=ShortRoundCounts(**scan.short_rounds) if scan.short_rounds else None,
    )


def _kept_masses(scan: ArchiveScan) -> KeptMasses | None:
    """Return the scan's kept-mass statistics (a scan from a replay pass has none)."""

    def one(m: MassStats | None) -> KeptMass | None:
        if m is None:
            return None
        share = m.below_099 / m.positions if m.positions else 0.0
        return KeptMass(m.positions, m.min, m.p01, m.p10, m.median, share)

    if scan.kept_draft is None and scan.kept_target is None:
        return None
    return KeptMasses(one(scan.kept_draft), one(scan.kept_target), scan.tails_recorded)


def measured_result(
    scan: ArchiveScan,
    *,
    command: str,
    seed: int,
    options: dict[str, Any],
    rename: tuple[Path, Path] | None = None,
) -> Result:
    """Return the MEASURED result of a scanned archive (``validate``, ``demo``).

    ``rename = (tmp, final)`` rewrites input paths read from a temporary output folder.
    """
    inputs = input_files([(f.path, f.rows) for f in scan.files])
    if rename is not None:
        old, new = str(rename[0]), str(rename[1])
        inputs = tuple(dataclasses.replace(f, path=f.path.replace(old, new, 1)) for f in inputs)
    return new_result(
        command=command,
        seed=seed,
        inputs=inputs,
        options=options,
        assumptions=[PATH_ASSUMPTION_NOTE],
        excluded=excluded_entries(excluded_unbucketed(scan.measured, scan.buckets)),
        arms=[scan.arm],
        cells=tuple(measured_cell(c) for c in scan.cells()),
        archive=archive_summary_of(scan),
        inputs_ignored=ignored_inputs((e.path, e.glob) for e in scan.ignored),
    )

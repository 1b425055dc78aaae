"""``specreplay synth``: log a synthetic archive from the toy model pair."""

from __future__ import annotations

import time
from pathlib import Path

from specreplay.replay.scan import Progress, no_progress
from specreplay.results.builders import write_synth_archive
from specreplay.results.output import output_dir
from specreplay.sim.synth import logging_arm_name

__all__ = ["run_synth"]


def run_synth(
    out: Path,
    *,
    n_requests: int,
    rounds: int,
    shard_requests: int,
    seed: int,
    force: bool,
    progress: Progress = no_progress,
) -> str:
    """Generate the synthetic archive into ``out`` (Parquet shards + SYNTH.json manifest)."""
    t0 = time.perf_counter()
    with output_dir(out, force=force, marker=False) as tmp:  # an archive: no marker
        cfg, files = write_synth_archive(tmp, n_requests, rounds, shard_requests, seed, progress)
        rows = n_requests * rounds * cfg.depth
    return (
        f"wrote {n_requests:,} request{'s' if n_requests != 1 else ''} × {rounds} rounds × "
        f"{cfg.depth} positions "
        f"({rows:,} rows) in {len(files)} shard{'s' if len(files) != 1 else ''} to {out} "
        f"(logging arm {logging_arm_name(cfg)}, seed {seed}) in {time.perf_counter() - t0:.1f} s"
    )

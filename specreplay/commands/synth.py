"""``specreplay synth``: log a synthetic archive from the toy model pair.

:func:`synth_archive` writes the archive and returns what it wrote (the Python API's ``synth``);
:func:`run_synth` adds the terminal line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.writer import check_compression
from specreplay.replay.scan import Progress, no_progress
from specreplay.results.builders import write_synth_archive
from specreplay.results.output import output_dir
from specreplay.sim.synth import logging_arm_name

__all__ = [
    "DEFAULT_FORM",
    "FORM_LABELS",
    "SYNTH_FORMS",
    "SynthArchive",
    "run_synth",
    "synth_archive",
]

SYNTH_FORMS: tuple[str, ...] = ("parquet", "ipc", "jsonl")
FORM_LABELS: dict[str, str] = {"parquet": "Parquet", "ipc": "Arrow IPC", "jsonl": "JSON Lines"}
DEFAULT_FORM = "parquet"
"""The form synth writes by default (chosen by measurement: see the module docstring)."""


@dataclass(frozen=True)
class SynthArchive:
    """A synthetic archive written by :func:`synth_archive`.

    ``path`` the shard folder; ``shards`` its files (in order), of ``form`` (parquet, ipc or
    jsonl) with ``compression``; ``rows`` =
    ``n_requests`` × ``rounds`` × ``positions`` (one row per position); ``logging_arm`` the arm
    that drafted it; ``seconds`` the wall time taken.
    """

    path: Path
    shards: tuple[Path, ...]
    n_requests: int
    rounds: int
    positions: int
    rows: int
    logging_arm: str
    seed: int
    seconds: float
    form: str = "parquet"
    compression: str = "zstd"


def synth_archive(
    out: Path,
    *,
    n_requests: int,
    rounds: int,
    shard_requests: int,
    seed: int,
    force: bool,
    progress: Progress = no_progress,
    form: str = DEFAULT_FORM,
    compression: str | None = None,
) -> SynthArchive:
    """Generate the synthetic archive into ``out`` (shards + SYNTH.json manifest).

    ``form``: parquet, ipc or jsonl (default :data:`DEFAULT_FORM`); ``compression``: the form's
    codec (None: its default; see :data:`~specreplay.replay.archive.writer.COMPRESSIONS`).
    """
    t0 = time.perf_counter()
    if form not in SYNTH_FORMS:
        raise SpecReplayError(f"--format {form!r}: expected one of {', '.join(SYNTH_FORMS)}")
    codec = check_compression(form, compression)
    with output_dir(out, force=force, marker=False) as tmp:  # an archive: no marker
        cfg, files = write_synth_archive(
            tmp, n_requests, rounds, shard_requests, seed, progress, form, codec
        )
    return SynthArchive(
        path=Path(out),
        shards=tuple(Path(out) / Path(f).name for f in files),
        n_requests=n_requests,
        rounds=rounds,
        positions=cfg.depth,
        rows=n_requests * rounds * cfg.depth,
        logging_arm=logging_arm_name(cfg),
        seed=seed,
        seconds=time.perf_counter() - t0,
        form=form,
        compression=codec,
    )


def run_synth(
    out: Path,
    *,
    n_requests: int,
    rounds: int,
    shard_requests: int,
    seed: int,
    force: bool,
    progress: Progress = no_progress,
    form: str = DEFAULT_FORM,
    compression: str | None = None,
) -> str:
    """Generate the synthetic archive into ``out``; return the terminal line."""
    a = synth_archive(out, n_requests=n_requests, rounds=rounds, shard_requests=shard_requests,
                      seed=seed, force=force, progress=progress, form=form,
                      compression=compression)  # fmt: skip
    n = len(a.shards)
    return (
        f"wrote {a.n_requests:,} request{'s' if a.n_requests != 1 else ''} × {a.rounds} rounds × "
        f"{a.positions} positions ({a.rows:,} rows) in {n} shard{'s' if n != 1 else ''} to {out} "
        f"({FORM_LABELS[a.form]}, {a.compression}; logging arm {a.logging_arm}, seed {seed}) "
        f"in {a.seconds:.1f} s"
    )

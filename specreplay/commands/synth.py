"""``specreplay synth``: log a synthetic archive from the toy model pair.

:func:`synth_archive` writes the archive and returns what it wrote (the Python API's ``synth``);
:func:`run_synth` adds the terminal line.

The default form, lz4 Parquet, was chosen by measurement (issue 8). The same synthetic archive of
512,000 positions (1,600 requests × 64 rounds × 5 positions, 7 shards), page cache warm, 2 shared
cores (noisy: ±30 %), best of 3 runs of ``ArchiveReader(path).validate()`` and of reading every
chunk (``read_chunks``), and ``api.requalify`` (analytic, 200 resamples, best of 2):

=======================  ========  ===================  ===========  ==============
form                     disk      validate (reader)    read chunks  requalify
=======================  ========  ===================  ===========  ==============
Parquet zstd             406 MiB   1.38 s               0.95 s       2.2–3.4 s
Parquet lz4              449 MiB   1.04 s               0.58 s       1.8–3.0 s
Parquet uncompressed     518 MiB   0.93 s               0.55 s       1.7 s
Arrow IPC, polars        559 MiB   0.52–0.72 s          0.27–0.32 s  1.5–2.5 s
Arrow IPC, pyarrow map   559 MiB   0.26–0.61 s          0.02 s       1.2–2.4 s
=======================  ========  ===================  ===========  ==============

zstd buys 10 % of disk over lz4 for 1.3–1.6× the reading time; Arrow IPC reads fastest but takes
25 % more disk than lz4 and is a form fewer tools open than Parquet, and every earlier archive,
test and bench of ``synth`` output is Parquet, so the default stays Parquet with lz4 instead of
zstd; ``--format ipc`` (or ``specreplay convert``) gives the fastest form.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from specreplay.errors import SpecReplayError
from specreplay.pipelines.builders import write_synth_archive
from specreplay.pipelines.options import SYNTH_DEPTH
from specreplay.replay.archive.sources import FORM_NAMES
from specreplay.replay.archive.writer import check_compression
from specreplay.replay.scan import Progress, no_progress
from specreplay.results.output import output_dir
from specreplay.sim.synth import logging_arm_name

__all__ = [
    "DEFAULT_FORM",
    "SYNTH_FORMS",
    "SynthArchive",
    "run_synth",
    "synth_archive",
]

SYNTH_FORMS: tuple[str, ...] = ("parquet", "ipc", "jsonl")
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
    depth: int = SYNTH_DEPTH.default,
) -> SynthArchive:
    """Generate the synthetic archive into ``out`` (shards + SYNTH.json manifest).

    ``form``: parquet, ipc or jsonl (default :data:`DEFAULT_FORM`); ``compression``: the form's
    codec (None: its default; see :data:`~specreplay.replay.archive.writer.COMPRESSIONS`);
    ``depth``: positions the logging arm drafts per round (default 8, the built-in archive's).
    """
    t0 = time.perf_counter()
    if form not in SYNTH_FORMS:
        raise SpecReplayError(f"--format {form!r}: expected one of {', '.join(SYNTH_FORMS)}")
    codec = check_compression(form, compression)
    # an archive: no report marker; its SYNTH.json says it is ours (``--force`` replaces it)
    with output_dir(out, force=force, marker=False) as tmp:
        cfg, files = write_synth_archive(
            tmp, n_requests, rounds, shard_requests, seed, progress, form, codec, depth
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
    depth: int = SYNTH_DEPTH.default,
) -> str:
    """Generate the synthetic archive into ``out``; return the terminal line."""
    a = synth_archive(
        out,
        n_requests=n_requests,
        rounds=rounds,
        shard_requests=shard_requests,
        seed=seed,
        force=force,
        progress=progress,
        form=form,
        compression=compression,
        depth=depth,
    )
    n = len(a.shards)
    return (
        f"wrote {a.n_requests:,} request{'s' if a.n_requests != 1 else ''} × {a.rounds} rounds × "
        f"{a.positions} positions ({a.rows:,} rows) in {n} shard{'s' if n != 1 else ''} to {out} "
        f"({FORM_NAMES[a.form]}, {a.compression}; logging arm {a.logging_arm}, seed {seed}) "
        f"in {a.seconds:.1f} s"
    )

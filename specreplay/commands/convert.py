"""``specreplay convert``: rewrite a position-trace archive in another form (issue 8).

:func:`convert_archive` validates every row first, with the checks of ``validate`` (the first
error raises, naming its file and row or line, and nothing is written), then writes one shard per
input shard into the folder OUT: the same stem with the new form's suffix (``.arrow`` for Arrow
IPC, ``.parquet``, ``.jsonl``), plus a small ``CONVERT.json`` manifest (source, form,
compression, the shards written) that the readers ignore. OUT is written as a temporary folder
swapped in when complete (:func:`~specreplay.results.output.output_dir`), with the rules of every
command: never a file, a symlink or a folder specreplay did not write, never the input or a folder
around it. Like ``synth``, the output is an archive: it carries no ``.specreplay-output`` marker
but its manifest says ``"written_by": "specreplay"``, so converting onto it again needs
``--force``.

Values are written from the canonical frames (schema-v1 columns in canonical order, cast to their
canonical dtypes; carried columns after them, unchanged), so every float keeps its bits: a Float32
column becomes the Float64 of the same value, and JSON Lines floats are written with Python's
shortest round-trip ``repr``. Parquet and IPC shards are converted by a streaming polars scan
(``sink_parquet`` / ``sink_ipc``; memory bounded by polars' batch size); a JSON Lines shard is
parsed by the archive reader and held in memory as one frame before it is written, so a JSON Lines
shard should fit in memory (as frames it takes about a third of its size on disk).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

import numpy as np
import polars as pl
from numpy.typing import NDArray

from specreplay.diskfull import writing
from specreplay.errors import SpecReplayError
from specreplay.pipelines.document import ignored_inputs, input_files, new_result
from specreplay.replay.archive.reader import ArchiveReader
from specreplay.replay.archive.sources import (
    FORM_NAMES,
    ArchiveFile,
    ArchiveListing,
    archive_listing,
    archive_rows,
    format_location,
    read_chunks,
    scan_file,
)
from specreplay.replay.archive.writer import (
    SHARD_SUFFIX,
    canonical_exprs,
    check_compression,
    jsonl_text,
    write_frame,
)
from specreplay.replay.scan import Progress, no_progress
from specreplay.results.io import write_result
from specreplay.results.output import WRITTEN_BY, check_out, output_dir

__all__ = ["CONVERT_FORMS", "ConvertedArchive", "convert_archive", "run_convert"]

CONVERT_FORMS: tuple[str, ...] = ("ipc", "parquet", "jsonl")
"""The forms ``convert`` writes; the first is the default."""
MANIFEST = "CONVERT.json"
_INT64_MAX = int(np.iinfo(np.int64).max)


@dataclass(frozen=True)
class ConvertedArchive:
    """An archive written by :func:`convert_archive`.

    ``source`` the input archive; ``path`` the output folder; ``files`` the shards written (in
    order, one per input shard); ``rows`` position rows; ``bytes_in`` / ``bytes_out`` the sizes
    of the input and output shards; ``seconds`` the wall time (validation included).
    """

    source: Path
    path: Path
    form: str
    compression: str
    files: tuple[Path, ...]
    rows: int
    bytes_in: int
    bytes_out: int
    seconds: float


def convert_archive(
    archive: Path,
    out: Path,
    *,
    form: str = "ipc",
    compression: str | None = None,
    force: bool = False,
    progress: Progress = no_progress,
    ignore: Sequence[str] = (),
) -> ConvertedArchive:
    """Validate ``archive`` and write it into the folder ``out`` in ``form``.

    ``ignore``: ``--ignore`` globs, entries of the archive's folder to skip (CONVERT.json's
    ``inputs_ignored`` lists them; nothing of theirs is converted).

    Raises
    ------
    SpecReplayError
        A bad option, an ``out`` refused by the output rules, or the archive's first error.
    """
    t0 = time.perf_counter()
    if form not in CONVERT_FORMS:
        raise SpecReplayError(f"--format {form!r}: expected one of {', '.join(CONVERT_FORMS)}")
    codec = check_compression(form, compression)
    archive, out = Path(archive), Path(out)
    check_out(out, force=force, inputs=[archive])
    listing = archive_listing(archive, ignore)
    files = list(listing.files)
    names = [f.path.stem + SHARD_SUFFIX[form] for f in files]
    _check_names(files, names)
    rows = _validate(archive, progress, ignore)
    with output_dir(out, force=force, inputs=[archive], marker=False) as tmp:
        with progress(f"writing {FORM_NAMES[form]}", len(files)) as advance:
            for file, name in zip(files, names, strict=True):
                _convert_file(file, tmp / name, form, codec)
                advance(1)
        bytes_out = sum((tmp / n).stat().st_size for n in names)
        _write_manifest(tmp, archive, listing, names, form, codec)
    return ConvertedArchive(
        source=archive,
        path=out,
        form=form,
        compression=codec,
        files=tuple(out / n for n in names),
        rows=rows,
        bytes_in=sum(f.path.stat().st_size for f in files),
        bytes_out=bytes_out,
        seconds=time.perf_counter() - t0,
    )


def _check_names(files: list[ArchiveFile], names: list[str]) -> None:
    """Refuse two input shards that would be written under one name (``a.jsonl``, ``a.ndjson``)."""
    seen: dict[str, Path] = {}
    for file, name in zip(files, names, strict=True):
        if name in seen:
            raise SpecReplayError(
                f"{file.path}: would be written as {name}, as {seen[name]} would; rename one"
            )
        seen[name] = file.path


def _validate(archive: Path, progress: Progress, ignore: Sequence[str]) -> int:
    """Read the whole archive with every check of ``validate``; return its rows."""
    reader = ArchiveReader(archive, max_errors=1, ignore=ignore)
    with progress(f"validating {archive.name}", archive_rows(archive, ignore)) as advance:
        for batch in reader:
            advance(batch.n_positions)
    return sum(f.rows for f in reader.files)


def _convert_file(file: ArchiveFile, target: Path, form: str, codec: str) -> None:
    """Write one input shard as ``target`` (in the temporary output folder)."""
    if form == "jsonl":
        with writing(target), target.open("w", encoding="utf-8") as fh:
            for chunk in read_chunks(file, 50_000):
                _check_json_ints(file, chunk.frame, chunk.locs)
                fh.write(jsonl_text(chunk.frame.select(canonical_exprs(chunk.frame.columns))))
        return
    if file.kind == "jsonl":
        frames = [chunk.frame for chunk in read_chunks(file, 100_000)]
        frame = pl.concat(frames, how="vertical") if frames else pl.DataFrame()
        write_frame(frame.select(canonical_exprs(frame.columns)), target, codec)
        return
    scan = scan_file(file)
    scan = scan.select(canonical_exprs(scan.collect_schema().names()))
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    with writing(target, tmp):  # polars' "(os error 28)" too: one line naming the shard
        if form == "ipc":
            scan.sink_ipc(tmp, compression=cast(Literal["uncompressed", "lz4", "zstd"], codec))
        else:
            scan.sink_parquet(
                tmp, compression=cast(Literal["zstd", "lz4", "snappy", "uncompressed"], codec)
            )
        os.replace(tmp, target)


def _check_json_ints(file: ArchiveFile, frame: pl.DataFrame, locs: NDArray[np.int64]) -> None:
    """Refuse a carried UInt64 value past int64, which the JSON Lines reader refuses."""
    for name, dtype in frame.schema.items():
        if dtype == pl.UInt64:
            big = (frame.get_column(name) > _INT64_MAX).fill_null(False)
            if big.any():
                i = int(big.arg_true()[0])
                raise SpecReplayError(
                    f"{format_location(file, int(locs[i]))}: column {name!r} = "
                    f"{frame.get_column(name)[i]} does not fit in int64, which JSON Lines "
                    "archives cannot hold; convert to ipc or parquet, or drop the column"
                )


def _write_manifest(
    folder: Path, archive: Path, listing: ArchiveListing, names: list[str], form: str, codec: str
) -> None:
    """Write CONVERT.json: the source's files (with digests), the form and the shards written."""
    files = listing.files
    outputs = tuple(
        dataclasses.replace(f, path=Path(f.path).name)
        for f in input_files([(folder / n, None) for n in names])
    )
    manifest = new_result(
        command="convert",
        seed=0,
        inputs=input_files([(f.path, None) for f in files]),
        options={"archive": str(archive), "form": form, "compression": codec},
        assumptions=["A copy of the source archive in another form; every value kept bit for bit."],
        outputs=outputs,
        inputs_ignored=ignored_inputs((e.path, e.glob) for e in listing.ignored),
        extra={"written_by": WRITTEN_BY},  # marks the folder as ours (results.output)
    )
    with writing(folder / MANIFEST):
        write_result(folder / MANIFEST, manifest)


def run_convert(
    archive: Path,
    out: Path,
    *,
    form: str,
    compression: str | None,
    force: bool,
    progress: Progress = no_progress,
    ignore: Sequence[str] = (),
) -> str:
    """Convert ``archive`` into ``out``; return the terminal lines."""
    c = convert_archive(
        archive,
        out,
        form=form,
        compression=compression,
        force=force,
        progress=progress,
        ignore=ignore,
    )
    n = len(c.files)
    mib = 2**20
    return (
        f"wrote {n} {FORM_NAMES[c.form]} shard{'s' if n != 1 else ''} ({c.compression}) to {out}: "
        f"{c.rows:,} rows, {c.bytes_in / mib:,.1f} MiB → {c.bytes_out / mib:,.1f} MiB, "
        f"in {c.seconds:.1f} s (every row validated; manifest {MANIFEST})"
    )

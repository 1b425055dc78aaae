"""TraceWriter: write a position-trace archive (schema v1) the way a serving engine would log it.

A writer takes rows (dicts) or polars frames in archive order and writes one of the input forms of
docs/inputs.md#position-traces-schema-v1: a directory of Parquet shards (``part-00000.parquet`` …),
one Parquet file, a directory of Arrow IPC shards (``part-00000.arrow`` …), one Arrow IPC file
(``.arrow``, ``.ipc``, ``.feather``), or one JSON Lines file. Every file is written under a
temporary name and renamed when complete, so a reader never sees a half-written shard.

**Runs are never mixed** (issue 9). A folder is written whole: its shards go to a temporary
folder beside it (``.NAME.tmp-PID``) with the manifest ``CAPTURE.json`` (``"written_by":
"specreplay"``, the form, the columns and their types, the logging arms, and each writer's
shards), and the folder is renamed into place when the writer closes; a writer that fails or is
left by an exception removes its temporary folder and writes nothing. The ``mode`` says what may
already be at the path:

- ``"new"`` (the default): nothing, or an empty folder; anything else is refused, naming it.
- ``"replace"``: a folder a TraceWriter wrote (its ``CAPTURE.json`` says ``written_by``
  specreplay, and it holds only that manifest and ``part-…`` shards: anything else is refused).
  The new run is written beside it complete; then, under the folder's lock, the old folder is
  renamed aside, the new one renamed in, and the old one removed: a reader sees the old run or
  the new one, never a mix. A single file is replaced by one rename.
- ``"append"`` (folders only; a single file cannot be appended to): adds this writer's shards,
  named ``part-<writer>-NNNNN`` (``writer_id``, or ``w<pid>_<random hex>``), to a folder a
  TraceWriter wrote, or starts one. Under an exclusive ``flock`` on the folder itself (no lock
  file: the folder may hold nothing but shards and the manifest), the writer checks that its
  columns and types and its logging arms equal the manifest's and that none of its request ids
  is in an existing shard (a request's rows are then all in one writer's shards, and since a
  writer id is a letter and letters, digits or ``_``, one writer's shards are contiguous in
  sorted path order, so the archive order rule holds), then renames its shards in and rewrites
  ``CAPTURE.json`` atomically. Several processes may append to one folder at once.

**Periodic commits** (issue 15): :meth:`TraceWriter.commit` puts a ``"new"`` or ``"append"``
run's complete shards in place before close, under the folder's lock, with ``CAPTURE.json``
rewritten to list them (the writer's record says ``"state": "open"``; ``"closed"`` once closed,
``"failed: REASON"`` when the run was aborted after a commit: its committed shards stay). A
recorder commits every N rounds or T seconds, so a killed process leaves every round up to its
last commit readable. ``"replace"`` commits at close only.

**A full disk** or a file-size limit (ENOSPC, EFBIG, also as polars raises them) while writing a
shard or the manifest raises :class:`~specreplay.diskfull.DiskFull`, a one-line
:class:`~specreplay.errors.SpecReplayError` that is also an ``OSError``, naming the file where it
was to go (``path/part-NNNNN.SUFFIX``, not the temporary folder); the file's temporary name is
removed, and the writer, left by the exception, aborts as on any failure (its temporary folder
removed; shards committed before stay).

A TraceWriter folder holds only ``CAPTURE.json``, ``part-NNNNN.SUFFIX`` (new, replace),
``part-<writer>-NNNNN.SUFFIX`` (append) and, for the instant of a manifest update,
``.CAPTURE.json.tmp-PID``.

Compression: Parquet takes ``lz4`` (the default: read 1.3–1.6× faster than zstd for about 10%
more disk, measured in ``specreplay/commands/synth.py``), ``zstd``, ``snappy`` or ``uncompressed``;
Arrow IPC is written ``uncompressed`` by default (a reader can then map it; polars also writes
``lz4`` and ``zstd`` IPC, which must be decompressed into memory and cannot be mapped); JSON Lines
takes none. Shards are cut only between rounds, so a round never spans
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

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, cast

import polars as pl

from specreplay.diskfull import DiskFull, disk_errno, writing
from specreplay.errors import SpecReplayError
from specreplay.replay.archive.schema import SCHEMA_V1
from specreplay.replay.archive.sources import DATA_SUFFIXES, form_of

__all__ = [
    "COMPRESSIONS",
    "FORMATS",
    "MANIFEST",
    "MODES",
    "SHARD_SUFFIX",
    "TraceWriter",
    "canonical_exprs",
    "check_capture_folder",
    "check_compression",
    "jsonl_text",
    "write_frame",
]

_ParquetCodec = Literal["zstd", "lz4", "snappy", "uncompressed"]
_IpcCodec = Literal["uncompressed", "lz4", "zstd"]
FORMATS: tuple[str, ...] = ("parquet-dir", "parquet", "ipc-dir", "ipc", "jsonl-dir", "jsonl")
"""The forms a TraceWriter writes (``-dir``: a folder of shards)."""
COMPRESSIONS: dict[str, tuple[str, ...]] = {
    "parquet": ("lz4", "zstd", "snappy", "uncompressed"),  # lz4 first: read 1.3-1.6x faster
    "ipc": ("uncompressed", "lz4", "zstd"),
    "jsonl": ("none",),
}
"""Compression codecs each form takes; the first is the default."""
SHARD_SUFFIX: dict[str, str] = {"parquet": ".parquet", "ipc": ".arrow", "jsonl": ".jsonl"}
"""The suffix of a shard the writer names itself (a folder's ``part-NNNNN``, convert's output)."""
MANIFEST = "CAPTURE.json"
"""The manifest of a folder a TraceWriter wrote (the capture manifest)."""
MODES: tuple[str, ...] = ("new", "replace", "append")
"""What a TraceWriter may find at its path (module docstring)."""
_WRITTEN_BY = "specreplay"
_WRITER_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
_SHARD = re.compile(r"part-(?:[A-Za-z][A-Za-z0-9_]*-)?\d{5}\.(?:parquet|arrow|jsonl)")
# another appender's manifest update in flight (it holds the lock; this writer is only looking)
_MANIFEST_TMP = re.compile(r"\.CAPTURE\.json\.tmp-\d+")


class TraceWriter:
    """Append position rows; write Parquet shards, one Parquet file, or JSON Lines atomically.

    Parameters
    ----------
    path : Path
        A directory (``format="parquet-dir"``, the default when the path has no suffix, or
        ``"ipc-dir"``), a ``.parquet`` file, an ``.arrow``/``.ipc``/``.feather`` file, or a
        ``.jsonl`` file.
    format : {"parquet-dir", "parquet", "ipc-dir", "ipc", "jsonl-dir", "jsonl"}, optional
        Inferred from the suffix when omitted.
    shard_rows : int
        Target rows per shard of a directory (cut at the next round boundary).
    shard_bytes : int, optional
        Also cut a shard once the buffered rows hold this many bytes in memory (polars'
        ``estimated_size``): bounds the memory of wide rows (a capture keeping the whole
        vocabulary) and keeps a close from having to write much at once.
    compression : str, optional
        Parquet: lz4 (default), zstd, snappy, uncompressed. IPC: uncompressed (default), lz4,
        zstd. JSON Lines: none.
    mode : {"new", "replace", "append"}, optional
        What may already be at ``path`` (module docstring); None is ``"new"``.
    writer_id : str, optional
        ``append``: this writer's id in its shard names (a letter, then letters, digits or
        ``_``); by default ``w<pid>_<random hex>``.
    manifest : bool
        False only for a command that stages the folder and writes its own manifest (synth's
        ``SYNTH.json``): the shards then go straight into ``path``, which must be empty, and no
        ``CAPTURE.json`` is written.

    Attributes
    ----------
    capture : dict or None
        Set before :meth:`close` to carry an extra JSON object in this writer's record of
        ``CAPTURE.json`` (its ``"capture"`` key): the recorder's settings and counts
        (:mod:`specreplay.capture.recorder`). None (the default) writes no such key.

    Raises
    ------
    SpecReplayError
        When the path holds what the mode does not allow, naming it (nothing is written).
    """

    def __init__(
        self,
        path: Path,
        *,
        format: str | None = None,
        shard_rows: int = 500_000,
        compression: str | None = None,
        mode: str | None = None,
        writer_id: str | None = None,
        manifest: bool = True,
        shard_bytes: int | None = None,
    ) -> None:
        self.path = Path(path)
        if format is None:
            format = form_of(self.path) or "parquet-dir"
        if format not in FORMATS:
            raise SpecReplayError(
                f"TraceWriter: unknown format {format!r} (expected {', '.join(FORMATS)})"
            )
        mode = mode or "new"
        if mode not in MODES:
            raise SpecReplayError(
                f"TraceWriter: unknown mode {mode!r} (expected {', '.join(MODES)})"
            )
        self.format = format
        self.mode = mode
        self.compression = check_compression(format.removesuffix("-dir"), compression)
        self.shard_rows = max(1, shard_rows)
        self.shard_bytes = shard_bytes
        self._bytes: float = 0  # the buffered frames' in-memory size (polars' estimate)
        self.written: list[Path] = []
        self._frames: list[pl.DataFrame] = []
        self._rows: list[dict[str, Any]] = []
        self._n = 0
        self._shard = 0
        self._closed = False
        self._sharded = format.endswith("-dir")
        self._columns: dict[str, str] | None = None
        self._arms: set[str] = set()
        self._requests: set[str] = set()  # append: every request id written (first commit)
        self._pending: set[str] = set()  # request ids of the shards not yet committed
        self._n_rows = 0
        self.writer_id = _writer_id(writer_id) if mode == "append" else None
        self.capture: dict[str, Any] | None = None
        self.commits = 0
        self.marked_failed = False  # abort after a commit wrote "state": "failed" (it may not)
        self._committed: list[str] = []  # shard names already put in place (commit)
        self._seen_elsewhere: dict[str, set[str]] = {}  # other writers' shards -> request ids
        self._state = "open"
        self._stage: Path | None = None
        if not self._sharded:
            self._open_file()
        elif not manifest:
            if mode != "new" or _entries(self.path):
                raise SpecReplayError(
                    f"{self.path}: TraceWriter(manifest=False) needs an empty folder"
                )
            self.path.mkdir(parents=True, exist_ok=True)
        else:
            self._open_folder()

    def _open_file(self) -> None:
        if self.mode == "append":
            raise SpecReplayError(
                f'{self.path}: mode="append" is for a folder of shards; a single '
                f"{self.format} file cannot be appended to (write a folder: "
                f'format="{self.format}-dir")'
            )
        if os.path.lexists(self.path):
            if self.path.is_dir() or self.path.is_symlink() or not self.path.is_file():
                raise SpecReplayError(
                    f"{self.path}: exists and is not a regular file; not replaced"
                )
            if self.mode != "replace":
                raise SpecReplayError(f'{self.path}: exists; pass mode="replace" to overwrite it')

    def _open_folder(self) -> None:
        path = self.path
        if os.path.lexists(path) and (path.is_symlink() or not path.is_dir()):
            raise SpecReplayError(f"{path}: exists and is not a folder")
        entries = _entries(path)
        if entries and self.mode == "new":
            raise SpecReplayError(
                f"{path}: the folder is not empty (it holds {entries[0]}); pass "
                'mode="replace" to replace a folder a TraceWriter wrote, or mode="append" to add '
                "this run to it"
            )
        if entries:
            found = check_capture_folder(path)
            if self.mode == "append" and found.get("format") != self.format:
                raise SpecReplayError(
                    f"{path}: {MANIFEST} says format {found.get('format')!r}; this writer writes "
                    f"{self.format!r} (append keeps one form per folder)"
                )
        target = Path(os.path.abspath(path))
        tag = f".{self.writer_id}" if self.writer_id else ""
        stage = target.with_name(f".{target.name}{tag}.tmp-{os.getpid()}")
        if stage.exists():
            shutil.rmtree(stage)
        with writing(path):
            target.parent.mkdir(parents=True, exist_ok=True)
            stage.mkdir()
        self._stage = stage

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
        else:
            self.abort()

    def abort(self, reason: str = "aborted") -> None:
        """Drop the run: remove the temporary folder; nothing more reaches ``path``.

        Before any :meth:`commit`, nothing of the run reaches ``path``. After one, the shards
        already committed stay (whole rounds), and this writer's record in ``CAPTURE.json`` says
        ``"state": "failed"`` with ``reason``, so the run cannot pass for a whole one.
        """
        self._frames, self._rows = [], []
        if self._stage is not None and not self._closed:
            shutil.rmtree(self._stage, ignore_errors=True)
            if self._committed:
                self._state = f"failed: {reason}"
                with contextlib.suppress(Exception):  # the failure being reported comes first
                    self._put_in_place([])
                    self.marked_failed = True
        self._closed = True

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
        if self.shard_bytes is not None:
            self._bytes += frame.estimated_size()
        self._maybe_flush()

    def end_shard(self) -> None:
        """Write everything buffered as one shard now (the caller ends it at a round boundary)."""
        if not self._sharded:
            return
        self._flush_rows()
        if self._frames:
            frame = pl.concat(self._frames, how="vertical")
            self._frames = []
            self._n = 0
            self._bytes = 0
            if frame.height:
                self._write_shard(frame)

    def commit(self) -> bool:
        """Put what is buffered in place now, as complete shards, with the manifest.

        A periodic commit (``"new"`` and ``"append"`` folders; the caller calls it at a round
        boundary): the buffered rows become one shard, and this writer's shards not yet in
        ``path`` are renamed in and ``CAPTURE.json`` rewritten, under the folder's lock, so a
        reader sees whole shards listed by the manifest (this writer's record says ``"state":
        "open"`` until :meth:`close`). A process killed later leaves ``path`` a readable archive of
        every round committed. ``"replace"`` commits only at close (a reader sees the old run
        until the new one is whole), and single files commit only at close: both return False.

        Returns
        -------
        bool
            True when shards were committed.

        Raises
        ------
        SpecReplayError
            When ``path`` no longer accepts this run (it was filled by another run, or its
            manifest clashes: the checks of ``"append"``), naming it.
        """
        if self._closed or self._stage is None or self.mode == "replace":
            return False
        self.end_shard()
        new = sorted(n for n in os.listdir(self._stage) if n not in self._committed)
        if not new:
            return False
        self._put_in_place(new)
        return True

    def close(self) -> list[Path]:
        """Write what is buffered, put the run in place, and return the files written."""
        if self._closed:
            return self.written
        try:
            self._flush_rows()
            frame = pl.concat(self._frames, how="vertical") if self._frames else None
            self._frames = []
            if self._sharded:
                if frame is not None and frame.height:
                    self._write_shard(frame)
                self._state = "closed"
                if self._stage is not None and (self._committed or self.mode == "append"):
                    new = sorted(n for n in os.listdir(self._stage) if n not in self._committed)
                    self._put_in_place(new)
                    self._stage.rmdir()
                    self.written = [self.path / n for n in self._committed]
                elif self._stage is not None:
                    self.written = self._commit(self._stage)
            else:
                write_frame(frame if frame is not None else _empty(), self.path, self.compression)
                self.written.append(self.path)
        except BaseException:
            self.abort()
            raise
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
        big = self.shard_bytes is not None and self._bytes >= self.shard_bytes
        if not self._sharded or (self._n < self.shard_rows and not big):
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
        self._bytes = rest.estimated_size() if self.shard_bytes is not None else 0

    def _write_shard(self, frame: pl.DataFrame) -> None:
        suffix = SHARD_SUFFIX[self.format.removesuffix("-dir")]
        tag = f"{self.writer_id}-" if self.writer_id else ""
        folder = self._stage if self._stage is not None else self.path
        path = folder / f"part-{tag}{self._shard:05d}{suffix}"
        self._check_columns(frame, path)
        try:
            write_frame(frame, path, self.compression)
        except DiskFull as exc:  # named where the shard was to go, not in the staging folder
            raise exc.moved(folder, self.path) from None
        self._note(frame)  # after the write: a shard that failed counts no row in the manifest
        self.written.append(path)
        self._shard += 1

    def _check_columns(self, frame: pl.DataFrame, path: Path) -> None:
        """Record the run's columns at its first shard; refuse a later shard with others."""
        columns = _column_types(frame)
        if self._columns is None:
            self._columns = columns
        elif columns != self._columns:
            raise SpecReplayError(
                f"{self.path}: shard {path.name} has columns {columns}, the run's first shard "
                f"{self._columns}: one run has one schema"
            )

    def _note(self, frame: pl.DataFrame) -> None:
        """Record a written shard's logging arms, request ids and rows (manifest, append checks)."""
        if "logging_arm" in frame.columns:
            self._arms.update(str(a) for a in frame.get_column("logging_arm").drop_nulls().unique())
        if self.mode == "append" or (self.mode == "new" and self._stage is not None):
            ids = {str(r) for r in frame.get_column("request_id").unique()}
            self._pending |= ids  # the next commit's (commit checks them against other writers)
            if self.mode == "append":
                self._requests |= ids
        self._n_rows += frame.height

    def _writer_record(self, shards: list[str]) -> dict[str, Any]:
        record: dict[str, Any] = {
            "writer": self.writer_id,
            "pid": os.getpid(),
            "shards": shards,
            "rows": self._n_rows,
            "state": self._state,
        }
        if self.capture is not None:
            record["capture"] = self.capture
        return record

    def _commit(self, stage: Path) -> list[Path]:
        """Put the staged, never committed run in place (new: rename; replace: swap)."""
        shards = sorted(p.name for p in stage.iterdir())
        _write_manifest(stage, self._new_manifest([self._writer_record(shards)]))
        target = Path(os.path.abspath(self.path))
        if self.mode == "new" or not _entries(target):  # absent or empty: a rename suffices
            _rename_in(stage, target)
        else:
            with _locked(target):
                check_capture_folder(target)  # still ours, and only ours
                old = target.with_name(f".{target.name}.old-{os.getpid()}")
                if os.path.lexists(old):
                    shutil.rmtree(old)
                os.rename(target, old)
                try:
                    os.rename(stage, target)
                except OSError:
                    os.rename(old, target)
                    raise
            shutil.rmtree(old)
        return [self.path / n for n in shards]

    def _new_manifest(self, writers: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "written_by": _WRITTEN_BY,
            "format": self.format,
            "compression": self.compression,
            "columns": self._columns or {},
            "logging_arms": sorted(self._arms),
            "writers": writers,
        }

    def _is_mine(self, record: Any) -> bool:
        return (
            isinstance(record, dict)
            and record.get("writer") == self.writer_id
            and record.get("pid") == os.getpid()
        )

    def _put_in_place(self, new: list[str]) -> None:
        """Rename this writer's ``new`` staged shards into ``path``; rewrite the manifest.

        Under the folder's lock. The first time: ``"new"`` needs the folder absent or empty,
        ``"append"`` checks the folder's columns, logging arms and request ids (:meth:
        `_check_append`); every time, this commit's request ids are checked against the other
        writers' shards. The manifest lists every shard of this writer committed so far, with
        the rows written so far (``rows`` counts the staged shards too; ``shards`` lists the
        committed ones) and this writer's ``state``.
        """
        assert self._stage is not None
        stage = self._stage
        target = Path(os.path.abspath(self.path))
        target.mkdir(parents=True, exist_ok=True)
        with _locked(target):
            entries = _entries(target)
            first = not self._committed
            if first and self.mode == "new" and entries:
                raise SpecReplayError(
                    f"{target}: cannot put the run in place: the folder was filled while this "
                    'writer ran (it holds {entries[0]})? Pass mode="replace" or mode="append"'
                )
            if entries:
                found = check_capture_folder(target)
                if first:
                    self._check_append(target, found)
                else:
                    self._check_requests(target, self._pending)
                writers = [w for w in found.get("writers", []) if not self._is_mine(w)]
                manifest = {**found, "writers": writers}
                if not found.get("columns"):
                    manifest["columns"] = self._columns or {}
                manifest["logging_arms"] = sorted(set(found.get("logging_arms", [])) | self._arms)
            else:
                manifest = self._new_manifest([])
            for name in new:
                if os.path.lexists(target / name):
                    raise SpecReplayError(
                        f"{self.path}: already holds {name}: writer id {self.writer_id!r} is in use"
                    )
            shards = [*self._committed, *new]
            manifest["writers"] = [*manifest["writers"], self._writer_record(shards)]
            with writing(target):
                for name in new:
                    os.replace(stage / name, target / name)
            self._committed = shards
            _write_manifest(target, manifest)
        self._pending = set()
        if new:
            self.commits += 1  # shards put in place (a state-only rewrite is not a commit)

    def _check_requests(self, target: Path, requests: set[str]) -> None:
        """Refuse request ids already in another writer's shards (read once per shard)."""
        mine = set(self._committed)
        for shard in sorted(p for p in target.iterdir() if _SHARD.fullmatch(p.name)):
            if shard.name in mine:
                continue
            ids = self._seen_elsewhere.get(shard.name)
            if ids is None:
                ids = self._seen_elsewhere[shard.name] = _request_ids(shard)
            clash = sorted(requests & ids)
            if clash:
                raise SpecReplayError(
                    f"{self.path}: request id {clash[0]!r} of this writer is already in "
                    f"{shard.name} (append: each request's rows come from one writer)"
                )

    def _check_append(self, target: Path, found: dict[str, Any]) -> None:
        """Refuse an append whose schema, logging arm or request ids clash with the folder's."""
        columns = found.get("columns") or {}
        if columns and self._columns and columns != self._columns:
            diff = sorted(set(columns.items()) ^ set(self._columns.items()))
            raise SpecReplayError(
                f"{self.path}: this writer's columns differ from the folder's ({MANIFEST}): "
                f"{diff[0][0]} ({', '.join(f'{k}: {v}' for k, v in diff[:2])})"
            )
        arms = set(found.get("logging_arms", []))
        if arms and self._arms and arms != self._arms:
            raise SpecReplayError(
                f"{self.path}: this writer logs arm(s) {sorted(self._arms)}, the folder "
                f"{sorted(arms)} ({MANIFEST}): one archive has one logging arm"
            )
        self._check_requests(target, self._requests)


def check_capture_folder(path: Path) -> dict[str, Any]:
    """Return the manifest of a folder a TraceWriter wrote; refuse any other folder.

    The folder must hold ``CAPTURE.json`` with ``"written_by": "specreplay"`` and otherwise only
    regular files named as a TraceWriter names shards (``part-NNNNN``, ``part-<writer>-NNNNN``)
    or its manifest while another appender rewrites it (``.CAPTURE.json.tmp-PID``).

    Raises
    ------
    SpecReplayError
        Naming the folder and what makes it not a TraceWriter folder.
    """
    manifest = path / MANIFEST
    hint = 'mode="replace"/"append" touch only a folder a TraceWriter wrote'
    try:
        found = json.loads(manifest.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecReplayError(
            f"{path}: no {MANIFEST}, so not a TraceWriter folder; {hint}"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecReplayError(f"{manifest}: unreadable ({exc}); {hint}") from None
    if not isinstance(found, dict) or found.get("written_by") != _WRITTEN_BY:
        raise SpecReplayError(f'{manifest}: not "written_by": "{_WRITTEN_BY}"; {hint}')
    for name in _entries(path):
        if name == MANIFEST:
            continue
        p = path / name
        if _MANIFEST_TMP.fullmatch(name) and not os.path.lexists(p):
            continue  # the other appender renamed it in since the listing
        ours = _SHARD.fullmatch(name) or _MANIFEST_TMP.fullmatch(name)
        if not ours or p.is_symlink() or not p.is_file():
            raise SpecReplayError(
                f"{path}: holds {name}, which a TraceWriter does not write; {hint}"
            )
    return found


def _entries(path: Path) -> list[str]:
    """Return the sorted names in ``path`` (none when it does not exist)."""
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _writer_id(given: str | None) -> str:
    if given is None:
        return f"w{os.getpid()}_{secrets.token_hex(4)}"
    if not _WRITER_ID.fullmatch(given):
        raise SpecReplayError(
            f"TraceWriter: writer_id {given!r} should be a letter then letters, digits or _ "
            "(at most 64): shard names must sort one writer's shards together"
        )
    return given


def _column_types(frame: pl.DataFrame) -> dict[str, str]:
    return {name: str(dtype) for name, dtype in frame.schema.items()}


def _request_ids(shard: Path) -> set[str]:
    """Return the request ids of one shard (its request_id column only)."""
    form = form_of(shard)
    if form == "jsonl":
        with shard.open(encoding="utf-8") as fh:
            return {str(json.loads(line)["request_id"]) for line in fh if line.strip()}
    scan = pl.scan_parquet(shard) if form == "parquet" else pl.scan_ipc(shard)
    return {str(r) for r in scan.select("request_id").unique().collect().get_column("request_id")}


def _write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    """Write ``folder/CAPTURE.json`` under a temporary name and rename it (atomic)."""
    path = folder / MANIFEST
    tmp = _tmp(path)
    with writing(path, tmp):
        tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)


def _rename_in(stage: Path, target: Path) -> None:
    """Rename the staged folder to ``target`` (absent or an empty folder)."""
    try:
        os.rename(stage, target)
    except OSError as exc:
        code = disk_errno(exc)
        if code is not None:
            raise DiskFull.file(target, code) from None
        raise SpecReplayError(
            f"{target}: cannot put the run in place ({exc.strerror}): the folder was filled "
            'while this writer ran? Pass mode="replace" or mode="append"'
        ) from None


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the folder itself (the folder may hold no lock file).

    A folder swapped by ``replace`` while this process waited is a new inode: lock it again.
    """
    while True:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_ino == os.stat(folder).st_ino:
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def canonical_exprs(columns: list[str]) -> list[pl.Expr]:
    """Select schema-v1 columns in canonical order (cast to their dtypes), then carried ones."""
    known = [c for c in SCHEMA_V1 if c in columns]
    other = [c for c in columns if c not in SCHEMA_V1]
    return [pl.col(c).cast(SCHEMA_V1[c]) for c in known] + [pl.col(c) for c in other]


def _canonical(frame: pl.DataFrame) -> pl.DataFrame:
    """Order schema-v1 columns canonically (cast to their dtypes), then carried columns."""
    return frame.select(canonical_exprs(frame.columns))


def jsonl_text(frame: pl.DataFrame) -> str:
    """Return the rows of ``frame`` as JSON Lines (−inf written ``-Infinity``)."""
    return "".join(json.dumps(row, allow_nan=True) + "\n" for row in frame.iter_rows(named=True))


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


def write_frame(frame: pl.DataFrame, path: Path, compression: str | None = None) -> None:
    """Write ``frame`` as one file of the form its suffix says, under a temporary name first.

    ``compression`` as :func:`check_compression` returns it (None: the form's default).
    """
    form = form_of(path)
    if form is None:
        raise SpecReplayError(
            f"{path}: unknown archive suffix (expected {', '.join(DATA_SUFFIXES)})"
        )
    compression = check_compression(form, compression)
    tmp = _tmp(path)
    with writing(path, tmp):  # any failure removes tmp; a full disk is one line naming path
        if form == "parquet":
            frame.write_parquet(tmp, compression=cast(_ParquetCodec, compression))
        elif form == "ipc":
            frame.write_ipc(tmp, compression=cast(_IpcCodec, compression))
        else:
            _write_jsonl(frame, tmp)
        os.replace(tmp, path)


def check_compression(form: str, compression: str | None) -> str:
    """Return the compression of ``form`` ("parquet", "ipc", "jsonl"), its default when None.

    >>> check_compression("ipc", None)
    'uncompressed'
    >>> check_compression("parquet", "lz4")
    'lz4'
    """
    allowed = COMPRESSIONS[form]
    if compression is None:
        return allowed[0]
    if compression not in allowed:
        raise SpecReplayError(f"--compression {compression!r}: {form} takes {', '.join(allowed)}")
    return compression


def _write_jsonl(frame: pl.DataFrame, path: Path) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for lo in range(0, frame.height, 10_000):
            fh.write(jsonl_text(frame.slice(lo, 10_000)))

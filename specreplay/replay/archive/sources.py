"""Finding archive files and reading them as raw chunks with row or line locations.

See docs/inputs.md#position-traces-schema-v1.

An archive path is one file of one of three forms, or a directory of shards of one form read in
sorted path order. The forms, by suffix: Parquet (``.parquet``), JSON Lines (``.jsonl``,
``.ndjson``) and Arrow IPC *file* format (``.arrow``, ``.ipc``, ``.feather``; ``kind == "ipc"``).
A directory holding shards of two forms is an error naming both forms and one file of
each (issue 8): until issue 8 a folder with ``*.parquet`` silently ignored its ``*.jsonl``, and
silently reading one form drops data; ``specreplay convert`` turns an archive into one form.

No entry of a folder is dropped silently (issue 9). :func:`folder_entries` judges every entry of a
folder archive (and of a folder of round traces, :mod:`~specreplay.replay.archive.importers`)
once, with ``lstat``, and each one is:

- a **shard**: a regular file (or a symlink to one, inside or outside the folder: it is judged by
  its target being a regular file, and named by the link) whose suffix is a data suffix, exactly
  (``part-1.PARQUET`` is an error: "rename it part-1.parquet");
- a **known sidecar**: exactly one of the names :data:`SIDECARS` (``SYNTH.json``,
  ``CONVERT.json``, and issue 12's capture manifest ``CAPTURE.json``, which a TraceWriter folder
  holds). "Exactly one of the known sidecars" is read as: each name may appear once (a folder
  cannot hold a name twice), and a folder states at most one origin: ``SYNTH.json`` (generated)
  and ``CONVERT.json`` (converted) together is an error naming both, since one folder cannot be
  both. ``CAPTURE.json`` may sit beside either (``synth`` logs its shards through a TraceWriter,
  which writes it). Matching is exact and case-sensitive (``synth.json`` is not a sidecar);
- **skipped** by ``--ignore GLOB`` (repeatable): ``fnmatch.fnmatchcase`` of the glob against the
  entry's name relative to the folder (never its absolute path; case-sensitive). A glob holding
  ``/`` or an empty one is an error (no top-level name can match it). A glob that matches nothing
  is fine and says nothing: nothing was skipped, and an entry it was meant for still stops the
  run. What was skipped is returned (:class:`IgnoredEntry`: the path and the glob) and goes into
  results.json as ``inputs_ignored``. An ignored entry is never opened (a FIFO does not block);
- else **an error that names it**, one line ``FOLDER/NAME: <what it is>; <what to do>``, exit 2:
  a hidden file, ``_SUCCESS``, ``*.crc`` or any other file, a sub-folder (shards are read from the
  folder itself, not below it), a folder named like a shard (``x.parquet/``), a FIFO, a socket or
  a device, a dangling or looping symlink or one to a folder. A writer's temporary
  ``.NAME.tmp-PID`` is "an unfinished shard (its writer is still running or was killed)". The
  first bad entry in name order is reported.

A folder with no shard (empty, only sidecars, or every shard ignored) is an error, as before,
saying how many entries ``--ignore`` skipped and then naming its first bad entry, if any
(``FOLDER: directory holds no … shard; FOLDER/trace.json: not a shard …``): "no shard" is the
news, the entry is often why.
A single file named explicitly may also end in ``.json``: it is then read as JSON Lines (one
object per line), since some engines log JSON Lines under that suffix; a JSON document that is
not one object per line fails validation at its first line.

Parquet files are streamed with pyarrow's ``iter_batches`` (2.6× faster than polars
``collect_batches`` on zstd list columns, measured in :func:`_arrow_parquet_batches`) after polars
checks their schema; JSON Lines are parsed line by line with
Python's ``json`` (so ``-Infinity`` is read as −inf, the convention Python and JavaScript use for a
draft log-probability of a token that cannot be drafted), because polars names no line in its
errors and drops unknown fields.

Arrow IPC files are checked for the ``ARROW1`` magic at both ends (an Arrow *stream* file, a
truncated file or another format is one line naming the file), then read into the same
:class:`RawChunk` as Parquet (same casts, same Issues, same messages for a missing column or a
wrong type). pyarrow (a dependency since issue 8, the one reader since issue 11) memory-maps the
file (``pa.memory_map`` + ``pa.ipc.open_file``), validates each record batch in full, and hands
it to polars by ``pl.from_arrow`` without a copy: the flat float buffers the kernels read are the
file's pages in the page cache, not private memory (polars 2.1's own ``scan_ipc`` has no
``memory_map`` option any more and decodes every buffer into its own memory). Measured on 512,000
positions of the synthetic archive (7 shards, 559 MiB, warm page cache, 2 shared cores, best of
3): reading every column's chunks 0.02 s mapped vs 0.27–0.32 s with polars alone (0.55–0.95 s
from Parquet); ``ArchiveReader.validate`` 0.26 s vs 0.52 s; ``api.requalify`` (analytic, 200
resamples) 1.24 s vs 1.50 s. The disk and speed table of every form is in
:mod:`specreplay.commands.synth`.

Projection: ``read_chunks(file, chunk_rows, columns)`` reads only the named columns present in the
file plus every REQUIRED one; for Parquet and IPC the selection is pushed into the scan, so a
column not read is never decoded nor checked (its type is not checked either); for JSON Lines
every line is still parsed, and the keys not read are dropped before the per-value checks.
:func:`file_columns` lists a file's columns from its schema or first line, without reading rows.

Each chunk carries, per row, its location: the 0-based row within its Parquet file, or the 1-based
physical line of its JSON Lines file (blank lines counted). Columns are cast to the canonical dtypes
of :mod:`specreplay.replay.archive.schema`; problems of type and shape become :class:`Issue`
records.
"""

from __future__ import annotations

import errno
import fnmatch
import importlib
import json
import os
import stat
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import polars as pl
from numpy.typing import NDArray

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.filehash import watch
from specreplay.replay.archive.schema import (
    INT_COLUMNS,
    LIST_COLUMNS,
    MARK_COLUMNS,
    REQUIRED,
    SCHEMA_V1,
    TAIL_COLUMNS,
)

__all__ = [
    "DATA_SUFFIXES",
    "FORM_NAMES",
    "SIDECARS",
    "ArchiveFile",
    "ArchiveListing",
    "FolderEntries",
    "IgnoredEntry",
    "Issue",
    "RawChunk",
    "archive_listing",
    "archive_rows",
    "check_globs",
    "check_schema",
    "file_columns",
    "folder_entries",
    "form_of",
    "format_location",
    "json_message",
    "list_archive",
    "parse_json_line",
    "read_chunks",
    "scan_file",
    "text_lines",
]

_INT64_MAX: Final[int] = int(np.iinfo(np.int64).max)
_SHARD_SUFFIXES: Final[tuple[str, ...]] = (".jsonl", ".ndjson")  # JSON Lines shards in a folder
_JSONL_SUFFIXES: Final[tuple[str, ...]] = (*_SHARD_SUFFIXES, ".json")  # a file named explicitly
IPC_SUFFIXES: Final[tuple[str, ...]] = (".arrow", ".ipc", ".feather")
_FOLDER_KINDS: Final[dict[str, str]] = {
    ".parquet": "parquet",
    **dict.fromkeys(_SHARD_SUFFIXES, "jsonl"),
    **dict.fromkeys(IPC_SUFFIXES, "ipc"),
}
"""The data suffixes that are shards in a folder, and their form (the writer's table too)."""
DATA_SUFFIXES: Final[tuple[str, ...]] = tuple(_FOLDER_KINDS)
FORM_NAMES: Final[dict[str, str]] = {
    "parquet": "Parquet",
    "jsonl": "JSON Lines",
    "ipc": "Arrow IPC",
}
"""Each form's name in messages and terminal lines."""
_ARROW_MAGIC: Final[bytes] = b"ARROW1"
SIDECARS: Final[tuple[str, ...]] = ("SYNTH.json", "CONVERT.json", "CAPTURE.json")
"""The known sidecar files a folder archive may hold beside its shards (exact names)."""
_ORIGINS: Final[frozenset[str]] = frozenset({"SYNTH.json", "CONVERT.json"})
"""Sidecars that say where a folder's shards came from: at most one per folder."""


@dataclass(frozen=True)
class ArchiveFile:
    """One file of an archive: its index in sorted path order, path and format."""

    index: int
    path: Path
    kind: str  # "parquet" | "jsonl" | "ipc"


@dataclass(frozen=True)
class Issue:
    """A validation problem at one row: ``loc`` is the row (Parquet) or line (JSONL)."""

    loc: int
    message: str


@dataclass(frozen=True)
class RawChunk:
    """Rows read from one file, cast to canonical dtypes.

    Attributes
    ----------
    file : ArchiveFile
    frame : polars.DataFrame
        Schema-v1 columns in canonical dtypes plus any carried-through columns.
    locs : ndarray of int64, shape (len(frame),)
        Location of each row (0-based Parquet row or 1-based JSONL line).
    issues : list of Issue
        Problems found while reading (rows with such a problem are not in ``frame``).
    """

    file: ArchiveFile
    frame: pl.DataFrame
    locs: NDArray[np.int64]
    issues: list[Issue]


def format_location(file: ArchiveFile, loc: int) -> str:
    """Return the prefix of a message about row/line ``loc`` of ``file``.

    The form is the one docs/inputs.md#position-traces-schema-v1 gives.
    """
    if file.kind == "jsonl":
        return f"{file.path}:line {loc}"
    return f"{file.path}: row {loc} (0-based)"


def list_archive(path: Path, ignore: Sequence[str] = ()) -> list[ArchiveFile]:
    """Return the files of an archive in sorted path order; raise on a missing or empty one.

    A folder's shards are the entries :func:`folder_entries` accepts; they must all be of one
    form. ``ignore``: globs of entries to skip (:func:`archive_listing` also says which).
    """
    return list(archive_listing(path, ignore).files)


def archive_listing(path: Path, ignore: Sequence[str] = ()) -> ArchiveListing:
    """Return an archive's files and the folder entries ``ignore`` skipped.

    Raises
    ------
    SpecReplayError
        For a missing path, a folder entry that is neither a shard, a known sidecar nor
        ignored, a folder with no shard or with shards of two forms.
    """
    if not path.exists():
        raise SpecReplayError(f"{path}: no such file or directory")
    if not path.is_dir():
        check_globs(ignore)
        return ArchiveListing((ArchiveFile(0, path, _kind_of(path)),), ())
    empty = "directory holds no .parquet or .jsonl shard (nor .ndjson, .arrow, .ipc, .feather)"
    entries = folder_entries(path, ignore, DATA_SUFFIXES, empty=empty + _nothing_recorded(path))
    files = entries.shards
    first: dict[str, Path] = {}
    for p in files:
        first.setdefault(_FOLDER_KINDS[p.suffix], p)
    if len(first) > 1:
        (k1, p1), (k2, p2) = list(first.items())[:2]
        raise SpecReplayError(
            f"{path}: directory mixes archive forms: {FORM_NAMES[k1]} ({p1.name}) and "
            f"{FORM_NAMES[k2]} ({p2.name}); keep one form per folder (specreplay convert "
            "rewrites an archive in one form)"
        )
    found = tuple(ArchiveFile(i, p, _kind_of(p)) for i, p in enumerate(files))
    return ArchiveListing(found, entries.ignored)


def _nothing_recorded(path: Path) -> str:
    """Return the reason a capture's writers give for recording nothing, or ''.

    A recorder that could not record (the vLLM plugin under Model Runner V2) says why in its
    writer's ``capture.recorded_nothing``; an empty capture folder's error then carries it.
    """
    try:
        manifest = json.loads((path / "CAPTURE.json").read_text(encoding="utf-8"))
        reasons = sorted(
            {
                str(w["capture"]["recorded_nothing"])
                for w in manifest["writers"]
                if isinstance(w.get("capture"), dict) and w["capture"].get("recorded_nothing")
            }
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ""
    return "".join(f"; CAPTURE.json: {r}" for r in reasons)


@dataclass(frozen=True)
class IgnoredEntry:
    """A folder entry skipped by ``--ignore``: its path and the first glob that matched its name."""

    path: Path
    glob: str


@dataclass(frozen=True)
class ArchiveListing:
    """An archive's files in sorted path order and the folder entries ``--ignore`` skipped."""

    files: tuple[ArchiveFile, ...]
    ignored: tuple[IgnoredEntry, ...]


@dataclass(frozen=True)
class FolderEntries:
    """A folder's entries as :func:`folder_entries` judged them (each list in name order)."""

    shards: tuple[Path, ...]
    sidecars: tuple[Path, ...]
    ignored: tuple[IgnoredEntry, ...]


def check_globs(ignore: Sequence[str]) -> None:
    """Raise for an ``--ignore`` glob no name in a folder can match (empty, or holding ``/``)."""
    for glob in ignore:
        if not glob or "/" in glob or os.sep in glob:
            raise SpecReplayError(
                f"--ignore {glob!r}: a glob is matched against the names of the folder's own "
                "entries (e.g. '_SUCCESS', '*.crc', '.*'), so it cannot be empty nor hold '/'"
            )


def folder_entries(
    folder: Path,
    ignore: Sequence[str],
    suffixes: Collection[str],
    *,
    empty: str,
    skip: Path | None = None,
) -> FolderEntries:
    """Judge every entry of ``folder``: a shard, a known sidecar, ignored, or an error naming it.

    Parameters
    ----------
    folder : Path
        The folder (its own entries only; nothing below it is read).
    ignore : sequence of str
        ``--ignore`` globs, matched with ``fnmatch.fnmatchcase`` against each entry's name.
    suffixes : collection of str
        The shard suffixes of this kind of folder (matched exactly, case-sensitively).
    empty : str
        What the error for a folder with no shard says after the folder's path.
    skip : Path, optional
        A file (resolved path) that is read as something else and is neither shard nor error
        (a Medusa ``question.jsonl`` inside the answers' folder).

    Raises
    ------
    SpecReplayError
        ``FOLDER/NAME: <what it is>; <what to do>`` for the first bad entry in name order;
        ``FOLDER: <empty>`` (then the first bad entry, if any) for a folder with no shard; or
        for ``SYNTH.json`` and ``CONVERT.json`` together.
    """
    check_globs(ignore)
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        raise SpecReplayError(f"{folder}: cannot list the folder: {exc.strerror}") from None
    shards: list[Path] = []
    sidecars: list[Path] = []
    ignored: list[IgnoredEntry] = []
    problem = ""
    for name in names:
        p = folder / name
        glob = next((g for g in ignore if fnmatch.fnmatchcase(name, g)), None)
        if glob is not None:
            ignored.append(IgnoredEntry(p, glob))
            continue
        if skip is not None and p.is_file() and p.resolve() == skip:
            continue  # read as the question file, not as a shard
        what = _entry_problem(p, suffixes)
        if what is not None:
            problem = problem or f"{p}: {what}; {_remedy(name)}"
            continue
        (sidecars if name in SIDECARS else shards).append(p)
    if not shards:
        n = len(ignored)
        note = f" ({n} entr{'ies' if n != 1 else 'y'} skipped by --ignore)" if n else ""
        raise SpecReplayError(f"{folder}: {empty}{note}" + (f"; {problem}" if problem else ""))
    if problem:
        raise SpecReplayError(problem)
    origins = [p for p in sidecars if p.name in _ORIGINS]
    if len(origins) > 1:
        first, second = origins[0].name, origins[1].name
        raise SpecReplayError(
            f"{folder}: holds both {first} and {second}: a folder is either generated (synth) "
            "or converted (convert), not both, so its shards may come from two runs; rebuild "
            f"the folder, or skip the stale manifest with --ignore {_quoted(second)}"
        )
    return FolderEntries(tuple(shards), tuple(sidecars), tuple(ignored))


def _remedy(name: str) -> str:
    return f"remove it or move it out of the folder, or skip it with --ignore {_quoted(name)}"


def _quoted(name: str) -> str:
    """Return the entry's name as a glob for a shell: quoted, glob characters escaped."""
    glob = "".join(f"[{c}]" if c in "*?[" else c for c in name)
    return "'" + glob.replace("'", "'\\''") + "'"


def _entry_problem(p: Path, suffixes: Collection[str]) -> str | None:
    """Say what is wrong with one folder entry (None: a shard or a known sidecar).

    Judged with ``lstat``, so a FIFO is never opened; a symlink by its target.
    """
    st = os.lstat(p)
    link = ""
    if stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(p)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return "a looping symlink (it never resolves to a file)"
            return f"a dangling symlink (to {os.readlink(p)}, which does not exist)"
        link = "a symlink to "  # judged by its target from here on
    name = p.name
    kind = _special_kind(st.st_mode)
    if kind == "folder":
        if _data_suffix(name, suffixes) is not None:
            return f"{link}a folder named like a shard (shards are files)"
        return f"{link}a sub-folder (shards are read from the folder itself, not below it)"
    if kind is not None:
        return f"{link}a {kind}, not a shard file"
    if name.startswith(".") and ".tmp-" in name:
        return "an unfinished shard (its writer is still running or was killed)"
    if name in SIDECARS:
        return None
    if name.startswith("."):
        return "a hidden file, not a shard nor a known sidecar"
    suffix = Path(name).suffix
    if suffix in suffixes:
        return None
    lower = _data_suffix(name, suffixes)
    if lower is not None:
        fixed = name[: len(name) - len(suffix)] + lower
        return f"shard suffix {suffix!r} is not lower-case (rename it {fixed})"
    return (
        f"not a shard ({', '.join(sorted(suffixes))}) nor a known sidecar ({', '.join(SIDECARS)})"
    )


def _data_suffix(name: str, suffixes: Collection[str]) -> str | None:
    """Return the shard suffix ``name`` ends in, in any case (None: none)."""
    low = Path(name).suffix.lower()
    return low if low in suffixes else None


def _special_kind(mode: int) -> str | None:
    """Name an entry that is not a regular file: folder, FIFO, socket, device (None: a file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"  # pragma: no cover - no other file type on POSIX


def form_of(path: Path) -> str | None:
    """Return the form ("parquet", "jsonl", "ipc") a shard file's suffix says, or None."""
    return _FOLDER_KINDS.get(path.suffix)


def _kind_of(path: Path) -> str:
    kind = form_of(path) or ("jsonl" if path.suffix in _JSONL_SUFFIXES else None)
    if kind is not None:
        return kind
    raise SpecReplayError(
        f"{path}: unknown archive format (expected .parquet, .arrow/.ipc/.feather (Arrow IPC), "
        ".jsonl, .ndjson or a .json file of JSON Lines)"
    )


def read_chunks(
    file: ArchiveFile, chunk_rows: int, columns: Collection[str] | None = None
) -> Iterator[RawChunk]:
    """Yield the rows of one archive file in chunks of about ``chunk_rows`` rows.

    ``columns``: read only these columns (those present in the file) plus every REQUIRED one;
    None reads every column.
    """
    keep = None if columns is None else frozenset(columns) | frozenset(REQUIRED)
    watch(file.path)  # the run's first stamp of the file, checked when its digest is recorded
    if file.kind == "jsonl":
        yield from _jsonl_chunks(file, chunk_rows, keep)
    else:
        yield from _columnar_chunks(file, chunk_rows, keep)


def file_columns(file: ArchiveFile) -> list[str]:
    """Return a file's column names from its schema (Parquet, IPC) or first JSON line, cheaply.

    For JSON Lines: the keys of the first non-blank line, or [] when it is not a JSON object (the
    reader reports that line).
    """
    if file.kind != "jsonl":
        return list(_file_schema(file).names())
    try:
        with file.path.open("rb") as fh:
            for _, line in text_lines(fh):
                if line is None:
                    return []
                if line.strip():
                    obj, problem = parse_json_line(line.rstrip("\r\n"))
                    return list(obj) if problem is None and isinstance(obj, dict) else []
    except OSError as exc:
        raise SpecReplayError(f"{file.path}: cannot open: {exc.strerror}") from None
    return []


# ---------------------------------------------------------------------------------------------
# Parquet


def _dtype_ok(name: str, dtype: pl.DataType) -> bool:
    if name in ("request_id", "family", "logging_arm"):
        return isinstance(dtype, pl.String | pl.Categorical | pl.Enum)
    if name in INT_COLUMNS:
        return dtype.is_integer()
    if name == "accepted":
        return isinstance(dtype, pl.Boolean)
    if name == "capped":  # a mark, or an all-null column (a writer that knew none)
        return isinstance(dtype, pl.Boolean | pl.Null)
    if name in TAIL_COLUMNS:  # a float, or an all-null column (a writer that knew no tail)
        return dtype.is_float() or dtype.is_integer() or isinstance(dtype, pl.Null)
    if name in LIST_COLUMNS:
        if not isinstance(dtype, pl.List | pl.Array):
            return False
        inner = dtype.inner
        return inner.is_integer() if name == "cand_ids" else inner.is_float()
    return True


_EXPECTED: Final[dict[str, str]] = {
    "request_id": "string",
    "family": "string",
    "logging_arm": "string",
    "context_tokens": "integer",
    "round": "integer",
    "position": "integer",
    "drafted_id": "integer",
    "accepted": "boolean",
    "cand_ids": "list of integers",
    "draft_logprobs": "list of floats",
    "target_probs": "list of floats",
    "emitted_q": "list of floats",
    "draft_tail": "float",
    "target_tail": "float",
    "capped": "boolean",
}


def _read_error(file: ArchiveFile, exc: BaseException, at: int | None = None) -> SpecReplayError:
    """One line naming the file (and the first row not yet read) for an unreadable file."""
    msg = (str(exc).splitlines() or [type(exc).__name__])[0]
    where = "" if at is None else f" at row {at} (0-based) or later"
    return SpecReplayError(f"{file.path}: cannot read as {FORM_NAMES[file.kind]}{where}: {msg}")


def _check_ipc_magic(file: ArchiveFile) -> None:
    """Raise unless the file starts and ends with the Arrow IPC file magic ``ARROW1``.

    An Arrow *stream* file (no footer), a truncated file or another format fails here, before
    polars reads any of it.
    """
    try:
        with file.path.open("rb") as fh:
            head = fh.read(len(_ARROW_MAGIC))
            size = fh.seek(0, 2)
            fh.seek(max(0, size - len(_ARROW_MAGIC)))
            tail = fh.read()
    except OSError as exc:
        raise SpecReplayError(f"{file.path}: cannot open: {exc.strerror}") from None
    if head != _ARROW_MAGIC or tail != _ARROW_MAGIC or size < 2 * len(_ARROW_MAGIC) + 8:
        why = "no ARROW1 magic at its start and end (truncated?)"
        if head[:4] == b"PAR1":
            why = "it is a Parquet file (rename it .parquet)"
        elif head[:4] == b"\xff" * 4:
            why = "it is an Arrow stream, not the Arrow file format"
        raise SpecReplayError(
            f"{file.path}: cannot read as Arrow IPC: not an Arrow IPC file: {why}"
        )


def last_rounds(file: ArchiveFile) -> dict[str, int]:
    """Return each request's largest round number in ``file`` (the ``capped`` default's scan).

    Two columns of a Parquet or IPC file (polars' lazy scan); a JSON Lines file is read through
    :func:`read_chunks` (its lines are parsed whole). Unreadable values are skipped: the reader
    reports them when it reads the file.
    """
    if file.kind == "jsonl":
        frames = [c.frame.select("request_id", "round") for c in read_chunks(file, 1 << 16)]
        frame = pl.concat(frames) if frames else pl.DataFrame({"request_id": [], "round": []})
    else:
        frame = (
            scan_file(file)
            .select(pl.col("request_id").cast(pl.String), pl.col("round").cast(pl.Int64))
            .collect()
        )
    last = frame.drop_nulls().group_by("request_id").agg(pl.col("round").max())
    return dict(zip(last["request_id"].to_list(), last["round"].to_list(), strict=True))


def scan_file(file: ArchiveFile) -> pl.LazyFrame:
    """Return a lazy scan of a Parquet or IPC file (nothing read yet)."""
    if file.kind == "ipc":
        return pl.scan_ipc(file.path)
    return pl.scan_parquet(file.path)


def _file_schema(file: ArchiveFile) -> pl.Schema:
    """Return a Parquet or IPC file's schema; one line naming the file when it cannot be read."""
    if file.kind == "ipc":
        _check_ipc_magic(file)
    try:
        return scan_file(file).collect_schema()
    except Exception as exc:
        raise _read_error(file, exc) from None


def check_schema(file: ArchiveFile, columns: Collection[str] | None = None) -> pl.Schema:
    """Return a Parquet or IPC file's schema; raise one line when unreadable or a column is wrong.

    With ``columns`` (a projection, REQUIRED included) only those columns' types are checked.
    """
    schema = _file_schema(file)
    for name in REQUIRED:
        if name not in schema:
            raise SpecReplayError(f"{file.path}: missing required column {name!r}")
    for name, dtype in schema.items():
        if columns is not None and name not in columns:
            continue
        if name in SCHEMA_V1 and not _dtype_ok(name, dtype):
            raise SpecReplayError(
                f"{file.path}: column {name!r} has type {dtype}; expected {_EXPECTED[name]}"
            )
    return schema


def _columnar_chunks(
    file: ArchiveFile, chunk_rows: int, keep: frozenset[str] | None
) -> Iterator[RawChunk]:
    schema = check_schema(file, keep)
    names = None if keep is None else [c for c in schema.names() if c in keep]
    start = 0
    for batch in _batches(file, chunk_rows, names):
        n = batch.height
        locs = np.arange(start, start + n, dtype=np.int64)
        frame, issues = _to_canonical(batch, schema, locs)
        yield RawChunk(file, frame, locs, issues)
        start += n


def _batches(file: ArchiveFile, chunk_rows: int, names: list[str] | None) -> Iterator[pl.DataFrame]:
    """Stream a Parquet or IPC file's rows through pyarrow; a corrupt page is one line.

    The line names the file and the first row not yet read when the error came (pyarrow names
    no row).
    """
    if file.kind == "ipc":
        yield from _mapped_batches(file, chunk_rows, names)
    else:
        yield from _arrow_parquet_batches(file, chunk_rows, names)


def _mapped_batches(
    file: ArchiveFile, chunk_rows: int, names: list[str] | None
) -> Iterator[pl.DataFrame]:
    """Stream an IPC file through pyarrow's memory map: the frames' buffers are the file's pages.

    Each record batch is validated in full (offsets in bounds and increasing, UTF-8) before polars
    sees it, so a corrupt file is an error line, never a crash; float values cannot be checked
    here (the row checks do). Record batches are sliced and regrouped into frames of
    ``chunk_rows`` rows (slicing copies nothing). The file must not change while it is read.
    """
    pa = importlib.import_module("pyarrow")  # untyped: imported as a module object
    ipc = importlib.import_module("pyarrow.ipc")
    start = 0
    try:
        reader = ipc.open_file(pa.memory_map(str(file.path)))
        pending: list[Any] = []
        n = 0
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            if names is not None:
                batch = batch.select(names)
            batch.validate(full=True)
            lo = 0
            while lo < batch.num_rows:
                take = min(chunk_rows - n, batch.num_rows - lo)
                pending.append(batch.slice(lo, take))
                n, lo = n + take, lo + take
                if n >= chunk_rows:
                    yield _arrow_frame(pa, pending)
                    start, pending, n = start + n, [], 0
        if pending:
            yield _arrow_frame(pa, pending)
    except (pa.ArrowException, OSError, pl.exceptions.PolarsError) as exc:
        raise _read_error(file, exc, start) from None


def _arrow_parquet_batches(
    file: ArchiveFile, chunk_rows: int, names: list[str] | None
) -> Iterator[pl.DataFrame]:
    """Stream a Parquet file through pyarrow's reader (record batches of ``chunk_rows`` rows).

    Measured on the 10 M-position synthetic archive (128 zstd shards, the columns a requalify
    reads, warm page cache, 2 cores): polars ``collect_batches`` 27.8 s, pyarrow ``iter_batches``
    10.9 s; the frames hold the same values (the tests compare every form's figures bit for bit).
    """
    pq = importlib.import_module("pyarrow.parquet")
    pa = importlib.import_module("pyarrow")
    start = 0
    try:
        reader = pq.ParquetFile(str(file.path))
        for batch in reader.iter_batches(batch_size=chunk_rows, columns=names):
            frame = pl.from_arrow(batch, rechunk=False)
            assert isinstance(frame, pl.DataFrame)
            yield frame
            start += batch.num_rows
    except (pa.ArrowException, OSError, pl.exceptions.PolarsError) as exc:
        raise _read_error(file, exc, start) from None


def _arrow_frame(pa: Any, batches: list[Any]) -> pl.DataFrame:
    """Return record batches as one polars frame without copying their buffers."""
    data = batches[0] if len(batches) == 1 else pa.Table.from_batches(batches)
    frame = pl.from_arrow(data, rechunk=False)
    assert isinstance(frame, pl.DataFrame)
    return frame


def _to_canonical(
    batch: pl.DataFrame, schema: pl.Schema, locs: NDArray[np.int64]
) -> tuple[pl.DataFrame, list[Issue]]:
    """Cast to canonical dtypes, reporting integers that do not fit in int64 as issues.

    A value that cannot be cast becomes null; the caller reports nulls (and drops those rows).
    """
    issues: list[Issue] = []
    exprs: list[pl.Expr] = []
    for name in batch.columns:
        target = SCHEMA_V1.get(name)
        if target is None:
            exprs.append(pl.col(name))
            continue
        col = batch.get_column(name)
        if name in INT_COLUMNS and schema[name] == pl.UInt64:
            big = (col > _INT64_MAX).fill_null(False)
            if big.any():
                i = int(big.arg_true()[0])
                issues.append(Issue(int(locs[i]), f"{name} = {col[i]} does not fit in int64"))
        dtype = schema[name]
        if (
            name == "cand_ids"
            and isinstance(dtype, pl.List | pl.Array)
            and dtype.inner == pl.UInt64
        ):
            big_list = (col.cast(pl.List(pl.UInt64)).list.max() > _INT64_MAX).fill_null(False)
            if big_list.any():
                i = int(big_list.arg_true()[0])
                issues.append(Issue(int(locs[i]), "a cand_id does not fit in int64"))
        exprs.append(pl.col(name).cast(target, strict=False))
    frame = batch.select(exprs)
    return frame, issues


# ---------------------------------------------------------------------------------------------
# JSON Lines


def text_lines(fh: Iterable[bytes]) -> Iterator[tuple[int, str | None]]:
    """Yield (1-based physical line, its text) of a binary file; None for a line not UTF-8.

    Decoding line by line names the line that holds a bad byte (a text-mode file decodes
    ahead in blocks, so its error cannot say which line). A UTF-8 byte-order mark is dropped.
    """
    for lineno, raw in enumerate(fh, 1):
        try:
            yield lineno, raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
        except UnicodeDecodeError:
            yield lineno, None


def parse_json_line(line: str) -> tuple[Any, str | None]:
    """Return (the JSON value of ``line``, None), or (None, why it is not JSON).

    Besides malformed text, Python's ``json`` refuses integers of more than 4,300 digits
    (ValueError) and nesting deeper than the interpreter's recursion limit (RecursionError):
    both are bad input, reported like any other invalid JSON.
    """
    try:
        return json.loads(line), None
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {json_message(exc.msg, exc.colno)}"
    except ValueError:
        return None, "invalid JSON: an integer of more than 4300 digits"
    except RecursionError:
        return None, "invalid JSON: nested too deeply"


def _jsonl_chunks(
    file: ArchiveFile, chunk_rows: int, keep: frozenset[str] | None = None
) -> Iterator[RawChunk]:
    try:
        fh = file.path.open("rb")
    except OSError as exc:
        raise SpecReplayError(f"{file.path}: cannot open: {exc.strerror}") from None
    state = _JsonlState()
    with fh:
        lineno = 0
        rows: list[dict[str, Any]] = []
        locs: list[int] = []
        issues: list[Issue] = []
        for lineno, line in text_lines(fh):
            if line is None:
                raise SpecReplayError(f"{file.path}:line {lineno}: not valid UTF-8")
            if not line.strip():
                continue
            row, problem = _parse_line(line, state, keep)
            if problem is not None:
                issues.append(Issue(lineno, problem))
            else:
                rows.append(row)
                locs.append(lineno)
            if len(rows) >= chunk_rows:
                yield _jsonl_chunk(file, rows, locs, issues, state)
                rows, locs, issues = [], [], []
        if rows or issues or lineno == 0:
            yield _jsonl_chunk(file, rows, locs, issues, state)


@dataclass
class _JsonlState:
    """Columns declared by a file's first row (optional ones must then appear in every row)."""

    declared: tuple[str, ...] | None = None
    extras: dict[str, type] | None = None


def _jsonl_chunk(
    file: ArchiveFile,
    rows: list[dict[str, Any]],
    locs: list[int],
    issues: list[Issue],
    state: _JsonlState,
) -> RawChunk:
    present = state.declared if state.declared is not None else REQUIRED
    extras = state.extras or {}
    schema: dict[str, pl.DataType] = {c: SCHEMA_V1[c] for c in present}
    py_to_pl: dict[type, pl.DataType] = {
        str: pl.String(),
        int: pl.Int64(),
        float: pl.Float64(),
        bool: pl.Boolean(),
    }
    for name, typ in extras.items():
        schema[name] = py_to_pl[typ]
    data = {c: [r.get(c) for r in rows] for c in schema}
    frame = pl.DataFrame(data, schema=schema, strict=False)
    return RawChunk(file, frame, np.asarray(locs, dtype=np.int64), issues)


def _parse_line(
    line: str, state: _JsonlState, keep: frozenset[str] | None = None
) -> tuple[dict[str, Any], str | None]:
    obj, problem = parse_json_line(line.rstrip("\r\n"))
    if problem is not None:
        return {}, problem
    if not isinstance(obj, dict):
        return {}, "expected a JSON object"
    if keep is not None:  # a projection: the other keys are neither kept nor checked
        obj = {k: v for k, v in obj.items() if k in keep}
    for name in REQUIRED:
        if name not in obj:
            return {}, f"missing required column {name!r}"
        if obj[name] is None:
            return {}, f"missing value in column {name!r}"
    if state.declared is None:
        state.declared = tuple(c for c in SCHEMA_V1 if c in obj)
        state.extras = {}
    extras = state.extras if state.extras is not None else {}
    for name in state.declared:
        if name not in obj:
            return {}, f"missing value in column {name!r} (present in the file's first row)"
    for name, value in obj.items():
        if name in SCHEMA_V1 and name not in state.declared:
            return {}, f"column {name!r} appears here but not in the file's first row"
        if name in SCHEMA_V1:
            problem = _check_value(name, value)
            if problem is not None:
                return {}, problem
        elif value is not None:
            typ = type(value)
            if typ not in (str, int, float, bool):
                return {}, f"column {name!r} must be a string, number or boolean"
            if typ is int and not -_INT64_MAX - 1 <= value <= _INT64_MAX:  # else a silent null
                return {}, f"column {name!r} = {value} does not fit in int64"
            seen = extras.setdefault(name, typ)
            if seen is not typ and not (seen is float and typ is int):
                return {}, f"column {name!r} is {typ.__name__} here but {seen.__name__} above"
    return obj, None


def _check_value(name: str, value: Any) -> str | None:
    exp = _EXPECTED[name]
    if value is None:
        if name in TAIL_COLUMNS or name in MARK_COLUMNS:
            return None  # null: the tail (the mark) is unknown
        return f"missing value in column {name!r}"
    if exp == "float":
        ok = type(value) in (float, int)
    elif exp == "string":
        ok = isinstance(value, str)
    elif exp == "integer":
        ok = type(value) is int
        if ok and not -_INT64_MAX - 1 <= value <= _INT64_MAX:
            return f"{name} = {value} does not fit in int64"
    elif exp == "boolean":
        ok = type(value) is bool
    elif name == "cand_ids":
        ok = isinstance(value, list) and all(type(x) is int for x in value)
        if ok and any(not -_INT64_MAX - 1 <= x <= _INT64_MAX for x in value):
            return "a cand_id does not fit in int64"
    else:
        ok = isinstance(value, list) and all(type(x) in (float, int) for x in value)
    if not ok:
        return f"column {name!r} should be {exp}, got {json.dumps(value)[:40]}"
    return None


def archive_rows(path: Path, ignore: Sequence[str] = ()) -> int | None:
    """Return the rows of a Parquet or IPC archive from its metadata (None: JSON Lines, error)."""
    try:
        files = list_archive(path, ignore)
        if any(f.kind == "jsonl" for f in files):
            return None
        return sum(int(scan_file(f).select(pl.len()).collect().item()) for f in files)
    except Exception:
        return None


def json_message(msg: str, column: int) -> str:
    """Return the JSON decoder's message with its column, without doubling a trailing "at".

    >>> json_message("Unterminated string starting at", 7)
    'Unterminated string starting at column 7'
    >>> json_message("Expecting value", 1)
    'Expecting value at column 1'
    """
    return f"{msg} column {column}" if msg.endswith(" at") else f"{msg} at column {column}"

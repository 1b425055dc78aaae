"""Readers of observed arms: round traces, per-request sums, Spec-Bench and FastChat/Medusa answers.

Each reader turns one arm's MEASURED rounds into :class:`~specreplay.stats.armdata.ArmData`: per
(request, context bucket) the rounds n and the retained tokens t, where a round retains 1 + A tokens
(A = accepted drafts, docs/methods.md#rounds-retained-tokens-and-r), so R = Σ t / Σ n. The formats
are those of docs/inputs.md#round-traces-and-per-request-sums:

``round-traces``
    One row per round: request_id, family, context_tokens (nullable), round (≥ 0), drafted
    (nullable, ≥ 1), accepted (A, 0..drafted). t = Σ (1 + A) over the request's rounds in a bucket.
``request-sums``
    One row per request: request_id, family, rounds (≥ 1), retained_tokens (≥ rounds).
``spec-bench``
    Spec-Bench answer files: question_id, category, ``choices[c].accept_lengths``, one entry per
    decoding step across all turns, each entry the tokens appended in that step (1 + A).
``medusa``
    FastChat/Medusa answer files, ``choices[c].idxs[t]`` and ``new_tokens[t]`` per turn t, with
    categories from the benchmark's ``question.jsonl``: rounds = Σ_t (idxs[t] + 1), because
    Medusa's loop counts steps from 0 and breaks after the final step; retained tokens =
    Σ_t new_tokens[t].

Only round traces carry a context length; the other formats put every round in the bucket
``unknown``. The format is detected from the content, never from the file name
(:func:`detect_kind`). A directory is read as the shards of one arm in sorted path order: its
``*.parquet`` files or its ``*.jsonl``/``*.ndjson`` files, not both (a folder holding both is an
error naming one of each: until issue 9 its JSON Lines were silently left out). Every other entry
is judged as in a folder archive (:func:`~specreplay.replay.archive.sources.folder_entries`): a
known sidecar, skipped by ``ignore`` (``--ignore GLOB``; ``ArmData.ignored`` says what), or an
error naming it; a Medusa ``question.jsonl`` inside the folder is read as the question file.

Every problem raises :class:`~specreplay.errors.SpecReplayError` with one self-contained line
(docs/inputs.md#position-traces-schema-v1): ``PATH:line N: …`` (1-based physical line, blank lines
counted) for JSON Lines, ``PATH: row N (0-based): …`` for Parquet, ``PATH: …`` for a problem of the
whole file. An error involving two rows names the later one and cites the first. A problem of a
whole file (format, missing or mistyped column) is reported as soon as it is found; of several row
problems, the first in reading order (files in sorted order, then rows) is reported, as a streaming
reader would.

Decisions where SPEC is silent
------------------------------
- Round traces: ``context_tokens`` and ``drafted`` may be absent (read as all null); the other four
  columns are required. A negative ``context_tokens`` is an error (null is how a trace says
  "unknown"). Round numbers need not be contiguous nor ordered; only a repeated
  (request_id, round) is an error. Extra columns are ignored.
- Per-request sums: ``retained_tokens`` may be fractional (any finite number ≥ rounds), so sums
  produced by a replay can be imported too.
- Spec-Bench: an ``accept_lengths`` entry must be a whole number ≥ 1 (``3.0`` reads as 3); an empty
  list (no decoding step) is an error, since an arm's (request, bucket) pieces have n ≥ 1.
  ``question_id`` may be an integer or a string; request_id is its decimal string.
- FastChat/Medusa: ``idxs`` and ``new_tokens`` must be non-empty lists of whole numbers ≥ 0 of the
  same length; Σ new_tokens ≥ Σ (idxs + 1) is required, the rule of per-request sums. The family
  is the question file's ``category``; a question id repeated in the question file is an error.
  The question file is skipped when it lies inside the arm's directory.
- Options that a format does not use are errors rather than silently ignored: ``question_file``
  is for Medusa answers only, ``drafted`` for Spec-Bench only, ``choice`` ≠ 0 for answer files only.
- A repeated request (question) within an arm is an error, also across the files of a directory
  (a directory of two Spec-Bench method files is two arms, not one).
- ``ArmData.files`` counts non-blank lines of JSON Lines files and rows of Parquet files.
- Sums are sorted by request_id (as strings, so "100" < "81"), then by bucket in specification
  order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NoReturn

import numpy as np
import polars as pl

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.sources import (
    ArchiveFile,
    IgnoredEntry,
    check_globs,
    folder_entries,
    format_location,
    parse_json_line,
    text_lines,
)
from specreplay.sim.drafting import DepthByBucket
from specreplay.stats.armdata import ARM_SCHEMA, ArmData
from specreplay.stats.buckets import Buckets

__all__ = ["KINDS", "detect_kind", "drafted_depths", "read_arm"]

KINDS: Final[tuple[str, ...]] = ("round-traces", "request-sums", "spec-bench", "medusa")
"""The observed-arm formats, as returned by :func:`detect_kind` and stored in ``ArmData.kind``."""

_INT64_MIN: Final[int] = int(np.iinfo(np.int64).min)
_INT64_MAX: Final[int] = int(np.iinfo(np.int64).max)
_PARQUET_MAGIC: Final[bytes] = b"PAR1"
_JSONL_SUFFIXES: Final[tuple[str, ...]] = (".jsonl", ".ndjson")
_EXPECTED: Final[str] = (
    "expected round traces (keys round, accepted), per-request sums (rounds, retained_tokens), "
    "Spec-Bench answers (choices[].accept_lengths) or FastChat/Medusa answers "
    "(choices[].idxs, choices[].new_tokens)"
)


class _LineError(Exception):
    """A problem at one line or row (``loc``) of the file being read; internal control flow."""

    def __init__(self, loc: int, message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


# ---------------------------------------------------------------------------------------------
# Public API


def detect_kind(path: Path, ignore: Sequence[str] = ()) -> str:
    """Return the observed-arm format of a file or directory, from its content.

    Parameters
    ----------
    path : Path
        A Parquet or JSON Lines file, or a directory of shards of one format.
    ignore : sequence of str
        ``--ignore`` globs: entries of a directory to skip (names relative to it).

    Returns
    -------
    str
        One of :data:`KINDS`: Parquet by its columns; JSON Lines by the keys of its first
        non-blank line (``choices[0].accept_lengths`` → ``spec-bench``; ``choices[0].idxs`` and
        ``new_tokens`` → ``medusa``; ``rounds`` and ``retained_tokens`` → ``request-sums``;
        ``round`` and ``accepted`` → ``round-traces``).

    Raises
    ------
    SpecReplayError
        Missing path, empty file or directory, unreadable content, an unknown format, or shards of
        different formats.
    """
    return _detect_all(_list_files(path, skip=None, ignore=ignore)[0])[0]


def read_arm(
    path: Path,
    *,
    buckets: Buckets,
    question_file: Path | None = None,
    choice: int = 0,
    drafted: int | None = None,
    name: str | None = None,
    truncate: int | DepthByBucket | None = None,
    ignore: Sequence[str] = (),
    per_round: Mapping[int, float] | None = None,
) -> ArmData:
    """Read one observed arm as per-(request, bucket) rounds and retained tokens.

    Parameters
    ----------
    path : Path
        File or directory of shards; the format is detected by :func:`detect_kind`.
    buckets : Buckets
        Context buckets for round traces (other formats go to ``unknown``).
    question_file : Path, optional
        The benchmark's ``question.jsonl`` (``question_id``, ``category``); required for, and
        only accepted with, FastChat/Medusa answers.
    choice : int, default 0
        Which ``choices[c]`` of an answer file to read (Spec-Bench, Medusa).
    drafted : int, optional
        Draft depth of a Spec-Bench run; every step must then retain ≤ drafted + 1 tokens.
    name : str, optional
        Arm label; default the file stem or directory name.
    truncate : int, optional
        Round traces only: retained tokens 1 + min(A, truncate) per round (the survival
        truncation proxy of a fixed depth, docs/methods.md#the-survival-truncation-proxy); a
        ``depth-by-bucket`` table truncates each round at the depth of its context.
    per_round : mapping of int to float, optional
        With a table: each round counts ``per_round[its depth]`` instead of its retained tokens
        (its positions drafted, or its ms per round: docs/methods.md#policies-adaptive-drafting).
    ignore : sequence of str
        ``--ignore`` globs: entries of a directory to skip (``ArmData.ignored`` lists them).

    Returns
    -------
    ArmData
        ``label`` MEASURED; ``files`` every file read (question file included) with its line or
        row count; ``notes`` the assumptions the format implies.

    Raises
    ------
    SpecReplayError
        On any problem with the options or the input, with the file and line or row.
    """
    if choice < 0:
        raise SpecReplayError(f"--choice {choice}: must be ≥ 0")
    if drafted is not None and drafted < 1:
        raise SpecReplayError(f"--drafted {drafted}: must be ≥ 1")
    skip = None
    if question_file is not None and path.is_dir():
        skip = question_file.resolve()
    files, ignored = _list_files(path, skip=skip, ignore=ignore)
    kind, first_line = _detect_all(files)
    _check_kind_options(
        kind, files[0].path, first_line, path, question_file, choice, drafted, truncate
    )
    opts = _Options(
        buckets, question_file, choice, drafted, counts=[], truncate=truncate, per_round=per_round
    )
    sums, notes = _READERS[kind](files, opts)
    if sums.height == 0:
        raise SpecReplayError(f"{path}: no rows: an arm needs at least one round")
    return ArmData(
        name=name if name is not None else (path.name if path.is_dir() else path.stem),
        kind=kind,
        sums=sums,
        label="MEASURED",
        files=opts.counts,
        notes=notes,
        ignored=[(e.path, e.glob) for e in ignored],
        depth=opts.depths[0] if opts.depths else None,
    )


def _check_kind_options(
    kind: str,
    first: Path,
    first_line: int,
    path: Path,
    question_file: Path | None,
    choice: int,
    drafted: int | None,
    truncate: int | DepthByBucket | None,
) -> None:
    """Raise when an option does not apply to the detected format (or one it needs is missing)."""
    files0 = first
    if kind != "spec-bench" and drafted is not None:
        raise SpecReplayError(
            f"{files0}: --drafted applies to Spec-Bench answers only; this is {kind}"
        )
    if kind in ("round-traces", "request-sums") and choice != 0:
        raise SpecReplayError(
            f"{files0}: --choice applies to Spec-Bench and FastChat/Medusa answers only; "
            f"this is {kind}"
        )
    if kind != "medusa" and question_file is not None:
        raise SpecReplayError(
            f"{question_file}: --question-file applies to FastChat/Medusa answers only; "
            f"{path} is {kind}"
        )
    if kind == "medusa" and question_file is None:
        raise SpecReplayError(
            f"{files0}:line {first_line}: FastChat/Medusa answers carry no category: "
            "--question-file (the benchmark's question.jsonl) is required"
        )
    if truncate is not None and kind != "round-traces":
        raise SpecReplayError(f"{files0}: a depth proxy needs round traces; this is {kind}")


# ---------------------------------------------------------------------------------------------
# Files and detection


@dataclass(frozen=True)
class _Options:
    """The options of one :func:`read_arm` call, and the files it read (appended as read)."""

    buckets: Buckets
    question_file: Path | None
    choice: int
    drafted: int | None
    counts: list[tuple[Path, int]]
    truncate: int | DepthByBucket | None = None
    depths: list[int] = field(default_factory=list)  # the arm's depth, when the reader knows it
    per_round: Mapping[int, float] | None = None  # a table's round: this value at its depth


def _list_files(
    path: Path, *, skip: Path | None, ignore: Sequence[str] = ()
) -> tuple[list[ArchiveFile], tuple[IgnoredEntry, ...]]:
    """Return an arm's files in sorted path order (format sniffed) and what ``ignore`` skipped."""
    if not path.exists():
        raise SpecReplayError(f"{path}: no such file or directory")
    if not path.is_dir():
        check_globs(ignore)
        return [ArchiveFile(0, path, _sniff(path))], ()
    empty = "directory holds no .parquet or .jsonl shard"
    entries = folder_entries(path, ignore, (".parquet", *_JSONL_SUFFIXES), empty=empty, skip=skip)
    shards = list(entries.shards)
    parquet = [p for p in shards if p.suffix == ".parquet"]
    jsonl = [p for p in shards if p.suffix in _JSONL_SUFFIXES]
    if parquet and jsonl:
        raise SpecReplayError(
            f"{path}: directory mixes Parquet ({parquet[0].name}) and JSON Lines "
            f"({jsonl[0].name}) shards; keep one form per folder, or skip one with --ignore"
        )
    return [ArchiveFile(i, p, _sniff(p)) for i, p in enumerate(shards)], entries.ignored


def _sniff(path: Path) -> str:
    """Return ``parquet`` when the file starts with Parquet's magic bytes, else ``jsonl``."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise SpecReplayError(f"{path}: cannot open: {exc.strerror}") from None
    return "parquet" if head == _PARQUET_MAGIC else "jsonl"


def _detect_all(files: list[ArchiveFile]) -> tuple[str, int]:
    """Detect every shard's format; return the common one and the first data line of file 0."""
    kinds = [_detect_one(f) for f in files]
    for f, (kind, _) in zip(files[1:], kinds[1:], strict=True):
        if kind != kinds[0][0]:
            raise SpecReplayError(
                f"{f.path}: holds {kind} but {files[0].path} holds {kinds[0][0]}: "
                "every shard of an arm must have the same format"
            )
    return kinds[0]


def _detect_one(file: ArchiveFile) -> tuple[str, int]:
    if file.kind == "parquet":
        cols = set(_parquet_schema(file).names())
        for kind, keys in (("request-sums", {"rounds", "retained_tokens"}), _ROUND_KEYS):
            if keys <= cols and "position" not in cols:
                return kind, 0
        raise SpecReplayError(
            f"{file.path}: cannot tell the format from Parquet columns {sorted(cols)}: "
            f"{_EXPECTED}{_position_hint(cols)}"
        )
    for lineno, obj in _json_objects(file, detecting=True):
        return _kind_of_object(file, lineno, obj), lineno
    raise SpecReplayError(f"{file.path}: empty file (no JSON line): {_EXPECTED}")


_ROUND_KEYS: Final[tuple[str, set[str]]] = ("round-traces", {"round", "accepted"})


def _position_hint(keys: set[str]) -> str:
    if "position" in keys:
        return (
            " (this looks like a position-trace archive, "
            'docs/inputs.md, "Position traces (schema v1)": replay it, it is not an observed arm)'
        )
    return ""


def _kind_of_object(file: ArchiveFile, lineno: int, obj: dict[str, Any]) -> str:
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        if "accept_lengths" in choices[0]:
            return "spec-bench"
        if "idxs" in choices[0] and "new_tokens" in choices[0]:
            return "medusa"
    keys = set(obj)
    if {"rounds", "retained_tokens"} <= keys:
        return "request-sums"
    if _ROUND_KEYS[1] <= keys and "position" not in keys:
        return "round-traces"
    shown = ", ".join(sorted(keys)[:12]) + (", …" if len(keys) > 12 else "")
    raise SpecReplayError(
        f"{file.path}:line {lineno}: cannot tell the format from keys [{shown}]: "
        f"{_EXPECTED}{_position_hint(keys)}"
    )


# ---------------------------------------------------------------------------------------------
# JSON Lines and Parquet access


def _json_objects(file: ArchiveFile, *, detecting: bool = False) -> Iterator[tuple[int, Any]]:
    """Yield (1-based physical line, JSON object) per non-blank line of a JSON Lines file.

    Invalid JSON, a non-object line or invalid UTF-8 raise :class:`_LineError` (or, while
    ``detecting``, :class:`SpecReplayError` directly, saying the file is not Parquet either).
    """
    try:
        fh = file.path.open("rb")
    except OSError as exc:
        raise SpecReplayError(f"{file.path}: cannot open: {exc.strerror}") from None
    prefix = "neither Parquet nor JSON Lines: " if detecting else ""
    with fh:
        for lineno, line in text_lines(fh):
            if line is None:
                _line_problem(file, lineno, f"{prefix}not valid UTF-8", detecting)
            if not line.strip():
                continue
            obj, problem = parse_json_line(line)
            if problem is not None:
                _line_problem(file, lineno, prefix + problem, detecting)
            if not isinstance(obj, dict):
                _line_problem(file, lineno, f"{prefix}expected a JSON object", detecting)
            yield lineno, obj


def _line_problem(file: ArchiveFile, lineno: int, message: str, detecting: bool) -> NoReturn:
    if detecting:
        raise SpecReplayError(f"{format_location(file, lineno)}: {message}")
    raise _LineError(lineno, message)


def _parquet_schema(file: ArchiveFile) -> pl.Schema:
    try:
        return pl.scan_parquet(file.path).collect_schema()
    except Exception as exc:  # polars raises several types for a damaged file
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecReplayError(f"{file.path}: cannot read as Parquet: {msg}") from None


# ---------------------------------------------------------------------------------------------
# Tabular formats: round traces and per-request sums


@dataclass(frozen=True)
class _Column:
    """One column of a tabular format: ``kind`` is string, integer or number."""

    name: str
    kind: str
    optional: bool = False

    @property
    def dtype(self) -> pl.DataType:
        return {"string": pl.String(), "integer": pl.Int64(), "number": pl.Float64()}[self.kind]


_ROUND_COLUMNS: Final[tuple[_Column, ...]] = (
    _Column("request_id", "string"),
    _Column("family", "string"),
    _Column("context_tokens", "integer", optional=True),
    _Column("round", "integer"),
    _Column("drafted", "integer", optional=True),
    _Column("accepted", "integer"),
)
_SUM_COLUMNS: Final[tuple[_Column, ...]] = (
    _Column("request_id", "string"),
    _Column("family", "string"),
    _Column("rounds", "integer"),
    _Column("retained_tokens", "number"),
)
_SUMS_SCHEMA: Final[dict[str, pl.DataType]] = {
    "request_id": pl.String(),
    "family": pl.String(),
    "n": pl.Int64(),
    "t": pl.Float64(),
}


def _value_problem(col: _Column, value: Any) -> str | None:
    """Return why a JSON value does not fit ``col`` (None when it does)."""
    if value is None:
        return None if col.optional else f"missing value in column {col.name!r}"
    if col.kind == "string":
        ok = isinstance(value, str)
    elif col.kind == "integer":
        ok = type(value) is int
        if ok and not _INT64_MIN <= value <= _INT64_MAX:
            return f"{col.name} = {value} does not fit in int64"
    else:
        ok = type(value) in (int, float)
        if ok and (abs(value) > 1e308 or not math.isfinite(value)):  # an int past float's range
            return f"{col.name} = {value} is not a finite number"
    if not ok:
        return f"column {col.name!r} should be {col.kind}, got {json.dumps(value)[:40]}"
    return None


def _jsonl_table(
    file: ArchiveFile, columns: tuple[_Column, ...], counts: list[tuple[Path, int]]
) -> tuple[pl.DataFrame, str | None]:
    """Read a JSON Lines table up to its first bad line; return the rows and that line's error."""
    data: dict[str, list[Any]] = {c.name: [] for c in columns}
    locs: list[int] = []
    stop = None
    try:
        for lineno, obj in _json_objects(file):
            for col in columns:
                if col.name not in obj and not col.optional:
                    raise _LineError(lineno, f"missing column {col.name!r}")
                problem = _value_problem(col, obj.get(col.name))
                if problem is not None:
                    raise _LineError(lineno, problem)
            for col in columns:
                data[col.name].append(obj.get(col.name))
            locs.append(lineno)
    except _LineError as err:
        stop = f"{format_location(file, err.loc)}: {err.message}"
    frame = pl.DataFrame(data, schema={c.name: c.dtype for c in columns}, strict=False)
    counts.append((file.path, len(locs)))
    return frame.with_columns(_loc=pl.Series(locs, dtype=pl.Int64())), stop


def _dtype_ok(col: _Column, dtype: pl.DataType) -> bool:
    if col.optional and isinstance(dtype, pl.Null):
        return True
    if col.kind == "string":
        return isinstance(dtype, pl.String | pl.Categorical | pl.Enum)
    if col.kind == "integer":
        return dtype.is_integer()
    return dtype.is_integer() or dtype.is_float()


def _parquet_table(
    file: ArchiveFile, columns: tuple[_Column, ...], counts: list[tuple[Path, int]]
) -> tuple[pl.DataFrame, str | None]:
    """Read a Parquet table up to its first bad row; return the rows and that row's error."""
    schema = _parquet_schema(file)
    for col in columns:
        if col.name not in schema:
            if not col.optional:
                raise SpecReplayError(f"{file.path}: missing required column {col.name!r}")
        elif not _dtype_ok(col, schema[col.name]):
            raise SpecReplayError(
                f"{file.path}: column {col.name!r} has type {schema[col.name]}; expected {col.kind}"
            )
    present = [c.name for c in columns if c.name in schema]
    try:
        raw = pl.read_parquet(file.path, columns=present)
    except Exception as exc:  # a damaged page is only found when read
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecReplayError(f"{file.path}: cannot read as Parquet: {msg}") from None
    out: dict[str, pl.Series] = {}
    first_bad: tuple[int, str] | None = None  # (row, message) of the earliest bad row
    for col in columns:
        if col.name not in schema:
            out[col.name] = pl.Series(col.name, [None] * raw.height, dtype=col.dtype)
            continue
        orig = raw.get_column(col.name)
        cast = orig.cast(col.dtype, strict=False)
        out[col.name] = cast
        checks: list[tuple[pl.Series, str, pl.Series | None]] = [
            (orig.is_not_null() & cast.is_null(), "{} = {} does not fit in int64", orig)
        ]
        if not col.optional:
            checks.append((orig.is_null(), "missing value in column {!r}{}", None))
        if col.kind == "number":
            checks.append((~cast.is_finite(), "{} = {} is not a finite number", cast))
        for mask, template, values in checks:
            hits = mask.fill_null(False).arg_true()
            if hits.len() and (first_bad is None or int(hits[0]) < first_bad[0]):
                row = int(hits[0])
                shown = "" if values is None else values[row]
                first_bad = (row, template.format(col.name, shown))
    frame = pl.DataFrame(out).with_columns(_loc=pl.int_range(raw.height, dtype=pl.Int64()))
    counts.append((file.path, raw.height))
    if first_bad is None:
        return frame, None
    row, message = first_bad
    return frame.head(row), f"{format_location(file, row)}: {message}"


def _read_table(
    files: list[ArchiveFile], columns: tuple[_Column, ...], counts: list[tuple[Path, int]]
) -> tuple[pl.DataFrame, str | None]:
    """Read the shards up to the first bad row; add ``_file`` and the reading-order index ``_i``."""
    frames: list[pl.DataFrame] = []
    stop = None
    for file in files:
        reader = _parquet_table if file.kind == "parquet" else _jsonl_table
        frame, stop = reader(file, columns, counts)
        frames.append(frame.with_columns(_file=pl.lit(file.index, dtype=pl.Int32())))
        if stop is not None:
            break
    rows = pl.concat(frames, how="vertical")
    return rows.with_row_index("_i"), stop


# ---------------------------------------------------------------------------------------------
# Validation rules over all rows read: the first violation in reading order wins


@dataclass(frozen=True)
class _Violation:
    index: int
    message: str


_Rule = Callable[[pl.DataFrame, Callable[[int], str]], "_Violation | None"]


def _row_rule(mask: pl.Expr, text: Callable[[dict[str, Any]], str]) -> _Rule:
    """Make a rule on single rows: the first row where ``mask`` holds, described by ``text``."""

    def rule(rows: pl.DataFrame, where: Callable[[int], str]) -> _Violation | None:
        hit = rows.filter(mask.fill_null(False)).head(1)
        if hit.height == 0:
            return None
        row = hit.row(0, named=True)
        return _Violation(row["_i"], f"{where(row['_i'])}: {text(row)}")

    return rule


def _duplicate_rule(keys: list[str], text: Callable[[dict[str, Any]], str]) -> _Rule:
    """Make a rule: the first row repeating ``keys`` of an earlier row, citing the earlier one."""

    def rule(rows: pl.DataFrame, where: Callable[[int], str]) -> _Violation | None:
        first = pl.col("_i").min().over(keys)
        hit = rows.with_columns(_first=first).filter(pl.col("_i") > pl.col("_first")).head(1)
        if hit.height == 0:
            return None
        row = hit.row(0, named=True)
        return _Violation(
            row["_i"], f"{where(row['_i'])}: {text(row)} (first at {where(row['_first'])})"
        )

    return rule


def _family_rule(rows: pl.DataFrame, where: Callable[[int], str]) -> _Violation | None:
    """Find the first row whose family differs from the family of its request's first row."""
    first_i = pl.col("_i").min().over("request_id")
    first_family = pl.col("family").first().over("request_id")
    hit = (
        rows.with_columns(_first=first_i, _family0=first_family)
        .filter(pl.col("family") != pl.col("_family0"))
        .head(1)
    )
    if hit.height == 0:
        return None
    row = hit.row(0, named=True)
    return _Violation(
        row["_i"],
        f"{where(row['_i'])}: request {row['request_id']!r} has family {row['family']!r} here "
        f"but {row['_family0']!r} at {where(row['_first'])} (a request's family is constant)",
    )


def _validate(
    rows: pl.DataFrame, stop: str | None, files: list[ArchiveFile], rules: list[_Rule]
) -> None:
    """Raise the first violation of ``rules`` in reading order, else ``stop`` if any."""
    locs = rows.get_column("_loc").to_numpy()
    file_of = rows.get_column("_file").to_numpy()

    def where(i: int) -> str:
        return format_location(files[int(file_of[i])], int(locs[i]))

    found = [v for rule in rules if (v := rule(rows, where)) is not None]
    if found:
        raise SpecReplayError(min(found, key=lambda v: v.index).message)
    if stop is not None:
        raise SpecReplayError(stop)


_DUPLICATE_REQUEST: Final[_Rule] = _duplicate_rule(
    ["request_id"], lambda r: f"duplicate request_id {r['request_id']!r}"
)
_ROUND_RULES: Final[list[_Rule]] = [
    _row_rule(pl.col("round") < 0, lambda r: f"round = {r['round']}: rounds are numbered from 0"),
    _row_rule(pl.col("accepted") < 0, lambda r: f"accepted = {r['accepted']}: must be ≥ 0"),
    _row_rule(
        pl.col("drafted") < 1,
        lambda r: f"drafted = {r['drafted']}: must be ≥ 1 (null when unknown)",
    ),
    _row_rule(
        pl.col("accepted") > pl.col("drafted"),
        lambda r: f"accepted = {r['accepted']} exceeds drafted = {r['drafted']}",
    ),
    _row_rule(
        pl.col("context_tokens") < 0,
        lambda r: f"context_tokens = {r['context_tokens']}: must be ≥ 0 (null when unknown)",
    ),
    _duplicate_rule(
        ["request_id", "round"],
        lambda r: f"duplicate round {r['round']} of request {r['request_id']!r}",
    ),
    _family_rule,
]
_SUM_RULES: Final[list[_Rule]] = [
    _row_rule(pl.col("n") < 1, lambda r: f"rounds = {r['n']}: must be ≥ 1"),
    _row_rule(
        pl.col("t") < pl.col("n"),
        lambda r: (
            f"retained_tokens = {_num(r['t'])} is less than rounds = {r['n']} "
            "(each round retains at least 1 token)"
        ),
    ),
    _DUPLICATE_REQUEST,
]


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _finish(sums: pl.DataFrame, buckets: Buckets) -> pl.DataFrame:
    """Sort (request_id, bucket in specification order) and keep the columns of ARM_SCHEMA."""
    order = {name: i for i, name in enumerate(buckets.names)}
    return (
        sums.with_columns(_b=pl.col("bucket").replace_strict(order, return_dtype=pl.Int32()))
        .sort("request_id", "_b")
        .select(pl.col(c).cast(dt) for c, dt in ARM_SCHEMA.items())
    )


_Reader = Callable[[list[ArchiveFile], _Options], tuple[pl.DataFrame, list[str]]]


def _table_depth(rule: DepthByBucket) -> pl.Expr:
    """Return the depth ``rule`` gives each round by its ``context_tokens`` (null without one)."""
    ctx = pl.col("context_tokens")
    expr: Any = pl
    for lo, hi, d in rule.entries:
        expr = expr.when((ctx >= lo) & (ctx < hi)).then(pl.lit(d))
    out: pl.Expr = expr.otherwise(pl.lit(None)).cast(pl.Int64())
    return out


def _truncated(accepted: pl.Expr, depth: int | DepthByBucket | None) -> pl.Expr:
    """Return A of a round (a round retains 1 + A, §1), or min(A, depth) for the proxy.

    A ``depth-by-bucket`` table truncates each round at its own depth
    (docs/methods.md#policies-adaptive-drafting).
    """
    if depth is None:
        return accepted
    if isinstance(depth, DepthByBucket):
        return pl.min_horizontal(accepted, _table_depth(depth))
    return pl.min_horizontal(accepted, pl.lit(depth))


def _round_value(opts: _Options) -> pl.Expr:
    """Per round: retained 1 + A (truncated), or a table's ``per_round`` value at its depth."""
    if opts.per_round is not None and isinstance(opts.truncate, DepthByBucket):
        table = {int(k): float(v) for k, v in opts.per_round.items()}
        return _table_depth(opts.truncate).replace_strict(table, return_dtype=pl.Float64())
    return (1 + _truncated(pl.col("accepted"), opts.truncate)).cast(pl.Float64())


def table_proxy_problem(path: Path, rule: DepthByBucket, ignore: Sequence[str] = ()) -> str | None:
    """Why the survival proxy cannot replay ``rule`` on round traces at ``path``, or None.

    Each round must record its context and have drafted at least the depth the table gives it.
    """
    files = _list_files(path, skip=None, ignore=ignore)[0]
    rows, stop = _read_table(files, _ROUND_COLUMNS, [])
    _validate(rows, stop, files, _ROUND_RULES)
    d = rows.select(_table_depth(rule)).to_series()
    no_ctx = int(d.null_count())
    short = int((rows.get_column("drafted") < d).fill_null(True).sum())
    if no_ctx:
        return f"{no_ctx} rounds record no context_tokens: the table gives them no depth"
    if short:
        return (
            f"UNSUPPORTED: {short} rounds drafted fewer positions than the table gives their "
            "context, or record no drafted depth (the proxy is valid only up to the depth a "
            "round drafted, never extrapolated)"
        )
    return None


def drafted_depths(path: Path, ignore: Sequence[str] = ()) -> tuple[int | None, int]:
    """Return (the smallest recorded ``drafted`` of a round-trace arm, rounds with it null)."""
    files = _list_files(path, skip=None, ignore=ignore)[0]
    counts: list[tuple[Path, int]] = []
    rows, stop = _read_table(files, _ROUND_COLUMNS, counts)
    _validate(rows, stop, files, _ROUND_RULES)
    col = rows.get_column("drafted")
    low = col.min()
    return (int(low) if low is not None else None), int(col.null_count())  # type: ignore[arg-type]


def _read_round_traces(files: list[ArchiveFile], opts: _Options) -> tuple[pl.DataFrame, list[str]]:
    rows, stop = _read_table(files, _ROUND_COLUMNS, opts.counts)
    _validate(rows, stop, files, _ROUND_RULES)
    drafted = rows.get_column("drafted")
    if rows.height and drafted.null_count() == 0:
        opts.depths.append(int(drafted.max()))  # type: ignore[arg-type]
    b = opts.buckets
    codes = b.assign(rows.get_column("context_tokens").fill_null(-1).to_numpy())
    names = pl.Series("bucket", np.asarray(b.names, dtype=object)[codes], dtype=pl.String())
    sums = (
        rows.with_columns(names)
        .group_by("request_id", "bucket")
        .agg(
            pl.col("family").first(),
            n=pl.len().cast(pl.Int64()),
            t=_round_value(opts).sum(),
        )
    )
    notes = [f"round traces: a round retains 1 + accepted tokens; buckets {b.spec!r}"]
    unknown_ctx = rows.get_column("context_tokens").null_count()
    if unknown_ctx:
        notes.append(
            f"context unknown (context_tokens null) in {unknown_ctx} of {rows.height} rounds: "
            f"those rounds go to bucket '{b.names[b.unknown_code]}'"
        )
    unknown_depth = rows.get_column("drafted").null_count()
    if unknown_depth:
        notes.append(
            f"drafted depth unknown (drafted null) in {unknown_depth} of {rows.height} rounds: "
            "accepted ≤ drafted not checked there"
        )
    return _finish(sums, b), notes


def _read_request_sums(files: list[ArchiveFile], opts: _Options) -> tuple[pl.DataFrame, list[str]]:
    rows, stop = _read_table(files, _SUM_COLUMNS, opts.counts)
    rows = rows.rename({"rounds": "n", "retained_tokens": "t"})
    _validate(rows, stop, files, _SUM_RULES)
    unknown = opts.buckets.names[opts.buckets.unknown_code]
    notes = [
        f"per-request sums: context unknown, rounds go to bucket '{unknown}'",
        "per-request sums: round-level checks (accepted ≤ drafted, repeated rounds) impossible",
    ]
    sums = rows.select("request_id", "family", bucket=pl.lit(unknown), n="n", t="t")
    return _finish(sums, opts.buckets), notes


# ---------------------------------------------------------------------------------------------
# Answer files: Spec-Bench and FastChat/Medusa


def _question_id(obj: dict[str, Any]) -> str:
    if "question_id" not in obj:
        raise _BadRecord("missing key 'question_id'")
    qid = obj["question_id"]
    if type(qid) is int or isinstance(qid, str):
        return str(qid)
    raise _BadRecord(f"question_id should be an integer or string, got {json.dumps(qid)[:40]}")


class _BadRecord(Exception):
    """A problem with one answer or question line (located by the caller)."""


def _chosen(obj: dict[str, Any], choice: int) -> dict[str, Any]:
    choices = obj.get("choices")
    if not isinstance(choices, list):
        raise _BadRecord("missing list 'choices'")
    if choice >= len(choices):
        raise _BadRecord(f"choices has {len(choices)} entries: no choices[{choice}] (--choice)")
    chosen = choices[choice]
    if not isinstance(chosen, dict):
        raise _BadRecord(f"choices[{choice}] should be an object")
    return chosen


def _whole_numbers(chosen: dict[str, Any], key: str, choice: int, minimum: int) -> list[int]:
    """Return ``chosen[key]`` as a non-empty list of whole numbers ≥ ``minimum``."""
    where = f"choices[{choice}].{key}"
    values = chosen.get(key)
    if not isinstance(values, list):
        raise _BadRecord(f"missing list {where}")
    if not values:
        raise _BadRecord(f"{where} is empty")
    out: list[int] = []
    for k, v in enumerate(values):
        ok = type(v) is int or (type(v) is float and v.is_integer())
        if not ok:
            raise _BadRecord(f"{where}[{k}] = {json.dumps(v)[:40]} is not a whole number")
        if v < minimum:
            raise _BadRecord(f"{where}[{k}] = {json.dumps(v)}: must be ≥ {minimum}")
        out.append(int(v))
    return out


def _read_answers(
    files: list[ArchiveFile], opts: _Options, parse: Callable[[dict[str, Any]], dict[str, Any]]
) -> pl.DataFrame:
    """Parse every answer line into a (request_id, family, n, t) row; validate across lines."""
    data: dict[str, list[Any]] = {c: [] for c in (*_SUMS_SCHEMA, "_loc", "_file")}
    stop = None
    for file in files:
        count = 0
        try:
            for lineno, obj in _json_objects(file):
                try:
                    rec = parse(obj)
                except _BadRecord as exc:
                    raise _LineError(lineno, str(exc)) from None
                for key, value in rec.items():
                    data[key].append(value)
                data["_loc"].append(lineno)
                data["_file"].append(file.index)
                count += 1
        except _LineError as err:
            stop = f"{format_location(file, err.loc)}: {err.message}"
        opts.counts.append((file.path, count))
        if stop is not None:
            break
    schema = {**_SUMS_SCHEMA, "_loc": pl.Int64(), "_file": pl.Int32()}
    rows = pl.DataFrame(data, schema=schema).with_row_index("_i")
    dup = _duplicate_rule(["request_id"], lambda r: f"duplicate question_id {r['request_id']}")
    _validate(rows, stop, files, [dup])
    return rows


def _read_spec_bench(files: list[ArchiveFile], opts: _Options) -> tuple[pl.DataFrame, list[str]]:
    c, d = opts.choice, opts.drafted

    def parse(obj: dict[str, Any]) -> dict[str, Any]:
        qid = _question_id(obj)
        family = obj.get("category")
        if not isinstance(family, str):
            raise _BadRecord("missing string 'category'")
        steps = _whole_numbers(_chosen(obj, c), "accept_lengths", c, 1)  # each entry = 1 + A
        if d is not None:
            for k, v in enumerate(steps):
                if v > d + 1:
                    raise _BadRecord(
                        f"choices[{c}].accept_lengths[{k}] = {v} exceeds drafted + 1 = {d + 1} "
                        f"(--drafted {d})"
                    )
        return {"request_id": qid, "family": family, "n": len(steps), "t": float(sum(steps))}

    rows = _read_answers(files, opts, parse)
    if d is not None:
        opts.depths.append(d)
    unknown = opts.buckets.names[opts.buckets.unknown_code]
    notes = [
        f"Spec-Bench answers, choices[{c}]: one round per accept_lengths entry, "
        "each entry = retained tokens 1 + A of that step",
        f"context unknown: rounds go to bucket '{unknown}'",
        "drafted depth unknown"
        if d is None
        else f"drafted depth {d} (--drafted): every step checked to retain ≤ {d + 1} tokens",
    ]
    sums = rows.select("request_id", "family", bucket=pl.lit(unknown), n="n", t="t")
    return _finish(sums, opts.buckets), notes


def _read_questions(path: Path) -> tuple[dict[str, tuple[str, str]], int]:
    """Return question_id → (category, location) of a FastChat ``question.jsonl``, and its count."""
    if not path.exists():
        raise SpecReplayError(f"{path}: no such file (--question-file)")
    if path.is_dir():
        raise SpecReplayError(f"{path}: is a directory; --question-file takes question.jsonl")
    file = ArchiveFile(0, path, "jsonl")
    categories: dict[str, tuple[str, str]] = {}
    try:
        for lineno, obj in _json_objects(file):
            where = format_location(file, lineno)
            try:
                qid = _question_id(obj)
            except _BadRecord as exc:
                raise _LineError(lineno, str(exc)) from None
            category = obj.get("category")
            if not isinstance(category, str):
                raise _LineError(lineno, "missing string 'category'")
            if qid in categories:
                raise _LineError(
                    lineno, f"duplicate question_id {qid} (first at {categories[qid][1]})"
                )
            categories[qid] = (category, where)
    except _LineError as err:
        raise SpecReplayError(f"{format_location(file, err.loc)}: {err.message}") from None
    if not categories:
        raise SpecReplayError(f"{path}: empty question file (--question-file)")
    return categories, len(categories)


def _read_medusa(files: list[ArchiveFile], opts: _Options) -> tuple[pl.DataFrame, list[str]]:
    assert opts.question_file is not None  # read_arm requires it for this kind
    qfile, c = opts.question_file, opts.choice
    categories, n_questions = _read_questions(qfile)
    opts.counts.append((qfile, n_questions))

    def parse(obj: dict[str, Any]) -> dict[str, Any]:
        qid = _question_id(obj)
        if qid not in categories:
            raise _BadRecord(f"question_id {qid} is not in {qfile}")
        chosen = _chosen(obj, c)
        idxs = _whole_numbers(chosen, "idxs", c, 0)
        new_tokens = _whole_numbers(chosen, "new_tokens", c, 0)
        if len(idxs) != len(new_tokens):
            raise _BadRecord(
                f"choices[{c}] has {len(idxs)} idxs but {len(new_tokens)} new_tokens "
                "(one of each per turn)"
            )
        rounds = sum(i + 1 for i in idxs)  # Medusa's loop counter starts at 0: idxs[t] + 1 rounds
        retained = sum(new_tokens)
        if retained < rounds:
            raise _BadRecord(
                f"Σ new_tokens = {retained} is less than rounds Σ (idxs + 1) = {rounds} "
                "(each round retains at least 1 token)"
            )
        return {"request_id": qid, "family": categories[qid][0], "n": rounds, "t": float(retained)}

    rows = _read_answers(files, opts, parse)
    unknown = opts.buckets.names[opts.buckets.unknown_code]
    notes = [
        f"FastChat/Medusa answers, choices[{c}]: Medusa rounds = Σ (idxs + 1) per question "
        "(its loop counts from 0 and breaks after the final step); retained tokens = Σ new_tokens",
        f"families: category from {qfile}",
        f"context unknown: rounds go to bucket '{unknown}'",
        "per-request sums only: no per-round counts of accepted drafts, drafted depth unknown",
    ]
    sums = rows.select("request_id", "family", bucket=pl.lit(unknown), n="n", t="t")
    return _finish(sums, opts.buckets), notes


_READERS: Final[dict[str, _Reader]] = {
    "round-traces": _read_round_traces,
    "request-sums": _read_request_sums,
    "spec-bench": _read_spec_bench,
    "medusa": _read_medusa,
}

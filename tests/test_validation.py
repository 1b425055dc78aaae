"""Every validation rule of docs/inputs.md#position-traces-schema-v1, triggered by a small bad
archive, with exact locations.

Each test writes a valid archive from :mod:`archive_factory`, breaks one thing, and checks the
error line: ``PATH:line N: message`` for JSON Lines (1-based physical line, blank lines counted)
and ``PATH: row N (0-based): message`` for Parquet. The JSONL files carry blank lines before rows
2 and 5 (``BLANKS``), so a physical line differs from the row index; the bad row is never the
first (except where a test says so).

Row layout of ``valid_rows()`` (3 requests × 2 rounds × positions 1..3)::

    row  0  1  2 | 3  4  5 | 6  7  8 | ...
    req  0  0  0 | 0  0  0 | 1  1  1 | ...
    rnd  0  0  0 | 1  1  1 | 0  0  0 | ...
    pos  1  2  3 | 1  2  3 | 1  2  3 | ...

The order rules are also checked with ``chunk_rows=4`` (rounds straddle chunks), since the errors
must not depend on how the reader chunks the file.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from archive_factory import LOGGING_ARM, clone, valid_rows, write_jsonl, write_parquet
from corpus import error_lines
from typer.testing import CliRunner

from specreplay.cli import app
from specreplay.errors import SpecReplayError
from specreplay.replay.archive.reader import ArchiveReader

KINDS = ("jsonl", "parquet")
BLANKS = {2: 2, 5: 1}  # blank lines before rows 2 and 5 of every JSONL file
BAD = 5  # the row most tests break: request 0, round 1, position 3 (last of its round)

Row = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# helpers


@pytest.fixture(scope="module")
def base_rows() -> list[Row]:
    return valid_rows()


def line_of(i: int, blanks: dict[int, int] | None = None) -> int:
    """1-based physical line of row ``i`` in a JSONL file written with ``blanks``."""
    blanks = BLANKS if blanks is None else blanks
    return i + 1 + sum(n for k, n in blanks.items() if k <= i)


def where(path: Path, kind: str, i: int, blanks: dict[int, int] | None = None) -> str:
    """Prefix (docs/inputs.md#position-traces-schema-v1) of an error about row ``i`` of ``path``."""
    if kind == "jsonl":
        return f"{path}:line {line_of(i, blanks)}"
    return f"{path}: row {i} (0-based)"


def cite(kind: str, i: int, blanks: dict[int, int] | None = None) -> str:
    """How a message cites row ``i`` of the same file."""
    return f"line {line_of(i, blanks)}" if kind == "jsonl" else f"row {i}"


def write(
    tmp_path: Path,
    kind: str,
    rows: list[Row] | list[Row | str],
    *,
    blanks: dict[int, int] | None = None,
    dtypes: dict[str, pl.DataType] | None = None,
    name: str = "trace",
) -> Path:
    path = tmp_path / f"{name}.{kind}"
    if kind == "jsonl":
        return write_jsonl(path, rows, blank_before=BLANKS if blanks is None else blanks)
    return write_parquet(path, rows, schema_overrides=dtypes)  # type: ignore[arg-type]


def errors_of(path: Path, **kwargs: Any) -> list[str]:
    return ArchiveReader(path, max_errors=None, **kwargs).validate()


def first_error(path: Path) -> str:
    with pytest.raises(SpecReplayError) as info:
        for _ in ArchiveReader(path, max_errors=1):
            pass
    return str(info.value)


def assert_first(path: Path, expected: str) -> list[str]:
    """The first error (``max_errors=1``) is exactly ``expected``; the collected ones start so."""
    with pytest.raises(SpecReplayError, match=f"^{re.escape(expected)}$"):
        for _ in ArchiveReader(path, max_errors=1):
            pass
    errs = errors_of(path)
    assert errs[:1] == [expected]
    return errs


def assert_only(path: Path, expected: list[str], *, chunked: bool = False) -> None:
    """The archive's errors are exactly ``expected`` (the first raised with ``max_errors=1``).

    ``chunked`` also reads it 4 rows at a time, so rounds of 3 rows straddle chunks (the order
    state machine carries its state across them).
    """
    assert assert_first(path, expected[0]) == expected
    if chunked:
        assert errors_of(path, chunk_rows=4) == expected


def assert_valid(path: Path) -> None:
    assert errors_of(path) == []
    for _ in ArchiveReader(path, max_errors=1):
        pass


def broken(rows: list[Row], i: int, **changes: Any) -> list[Row]:
    out = clone(rows)
    out[i].update(changes)
    return out


# ---------------------------------------------------------------------------------------------
# the factory's archive is valid (so every error below is caused by the one change)


@pytest.mark.parametrize("kind", KINDS)
def test_valid_archive_passes(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    path = write(tmp_path, kind, base_rows)
    assert_valid(path)
    reader = ArchiveReader(path)
    n_rounds = sum(b.round_offsets.shape[0] - 1 for b in reader)
    assert n_rounds == 6
    assert reader.logging_arm == LOGGING_ARM


def test_narrow_parquet_dtypes_pass(tmp_path: Path, base_rows: list[Row]) -> None:
    """: integer columns accept any integer width that fits; float lists any width.

    See docs/inputs.md#position-traces-schema-v1.
    """
    dtypes: dict[str, pl.DataType] = {
        "context_tokens": pl.Int32(),
        "round": pl.UInt8(),
        "position": pl.Int8(),
        "drafted_id": pl.UInt16(),
        "cand_ids": pl.List(pl.UInt32()),
        "target_probs": pl.List(pl.Float32()),
    }
    path = write(tmp_path, "parquet", base_rows, dtypes=dtypes)
    assert_valid(path)


# ---------------------------------------------------------------------------------------------
# per-row rules on the lists (both forms)


ROW_CASES: dict[str, tuple[Callable[[Row], None], str]] = {}


def _case(name: str, message: str) -> Callable[[Callable[[Row], None]], Callable[[Row], None]]:
    def deco(fn: Callable[[Row], None]) -> Callable[[Row], None]:
        ROW_CASES[name] = (fn, message)
        return fn

    return deco


@_case("ragged-target", "list lengths differ: cand_ids has 4, target_probs has 3")
def _(r: Row) -> None:
    r["target_probs"] = r["target_probs"][:3]


@_case("ragged-emitted", "list lengths differ: cand_ids has 4, emitted_q has 5")
def _(r: Row) -> None:
    r["emitted_q"] = [*r["emitted_q"], 0.0]


@_case("empty-lists", "empty candidate lists")
def _(r: Row) -> None:
    r.update(cand_ids=[], draft_logprobs=[], target_probs=[], emitted_q=[])


@_case("duplicate-cand", "duplicate cand_ids")
def _(r: Row) -> None:
    r["cand_ids"][2] = r["cand_ids"][0]


@_case("negative-cand", "negative cand_id")
def _(r: Row) -> None:
    r["cand_ids"][1] = -3


@_case("nan-draft", "NaN or +inf in draft_logprobs (nan)")
def _(r: Row) -> None:
    r["draft_logprobs"][1] = math.nan


@_case("inf-draft", "NaN or +inf in draft_logprobs (inf)")
def _(r: Row) -> None:
    r["draft_logprobs"][1] = math.inf


@_case("nan-target", "NaN or inf in target_probs (nan)")
def _(r: Row) -> None:
    r["target_probs"][1] = math.nan


@_case("inf-target", "NaN or inf in target_probs (inf)")
def _(r: Row) -> None:
    r["target_probs"][1] = math.inf


@_case("target-negative", "target probability < 0 or > 1 (-0.125)")
def _(r: Row) -> None:
    r["target_probs"][2] = -0.125


@_case("target-above-1", "target probability < 0 or > 1 (1.5)")
def _(r: Row) -> None:
    r["target_probs"] = [1.5, 0.0, 0.0, 0.0]


@_case("target-sum", "Σ target_probs > 1 + 1e-6 (1.125)")
def _(r: Row) -> None:
    r["target_probs"] = [0.5, 0.25, 0.25, 0.125]


@_case("target-sum-just-over", "Σ target_probs > 1 + 1e-6 (1.000002)")
def _(r: Row) -> None:
    # dyadic part sums exactly to 1; 2e-6 is twice the tolerance
    r["target_probs"] = [0.5, 0.25, 0.125, 0.125 + 2e-6]


@_case("draft-positive", "draft log-probability > 0 (0.25)")
def _(r: Row) -> None:
    r["draft_logprobs"][2] = 0.25


@_case("draft-sum", "Σ exp(draft_logprobs) > 1 + 1e-6 (1.125)")
def _(r: Row) -> None:
    r["draft_logprobs"] = [math.log(x) for x in (0.5, 0.25, 0.25, 0.125)]


@_case("drafted-not-in-cands", "drafted_id not in cand_ids (1000)")
def _(r: Row) -> None:
    r["drafted_id"] = 1000  # the factory draws ids from [0, 1000)


@_case("emitted-sum", "emitted_q does not sum to 1 within 1e-6 (0.75)")
def _(r: Row) -> None:
    r["emitted_q"] = [0.25, 0.25, 0.125, 0.125]


@_case("emitted-range", "emitted_q value < 0 or > 1 (1.5)")
def _(r: Row) -> None:
    r["emitted_q"] = [1.5, -0.5, 0.0, 0.0]


@_case("emitted-nan", "NaN or inf in emitted_q (nan)")
def _(r: Row) -> None:
    r["emitted_q"][0] = math.nan


@_case(
    "emitted-zero-at-drafted", "emitted_q is 0 at drafted_id (the logged draft had probability 0)"
)
def _(r: Row) -> None:
    r["emitted_q"] = [1.0, 0.0, 0.0, 0.0]
    r["drafted_id"] = r["cand_ids"][1]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(ROW_CASES))
def test_row_rule(tmp_path: Path, base_rows: list[Row], kind: str, case: str) -> None:
    mutate, message = ROW_CASES[case]
    rows = clone(base_rows)
    mutate(rows[BAD])
    path = write(tmp_path, kind, rows)
    assert_only(path, [f"{where(path, kind, BAD)}: {message}"])


@pytest.mark.parametrize("kind", KINDS)
def test_jsonl_literals_nan_infinity(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    """JSONL spells them NaN / Infinity (Python's and JavaScript's convention)."""
    rows = clone(base_rows)
    rows[BAD]["draft_logprobs"][0] = math.inf
    rows[BAD + 3]["target_probs"][0] = math.nan
    path = write(tmp_path, kind, rows)
    if kind == "jsonl":
        text = path.read_text()
        assert "Infinity" in text and "NaN" in text
    assert_only(
        path,
        [
            f"{where(path, kind, BAD)}: NaN or +inf in draft_logprobs (inf)",
            f"{where(path, kind, BAD + 3)}: NaN or inf in target_probs (nan)",
        ],
    )


@pytest.mark.parametrize("kind", KINDS)
def test_sums_just_under_tolerance_pass(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    """Σ target_probs and Σ exp(draft_logprobs) of 1 + 5e-7 are within the 1e-6 tolerance."""
    rows = clone(base_rows)
    rows[BAD]["target_probs"] = [0.5, 0.25, 0.125, 0.125 + 5e-7]
    rows[BAD + 1]["draft_logprobs"] = [math.log(x) for x in (0.5, 0.25, 0.125, 0.125 + 5e-7)]
    assert 1.0 < sum(math.exp(x) for x in rows[BAD + 1]["draft_logprobs"]) < 1.0 + 1e-6
    assert_valid(write(tmp_path, kind, rows))


@pytest.mark.parametrize("kind", KINDS)
def test_minus_inf_draft_logprob_allowed(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    """: −inf is allowed (q = 0); JSONL spells it -Infinity.

    See docs/inputs.md#position-traces-schema-v1.
    """
    rows = clone(base_rows)
    rows[BAD]["draft_logprobs"][3] = -math.inf
    path = write(tmp_path, kind, rows)
    if kind == "jsonl":
        assert "-Infinity" in path.read_text()
    assert_valid(path)
    lp = np.concatenate([b.draft_logprobs for b in ArchiveReader(path)])
    assert np.isneginf(lp).sum() == 1


@pytest.mark.parametrize("kind", KINDS)
def test_drafted_id_shown_exactly(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    """The offending drafted_id is printed as the integer it is."""
    rows = broken(base_rows, BAD, drafted_id=123456789012)
    path = write(tmp_path, kind, rows)
    assert "123456789012" in first_error(path)


# ---------------------------------------------------------------------------------------------
# missing, null and mistyped values


JSONL_VALUE_CASES: dict[str, tuple[Callable[[Row], Row | str], str]] = {
    "missing-required-key": (
        lambda r: {k: v for k, v in r.items() if k != "round"},
        "missing required column 'round'",
    ),
    "missing-optional-key": (
        lambda r: {k: v for k, v in r.items() if k != "accepted"},
        "missing value in column 'accepted' (present in the file's first row)",
    ),
    "null-optional": (lambda r: {**r, "drafted_id": None}, "missing value in column 'drafted_id'"),
    "string-round": (lambda r: {**r, "round": "1"}, "column 'round' should be integer, got \"1\""),
    "float-position": (
        lambda r: {**r, "position": 3.0},
        "column 'position' should be integer, got 3.0",
    ),
    "bool-round": (lambda r: {**r, "round": True}, "column 'round' should be integer, got true"),
    "bool-in-cand-ids": (
        lambda r: {**r, "cand_ids": [True, 5, 6, 7]},
        "column 'cand_ids' should be list of integers, got [true, 5, 6, 7]",
    ),
    "int-accepted": (lambda r: {**r, "accepted": 1}, "column 'accepted' should be boolean, got 1"),
    "int-request-id": (
        lambda r: {**r, "request_id": 7},
        "column 'request_id' should be string, got 7",
    ),
    "string-in-target": (
        lambda r: {**r, "target_probs": ["0.5", 0.25, 0.125, 0.125]},
        "column 'target_probs' should be list of floats, got [\"0.5\", 0.25, 0.125, 0.125]",
    ),
    "bool-in-draft": (
        lambda r: {**r, "draft_logprobs": [False, -1.0, -2.0, -3.0]},
        "column 'draft_logprobs' should be list of floats, got [false, -1.0, -2.0, -3.0]",
    ),
    "scalar-for-list": (
        lambda r: {**r, "emitted_q": 1.0},
        "column 'emitted_q' should be list of floats, got 1.0",
    ),
    "too-large-int": (
        lambda r: {**r, "context_tokens": 2**63},
        "context_tokens = 9223372036854775808 does not fit in int64",
    ),
    "too-large-cand": (
        lambda r: {**r, "cand_ids": [2**64, 1, 2, 3]},
        "a cand_id does not fit in int64",
    ),
    "invalid-json": (
        lambda r: '{"request_id": "req-0",, "x": 1}',
        "invalid JSON: Expecting property name enclosed in double quotes at column 24",
    ),
    "not-an-object": (lambda r: "[1, 2, 3]", "expected a JSON object"),
}


@pytest.mark.parametrize("case", list(JSONL_VALUE_CASES))
def test_jsonl_value_rule(tmp_path: Path, base_rows: list[Row], case: str) -> None:
    mutate, message = JSONL_VALUE_CASES[case]
    rows: list[Row | str] = list(clone(base_rows))
    rows[BAD] = mutate(rows[BAD])  # type: ignore[arg-type]
    path = write(tmp_path, "jsonl", rows)
    assert_only(path, [f"{where(path, 'jsonl', BAD)}: {message}"])


def test_jsonl_null_required_value(tmp_path: Path, base_rows: list[Row]) -> None:
    """A null in a required column is reported (the message names the column)."""
    rows = broken(base_rows, BAD, round=None)
    path = write(tmp_path, "jsonl", rows)
    message = first_error(path)
    assert message.startswith(f"{where(path, 'jsonl', BAD)}: ")
    assert "'round'" in message


def test_jsonl_null_required_value_says_value(tmp_path: Path, base_rows: list[Row]) -> None:
    rows = broken(base_rows, BAD, round=None)
    path = write(tmp_path, "jsonl", rows)
    assert "missing required column" not in first_error(path)


def test_jsonl_truncated_line_column(tmp_path: Path, base_rows: list[Row]) -> None:
    rows: list[Row | str] = list(clone(base_rows))
    rows[BAD] = '{"request_id": "req-0", "family": '  # 34 characters: the value is due at 35
    path = write(tmp_path, "jsonl", rows)
    assert first_error(path) == (
        f"{where(path, 'jsonl', BAD)}: invalid JSON: Expecting value at column 35"
    )


def test_jsonl_column_not_in_first_row(tmp_path: Path, base_rows: list[Row]) -> None:
    rows = [{k: v for k, v in r.items() if k != "emitted_q"} for r in base_rows]
    rows[BAD]["emitted_q"] = base_rows[BAD]["emitted_q"]
    path = write(tmp_path, "jsonl", rows)
    assert_only(
        path,
        [
            f"{where(path, 'jsonl', BAD)}: column 'emitted_q' appears here but not in the file's "
            "first row"
        ],
    )


def test_jsonl_missing_required_in_first_row(tmp_path: Path, base_rows: list[Row]) -> None:
    rows = clone(base_rows)
    del rows[0]["family"]
    path = write(tmp_path, "jsonl", rows)
    assert_first(path, f"{where(path, 'jsonl', 0)}: missing required column 'family'")


@pytest.mark.parametrize("column", ["request_id", "round", "cand_ids", "target_probs"])
def test_parquet_missing_required_column(tmp_path: Path, base_rows: list[Row], column: str) -> None:
    rows = [{k: v for k, v in r.items() if k != column} for r in base_rows]
    path = write(tmp_path, "parquet", rows)
    message = f"{path}: missing required column {column!r}"
    with pytest.raises(SpecReplayError, match=f"^{re.escape(message)}$"):
        ArchiveReader(path, max_errors=None).validate()


PARQUET_DTYPE_CASES: dict[str, tuple[pl.DataType, str]] = {
    "round": (pl.String(), "String; expected integer"),
    "position": (pl.Float64(), "Float64; expected integer"),
    "accepted": (pl.Int8(), "Int8; expected boolean"),
    "family": (pl.Int64(), "Int64; expected string"),
    "cand_ids": (pl.List(pl.Float64()), "List(Float64); expected list of integers"),
    "target_probs": (pl.List(pl.String()), "List(String); expected list of floats"),
    "draft_logprobs": (pl.Float64(), "Float64; expected list of floats"),
}


@pytest.mark.parametrize("column", list(PARQUET_DTYPE_CASES))
def test_parquet_wrong_dtype(tmp_path: Path, base_rows: list[Row], column: str) -> None:
    dtype, tail = PARQUET_DTYPE_CASES[column]
    rows = clone(base_rows)
    if column == "family":
        for r in rows:
            r["family"] = len(r["family"])
    if column == "draft_logprobs":
        for r in rows:
            r["draft_logprobs"] = r["draft_logprobs"][0]
    path = write(tmp_path, "parquet", rows, dtypes={column: dtype})
    assert pl.read_parquet_schema(path)[column] == dtype
    message = f"{path}: column {column!r} has type {tail}"
    with pytest.raises(SpecReplayError, match=f"^{re.escape(message)}$"):
        ArchiveReader(path, max_errors=None).validate()


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("round", None),
        ("context_tokens", None),
        ("drafted_id", None),
        ("accepted", None),
        ("logging_arm", None),
        ("target_probs", "inner"),
        ("cand_ids", None),
    ],
)
def test_parquet_null_value(tmp_path: Path, base_rows: list[Row], column: str, value: Any) -> None:
    rows = clone(base_rows)
    if value == "inner":
        rows[BAD][column][1] = None
    else:
        rows[BAD][column] = None
    path = write(tmp_path, "parquet", rows)
    assert_only(
        path, [f"{where(path, 'parquet', BAD)}: missing or non-numeric value in {column!r}"]
    )


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("context_tokens", 2**63, "context_tokens = 9223372036854775808 does not fit in int64"),
        ("round", 2**64 - 1, "round = 18446744073709551615 does not fit in int64"),
        ("drafted_id", 2**63 + 5, "drafted_id = 9223372036854775813 does not fit in int64"),
    ],
)
def test_parquet_uint64_too_large(
    tmp_path: Path, base_rows: list[Row], column: str, value: int, message: str
) -> None:
    rows = broken(base_rows, BAD, **{column: value})
    path = write(tmp_path, "parquet", rows, dtypes={column: pl.UInt64()})
    assert_only(path, [f"{where(path, 'parquet', BAD)}: {message}"])


def test_parquet_uint64_cand_id_too_large(tmp_path: Path, base_rows: list[Row]) -> None:
    rows = clone(base_rows)
    rows[BAD]["cand_ids"][2] = 2**63
    path = write(tmp_path, "parquet", rows, dtypes={"cand_ids": pl.List(pl.UInt64())})
    assert_only(path, [f"{where(path, 'parquet', BAD)}: a cand_id does not fit in int64"])


def test_parquet_uint64_that_fits_passes(tmp_path: Path, base_rows: list[Row]) -> None:
    dtypes: dict[str, pl.DataType] = {
        "context_tokens": pl.UInt64(),
        "cand_ids": pl.List(pl.UInt64()),
    }
    assert_valid(write(tmp_path, "parquet", base_rows, dtypes=dtypes))


# ---------------------------------------------------------------------------------------------
# a row dropped for a bad value must not cause a second, false error at the next row


RAGGED = "list lengths differ: cand_ids has 4, target_probs has 2"
DROP_CASES: dict[str, tuple[str, Callable[[Row], Row | str], str]] = {
    "jsonl-invalid-json": (
        "jsonl",
        lambda r: "[1,,2]",
        "invalid JSON: Expecting value at column 4",
    ),
    "jsonl-string-round": (
        "jsonl",
        lambda r: {**r, "round": "1"},
        "column 'round' should be integer, got \"1\"",
    ),
    "jsonl-too-large": (
        "jsonl",
        lambda r: {**r, "context_tokens": 2**63},
        "context_tokens = 9223372036854775808 does not fit in int64",
    ),
    "parquet-null-round": (
        "parquet",
        lambda r: {**r, "round": None},
        "missing or non-numeric value in 'round'",
    ),
    "parquet-null-accepted": (
        "parquet",
        lambda r: {**r, "accepted": None},
        "missing or non-numeric value in 'accepted'",
    ),
    "jsonl-ragged": ("jsonl", lambda r: {**r, "target_probs": r["target_probs"][:2]}, RAGGED),
    "parquet-ragged": ("parquet", lambda r: {**r, "target_probs": r["target_probs"][:2]}, RAGGED),
}


@pytest.mark.parametrize("case", list(DROP_CASES))
def test_dropped_row_not_reported_twice(tmp_path: Path, base_rows: list[Row], case: str) -> None:
    kind, mutate, message = DROP_CASES[case]
    rows: list[Row | str] = list(clone(base_rows))
    rows[4] = mutate(rows[4])  # type: ignore[arg-type]  # position 2 of round 1 of req-0
    path = write(tmp_path, kind, rows)
    assert errors_of(path) == [f"{where(path, kind, 4)}: {message}"]


@pytest.mark.parametrize("kind", KINDS)
def test_dropped_first_row_not_reported_twice(
    tmp_path: Path, base_rows: list[Row], kind: str
) -> None:
    rows = broken(base_rows, 0, round=None)
    path = write(tmp_path, kind, rows)
    errs = errors_of(path)
    assert len(errs) == 1
    assert errs[0].startswith(f"{where(path, kind, 0)}: ")


@pytest.mark.parametrize("first_shard", ["all-bad", "empty"])
def test_jsonl_shards_first_without_valid_rows(
    tmp_path: Path, base_rows: list[Row], first_shard: str
) -> None:
    shards = tmp_path / "archive"
    shards.mkdir()
    bad_lines: list[Row | str] = ["[1,,2]"] * 2 if first_shard == "all-bad" else []
    first = write(shards, "jsonl", bad_lines, blanks={}, name="part-00000")
    write(shards, "jsonl", base_rows, blanks={}, name="part-00001")
    expected = [
        f"{first}:line {i}: invalid JSON: Expecting value at column 4"
        for i in range(1, len(bad_lines) + 1)
    ]
    assert errors_of(shards) == expected


# ---------------------------------------------------------------------------------------------
# order, duplicate and constancy rules (both forms)


@pytest.mark.parametrize("kind", KINDS)
def test_accepted_true_after_false(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    rows = clone(base_rows)
    for i, acc in zip((3, 4, 5), (True, False, True), strict=True):
        rows[i]["accepted"] = acc
    path = write(tmp_path, kind, rows)
    assert_only(
        path,
        [
            f"{where(path, kind, 5)}: accepted True after a False in round 1 of request "
            f"'req-0'; first at {cite(kind, 4)}"
        ],
        chunked=True,
    )


@pytest.mark.parametrize("chunk_rows", [1, 2, 4])
@pytest.mark.parametrize("kind", KINDS)
def test_accepted_true_after_false_across_a_chunk_boundary(
    tmp_path: Path, base_rows: list[Row], kind: str, chunk_rows: int
) -> None:
    # round 1 of req-0 is rows 3, 4, 5: False at row 3, True at row 4. With 1, 2 or 4 rows per
    # chunk, rows 3 and 4 fall in different chunks (3 | 4, 2-3 | 4-5, 0-3 | 4-7), so the rejection
    # must be carried from one chunk to the next.
    rows = clone(base_rows)
    for i, acc in zip((3, 4, 5), (False, True, False), strict=True):
        rows[i]["accepted"] = acc
    path = write(tmp_path, kind, rows)
    expected = [
        f"{where(path, kind, 4)}: accepted True after a False in round 1 of request "
        f"'req-0'; first at {cite(kind, 3)}"
    ]
    assert errors_of(path, chunk_rows=chunk_rows) == expected
    with pytest.raises(SpecReplayError, match=f"^{re.escape(expected[0])}$"):
        for _ in ArchiveReader(path, max_errors=1, chunk_rows=chunk_rows):
            pass


@pytest.mark.parametrize("kind", KINDS)
def test_round_not_starting_at_position_1(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    rows = base_rows[:3] + base_rows[4:]  # drop position 1 of round 1 of req-0
    path = write(tmp_path, kind, rows)
    assert_only(
        path,
        [f"{where(path, kind, 3)}: round 1 of request 'req-0' starts at position 2, not 1"],
        chunked=True,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_position_below_1(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    rows = broken(base_rows, 3, position=0)
    path = write(tmp_path, kind, rows)
    assert_first(
        path,
        f"{where(path, kind, 3)}: position < 1 (positions start at 1) "
        "(request 'req-0', round 1, position 0)",
    )


@pytest.mark.parametrize("kind", KINDS)
def test_gap_in_positions(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    rows = base_rows[:4] + base_rows[5:]  # drop position 2 of round 1 of req-0
    path = write(tmp_path, kind, rows)
    assert_only(
        path,
        [f"{where(path, kind, 4)}: gap in positions of round 1 of request 'req-0': 3 follows 1"],
        chunked=True,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_duplicate_position(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    rows = clone([*base_rows[:6], base_rows[4], *base_rows[6:]])  # position 2 again after 3
    path = write(tmp_path, kind, rows)
    assert_only(
        path,
        [
            f"{where(path, kind, 6)}: duplicate (request_id='req-0', round=1, position=2); "
            f"first at {cite(kind, 4)}"
        ],
        chunked=True,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_duplicate_adjacent(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    rows = clone([*base_rows[:5], base_rows[4], *base_rows[5:]])
    path = write(tmp_path, kind, rows)
    assert_only(
        path,
        [
            f"{where(path, kind, 5)}: duplicate (request_id='req-0', round=1, position=2); "
            f"first at {cite(kind, 4)}"
        ],
        chunked=True,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_round_not_contiguous_single_row(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    # req-0 round 0 positions 1, 2 | req-1 round 0 | req-0 round 0 position 3 | ...
    rows = base_rows[:2] + base_rows[6:9] + [base_rows[2]] + base_rows[3:6] + base_rows[9:]
    path = write(tmp_path, kind, rows)
    assert_only(
        path,
        [
            f"{where(path, kind, 5)}: rows of round 0 of request 'req-0' are not contiguous; "
            f"first at {cite(kind, 0)}"
        ],
        chunked=True,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_round_not_contiguous_two_rows(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    # req-0 round 0 position 1 | req-1 round 0 | req-0 round 0 positions 2, 3 | ...
    rows = base_rows[:1] + base_rows[6:9] + base_rows[1:6] + base_rows[9:]
    path = write(tmp_path, kind, rows)
    assert errors_of(path) == [
        f"{where(path, kind, 4)}: rows of round 0 of request 'req-0' are not contiguous; "
        f"first at {cite(kind, 0)}"
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_round_out_of_order_first_error(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    rows = base_rows[3:6] + base_rows[0:3] + base_rows[6:]  # req-0: round 1 then round 0
    path = write(tmp_path, kind, rows)
    assert_first(
        path,
        f"{where(path, kind, 3)}: round 0 of request 'req-0' comes after a later round; "
        f"first at {cite(kind, 0)}",
    )


@pytest.mark.parametrize("kind", KINDS)
def test_round_out_of_order_once(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    rows = base_rows[3:6] + base_rows[0:3] + base_rows[6:]
    path = write(tmp_path, kind, rows)
    assert errors_of(path) == [
        f"{where(path, kind, 3)}: round 0 of request 'req-0' comes after a later round; "
        f"first at {cite(kind, 0)}"
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_round_split_across_files(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    shards = tmp_path / "archive"
    shards.mkdir()
    # round 1 of req-0 is rows 3..5: rows 3 in the first shard, 4 and 5 in the second
    first = write(shards, kind, base_rows[:4], blanks={}, name="part-00000")
    second = write(shards, kind, base_rows[4:], blanks={}, name="part-00001")
    first_at = where(first, kind, 3, blanks={})
    assert_only(
        shards,
        [
            f"{where(second, kind, 0, blanks={})}: round 1 of request 'req-0' is split across "
            f"files; first at {first_at}"
        ],
        chunked=True,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_round_repeated_in_next_file(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    shards = tmp_path / "archive"
    shards.mkdir()
    first = write(shards, kind, base_rows[:6], blanks={}, name="part-00000")
    second = write(shards, kind, base_rows[3:], blanks={}, name="part-00001")
    assert_first(
        shards,
        f"{where(second, kind, 0, blanks={})}: round 1 of request 'req-0' is split across "
        f"files; first at {where(first, kind, 3, blanks={})}",
    )


@pytest.mark.parametrize("kind", KINDS)
def test_round_out_of_order_across_files(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    shards = tmp_path / "archive"
    shards.mkdir()
    first = write(shards, kind, base_rows[3:6] + base_rows[6:], blanks={}, name="part-00000")
    second = write(shards, kind, base_rows[0:3], blanks={}, name="part-00001")
    assert_first(
        shards,
        f"{where(second, kind, 0, blanks={})}: round 0 of request 'req-0' comes after a later "
        f"round; first at {where(first, kind, 0, blanks={})}",
    )


@pytest.mark.parametrize("kind", KINDS)
def test_family_changes(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    rows = broken(base_rows, BAD, family="math")
    path = write(tmp_path, kind, rows)
    assert_only(
        path,
        [
            f"{where(path, kind, BAD)}: request 'req-0' changes family to 'math'; "
            f"first at {cite(kind, 0)}"
        ],
        chunked=True,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_family_changes_across_files(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    shards = tmp_path / "archive"
    shards.mkdir()
    first = write(shards, kind, base_rows[:3], blanks={}, name="part-00000")
    second = write(
        shards, kind, broken(base_rows[3:], 2, family="math"), blanks={}, name="part-00001"
    )
    assert_only(
        shards,
        [
            f"{where(second, kind, 2, blanks={})}: request 'req-0' changes family to 'math'; "
            f"first at {where(first, kind, 0, blanks={})}"
        ],
        chunked=True,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_family_change_mid_round_once(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    rows = broken(base_rows, 4, family="math")
    path = write(tmp_path, kind, rows)
    assert errors_of(path) == [
        f"{where(path, kind, 4)}: request 'req-0' changes family to 'math'; "
        f"first at {cite(kind, 0)}"
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_context_tokens_vary_within_round(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    rows = broken(base_rows, BAD, context_tokens=999)
    path = write(tmp_path, kind, rows)
    assert_only(
        path,
        [
            f"{where(path, kind, BAD)}: context_tokens 999 varies within round 1 of request "
            f"'req-0'; first at {cite(kind, 3)}"
        ],
        chunked=True,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_logging_arm_varies(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    rows = broken(base_rows, BAD, logging_arm="other")
    path = write(tmp_path, kind, rows)
    message = first_error(path)
    assert message.startswith(f"{where(path, kind, BAD)}: logging_arm 'other' differs from ")
    assert repr(LOGGING_ARM) in message
    assert len(errors_of(path)) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_logging_arm_varies_cites_like_spec(
    tmp_path: Path, base_rows: list[Row], kind: str
) -> None:
    rows = broken(base_rows, BAD, logging_arm="other")
    path = write(tmp_path, kind, rows)
    assert first_error(path).endswith(f"; first at {cite(kind, 0)}")


@pytest.mark.parametrize("kind", KINDS)
def test_logging_arm_varies_across_files(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    shards = tmp_path / "archive"
    shards.mkdir()
    first = write(shards, kind, base_rows[:6], blanks={}, name="part-00000")
    second = write(
        shards, kind, broken(base_rows[6:], 1, logging_arm="other"), blanks={}, name="part-00001"
    )
    message = first_error(shards)
    assert message.startswith(f"{where(second, kind, 1, blanks={})}: logging_arm 'other' differs")
    assert where(first, kind, 0, blanks={}) in message


# ---------------------------------------------------------------------------------------------
# error limits


def _many_bad(n_bad: int) -> list[Row]:
    rows = clone(valid_rows(n_requests=5, n_rounds=2))  # 30 rows
    for i in range(n_bad):
        rows[i]["drafted_id"] = 1000 + i
    return rows


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("chunk_rows", [7, 100_000])
def test_max_errors_truncates_in_file_order(
    tmp_path: Path, base_rows: list[Row], kind: str, chunk_rows: int
) -> None:
    rows = _many_bad(25)
    path = write(tmp_path, kind, rows)
    expected = [
        f"{where(path, kind, i)}: drafted_id not in cand_ids ({1000 + i})" for i in range(25)
    ]
    reader = ArchiveReader(path, max_errors=20, chunk_rows=chunk_rows)
    assert reader.validate() == expected[:20]
    assert reader.truncated
    reader = ArchiveReader(path, max_errors=None, chunk_rows=chunk_rows)
    assert reader.validate() == expected
    assert not reader.truncated


@pytest.mark.parametrize("kind", KINDS)
def test_exactly_max_errors_is_not_truncated(
    tmp_path: Path, base_rows: list[Row], kind: str
) -> None:
    path = write(tmp_path, kind, _many_bad(20))
    reader = ArchiveReader(path, max_errors=20)
    assert len(reader.validate()) == 20
    assert not reader.truncated


# ---------------------------------------------------------------------------------------------
# command line


def _run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


@pytest.mark.parametrize("kind", KINDS)
def test_cli_validate_bad_file(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    path = write(tmp_path, kind, _many_bad(25))
    result = _run("validate", str(path))
    assert result.exit_code == 2
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout == ""
    lines = error_lines(result)
    assert lines[0] == f"{where(path, kind, 0)}: drafted_id not in cand_ids (1000)"
    assert sum(line.startswith(str(path)) for line in lines) == 20

    result = _run("validate", str(path), "--all")
    assert result.exit_code == 2
    assert "Traceback" not in result.stdout + result.stderr
    assert sum(line.startswith(str(path)) for line in result.stderr.splitlines()) == 25


@pytest.mark.parametrize("kind", KINDS)
def test_cli_validate_unreadable_archive(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"garbage.{kind}"
    path.write_bytes(b"\xff\xfe not an archive \x00")
    result = _run("validate", str(path))
    assert result.exit_code == 2
    assert "Traceback" not in result.stdout + result.stderr
    assert str(path) in result.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_cli_validate_good_file(tmp_path: Path, base_rows: list[Row], kind: str) -> None:
    path = write(tmp_path, kind, base_rows)
    result = _run("validate", str(path))
    assert result.exit_code == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout.strip()

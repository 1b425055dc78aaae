"""The bad-input corpus (issue 7, item 6): every kind of malformed input, through the CLI.

Each case writes one small input with exactly one defect (from :mod:`archive_factory`, the real
files under ``tests/data`` or a few hand-written lines), runs the command through typer's
``CliRunner`` into ``--out`` and checks the contract of docs/inputs.md and docs/commands.md:

- exit code 2;
- stderr is ONE line, ``error: …``, holding the expected fragments: the file and the row or line
  (``PATH:line N`` for JSON Lines, the 1-based physical line; ``PATH: row N (0-based)`` for
  Parquet; ``PATH: …`` for a problem of the whole file) or, for an option, the option and its
  value; and the words that say what is wrong;
- no ``Traceback`` anywhere, nothing on stdout;
- the ``--out`` folder does not exist afterwards and no temporary folder is left beside it.

The cases are distinct defects (each breaks a different rule), not one defect in several files.
The expected location is computed from the row a case breaks, never copied from the output.
Usage errors (a non-number for a float option, a missing argument) are one line too since issue 9
(``specreplay/commands/cliparse.py``); their corpus is ``tests/test_safety_options.py``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from archive_factory import LOGGING_ARM, clone, valid_rows, write_jsonl, write_parquet
from corpus import assert_clean, tree_digest
from typer.testing import CliRunner

from specreplay.cli import app

REPO = Path(__file__).resolve().parents[1]
SPEC_BENCH = REPO / "tests" / "data" / "spec-bench" / "eagle.jsonl"
MEDUSA = REPO / "tests" / "data" / "medusa-mtbench"
STEM = "temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"
MEDUSA_A = MEDUSA / f"medusa-vicuna-7b-v1.3-{STEM}"
QUESTIONS = MEDUSA / "question.jsonl"
BASE, CAND = LOGGING_ARM, "top4:t1:dyadic24@3"  # the factory's archive: 4 candidates, depth 3
FAST = ["-q", "--n-boot", "100"]

Row = dict[str, Any]
Built = tuple[list[str], list[str]]  # (CLI arguments without --out, fragments of the one line)
Builder = Callable[[Path], Built]

CASES: dict[str, tuple[str, Builder]] = {}
"""name → (input kind, builder): ``builder(tmp)`` writes the bad input under ``tmp``."""


def case(name: str, kind: str) -> Callable[[Builder], Builder]:
    def deco(fn: Builder) -> Builder:
        assert name not in CASES, name
        CASES[name] = (kind, fn)
        return fn

    return deco


# ---------------------------------------------------------------------------------------------
# position archives (docs/inputs.md#position-traces-schema-v1), replayed by requalify (which stops
# at the first error)
#
# valid_rows(): 3 requests × 2 rounds × positions 1..3; row 5 is request 'req-0', round 1,
# position 3 (the last of its round), row 3 its first. Files are written without blank lines,
# so row i is JSONL line i + 1.


def where(path: Path, i: int) -> str:
    """.md#position-traces-schema-v1 prefix of row ``i`` of a file written without blank lines.

    See docs/inputs.md#position-traces-schema-v1.
    """
    if path.suffix in (".parquet", ".arrow"):
        return f"{path}: row {i} (0-based): "
    return f"{path}:line {i + 1}: "


def cite(path: Path, i: int) -> str:
    """How a message cites row ``i`` of the same file."""
    return f"row {i}" if path.suffix in (".parquet", ".arrow") else f"line {i + 1}"


def requalify(path: Path, *extra: str) -> list[str]:
    return ["requalify", str(path), "--baseline", BASE, "--candidate", CAND, *FAST, *extra]


def write_rows(path: Path, rows: list[Row], dtypes: dict[str, pl.DataType] | None = None) -> Path:
    if path.suffix == ".parquet":
        return write_parquet(path, rows, schema_overrides=dtypes)
    if path.suffix == ".arrow":  # Arrow IPC: the same frame as the Parquet writer's
        write_parquet(path.with_suffix(".tmp-parquet"), rows, schema_overrides=dtypes)
        pl.read_parquet(path.with_suffix(".tmp-parquet")).write_ipc(path)
        path.with_suffix(".tmp-parquet").unlink()
        return path
    return write_jsonl(path, rows)


def archive(tmp: Path, suffix: str, mutate: Callable[[list[Row]], Any]) -> Path:
    rows = clone(valid_rows())
    mutate(rows)
    return write_rows(tmp / f"trace.{suffix}", rows)


def row_case(
    name: str, suffix: str, message: str, i: int = 5
) -> Callable[[Callable[[Row], Any]], Any]:
    """Register a case that breaks row ``i`` of the factory archive with ``mutate(row)``."""

    def deco(mutate: Callable[[Row], Any]) -> Builder:
        def build(tmp: Path) -> Built:
            path = archive(tmp, suffix, lambda rows: mutate(rows[i]))
            return requalify(path), [where(path, i) + message]

        return case(name, "position archive")(build)

    return deco


@row_case("jsonl-duplicate-cand-ids", "jsonl", "duplicate cand_ids")
def _(r: Row) -> None:
    r["cand_ids"][2] = r["cand_ids"][0]


@row_case("parquet-drafted-id-not-in-cand-ids", "parquet", "drafted_id not in cand_ids (1000)")
def _(r: Row) -> None:
    r["drafted_id"] = 1000  # the factory draws candidate ids from [0, 1000)


@row_case("jsonl-negative-target-prob", "jsonl", "target probability < 0 or > 1 (-0.125)")
def _(r: Row) -> None:
    r["target_probs"][2] = -0.125


@row_case("parquet-target-prob-above-1", "parquet", "target probability < 0 or > 1 (1.5)")
def _(r: Row) -> None:
    r["target_probs"] = [1.5, 0.0, 0.0, 0.0]


@row_case("jsonl-target-mass-above-1", "jsonl", "Σ target_probs > 1 + 1e-6 (1.125)")
def _(r: Row) -> None:
    r["target_probs"] = [0.5, 0.25, 0.25, 0.125]


@row_case("parquet-positive-draft-logprob", "parquet", "draft log-probability > 0 (0.25)")
def _(r: Row) -> None:
    r["draft_logprobs"][2] = 0.25


@row_case("jsonl-draft-mass-above-1", "jsonl", "Σ exp(draft_logprobs) > 1 + 1e-6 (1.125)")
def _(r: Row) -> None:
    r["draft_logprobs"] = [math.log(x) for x in (0.5, 0.25, 0.25, 0.125)]


@row_case("jsonl-nan-draft-logprob", "jsonl", "NaN or +inf in draft_logprobs (nan)")
def _(r: Row) -> None:
    r["draft_logprobs"][1] = math.nan  # written as the literal NaN


@row_case("parquet-inf-target-prob", "parquet", "NaN or inf in target_probs (inf)")
def _(r: Row) -> None:
    r["target_probs"][1] = math.inf


@row_case(
    "parquet-list-lengths-differ",
    "parquet",
    "list lengths differ: cand_ids has 4, target_probs has 3",
)
def _(r: Row) -> None:
    r["target_probs"] = r["target_probs"][:3]


@row_case("jsonl-empty-lists", "jsonl", "empty candidate lists")
def _(r: Row) -> None:
    r.update(cand_ids=[], draft_logprobs=[], target_probs=[], emitted_q=[])


@row_case("parquet-negative-cand-id", "parquet", "negative cand_id")
def _(r: Row) -> None:
    r["cand_ids"][1] = -3


@row_case("jsonl-emitted-q-not-a-law", "jsonl", "emitted_q does not sum to 1 within 1e-6 (0.75)")
def _(r: Row) -> None:
    r["emitted_q"] = [0.25, 0.25, 0.125, 0.125]


@row_case("parquet-emitted-q-out-of-range", "parquet", "emitted_q value < 0 or > 1 (1.5)")
def _(r: Row) -> None:
    r["emitted_q"] = [1.5, -0.5, 0.0, 0.0]


@row_case("jsonl-emitted-q-zero-at-drafted", "jsonl", "emitted_q is 0 at drafted_id")
def _(r: Row) -> None:
    r["emitted_q"] = [1.0, 0.0, 0.0, 0.0]
    r["drafted_id"] = r["cand_ids"][1]


@row_case("jsonl-wrong-type", "jsonl", "column 'round' should be integer, got \"1\"")
def _(r: Row) -> None:
    r["round"] = "1"


@row_case("jsonl-bool-in-cand-ids", "jsonl", "column 'cand_ids' should be list of integers")
def _(r: Row) -> None:
    r["cand_ids"][0] = True


@row_case(
    "jsonl-integer-out-of-range",
    "jsonl",
    "context_tokens = 9223372036854775808 does not fit in int64",
)
def _(r: Row) -> None:
    r["context_tokens"] = 2**63


@row_case("jsonl-null-required-value", "jsonl", "missing value in column 'round'")
def _(r: Row) -> None:
    r["round"] = None


@row_case("jsonl-missing-required-column", "jsonl", "missing required column 'family'")
def _(r: Row) -> None:
    del r["family"]


@row_case(
    "parquet-null-in-optional-column", "parquet", "missing or non-numeric value in 'accepted'"
)
def _(r: Row) -> None:
    r["accepted"] = None


@row_case(
    "jsonl-optional-column-dropped-later",
    "jsonl",
    "missing value in column 'emitted_q' (present in the file's first row)",
)
def _(r: Row) -> None:
    del r["emitted_q"]


@row_case("parquet-position-zero", "parquet", "position < 1 (positions start at 1)", i=3)
def _(r: Row) -> None:
    r["position"] = 0


@row_case("jsonl-position-above-1024", "jsonl", "position > 1024")
def _(r: Row) -> None:
    r["position"] = 1025


@row_case(
    "jsonl-family-changes-within-request",
    "jsonl",
    "request 'req-0' changes family to 'math'; first at line 1",
)
def _(r: Row) -> None:
    r["family"] = "math"


@row_case(
    "parquet-context-varies-within-round",
    "parquet",
    "context_tokens 999 varies within round 1 of request 'req-0'; first at row 3",
)
def _(r: Row) -> None:
    r["context_tokens"] = 999


@row_case(
    "jsonl-logging-arm-varies",
    "jsonl",
    "logging_arm 'top4:t1@2' differs from 'top4:t1@3'; first at line 1",
)
def _(r: Row) -> None:
    r["logging_arm"] = "top4:t1@2"


def order_case(
    name: str, suffix: str, at: int, message: str
) -> Callable[[Callable[[list[Row]], list[Row]]], Any]:
    """Register a case that reorders the rows; the error is at (new) row ``at``."""

    def deco(reorder: Callable[[list[Row]], list[Row]]) -> Builder:
        def build(tmp: Path) -> Built:
            path = write_rows(tmp / f"trace.{suffix}", clone(reorder(valid_rows())))
            return requalify(path), [
                where(path, at) + message.format(c0=cite(path, 0), c4=cite(path, 4))
            ]

        return case(name, "position archive")(build)

    return deco


@order_case(
    "jsonl-round-out-of-order",
    "jsonl",
    3,
    "round 0 of request 'req-0' comes after a later round; first at {c0}",
)
def _(rows: list[Row]) -> list[Row]:
    return rows[3:6] + rows[0:3] + rows[6:]


@order_case(
    "parquet-duplicate-position",
    "parquet",
    6,
    "duplicate (request_id='req-0', round=1, position=2); first at {c4}",
)
def _(rows: list[Row]) -> list[Row]:
    return [*rows[:6], rows[4], *rows[6:]]


@order_case(
    "jsonl-gap-in-positions",
    "jsonl",
    4,
    "gap in positions of round 1 of request 'req-0': 3 follows 1",
)
def _(rows: list[Row]) -> list[Row]:
    return rows[:4] + rows[5:]


@order_case(
    "parquet-round-starts-at-position-2",
    "parquet",
    3,
    "round 1 of request 'req-0' starts at position 2, not 1",
)
def _(rows: list[Row]) -> list[Row]:
    return rows[:3] + rows[4:]


@order_case(
    "jsonl-round-rows-not-contiguous",
    "jsonl",
    5,
    "rows of round 0 of request 'req-0' are not contiguous; first at {c0}",
)
def _(rows: list[Row]) -> list[Row]:
    return rows[:2] + rows[6:9] + [rows[2]] + rows[3:6] + rows[9:]


@order_case(
    "parquet-accepted-after-a-false",
    "parquet",
    5,
    "accepted True after a False in round 1 of request 'req-0'; first at {c4}",
)
def _(rows: list[Row]) -> list[Row]:
    rows = clone(rows)
    for i, acc in zip((3, 4, 5), (True, False, True), strict=True):
        rows[i]["accepted"] = acc
    return rows


@case("parquet-logging-arm-not-an-arm", "position archive")
def _(tmp: Path) -> Built:
    path = archive(tmp, "parquet", lambda rows: [r.update(logging_arm="top4:t1") for r in rows])
    return requalify(path), [
        where(path, 0) + "logging_arm: arm 'top4:t1': expected exactly one '@DEPTH'"
    ]


@case("parquet-missing-required-column", "position archive")
def _(tmp: Path) -> Built:
    rows = [{k: v for k, v in r.items() if k != "target_probs"} for r in valid_rows()]
    path = write_rows(tmp / "trace.parquet", rows)
    return requalify(path), [f"{path}: missing required column 'target_probs'"]


@case("parquet-wrong-column-type", "position archive")
def _(tmp: Path) -> Built:
    path = write_rows(tmp / "trace.parquet", valid_rows(), {"position": pl.Float64()})
    return requalify(path), [f"{path}: column 'position' has type Float64; expected integer"]


@case("parquet-uint64-out-of-range", "position archive")
def _(tmp: Path) -> Built:
    rows = clone(valid_rows())
    rows[5]["round"] = 2**64 - 1
    path = write_rows(tmp / "trace.parquet", rows, {"round": pl.UInt64()})
    return requalify(path), [where(path, 5) + "round = 18446744073709551615 does not fit in int64"]


@case("jsonl-empty-file", "position archive")
def _(tmp: Path) -> Built:
    path = tmp / "trace.jsonl"
    path.write_text("\n\n")
    return requalify(path), [f"{path}: the archive holds no row (1 file read)"]


@case("parquet-zero-rows", "position archive")
def _(tmp: Path) -> Built:
    path = write_rows(tmp / "trace.parquet", valid_rows())
    pl.read_parquet(path).head(0).write_parquet(path)
    return requalify(path), [f"{path}: the archive holds no row"]


def line_case(name: str, line: str, message: str) -> None:
    """Register a case replacing row 5 of a JSON Lines archive by the text ``line``."""

    def build(tmp: Path) -> Built:
        rows: list[Row | str] = list(clone(valid_rows()))
        rows[5] = line
        path = write_jsonl(tmp / "trace.jsonl", rows)
        return requalify(path), [where(path, 5) + message]

    case(name, "position archive")(build)


line_case(
    "jsonl-truncated-line",
    '{"request_id": "req-0", "family": ',
    "invalid JSON: Expecting value at column 35",
)
line_case(
    "jsonl-not-json", "request_id=req-0 family=code", "invalid JSON: Expecting value at column 1"
)
line_case("jsonl-not-an-object", "[1, 2, 3]", "expected a JSON object")
# Python's json raises ValueError (not JSONDecodeError) past 4,300 digits, RecursionError when
# nested past the recursion limit: found by tests/test_fuzz.py
line_case(
    "jsonl-integer-of-5000-digits",
    '{"round": ' + "9" * 5000 + "}",
    "invalid JSON: an integer of more than 4300 digits",
)
line_case("jsonl-nested-too-deeply", "[" * 100_000, "invalid JSON: nested too deeply")


@case("jsonl-invalid-utf8", "position archive")
def _(tmp: Path) -> Built:
    path = write_jsonl(tmp / "trace.jsonl", valid_rows())
    lines = path.read_bytes().splitlines(keepends=True)
    lines[5] = lines[5].replace(b'"code"', b'"c\xff\xfede"')
    path.write_bytes(b"".join(lines))
    return requalify(path), [where(path, 5) + "not valid UTF-8"]


@case("jsonl-column-not-in-first-row", "position archive")
def _(tmp: Path) -> Built:
    rows = [{k: v for k, v in r.items() if k != "emitted_q"} for r in valid_rows()]
    rows[5]["emitted_q"] = valid_rows()[5]["emitted_q"]
    path = write_rows(tmp / "trace.jsonl", rows)
    return requalify(path), [
        where(path, 5) + "column 'emitted_q' appears here but not in the file's first row"
    ]


@case("jsonl-carried-column-changes-type", "position archive")
def _(tmp: Path) -> Built:
    rows = clone(valid_rows())
    for i, r in enumerate(rows):
        r["batch"] = "eight" if i == 5 else 8
    path = write_rows(tmp / "trace.jsonl", rows)
    # a pass reads a carried column only to code --by cells (else it is listed as not read)
    return requalify(path, "--by", "batch"), [
        where(path, 5) + "column 'batch' is str here but int above"
    ]


@case("jsonl-carried-column-out-of-range", "position archive")
def _(tmp: Path) -> Built:
    rows = clone(valid_rows())
    for i, r in enumerate(rows):
        r["batch"] = 2**63 if i == 5 else 8  # polars would read it as a null, silently
    path = write_rows(tmp / "trace.jsonl", rows)
    # a pass reads a carried column only to code --by cells (else it is listed as not read)
    msg = where(path, 5) + f"column 'batch' = {2**63} does not fit in int64"
    return requalify(path, "--by", "batch"), [msg]


@case("parquet-corrupt-file", "position archive")
def _(tmp: Path) -> Built:
    path = tmp / "trace.parquet"
    path.write_bytes(b"PAR1 this is not a parquet file PAR1")
    return requalify(path), [f"{path}: cannot read as Parquet"]


# Arrow IPC (issue 8): the same contract as Parquet; rows are cited 0-based.


@row_case("ipc-drafted-id-not-in-cand-ids", "arrow", "drafted_id not in cand_ids (1000)")
def _(r: Row) -> None:
    r["drafted_id"] = 1000


@case("ipc-truncated", "position archive")
def _(tmp: Path) -> Built:
    path = write_rows(tmp / "trace.arrow", valid_rows())
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    return requalify(path), [f"{path}: cannot read as Arrow IPC: not an Arrow IPC file"]


@case("ipc-flipped-bytes", "position archive")
def _(tmp: Path) -> Built:
    path = write_rows(tmp / "trace.arrow", valid_rows())
    raw = bytearray(path.read_bytes())
    at = raw.find(b"req-1")  # a request id, stored inline: 0xFF makes it invalid UTF-8
    assert at > 0
    raw[at] = 0xFF
    path.write_bytes(bytes(raw))
    return requalify(path), [f"{path}: cannot read as Arrow IPC at row 0 (0-based) or later"]


@case("ipc-is-parquet-renamed", "position archive")
def _(tmp: Path) -> Built:
    path = write_rows(tmp / "trace.parquet", valid_rows()).rename(tmp / "trace.arrow")
    return requalify(path), [f"{path}: cannot read as Arrow IPC: not an Arrow IPC file: it is a "
                             "Parquet file"]  # fmt: skip


@case("ipc-stream-not-file-format", "position archive")
def _(tmp: Path) -> Built:
    path = tmp / "trace.arrow"
    pl.read_parquet(write_rows(tmp / "t.parquet", valid_rows())).write_ipc_stream(path)
    (tmp / "t.parquet").unlink()
    return requalify(path), [f"{path}: cannot read as Arrow IPC: not an Arrow IPC file: it is an "
                             "Arrow stream"]  # fmt: skip


@case("ipc-string-position", "position archive")
def _(tmp: Path) -> Built:
    path = write_rows(tmp / "trace.arrow", valid_rows(), {"position": pl.String()})
    return requalify(path), [f"{path}: column 'position' has type String; expected integer"]


@case("ipc-missing-cand-ids", "position archive")
def _(tmp: Path) -> Built:
    rows = [{k: v for k, v in r.items() if k != "cand_ids"} for r in valid_rows()]
    path = write_rows(tmp / "trace.arrow", rows)
    return requalify(path), [f"{path}: missing required column 'cand_ids'"]


@case("dir-mixing-forms", "position archive")
def _(tmp: Path) -> Built:
    rows = valid_rows()
    folder = tmp / "arch"
    folder.mkdir()
    write_rows(folder / "part-00000.parquet", rows[:6])
    write_rows(folder / "part-00001.jsonl", rows[6:])
    return requalify(folder), [
        f"{folder}: directory mixes archive forms: Parquet (part-00000.parquet) and JSON Lines "
        "(part-00001.jsonl)"
    ]


@case("unknown-suffix", "position archive")
def _(tmp: Path) -> Built:
    path = tmp / "trace.csv"
    path.write_text("request_id,family\n")
    return requalify(path), [f"{path}: unknown archive format"]


@case("missing-path", "position archive")
def _(tmp: Path) -> Built:
    path = tmp / "nowhere"
    return requalify(path), [f"{path}: no such file or directory"]


@case("dir-without-shards", "position archive")
def _(tmp: Path) -> Built:
    (tmp / "arch").mkdir()
    (tmp / "arch" / "README.txt").write_text("no shards here\n")
    return requalify(tmp / "arch"), [f"{tmp / 'arch'}: directory holds no .parquet or .jsonl shard"]


def shards(
    tmp: Path, first: list[Row], second: list[Row], suffix: str = "parquet"
) -> tuple[Path, Path, Path]:
    folder = tmp / "arch"
    folder.mkdir()
    a = write_rows(folder / f"part-00000.{suffix}", first)
    b = write_rows(folder / f"part-00001.{suffix}", second)
    return folder, a, b


@case("dir-bad-row-in-second-shard", "position archive")
def _(tmp: Path) -> Built:
    rows = clone(valid_rows())
    rows[7]["drafted_id"] = 1000
    folder, _, b = shards(tmp, rows[:6], rows[6:])
    return requalify(folder), [where(b, 1) + "drafted_id not in cand_ids (1000)"]


@case("dir-round-split-across-files", "position archive")
def _(tmp: Path) -> Built:
    rows = valid_rows()
    folder, a, b = shards(tmp, rows[:4], rows[4:], suffix="jsonl")
    return requalify(folder), [
        where(b, 0)
        + f"round 1 of request 'req-0' is split across files; first at {where(a, 3)[:-2]}"
    ]


@case("dir-optional-columns-differ", "position archive")
def _(tmp: Path) -> Built:
    rows = valid_rows()
    second = [{k: v for k, v in r.items() if k != "emitted_q"} for r in rows[6:]]
    folder, a, b = shards(tmp, rows[:6], second)
    return requalify(folder), [f"{b}: optional columns ['emitted_q'] differ from {a}"]


@case("logging-arm-option-and-column", "position archive")
def _(tmp: Path) -> Built:
    path = archive(tmp, "jsonl", lambda rows: None)
    return requalify(path, "--logging-arm", BASE), [
        f"{path}: --logging-arm given but the archive has a logging_arm column"
    ]


# ---------------------------------------------------------------------------------------------
# observed arms (docs/inputs.md#round-traces-and-per-request-sums), compared by interval; the bad
# file is always arm B


def write_table(path: Path, rows: list[Row], dtypes: dict[str, pl.DataType] | None = None) -> Path:
    """Write rows as JSON Lines or Parquet (polars' own dtypes, or ``dtypes``)."""
    if path.suffix == ".parquet":
        pl.DataFrame(rows, schema_overrides=dtypes).write_parquet(path)
        return path
    return write_jsonl(path, rows)


def round_rows() -> list[Row]:
    """Valid round traces: 12 requests × 3 rounds; row i is request i // 3, round i % 3."""
    return [
        {
            "request_id": f"r{i // 3}",
            "family": ("code", "chat")[i // 3 % 2],
            "context_tokens": 100 + i,
            "round": i % 3,
            "drafted": 4,
            "accepted": i % 5 % 4,
        }
        for i in range(36)
    ]


def interval(tmp: Path, b: Path, *extra: str, a: Path | None = None) -> list[str]:
    if a is None:
        a = write_jsonl(tmp / "a.jsonl", round_rows())
    return ["interval", str(a), str(b), *FAST, *extra]


def traces_case(
    name: str, suffix: str, i: int, message: str
) -> Callable[[Callable[[list[Row]], Any]], Any]:
    def deco(mutate: Callable[[list[Row]], Any]) -> Builder:
        def build(tmp: Path) -> Built:
            rows = round_rows()
            mutate(rows)
            b = write_table(tmp / f"b.{suffix}", rows)
            return interval(tmp, b), [where(b, i) + message]

        return case(name, "round traces")(build)

    return deco


@traces_case(
    "round-traces-accepted-exceeds-drafted", "jsonl", 7, "accepted = 5 exceeds drafted = 4"
)
def _(rows: list[Row]) -> None:
    rows[7]["accepted"] = 5


@traces_case(
    "round-traces-duplicate-round", "parquet", 8, "duplicate round 1 of request 'r2' (first at "
)
def _(rows: list[Row]) -> None:
    rows[8]["round"] = 1


@traces_case("round-traces-negative-round", "jsonl", 4, "round = -1: rounds are numbered from 0")
def _(rows: list[Row]) -> None:
    rows[4]["round"] = -1


@traces_case(
    "round-traces-family-changes", "jsonl", 5, "request 'r1' has family 'code' here but 'chat' at"
)
def _(rows: list[Row]) -> None:
    rows[5]["family"] = "code"


@traces_case("round-traces-negative-context", "parquet", 9, "context_tokens = -5: must be ≥ 0")
def _(rows: list[Row]) -> None:
    rows[9]["context_tokens"] = -5


@traces_case("round-traces-missing-column", "jsonl", 6, "missing column 'family'")
def _(rows: list[Row]) -> None:
    del rows[6]["family"]


@traces_case(
    "round-traces-fractional-accepted", "jsonl", 2, "column 'accepted' should be integer, got 1.5"
)
def _(rows: list[Row]) -> None:
    rows[2]["accepted"] = 1.5


@case("round-traces-parquet-wrong-column-type", "round traces")
def _(tmp: Path) -> Built:
    rows = [{**r, "request_id": i // 3} for i, r in enumerate(round_rows())]
    b = write_table(tmp / "b.parquet", rows)
    return interval(tmp, b), [f"{b}: column 'request_id' has type Int64; expected string"]


@case("request-sums-tokens-past-float-range", "round traces")
def _(tmp: Path) -> Built:
    rows = [
        {"request_id": f"r{i}", "family": "code", "rounds": 10, "retained_tokens": 25}
        for i in range(12)
    ]
    rows[2]["retained_tokens"] = 10**400
    b = write_jsonl(tmp / "b.jsonl", rows)
    return interval(tmp, b), [where(b, 2) + "retained_tokens = 1000", "is not a finite number"]


@case("request-sums-fewer-tokens-than-rounds", "round traces")
def _(tmp: Path) -> Built:
    rows = [
        {"request_id": f"r{i}", "family": "code", "rounds": 10, "retained_tokens": 25.5}
        for i in range(12)
    ]
    rows[3]["retained_tokens"] = 9
    b = write_jsonl(tmp / "b.jsonl", rows)
    return interval(tmp, b), [where(b, 3) + "retained_tokens = 9 is less than rounds = 10"]


@case("observed-arm-unknown-format", "round traces")
def _(tmp: Path) -> Built:
    b = write_jsonl(tmp / "b.jsonl", [{"id": 1, "tokens": [1, 2]}])
    return interval(tmp, b), [f"{b}:line 1: cannot tell the format from keys [id, tokens]"]


@case("observed-arm-shards-of-two-formats", "round traces")
def _(tmp: Path) -> Built:
    folder = tmp / "b"
    folder.mkdir()
    write_jsonl(folder / "part-0.jsonl", round_rows())
    second = write_jsonl(
        folder / "part-1.jsonl",
        [{"request_id": "x", "family": "code", "rounds": 2, "retained_tokens": 3}],
    )
    return interval(tmp, folder), [f"{second}: holds request-sums but"]


def answers(path: Path, source: Path, i: int, mutate: Callable[[Row], Any]) -> Path:
    """Copy a real answer file with line ``i`` (0-based) changed by ``mutate(record)``."""
    records = [json.loads(x) for x in source.read_text().splitlines() if x.strip()]
    mutate(records[i])
    return write_jsonl(path, records)


def bench_case(
    name: str, i: int, message: str, *extra: str
) -> Callable[[Callable[[Row], Any]], Any]:
    """A Spec-Bench case: eagle.jsonl (arm A) against a copy with line ``i`` broken."""

    def deco(mutate: Callable[[Row], Any]) -> Builder:
        def build(tmp: Path) -> Built:
            b = answers(tmp / "b.jsonl", SPEC_BENCH, i, mutate)
            return interval(tmp, b, *extra, a=SPEC_BENCH), [where(b, i) + message]

        return case(name, "Spec-Bench")(build)

    return deco


@bench_case("spec-bench-zero-accept-length", 2, "choices[0].accept_lengths[1] = 0: must be ≥ 1")
def _(r: Row) -> None:
    r["choices"][0]["accept_lengths"][1] = 0


@bench_case(
    "spec-bench-fractional-accept-length",
    1,
    "choices[0].accept_lengths[0] = 2.5 is not a whole number",
)
def _(r: Row) -> None:
    r["choices"][0]["accept_lengths"][0] = 2.5


@bench_case("spec-bench-empty-accept-lengths", 3, "choices[0].accept_lengths is empty")
def _(r: Row) -> None:
    r["choices"][0]["accept_lengths"] = []


@bench_case("spec-bench-missing-category", 4, "missing string 'category'")
def _(r: Row) -> None:
    del r["category"]


@bench_case("spec-bench-duplicate-question", 5, "duplicate question_id 1 (first at")
def _(r: Row) -> None:
    r["question_id"] = 1


@bench_case(
    "spec-bench-bool-question-id", 2, "question_id should be an integer or string, got true"
)
def _(r: Row) -> None:
    r["question_id"] = True


@case("spec-bench-step-exceeds-drafted", "Spec-Bench")
def _(tmp: Path) -> Built:
    # eagle.jsonl line 1: accept_lengths [3, 1, 4, …]: entry 2 (4 tokens) exceeds --drafted 2 + 1
    return interval(tmp, SPEC_BENCH, "--drafted", "2", a=SPEC_BENCH), [
        f"{SPEC_BENCH}:line 1: choices[0].accept_lengths[2] = 4 exceeds drafted + 1 = 3"
    ]


def medusa_case(name: str, i: int, message: str) -> Callable[[Callable[[Row], Any]], Any]:
    def deco(mutate: Callable[[Row], Any]) -> Builder:
        def build(tmp: Path) -> Built:
            b = answers(tmp / "b.jsonl", MEDUSA_A, i, mutate)
            args = interval(tmp, b, "--question-file", str(QUESTIONS), a=MEDUSA_A)
            return args, [where(b, i) + message]

        return case(name, "Medusa")(build)

    return deco


@medusa_case("medusa-question-not-in-question-file", 6, "question_id 9999 is not in")
def _(r: Row) -> None:
    r["question_id"] = 9999


@medusa_case(
    "medusa-turn-counts-differ", 7, "choices[0] has 2 idxs but 1 new_tokens (one of each per turn)"
)
def _(r: Row) -> None:
    r["choices"][0]["new_tokens"] = r["choices"][0]["new_tokens"][:1]


@medusa_case("medusa-fewer-tokens-than-rounds", 8, "Σ new_tokens = 2 is less than rounds")
def _(r: Row) -> None:
    r["choices"][0]["new_tokens"] = [1, 1]


@medusa_case("medusa-negative-idx", 9, "choices[0].idxs[1] = -1: must be ≥ 0")
def _(r: Row) -> None:
    r["choices"][0]["idxs"][1] = -1


@case("medusa-without-question-file", "Medusa")
def _(tmp: Path) -> Built:
    return interval(tmp, MEDUSA_A, a=MEDUSA_A), [
        f"{MEDUSA_A}:line 1: FastChat/Medusa answers carry no category: --question-file"
    ]


def question_case(name: str, i: int, message: str, mutate: Callable[[Row], Any]) -> None:
    def build(tmp: Path) -> Built:
        q = answers(tmp / "question.jsonl", QUESTIONS, i, mutate)
        return interval(tmp, MEDUSA_A, "--question-file", str(q), a=MEDUSA_A), [
            where(q, i) + message
        ]

    case(name, "Medusa")(build)


question_case(
    "medusa-question-file-duplicate-id",
    10,
    "duplicate question_id 81 (first at",
    lambda r: r.update(question_id=81),
)
question_case(
    "medusa-question-file-missing-category",
    11,
    "missing string 'category'",
    lambda r: r.pop("category"),
)


# ---------------------------------------------------------------------------------------------
# run counters and vLLM scrapes (docs/inputs.md#run-counters-and-vllm-scrapes), screened

RUN = {
    "suite": "s1",
    "worker": "w",
    "batch": 2,
    "context": 0,
    "request_rounds": 100,
    "accepted_position": [80, 60, 40, 20, 10],
    "step_p50_ms": 40.0,
}
CONFIG = "[draft_p50_ms]\n2 = 2.0\n"


def screen(tmp: Path, second: Row | str, config: str = CONFIG) -> tuple[list[str], Path]:
    """Counters of two runs, the second one bad (line 2), and a config."""
    counters = write_jsonl(tmp / "counters.jsonl", [RUN, second])
    cfg = tmp / "screen.toml"
    cfg.write_text(config)
    return ["screen", str(counters), "--config", str(cfg)], counters


def counters_case(name: str, second: Row | str, message: str) -> None:
    def build(tmp: Path) -> Built:
        args, counters = screen(tmp, second)
        return args, [f"{counters}:line 2: {message}"]

    case(name, "counters")(build)


counters_case("counters-not-json", "{suite: s1}", "not JSON")
counters_case(
    "counters-missing-key",
    {k: v for k, v in RUN.items() if k != "worker"},
    "missing key(s) ['worker']",
)
counters_case(
    "counters-survivals-increase",
    {**RUN, "accepted_position": [10, 20, 5]},
    "accepted_position should be non-increasing",
)
counters_case(
    "counters-survival-exceeds-rounds",
    {**RUN, "accepted_position": [101]},
    "accepted_position[0] = 101 exceeds the rounds (100)",
)
counters_case("counters-batch-zero", {**RUN, "batch": 0}, "batch should be an integer ≥ 1, got 0")
counters_case(
    "counters-negative-step",
    {**RUN, "step_p50_ms": -1},
    "step_p50_ms should be a finite number > 0, got -1",
)
counters_case("counters-empty-suite", {**RUN, "suite": ""}, "suite should be a non-empty string")
counters_case("counters-not-an-object", "[1, 2]", "expected a JSON object")
counters_case(
    "counters-step-past-float-range",
    {**RUN, "step_p50_ms": 10**400},
    "step_p50_ms should be a finite number > 0, got 1000",
)


@case("counters-no-d-b-for-batch", "counters")
def _(tmp: Path) -> Built:
    args, counters = screen(tmp, {**RUN, "batch": 3})
    return args, [f"{counters}:line 2: no D_B for batch 3"]


def scrape(drafts: int, per_pos: tuple[int, ...], extra: str = "") -> str:
    lab = 'model_name="m",engine="0"'
    lines = [
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f"vllm:spec_decode_num_drafts_total{{{lab}}} {float(drafts)}",
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {float(v)}'
        for i, v in enumerate(per_pos)
    ]
    return "\n".join(lines) + "\n" + extra


VLLM_CONFIG = CONFIG.replace("2 = 2.0", "1 = 2.0") + (
    '[[vllm]]\nbefore = "before.prom"\nafter = "after.prom"\nsuite = "b"\nworker = "v"\n'
    "batch = 1\ncontext = 0\nstep_p50_ms = 30.0\n"
)


def vllm_case(name: str, after: str, line: int | None, message: str) -> None:
    """Two scrapes named by a [[vllm]] entry; ``after`` is the (bad) second scrape."""

    def build(tmp: Path) -> Built:
        (tmp / "before.prom").write_text(scrape(100, (60, 30)))
        (tmp / "after.prom").write_text(after)
        (tmp / "screen.toml").write_text(VLLM_CONFIG)
        args = [
            "screen",
            str(tmp / "before.prom"),
            str(tmp / "after.prom"),
            "--config",
            str(tmp / "screen.toml"),
        ]
        loc = f"{tmp / 'after.prom'}:line {line}: " if line else f"{tmp / 'after.prom'}: "
        return args, [loc, message]

    case(name, "vLLM scrape")(build)


# scrape(): line 1 a comment, 2 the drafts, 3 and 4 the per-position counts, then ``extra``
vllm_case(
    "vllm-malformed-labels",
    scrape(300, (200, 90), "vllm:spec_decode_num_drafts_total{engine=1} 3\n"),
    5,
    "malformed labels {engine=1}",
)
vllm_case(
    "vllm-value-not-a-number",
    scrape(300, (200, 90)).replace("300.0", "many"),
    2,
    "value 'many' is not a number",
)
vllm_case(
    "vllm-fractional-count",
    scrape(300, (200, 90)).replace("300.0", "300.5"),
    2,
    "should be a whole count ≥ 0, got 300.5",
)
vllm_case(
    "vllm-counter-reset",
    scrape(50, (200, 90)),
    None,
    'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} decreased since',
)
vllm_case(
    "vllm-per-pos-without-position",
    scrape(300, (200, 90)).replace(',position="1"', ""),
    4,
    'needs a label position="0"',
)
vllm_case(
    "vllm-repeated-series",
    scrape(300, (200, 90)) + scrape(300, (200, 90)).splitlines()[1] + "\n",
    5,
    "repeats a series (same labels)",
)
vllm_case(
    "vllm-not-a-sample-line",
    scrape(300, (200, 90), "vllm:spec_decode_num_drafts_total\n"),
    5,
    "not a Prometheus sample line",
)


def config_case(name: str, config: str, message: str) -> None:
    def build(tmp: Path) -> Built:
        args, _ = screen(tmp, RUN, config=config)
        return args, [f"{tmp / 'screen.toml'}{message}"]

    case(name, "screen config")(build)


config_case("config-not-toml", "x = \n", ": not TOML")
config_case("config-unknown-key", CONFIG + "[centrall]\n", ": unknown key(s) ['centrall']")
config_case(
    "config-overlap-out-of-range",
    CONFIG + "[envelope]\noverlap = [0, 2]\n",
    ": envelope.overlap: should be a number in [0, 1.0], got 2",
)
config_case(
    "config-batch-key-not-integer",
    "[draft_p50_ms]\ntwo = 2.0\n",
    ": [draft_p50_ms]: keys are batch sizes (integers ≥ 1), got 'two'",
)
config_case(
    "config-vllm-entry-missing-key",
    CONFIG + '[[vllm]]\nbefore = "b.prom"\n',
    ": [[vllm]] #1: missing key(s)",
)


# ---------------------------------------------------------------------------------------------
# options: arm and bucket specs, --cost, --depths, --margin, budget options. The input files are
# valid; the line names the option and its value.


def good_archive(tmp: Path) -> Path:
    return write_jsonl(tmp / "trace.jsonl", valid_rows())


def option_case(name: str, kind: str, make: Callable[[Path], list[str]], *fragments: str) -> None:
    def build(tmp: Path) -> Built:
        return make(tmp), list(fragments)

    case(name, kind)(build)


def arm_case(name: str, option: str, value: str, message: str) -> None:
    def make(tmp: Path) -> list[str]:
        args = requalify(good_archive(tmp))
        if option in ("--baseline", "--candidate"):
            args[args.index(option) + 1] = value
        else:
            args += [option, value]
        return args

    option_case(name, "arm spec", make, f"{option}: arm {value!r}: {message}")


arm_case("arm-temperature-zero", "--baseline", "top4:t0@3", "temperature 0 ('t0'): use greedy")
arm_case("arm-greedy-with-quantizer", "--candidate", "greedy:dyadic8@3", "greedy takes no QUANT")
arm_case("arm-depth-zero", "--baseline", "top4@0", "DEPTH must be an integer in 1..127, got '0'")
arm_case(
    "arm-dyadic-bits-out-of-range",
    "--candidate",
    "top4:dyadic7@3",
    "N of dyadicN must be an integer in 8..53, got 'dyadic7'",
)
arm_case("arm-without-depth", "--baseline", "top4:t1", "expected exactly one '@DEPTH'")
arm_case("arm-top-p-above-1", "--candidate", "top4:p1.5@3", "P of pP must be in (0, 1]")
arm_case("arm-part-twice", "--reference", "top4:top2@3", "part 'top' given twice")
arm_case(
    "arm-unknown-rounding",
    "--reference",
    "top4:dyadic8:ceil@3",
    "'ceil' after the sampler QUANT 'dyadic8'",
)
arm_case("arm-unknown-part", "--candidate", "top4:k9@3", "unknown part 'k9'")
arm_case(
    "arm-depth-of-5000-digits",
    "--baseline",
    "top4@" + "9" * 5000,
    "DEPTH must be an integer in 1..127",
)
option_case(
    "arm-bad-logging-arm-option",
    "arm spec",
    lambda tmp: [*requalify(good_archive(tmp)), "--logging-arm", "x@1"],
    "--logging-arm 'x@1': arm 'x@1': unknown part 'x'",
)
option_case(
    "arm-unbalanced-brace",
    "arm spec",
    lambda tmp: ["sweep", str(good_archive(tmp)), "--arm", "top4:dyadic{8,12@3", *FAST],
    "--arm 'top4:dyadic{8,12@3': unbalanced brace",
)
option_case(
    "arm-empty-brace-alternative",
    "arm spec",
    lambda tmp: ["sweep", str(good_archive(tmp)), "--arm", "top4:dyadic{8,}@3", *FAST],
    "--arm 'top4:dyadic{8,}@3': empty alternative",
)
option_case(
    "arm-lawtest-bad-arm",
    "arm spec",
    lambda tmp: ["lawtest", "--arm", "top4:t-1@3"],
    "--arm: arm 'top4:t-1@3': T of tT must be > 0",
)


def bucket_case(name: str, spec: str, message: str) -> None:
    option_case(
        name,
        "bucket spec",
        lambda tmp: [*requalify(good_archive(tmp)), "--buckets", spec],
        f"--buckets: {message}",
    )


bucket_case("buckets-overlap", "a:<4K,b:2K-8K", "ranges of 'a' and 'b' overlap")
bucket_case("buckets-empty-range", "a:8K-4K", "range of 'a' is empty (8192 >= 4096)")
bucket_case("buckets-unreadable-number", "a:<4X", "cannot read '4X' in 'a:<4X' as a token count")
bucket_case("buckets-reserved-name", "unknown:<4K", "bucket name 'unknown' is reserved or repeated")
bucket_case("buckets-repeated-name", "a:<4K,a:>=4K", "bucket name 'a' is reserved or repeated")
bucket_case("buckets-no-range", "short", "'short' should be NAME:LO-HI, NAME:<HI or NAME:>=LO")
bucket_case("buckets-bad-range-form", "a:4K", "range '4K' in 'a:4K' should be LO-HI, <HI or >=LO")
bucket_case("buckets-fractional-tokens", "a:<10.5", "'10.5' in 'a:<10.5' is not a whole number")
bucket_case("buckets-none-given", " , ", "no bucket given")
bucket_case(
    "buckets-number-past-int64",
    "a:<" + "9" * 400,
    f"'{'9' * 400}' in 'a:<{'9' * 400}' is more tokens than an int64 holds",
)


def sweep(tmp: Path, *extra: str) -> list[str]:
    return ["sweep", str(good_archive(tmp)), "--arm", BASE, *FAST, *extra]


def cost_file(tmp: Path, text: str) -> Path:
    path = tmp / "cost.toml"
    path.write_text(text)
    return path


option_case(
    "cost-linear-missing-slope",
    "--cost",
    lambda tmp: sweep(tmp, "--cost", "linear:1"),
    "--cost 'linear:1': expected linear:T0:C (ms)",
)
option_case(
    "cost-linear-all-zero",
    "--cost",
    lambda tmp: sweep(tmp, "--cost", "linear:0:0"),
    "--cost 'linear:0:0': T0 and C are finite ms ≥ 0, not both 0",
)
option_case(
    "cost-linear-negative",
    "--cost",
    lambda tmp: sweep(tmp, "--cost", "linear:-1:0.05"),
    "--cost 'linear:-1:0.05': T0 and C are finite ms ≥ 0",
)
option_case(
    "cost-linear-infinite",
    "--cost",
    lambda tmp: sweep(tmp, "--cost", "linear:inf:0.05"),
    "--cost 'linear:inf:0.05': T0 and C are finite ms ≥ 0",
)


def cost_file_case(name: str, text: str | bytes | None, message: str) -> None:
    """``--cost FILE`` with ``text`` in the file (None: no file); the message names the file."""

    def build(tmp: Path) -> Built:
        path = tmp / "cost.toml"
        if isinstance(text, bytes):
            path.write_bytes(text)
        elif text is not None:
            path.write_text(text)
        return sweep(tmp, "--cost", str(path)), [f"--cost {path}: ", message]

    case(name, "--cost")(build)


cost_file_case("cost-missing-file", None, "No such file or directory")
cost_file_case("cost-file-not-toml", "ms_per_round = {1 = }\n", "Invalid value")
cost_file_case("cost-file-not-utf8", b"ms_per_round = {1 = 2.0} # \xff\n", "not valid UTF-8")
cost_file_case(
    "cost-file-without-table", "per_round = 2.0\n", "expected a table ms_per_round = {1 = 2.1, …}"
)
cost_file_case(
    "cost-file-depth-zero",
    "ms_per_round = {0 = 2.0, 1 = 2.2}\n",
    "ms_per_round.0 = 2.0: depth 1..127 → finite ms > 0",
)
cost_file_case(
    "cost-file-negative-ms",
    "ms_per_round = {1 = -2.0}\n",
    "ms_per_round.1 = -2.0: depth 1..127 → finite ms > 0",
)
cost_file_case(
    "cost-file-boolean-ms",
    "ms_per_round = {1 = true}\n",
    "ms_per_round.1 = True: depth 1..127 → finite ms > 0",
)
cost_file_case(
    "cost-file-infinite-ms",
    "ms_per_round = {1 = inf}\n",
    "ms_per_round.1 = inf: depth 1..127 → finite ms > 0",
)


def depths_case(name: str, value: str, message: str) -> None:
    option_case(
        name,
        "--depths",
        lambda tmp: sweep(tmp, "--depths", value),
        f"--depths {value!r}: {message}",
    )


depths_case("depths-zero", "0..3", "depths are 1..127, low to high")
depths_case("depths-reversed", "5..2", "depths are 1..127, low to high")
depths_case("depths-above-127", "1..200", "depths are 1..127, low to high")
depths_case("depths-not-numbers", "one..three", "expected 1..8 or 1,2,4")
depths_case("depths-empty-item", "1,,3", "expected 1..8 or 1,2,4")
depths_case("depths-huge-number", "1.." + "9" * 5000, "depths are 1..127, low to high")


def margin_case(name: str, value: str) -> None:
    option_case(
        name,
        "--margin",
        lambda tmp: [*requalify(good_archive(tmp)), "--margin", value],
        f"--margin: {value!r} should be a positive number",
    )


margin_case("margin-negative", "-0.5%")
margin_case("margin-zero", "0")
margin_case("margin-not-a-number", "half a percent")
margin_case("margin-infinite", "9" * 400)


def budget(*args: str) -> Callable[[Path], list[str]]:
    return lambda tmp: ["budget", *args]


DIRECT = ("--price-ms", "48.08", "--base", "3.09")
option_case(
    "budget-negative-price",
    "budget",
    budget("--price-ms", "-1", "--base", "3", "--delta-lo", ".1"),
    "--price-ms: -1 should be a positive number",
)
option_case(
    "budget-nan-base",
    "budget",
    budget("--price-ms", "48", "--base", "nan", "--delta-lo", ".1"),
    "--base nan: not a finite number (range -2^53 to 2^53)",  # refused at parse time (issue 9)
)
option_case(
    "budget-infinite-delta",
    "budget",
    budget(*DIRECT, "--delta-lo", "inf"),
    "--delta-lo inf: not a finite number (range -2^53 to 2^53)",
)
option_case(
    "budget-negative-known-cost",
    "budget",
    budget(*DIRECT, "--delta-lo", ".1", "--known", "-2"),
    "--known: -2 should be a cost ≥ 0 ms",
)
option_case(
    "budget-missing-delta",
    "budget",
    budget(*DIRECT),
    "give --base and --delta-lo, or --from a requalify results.json",
)
option_case(
    "budget-gain-below-minus-1",
    "budget",
    budget(*DIRECT, "--delta-lo", ".1", "--rate", "100", "--tau-ms", "40", "--gain", "-2"),
    "--gain: -2 should be a relative gain > -1",
)
option_case(
    "budget-sensitivity-incomplete",
    "budget",
    budget(*DIRECT, "--delta-lo", ".1", "--rate", "100"),
    "the sensitivity table needs --tau-ms, --gain too",
)
option_case(
    "budget-x-grid-not-numbers",
    "budget",
    budget(
        *DIRECT,
        "--delta-lo",
        ".1",
        "--rate",
        "100",
        "--tau-ms",
        "40",
        "--gain",
        ".08",
        "--x-grid",
        "0,one,3",
    ),
    "--x-grid: '0,one,3' should be comma-separated ms",
)


@case("budget-from-not-results-json", "budget")
def _(tmp: Path) -> Built:
    path = tmp / "results.json"
    path.write_text("{not json")
    return ["budget", "--price-ms", "48", "--from", str(path)], [f"--from: {path}"]


@case("budget-from-and-base", "budget")
def _(tmp: Path) -> Built:
    return ["budget", *DIRECT, "--from", str(tmp)], [
        "--from reads R_0 and Δ_lo: give it without --base"
    ]


option_case(
    "stratify-unknown",
    "other option",
    lambda tmp: [*requalify(good_archive(tmp)), "--stratify", "bucket"],
    "--stratify: 'bucket' should be family or none",
)
option_case(
    "fail-on-unknown-verdict",
    "other option",
    lambda tmp: [*requalify(good_archive(tmp)), "--fail-on", "QUALIFIED,MAYBE"],
    "--fail-on: unknown verdict(s) ['MAYBE']",
)


# ---------------------------------------------------------------------------------------------
# Dask and the per-shard cache (issue 8): --scheduler, --workers, --cache


def _unused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


option_case(
    "dask-scheduler-and-workers",
    "Dask",
    lambda tmp: [
        *requalify(good_archive(tmp)),
        "--scheduler",
        "tcp://127.0.0.1:8786",
        "--workers",
        "2",
    ],
    "--scheduler tcp://127.0.0.1:8786 and --workers 2: give one of them",
)
option_case(
    "cache-not-a-folder",
    "Dask",
    # a regular file that is not an input (the input itself is refused first: "is the input")
    lambda tmp: [
        *requalify(good_archive(tmp)),
        "--cache",
        str(write_jsonl(tmp / "cache.jsonl", valid_rows())),
    ],
    "--cache ",
    "cache.jsonl: not a folder",
)


@case("dask-scheduler-unreachable", "Dask")
def _(tmp: Path) -> Built:
    # nobody listens: refused at once (the probe does not wait out the 10 s; issue 9)
    address = f"tcp://127.0.0.1:{_unused_port()}"
    return [*requalify(good_archive(tmp)), "--scheduler", address], [
        f"--scheduler {address}: no Dask scheduler answered within 10 s",
        "ConnectionRefusedError",
    ]


@case("dask-bad-row-in-worker", "Dask")
def _(tmp: Path) -> Built:
    """Two shards replayed by a 1-worker local cluster; the second's row 2 is bad."""
    rows = clone(valid_rows())  # requests req-0, req-1, req-2: 6 rows each
    rows[12 + 2]["drafted_id"] = 1000  # the factory draws candidate ids from [0, 1000)
    folder = tmp / "archive"
    folder.mkdir()
    write_parquet(folder / "part-0.parquet", rows[:12])
    second = write_parquet(folder / "part-1.parquet", rows[12:])
    args = ["requalify", str(folder), "--baseline", BASE, "--candidate", CAND, *FAST,
            "--workers", "1"]  # fmt: skip
    return args, [where(second, 2) + "drafted_id not in cand_ids (1000)"]


def test_counters_lines_are_physical_lines(tmp_path: Path) -> None:
    """A JSON string may hold U+2028 unescaped: it does not start a line (``str.splitlines``
    split there, so a valid file failed and later lines were misnumbered)."""
    counters = tmp_path / "counters.jsonl"
    rows = [{**RUN, "suite": "a\u2028b"}, RUN]
    counters.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    assert "\u2028" in counters.read_text(encoding="utf-8")  # written raw, not escaped
    cfg = tmp_path / "screen.toml"
    cfg.write_text(CONFIG)
    res = CliRunner().invoke(
        app, ["screen", str(counters), "--config", str(cfg), "--out", str(tmp_path / "out")]
    )
    assert res.exit_code == 0, res.output
    with counters.open("a", encoding="utf-8") as fh:
        fh.write("{oops\n")
    res = CliRunner().invoke(
        app, ["screen", str(counters), "--config", str(cfg), "--out", str(tmp_path / "out2")]
    )
    assert res.exit_code == 2
    assert f"{counters}:line 3: not JSON" in res.stderr


# ---------------------------------------------------------------------------------------------
# the test


def test_corpus_is_large_and_covers_every_kind() -> None:
    """Issue 7's acceptance: at least 40 distinct bad inputs across all input kinds."""
    kinds = {kind for kind, _ in CASES.values()}
    assert len(CASES) >= 40
    assert kinds >= {
        "position archive",
        "round traces",
        "Spec-Bench",
        "Medusa",
        "counters",
        "vLLM scrape",
        "screen config",
        "arm spec",
        "bucket spec",
        "--cost",
        "--depths",
        "--margin",
        "budget",
    }


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(tmp_path: Path, name: str) -> None:
    _, build = CASES[name]
    inputs = tmp_path / "in"
    inputs.mkdir()
    args, fragments = build(inputs)
    before = tree_digest(inputs)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, [*args, "--out", str(out)], env={"COLUMNS": "300"})
    assert_clean(res, before, [inputs])
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 2, (res.exit_code, res.output)
    # a cold Numba cache adds its one "compiling kernels" notice before any work (not an error)
    lines = [x for x in res.stderr.strip().splitlines() if not x.startswith("compiling kernels")]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert res.stdout == ""
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["in"]  # no temporary folder beside --out


# ---------------------------------------------------------------------------------------------
# convert (issue 8): OUT is its second argument, not --out, so these run outside CASES


def _convert_bad_format(tmp: Path) -> tuple[list[str], list[str]]:
    src = write_rows(tmp / "trace.parquet", valid_rows())
    return ["convert", str(src), "--format", "xyz"], ["--format 'xyz': expected one of"]


def _convert_bad_compression(tmp: Path) -> tuple[list[str], list[str]]:
    src = write_rows(tmp / "trace.parquet", valid_rows())
    return ["convert", str(src), "--format", "jsonl", "--compression", "zstd"], [
        "--compression 'zstd': jsonl takes none"
    ]


def _convert_bad_row(tmp: Path) -> tuple[list[str], list[str]]:
    rows = clone(valid_rows())
    rows[5]["drafted_id"] = 1000
    src = write_rows(tmp / "trace.jsonl", rows)
    return ["convert", str(src)], [where(src, 5) + "drafted_id not in cand_ids (1000)"]


def _convert_onto_foreign_out(tmp: Path) -> tuple[list[str], list[str]]:
    src = write_rows(tmp / "trace.parquet", valid_rows())
    return ["convert", str(src)], ["folder is not empty and was not written by specreplay"]


CONVERT_CASES: dict[str, Callable[[Path], tuple[list[str], list[str]]]] = {
    "convert-format-xyz": _convert_bad_format,
    "convert-compression-not-of-form": _convert_bad_compression,
    "convert-bad-row": _convert_bad_row,
    "convert-onto-foreign-out": _convert_onto_foreign_out,
}


@pytest.mark.parametrize("name", list(CONVERT_CASES))
def test_bad_convert(tmp_path: Path, name: str) -> None:
    """One error line, exit 2, no traceback, and OUT as it was (absent, or a foreign folder)."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    args, fragments = CONVERT_CASES[name](inputs)
    out = tmp_path / "out"
    foreign = name == "convert-onto-foreign-out"
    if foreign:
        out.mkdir()
        (out / "notes.txt").write_text("mine\n")
    before = tree_digest(inputs, out)
    res = CliRunner().invoke(app, [*args[:2], str(out), *args[2:], "-q"], env={"COLUMNS": "300"})
    assert_clean(res, before, [inputs, out])
    assert "Traceback" not in res.output, res.output
    assert res.exit_code == 2, (res.exit_code, res.output)
    lines = [x for x in res.stderr.strip().splitlines() if not x.startswith("compiling kernels")]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert res.stdout == ""
    if foreign:
        assert [p.name for p in out.iterdir()] == ["notes.txt"]
    else:
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"] + (["out"] if foreign else [])

"""Fuzzing the parsers of user input (issue 7, item 6): no input may produce a traceback.

Every parser here either returns its value or raises :class:`SpecReplayError`, the one error type
the CLI turns into a one-line message and exit code 2; any other exception would reach the user
as a traceback. Fuzzed:

- the JSON Lines archive reader (:class:`ArchiveReader`, first-error and collect-all modes), on
  random bytes, random text lines and near-valid rows of :mod:`archive_factory` with one field
  mutated, dropped or added; the observed-arm and run-counter readers on random lines;
- the arm parser (:func:`parse_arm`), on random text and on near-grammatical token soups;
- the bucket parser (:meth:`Buckets.parse`), likewise, then assigning contexts with it.

Every ``@settings`` states ``max_examples`` and ``derandomize=True`` (the same examples on every
run, so a failure reproduces); ``deadline=None`` because a reader's first call loads Numba
kernels. Together they take about 17 s here (``pytest --durations``); issue 7 allows 60 s.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from archive_factory import clone, valid_rows, write_jsonl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.counters import read_counter_runs
from specreplay.replay.archive.importers import read_arm
from specreplay.replay.archive.reader import ArchiveReader
from specreplay.sim.arms import parse_arm
from specreplay.stats.buckets import Buckets


def fuzz(n: int) -> settings:
    """Settings of one fuzzer: ``n`` examples, derandomized, no deadline, no example database
    (nothing written into the clone's ``.hypothesis``)."""
    return settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@contextmanager
def scratch(name: str) -> Iterator[Path]:
    """A fresh file path per example (hypothesis cannot reuse pytest's function tmp_path)."""
    with tempfile.TemporaryDirectory(prefix="specreplay-fuzz-") as d:
        yield Path(d) / name


def read_all(path: Path) -> None:
    """Read an archive in both modes; anything but SpecReplayError fails the test."""
    try:  # 5 rows a chunk: rounds of 3 rows straddle chunks
        for _ in ArchiveReader(path, max_errors=1, chunk_rows=5):
            pass
    except SpecReplayError:
        pass
    try:
        errors = ArchiveReader(path, max_errors=None).validate()
    except SpecReplayError:
        return
    assert all(isinstance(e, str) and "\n" not in e for e in errors)


# ---------------------------------------------------------------------------------------------
# (a) JSON Lines readers

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**400, 0, -1, 1025])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
TRICKY_LINES = st.sampled_from(
    [
        "",
        "   ",
        "\ufeff{}",
        "{}",
        "[]",
        "null",
        "NaN",
        "[" * 50_000,  # nesting past the recursion limit
        "1" * 5000,  # an integer past int's 4,300-digit conversion limit
        '{"request_id": "a\u2028b"}',
        '{"round": ' + "9" * 5000 + "}",
        '{"cand_ids": [1, 2]',
    ]
)


@fuzz(150)
@given(data=st.binary(max_size=400))
def test_jsonl_reader_random_bytes(data: bytes) -> None:
    with scratch("trace.jsonl") as path:
        path.write_bytes(data)
        read_all(path)


@fuzz(150)
@given(lines=st.lists(st.text(max_size=60) | TRICKY_LINES, max_size=6))
def test_jsonl_reader_random_lines(lines: list[str]) -> None:
    with scratch("trace.jsonl") as path:
        path.write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
        read_all(path)


BASE_ROWS = valid_rows(n_requests=2, n_rounds=2)
FIELDS = [*sorted(BASE_ROWS[0]), "batch", "extra"]


@st.composite
def near_valid_rows(draw: st.DrawFn) -> list[dict[str, Any] | str]:
    """The factory's rows with 1-3 mutations: a field replaced, dropped, added or a row
    replaced by a JSON value, duplicated or dropped."""
    rows: list[dict[str, Any] | str] = list(clone(BASE_ROWS))
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(rows) - 1))
        row = rows[i]
        op = draw(st.sampled_from(["set", "set-item", "drop", "row", "dup", "del"]))
        if op == "row":
            rows[i] = json.dumps(draw(JSON_VALUES), allow_nan=True)
        elif op == "dup":
            rows.insert(draw(st.integers(0, len(rows))), row)
        elif op == "del" and len(rows) > 1:
            del rows[i]
        elif isinstance(row, dict):
            key = draw(st.sampled_from(FIELDS))
            if op == "drop":
                row.pop(key, None)
            elif op == "set-item" and isinstance(row.get(key), list) and row[key]:
                row[key][draw(st.integers(0, len(row[key]) - 1))] = draw(JSON_SCALARS)
            else:
                row[key] = draw(JSON_VALUES)
    return rows


@fuzz(200)
@given(rows=near_valid_rows())
def test_jsonl_reader_near_valid_rows(rows: list[dict[str, Any] | str]) -> None:
    with scratch("trace.jsonl") as path:
        write_jsonl(path, rows)
        read_all(path)


ROUND_ROW = {"request_id": "r0", "family": "code", "context_tokens": 100, "round": 0,
             "drafted": 4, "accepted": 2}  # fmt: skip
RUN_ROW = {"suite": "s", "worker": "w", "batch": 2, "context": 0, "request_rounds": 100,
           "accepted_position": [80, 60, 40], "step_p50_ms": 40.0}  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> str:
    """One JSON line: ``base`` with a field replaced or dropped, or any JSON value."""
    if draw(st.booleans()):
        return json.dumps(draw(JSON_VALUES), allow_nan=True)
    row = dict(base)
    key = draw(st.sampled_from([*base, "choices", "rounds", "retained_tokens"]))
    if draw(st.booleans()):
        row.pop(key, None)
    else:
        row[key] = draw(JSON_VALUES)
    return json.dumps(row, allow_nan=True)


@fuzz(100)
@given(lines=st.lists(mutated(ROUND_ROW) | TRICKY_LINES, min_size=1, max_size=4))
def test_observed_arm_reader_random_lines(lines: list[str]) -> None:
    with scratch("arm.jsonl") as path:
        path.write_text("\n".join(lines) + "\n")
        with suppress(SpecReplayError):
            read_arm(path, buckets=Buckets.parse())


@fuzz(100)
@given(lines=st.lists(mutated(RUN_ROW) | TRICKY_LINES, min_size=1, max_size=4))
def test_counters_reader_random_lines(lines: list[str]) -> None:
    with scratch("counters.jsonl") as path:
        path.write_text("\n".join(lines) + "\n")
        try:
            runs = read_counter_runs(path)
        except SpecReplayError:
            return
        assert all(math.isfinite(r.step_p50_ms) for r in runs)


# ---------------------------------------------------------------------------------------------
# (b) the arm parser

NUMBERS = st.sampled_from(
    ["0", "1", "5", "32", "0.7", "1e-400", "1e400", "08", "127", "128", "9" * 20, "9" * 400,
     "9" * 5000, "nan", "inf", ".5", "-1", "٣", ""]
) | st.text(alphabet="0123456789.e+-", max_size=8)  # fmt: skip
ARM_PART = st.tuples(
    st.sampled_from(["greedy", "top", "t", "p", "dyadic", "float64", "float32", "bfloat16",
                     "float16", "nearest", "floor-argmax", "x", ""]),
    NUMBERS,
).map("".join)  # fmt: skip


@st.composite
def arm_like(draw: st.DrawFn) -> str:
    """Near-grammatical arms: PART(:PART)* [/PART(:PART)*] @NUMBER, sometimes cut or doubled."""
    sampler = ":".join(draw(st.lists(ARM_PART, min_size=1, max_size=4)))
    verifier = draw(st.none() | st.lists(ARM_PART, min_size=1, max_size=2).map(":".join))
    text = sampler + ("" if verifier is None else "/" + verifier)
    at = draw(st.sampled_from(["@", "@", "", "@@", " @ "]))
    return text + at + draw(NUMBERS)


@fuzz(300)
@given(text=st.text(max_size=40) | arm_like())
def test_parse_arm_never_raises_anything_else(text: str) -> None:
    try:
        arm = parse_arm(text)
    except SpecReplayError as err:
        assert "\n" not in err.message
        return
    assert parse_arm(arm.canonical) == arm  # what parses, round-trips


# ---------------------------------------------------------------------------------------------
# (c) the bucket parser

TOKENS = st.tuples(NUMBERS, st.sampled_from(["", "", "K", "k", " K", "M"])).map("".join)
BUCKET = st.tuples(
    st.sampled_from(["a", "b", "c", "unknown", "unbucketed", "", " a ", "a:b"]),
    st.sampled_from([":", ":", "", "::"]),
    st.one_of(
        TOKENS.map(lambda x: "<" + x),
        TOKENS.map(lambda x: ">=" + x),
        st.tuples(TOKENS, TOKENS).map("-".join),
        TOKENS,
    ),
).map("".join)


@fuzz(300)
@given(text=st.text(max_size=40) | st.lists(BUCKET, min_size=1, max_size=4).map(",".join))
def test_buckets_parse_never_raises_anything_else(text: str) -> None:
    try:
        buckets = Buckets.parse(text)
    except SpecReplayError as err:
        assert "\n" not in err.message
        return
    codes = buckets.assign([-1, 0, 4095, 4096, 2**62])
    assert codes.min() >= 0 and codes.max() < len(buckets.names)

"""Readers of observed arms (docs/inputs.md#round-traces-and-per-request-sums): exact sums against
independent plain-Python computations, format detection, and every validation message with its file
and line or row."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.importers import KINDS, detect_kind, read_arm
from specreplay.stats.buckets import Buckets

DATA = Path(__file__).parent / "data"
MEDUSA = DATA / "medusa-mtbench"
QUESTIONS = MEDUSA / "question.jsonl"
SUFFIX = "temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"
M7 = MEDUSA / f"medusa-vicuna-7b-v1.3-{SUFFIX}"
M7_1 = MEDUSA / f"medusa-vicuna-7b-v1.3-1-{SUFFIX}"
M13 = MEDUSA / f"medusa-vicuna-13b-v1.3-{SUFFIX}"
EAGLE = DATA / "spec-bench" / "eagle.jsonl"
SPS = DATA / "spec-bench" / "sps.jsonl"
BUCKETS = Buckets.parse("short:<100,long:100-1000")


def _err(path: Path, where: str, message: str) -> str:
    """Regex for a whole message of docs/inputs.md#position-traces-schema-v1's form:
    ``PATH<where>: message`` (message escaped)."""
    return "^" + re.escape(f"{path}{where}: {message}")


def _line(path: Path, n: int, message: str) -> str:
    return _err(path, f":line {n}", message)


def _row(path: Path, n: int, message: str) -> str:
    return _err(path, f": row {n} (0-based)", message)


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    return _write_lines(path, [json.dumps(r) for r in rows])


def _pooled(sums: pl.DataFrame) -> float:
    return float(sums["t"].sum()) / float(sums["n"].sum())


def _by_family(sums: pl.DataFrame) -> dict[str, float]:
    agg = sums.group_by("family").agg(pl.col("n").sum(), pl.col("t").sum())
    return {f: t / n for f, n, t in agg.select("family", "n", "t").iter_rows()}


# ---------------------------------------------------------------------------------------------
# FastChat/Medusa answers (real runs, FasterDecoding/Medusa e2a5d20, see PROVENANCE.md)


def _medusa_direct(answer: Path) -> dict[str, tuple[str, int, int]]:
    """question_id → (category, rounds Σ (idxs + 1), retained Σ new_tokens), in plain Python."""
    category = {}
    for line in QUESTIONS.read_text().splitlines():
        q = json.loads(line)
        category[str(q["question_id"])] = q["category"]
    out = {}
    for line in answer.read_text().splitlines():
        a = json.loads(line)
        c = a["choices"][0]
        qid = str(a["question_id"])
        out[qid] = (category[qid], sum(i + 1 for i in c["idxs"]), sum(c["new_tokens"]))
    return out


@pytest.mark.parametrize(("answer", "published"), [(M7, 2.5650), (M13, 2.6387)])
def test_medusa_pooled_R_matches_direct_sums_and_provenance(answer: Path, published: float) -> None:
    arm = read_arm(answer, buckets=BUCKETS, question_file=QUESTIONS)
    direct = _medusa_direct(answer)
    n = sum(v[1] for v in direct.values())
    t = sum(v[2] for v in direct.values())
    assert len(direct) == 80 and arm.sums.height == 80
    assert int(arm.sums["n"].sum()) == n and float(arm.sums["t"].sum()) == t
    assert _pooled(arm.sums) == t / n
    assert round(t / n, 4) == published  # the figure PROVENANCE.md states
    assert set(arm.sums["bucket"]) == {"unknown"}
    assert arm.kind == "medusa" and arm.label == "MEASURED"
    assert arm.name == answer.stem
    assert arm.files == [(QUESTIONS, 80), (answer, 80)]
    assert any("Σ (idxs + 1)" in note for note in arm.notes)
    assert any("bucket 'unknown'" in note for note in arm.notes)


def test_medusa_7b_sums_exact_values() -> None:
    arm = read_arm(M7, buckets=BUCKETS, question_file=QUESTIONS)
    assert (int(arm.sums["n"].sum()), float(arm.sums["t"].sum())) == (17058, 43754.0)


@pytest.mark.parametrize("answer", [M7, M13])
def test_medusa_per_category_R_matches_direct(answer: Path) -> None:
    arm = read_arm(answer, buckets=BUCKETS, question_file=QUESTIONS)
    n: dict[str, int] = defaultdict(int)
    t: dict[str, int] = defaultdict(int)
    for category, rounds, retained in _medusa_direct(answer).values():
        n[category] += rounds
        t[category] += retained
    assert len(n) == 8
    assert _by_family(arm.sums) == {c: t[c] / n[c] for c in n}
    per_request = {
        r["request_id"]: (r["family"], r["n"], r["t"]) for r in arm.sums.iter_rows(named=True)
    }
    assert per_request == {q: (c, r, float(k)) for q, (c, r, k) in _medusa_direct(answer).items()}


def test_medusa_repeated_runs_give_identical_sums() -> None:
    a = read_arm(M7, buckets=BUCKETS, question_file=QUESTIONS)
    b = read_arm(M7_1, buckets=BUCKETS, question_file=QUESTIONS)
    assert a.sums.equals(b.sums)
    assert a.name != b.name


def test_medusa_without_question_file_says_it_is_required() -> None:
    msg = "FastChat/Medusa answers carry no category: --question-file (the benchmark's"
    with pytest.raises(SpecReplayError, match=_line(M7, 1, msg)):
        read_arm(M7, buckets=BUCKETS)


def test_medusa_question_missing_from_question_file(tmp_path: Path) -> None:
    lines = QUESTIONS.read_text().splitlines()
    qfile = _write_lines(
        tmp_path / "question.jsonl", [q for q in lines if '"question_id": 83,' not in q]
    )
    with pytest.raises(SpecReplayError, match=_line(M7, 3, f"question_id 83 is not in {qfile}")):
        read_arm(M7, buckets=BUCKETS, question_file=qfile)


def test_medusa_question_file_problems(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(SpecReplayError, match=_err(missing, "", "no such file (--question-file)")):
        read_arm(M7, buckets=BUCKETS, question_file=missing)
    dup = _write_lines(tmp_path / "dup.jsonl", QUESTIONS.read_text().splitlines()[:2] * 2)
    msg = f"duplicate question_id 81 (first at {dup}:line 1)"
    with pytest.raises(SpecReplayError, match=_line(dup, 3, msg)):
        read_arm(M7, buckets=BUCKETS, question_file=dup)
    nocat = _write_jsonl(tmp_path / "nocat.jsonl", [{"question_id": 81}])
    with pytest.raises(SpecReplayError, match=_line(nocat, 1, "missing string 'category'")):
        read_arm(M7, buckets=BUCKETS, question_file=nocat)


def _medusa_line(qid: int = 81, idxs: Any = (3, 4), new_tokens: Any = (10, 12)) -> dict[str, Any]:
    return {
        "question_id": qid,
        "choices": [{"index": 0, "idxs": list(idxs), "new_tokens": list(new_tokens)}],
    }


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (_medusa_line(idxs=[3]), "choices[0] has 1 idxs but 2 new_tokens (one of each per turn)"),
        (_medusa_line(idxs=[-1, 2]), "choices[0].idxs[0] = -1: must be ≥ 0"),
        (_medusa_line(new_tokens=[1.5, 2]), "choices[0].new_tokens[0] = 1.5 is not a whole number"),
        (_medusa_line(idxs=[], new_tokens=[]), "choices[0].idxs is empty"),
        (
            _medusa_line(idxs=[3, 4], new_tokens=[4, 4]),
            "Σ new_tokens = 8 is less than rounds Σ (idxs + 1) = 9 (each round retains at least",
        ),
        ({**_medusa_line(), "question_id": True}, "question_id should be an integer or string"),
    ],
)
def test_medusa_line_validation(tmp_path: Path, line: dict[str, Any], message: str) -> None:
    path = _write_lines(
        tmp_path / "ans.jsonl", [json.dumps(_medusa_line(82)), "", json.dumps(line)]
    )
    with pytest.raises(SpecReplayError, match=_line(path, 3, message)):
        read_arm(path, buckets=BUCKETS, question_file=QUESTIONS)


def test_medusa_duplicate_question_cites_first(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "ans.jsonl", [_medusa_line(81), _medusa_line(82), _medusa_line(81)]
    )
    msg = f"duplicate question_id 81 (first at {path}:line 1)"
    with pytest.raises(SpecReplayError, match=_line(path, 3, msg)):
        read_arm(path, buckets=BUCKETS, question_file=QUESTIONS)


def test_medusa_directory_skips_question_file_inside_it(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    qfile = folder / "question.jsonl"
    qfile.write_bytes(QUESTIONS.read_bytes())
    (folder / "answers.jsonl").write_bytes(M7.read_bytes())
    arm = read_arm(folder, buckets=BUCKETS, question_file=qfile)
    assert arm.name == "run"
    assert arm.files == [(qfile, 80), (folder / "answers.jsonl", 80)]
    assert arm.sums.equals(read_arm(M7, buckets=BUCKETS, question_file=QUESTIONS).sums)


# ---------------------------------------------------------------------------------------------
# Spec-Bench answers (hand-made fixture, see tests/data/spec-bench/README.md)


def _spec_bench_direct(path: Path) -> dict[str, tuple[str, int, int]]:
    out = {}
    for line in path.read_text().splitlines():
        a = json.loads(line)
        steps = a["choices"][0]["accept_lengths"]
        out[str(a["question_id"])] = (a["category"], len(steps), sum(steps))
    return out


@pytest.mark.parametrize("path", [EAGLE, SPS])
def test_spec_bench_per_category_R_matches_direct(path: Path) -> None:
    arm = read_arm(path, buckets=BUCKETS)
    direct = _spec_bench_direct(path)
    n: dict[str, int] = defaultdict(int)
    t: dict[str, int] = defaultdict(int)
    for category, steps, retained in direct.values():
        n[category] += steps
        t[category] += retained
    assert _by_family(arm.sums) == {c: t[c] / n[c] for c in n}
    assert _pooled(arm.sums) == sum(t.values()) / sum(n.values())
    assert arm.sums["request_id"].to_list() == ["1", "2", "3", "4", "5", "6"]
    assert set(arm.sums["bucket"]) == {"unknown"}
    assert arm.kind == "spec-bench" and arm.files == [(path, 6)]
    assert "drafted depth unknown" in arm.notes


def test_spec_bench_hand_values() -> None:
    # eagle.jsonl by hand: 7+8+6+2+9+3 = 35 steps, 18+19+11+3+38+11 = 100 tokens
    arm = read_arm(EAGLE, buckets=BUCKETS)
    assert (int(arm.sums["n"].sum()), float(arm.sums["t"].sum())) == (35, 100.0)


def test_spec_bench_drafted_checks_every_step() -> None:
    arm = read_arm(EAGLE, buckets=BUCKETS, drafted=5)
    assert any("drafted depth 5" in note for note in arm.notes)
    msg = "choices[0].accept_lengths[1] = 6 exceeds drafted + 1 = 5 (--drafted 4)"
    with pytest.raises(SpecReplayError, match=_line(EAGLE, 5, msg)):
        read_arm(EAGLE, buckets=BUCKETS, drafted=4)


def test_spec_bench_choice_out_of_range() -> None:
    with pytest.raises(
        SpecReplayError, match=_line(EAGLE, 1, "choices has 1 entries: no choices[1]")
    ):
        read_arm(EAGLE, buckets=BUCKETS, choice=1)


def test_spec_bench_choice_selects_entry(tmp_path: Path) -> None:
    two = {
        "question_id": 7,
        "category": "qa",
        "choices": [{"accept_lengths": [1]}, {"accept_lengths": [2, 3.0]}],
    }
    arm = read_arm(_write_jsonl(tmp_path / "two.jsonl", [two]), buckets=BUCKETS, choice=1)
    assert arm.sums.row(0) == ("7", "qa", "unknown", 2, 5.0)


def test_spec_bench_directory_of_two_methods_is_a_duplicate() -> None:
    msg = f"duplicate question_id 1 (first at {EAGLE}:line 1)"
    with pytest.raises(SpecReplayError, match=_line(SPS, 1, msg)):
        read_arm(EAGLE.parent, buckets=BUCKETS, ignore=["README.md"])  # issue 9: else an error


@pytest.mark.parametrize(
    ("choice0", "message"),
    [
        ({"accept_lengths": [2, 0, 1]}, "choices[0].accept_lengths[1] = 0: must be ≥ 1"),
        ({"accept_lengths": []}, "choices[0].accept_lengths is empty"),
        ({"accept_lengths": [2, "3"]}, 'choices[0].accept_lengths[1] = "3" is not a whole number'),
        (
            {"accept_lengths": [2, True]},
            "choices[0].accept_lengths[1] = true is not a whole number",
        ),
        ({"accept_lengths": 3}, "missing list choices[0].accept_lengths"),
    ],
)
def test_spec_bench_line_validation(tmp_path: Path, choice0: dict[str, Any], message: str) -> None:
    good = {"question_id": 1, "category": "qa", "choices": [{"accept_lengths": [1, 2]}]}
    bad = {"question_id": 2, "category": "qa", "choices": [choice0]}
    path = _write_lines(tmp_path / "sb.jsonl", [json.dumps(good), "", "", json.dumps(bad)])
    with pytest.raises(SpecReplayError, match=_line(path, 4, message)):
        read_arm(path, buckets=BUCKETS)


def test_spec_bench_missing_category(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "sb.jsonl", [{"question_id": 1, "choices": [{"accept_lengths": [1]}]}]
    )
    with pytest.raises(SpecReplayError, match=_line(path, 1, "missing string 'category'")):
        read_arm(path, buckets=BUCKETS)


# ---------------------------------------------------------------------------------------------
# Round traces and per-request sums


ROUNDS: list[dict[str, Any]] = [
    # r1 crosses the short/long boundary (100); r2 has unknown contexts and depths; r3 is 'long'.
    {
        "request_id": "r1",
        "family": "code",
        "context_tokens": 10,
        "round": 0,
        "drafted": 5,
        "accepted": 5,
    },
    {
        "request_id": "r1",
        "family": "code",
        "context_tokens": 60,
        "round": 1,
        "drafted": 5,
        "accepted": 2,
    },
    {
        "request_id": "r1",
        "family": "code",
        "context_tokens": 99,
        "round": 2,
        "drafted": 5,
        "accepted": 0,
    },
    {
        "request_id": "r1",
        "family": "code",
        "context_tokens": 100,
        "round": 3,
        "drafted": 5,
        "accepted": 4,
    },
    {
        "request_id": "r2",
        "family": "chat",
        "context_tokens": None,
        "round": 0,
        "drafted": None,
        "accepted": 1,
    },
    {
        "request_id": "r2",
        "family": "chat",
        "context_tokens": 50,
        "round": 1,
        "drafted": 4,
        "accepted": 3,
    },
    {
        "request_id": "r2",
        "family": "chat",
        "context_tokens": None,
        "round": 2,
        "drafted": None,
        "accepted": 7,
    },
    {
        "request_id": "r3",
        "family": "chat",
        "context_tokens": 5000,
        "round": 0,
        "drafted": 3,
        "accepted": 3,
    },
]


def _bucket_of(ctx: int | None) -> str:
    if ctx is None:
        return "unknown"
    return "short" if ctx < 100 else "long" if ctx < 1000 else "unbucketed"


def _round_direct(rows: list[dict[str, Any]]) -> list[tuple[str, str, str, int, float]]:
    acc: dict[tuple[str, str], list[Any]] = {}
    for r in rows:
        key = (r["request_id"], _bucket_of(r["context_tokens"]))
        entry = acc.setdefault(key, [r["family"], 0, 0.0])
        entry[1] += 1
        entry[2] += 1 + r["accepted"]
    order = {"short": 0, "long": 1, "unbucketed": 2, "unknown": 3}
    keys = sorted(acc, key=lambda k: (k[0], order[k[1]]))
    return [(k[0], acc[k][0], k[1], acc[k][1], acc[k][2]) for k in keys]


def _round_trip(tmp_path: Path, rows: list[dict[str, Any]], fmt: str, stem: str = "arm") -> Path:
    if fmt == "jsonl":
        return _write_jsonl(tmp_path / f"{stem}.jsonl", rows)
    path = tmp_path / f"{stem}.parquet"
    pl.DataFrame(rows).write_parquet(path)
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_round_traces_round_trip(tmp_path: Path, fmt: str) -> None:
    path = _round_trip(tmp_path, ROUNDS, fmt)
    arm = read_arm(path, buckets=BUCKETS, name="base")
    assert arm.sums.rows() == _round_direct(ROUNDS)
    assert arm.sums.schema == pl.Schema(
        {
            "request_id": pl.String,
            "family": pl.String,
            "bucket": pl.String,
            "n": pl.Int64,
            "t": pl.Float64,
        }
    )
    assert arm.kind == "round-traces" and arm.name == "base" and arm.files == [(path, 8)]
    assert any("context unknown (context_tokens null) in 2 of 8 rounds" in n for n in arm.notes)
    assert any("drafted depth unknown (drafted null) in 2 of 8 rounds" in n for n in arm.notes)


def test_round_traces_directory_of_shards_equals_one_file(tmp_path: Path) -> None:
    folder = tmp_path / "shards"
    folder.mkdir()
    pl.DataFrame(ROUNDS[:3]).write_parquet(folder / "part-000.parquet")
    pl.DataFrame(ROUNDS[3:]).write_parquet(folder / "part-001.parquet")
    (folder / "notes.txt").write_text("skipped by --ignore (issue 9: else an error naming it)")
    arm = read_arm(folder, buckets=BUCKETS, ignore=["*.txt"])
    assert arm.sums.rows() == _round_direct(ROUNDS)
    assert arm.name == "shards"
    assert arm.files == [(folder / "part-000.parquet", 3), (folder / "part-001.parquet", 5)]
    assert arm.ignored == [(folder / "notes.txt", "*.txt")]


def test_round_traces_optional_columns_may_be_absent(tmp_path: Path) -> None:
    rows = [{k: v for k, v in r.items() if k not in ("context_tokens", "drafted")} for r in ROUNDS]
    for fmt in ("jsonl", "parquet"):
        arm = read_arm(_round_trip(tmp_path, rows, fmt), buckets=BUCKETS)
        assert set(arm.sums["bucket"]) == {"unknown"}
        assert int(arm.sums["n"].sum()) == 8
        assert float(arm.sums["t"].sum()) == sum(1 + r["accepted"] for r in rows)


def test_round_traces_parquet_narrow_and_categorical_types(tmp_path: Path) -> None:
    frame = pl.DataFrame(ROUNDS).with_columns(
        pl.col("family").cast(pl.Categorical()),
        pl.col("accepted").cast(pl.UInt8()),
        pl.col("round").cast(pl.Int16()),
    )
    path = tmp_path / "narrow.parquet"
    frame.write_parquet(path)
    assert read_arm(path, buckets=BUCKETS).sums.rows() == _round_direct(ROUNDS)


SUMS: list[dict[str, Any]] = [
    {"request_id": "b", "family": "chat", "rounds": 4, "retained_tokens": 9},
    {"request_id": "a", "family": "code", "rounds": 2, "retained_tokens": 7.5},
    {"request_id": "c", "family": "chat", "rounds": 1, "retained_tokens": 1},
]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_request_sums_round_trip(tmp_path: Path, fmt: str) -> None:
    path = _round_trip(tmp_path, SUMS, fmt)
    arm = read_arm(path, buckets=BUCKETS)
    expected = sorted(
        (r["request_id"], r["family"], "unknown", r["rounds"], float(r["retained_tokens"]))
        for r in SUMS
    )
    assert arm.sums.rows() == expected
    assert arm.kind == "request-sums" and arm.files == [(path, 3)]
    assert any("bucket 'unknown'" in n for n in arm.notes)


# Validation of round traces: each rule, JSONL (physical line, blank lines counted) and Parquet.

BAD_ROUNDS: list[tuple[str, dict[str, Any], str]] = [
    ("a-negative", {"accepted": -1}, "accepted = -1: must be ≥ 0"),
    ("a-over-drafted", {"accepted": 6}, "accepted = 6 exceeds drafted = 5"),
    ("drafted-zero", {"drafted": 0, "accepted": 0}, "drafted = 0: must be ≥ 1 (null when unknown)"),
    ("round-negative", {"round": -2}, "round = -2: rounds are numbered from 0"),
    (
        "context-negative",
        {"context_tokens": -1},
        "context_tokens = -1: must be ≥ 0 (null when unknown)",
    ),
    ("family-null", {"family": None}, "missing value in column 'family'"),
    ("accepted-null", {"accepted": None}, "missing value in column 'accepted'"),
]


def _three_rounds(change: dict[str, Any]) -> list[dict[str, Any]]:
    base = {"request_id": "r", "family": "code", "context_tokens": 10, "drafted": 5, "accepted": 1}
    return [{**base, "round": 0}, {**base, "round": 1}, {**base, "round": 2, **change}]


@pytest.mark.parametrize(
    ("change", "message"), [b[1:] for b in BAD_ROUNDS], ids=[b[0] for b in BAD_ROUNDS]
)
def test_round_trace_rule_jsonl_line(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    rows = _three_rounds(change)
    path = _write_lines(
        tmp_path / "t.jsonl",
        ["", json.dumps(rows[0]), json.dumps(rows[1]), "  ", json.dumps(rows[2])],
    )
    with pytest.raises(SpecReplayError, match=_line(path, 5, message)):
        read_arm(path, buckets=BUCKETS)


@pytest.mark.parametrize(
    ("change", "message"), [b[1:] for b in BAD_ROUNDS], ids=[b[0] for b in BAD_ROUNDS]
)
def test_round_trace_rule_parquet_row(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    schema = {
        "request_id": pl.String,
        "family": pl.String,
        "context_tokens": pl.Int64,
        "round": pl.Int64,
        "drafted": pl.Int64,
        "accepted": pl.Int64,
    }
    path = tmp_path / "t.parquet"
    pl.DataFrame(_three_rounds(change), schema=schema).write_parquet(path)
    with pytest.raises(SpecReplayError, match=_row(path, 2, message)):
        read_arm(path, buckets=BUCKETS)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_round_trace_duplicate_round_cites_first(tmp_path: Path, fmt: str) -> None:
    rows = _three_rounds({"round": 0})
    path = _round_trip(tmp_path, rows, fmt)
    where, first = (
        (":line 3", f"{path}:line 1")
        if fmt == "jsonl"
        else (": row 2 (0-based)", f"{path}: row 0 (0-based)")
    )
    msg = f"duplicate round 0 of request 'r' (first at {first})"
    with pytest.raises(SpecReplayError, match=_err(path, where, msg)):
        read_arm(path, buckets=BUCKETS)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_round_trace_family_change_cites_first(tmp_path: Path, fmt: str) -> None:
    rows = _three_rounds({"family": "chat"})
    path = _round_trip(tmp_path, rows, fmt)
    where, first = (
        (":line 3", f"{path}:line 1")
        if fmt == "jsonl"
        else (": row 2 (0-based)", f"{path}: row 0 (0-based)")
    )
    msg = (
        f"request 'r' has family 'chat' here but 'code' at {first} (a request's family is constant)"
    )
    with pytest.raises(SpecReplayError, match=_err(path, where, msg)):
        read_arm(path, buckets=BUCKETS)


def test_round_trace_duplicate_across_shards_cites_other_file(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    rows = _three_rounds({})
    _write_jsonl(folder / "a.jsonl", rows[:2])
    second = _write_jsonl(folder / "b.jsonl", [rows[2], rows[0]])
    msg = f"duplicate round 0 of request 'r' (first at {folder / 'a.jsonl'}:line 1)"
    with pytest.raises(SpecReplayError, match=_line(second, 2, msg)):
        read_arm(folder, buckets=BUCKETS)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"request_id": "r", "family": "code", "round": 3}', "missing column 'accepted'"),
        (
            '{"request_id": "r", "family": "code", "round": "3", "accepted": 1}',
            "column 'round' should be integer, got \"3\"",
        ),
        (
            '{"request_id": 7, "family": "code", "round": 3, "accepted": 1}',
            "column 'request_id' should be string, got 7",
        ),
        (
            '{"request_id": "r", "family": "code", "round": 3, "accepted": 1.0}',
            "column 'accepted' should be integer, got 1.0",
        ),
        (
            '{"request_id": "r", "family": "code", "round": 3, "accepted": true}',
            "column 'accepted' should be integer, got true",
        ),
        (
            '{"request_id": "r", "family": "code", "round": 3, "accepted": 99999999999999999999}',
            "accepted = 99999999999999999999 does not fit in int64",
        ),
        (
            '{"request_id": "r", "family": "code", "round": 3, "accepted": 1',
            "invalid JSON: Expecting ',' delimiter at column",
        ),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_round_trace_jsonl_line_problems(tmp_path: Path, line: str, message: str) -> None:
    first = json.dumps(_three_rounds({})[0])
    path = _write_lines(tmp_path / "t.jsonl", [first, "", line])
    with pytest.raises(SpecReplayError, match=_line(path, 3, message)):
        read_arm(path, buckets=BUCKETS)


def test_first_problem_in_reading_order_wins(tmp_path: Path) -> None:
    # line 2 repeats round 0 (a cross-row rule), line 3 is not JSON: line 2 is reported
    row = json.dumps(_three_rounds({})[0])
    path = _write_lines(tmp_path / "t.jsonl", [row, row, "{oops"])
    with pytest.raises(SpecReplayError, match=_line(path, 2, "duplicate round 0")):
        read_arm(path, buckets=BUCKETS)
    # and the other way round: a bad value on line 2 before a duplicate on line 3
    bad = json.dumps(_three_rounds({"accepted": -1})[2])
    path = _write_lines(tmp_path / "u.jsonl", [row, bad, row])
    with pytest.raises(SpecReplayError, match=_line(path, 2, "accepted = -1")):
        read_arm(path, buckets=BUCKETS)


def test_round_trace_parquet_column_problems(tmp_path: Path) -> None:
    missing = tmp_path / "missing.parquet"
    pl.DataFrame(ROUNDS).drop("family").write_parquet(missing)
    with pytest.raises(
        SpecReplayError, match=_err(missing, "", "missing required column 'family'")
    ):
        read_arm(missing, buckets=BUCKETS)
    typed = tmp_path / "typed.parquet"
    pl.DataFrame(ROUNDS).with_columns(pl.col("accepted").cast(pl.Float64)).write_parquet(typed)
    with pytest.raises(
        SpecReplayError,
        match=_err(typed, "", "column 'accepted' has type Float64; expected integer"),
    ):
        read_arm(typed, buckets=BUCKETS)
    huge = tmp_path / "huge.parquet"
    pl.DataFrame(ROUNDS).with_columns(
        pl.Series("round", [0, 1, 2, 2**63, 0, 1, 2, 0], dtype=pl.UInt64)
    ).write_parquet(huge)
    with pytest.raises(
        SpecReplayError, match=_row(huge, 3, f"round = {2**63} does not fit in int64")
    ):
        read_arm(huge, buckets=BUCKETS)


def test_round_trace_parquet_without_rows(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    pl.DataFrame(ROUNDS).head(0).write_parquet(path)
    with pytest.raises(
        SpecReplayError, match=_err(path, "", "no rows: an arm needs at least one round")
    ):
        read_arm(path, buckets=BUCKETS)


BAD_SUMS: list[tuple[str, dict[str, Any], str]] = [
    ("rounds-zero", {"rounds": 0, "retained_tokens": 0}, "rounds = 0: must be ≥ 1"),
    (
        "retained-below-rounds",
        {"rounds": 5, "retained_tokens": 4.5},
        "retained_tokens = 4.5 is less than rounds = 5 (each round retains at least 1 token)",
    ),
    ("duplicate", {"request_id": "a"}, "duplicate request_id 'a' (first at {first})"),
]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize(
    ("change", "message"), [b[1:] for b in BAD_SUMS], ids=[b[0] for b in BAD_SUMS]
)
def test_request_sums_rules(tmp_path: Path, fmt: str, change: dict[str, Any], message: str) -> None:
    rows = [{**SUMS[1]}, {**SUMS[0]}, {**SUMS[2], **change}]
    path = _round_trip(tmp_path, rows, fmt)
    where, first = (
        (":line 3", f"{path}:line 1")
        if fmt == "jsonl"
        else (": row 2 (0-based)", f"{path}: row 0 (0-based)")
    )
    with pytest.raises(SpecReplayError, match=_err(path, where, message.format(first=first))):
        read_arm(path, buckets=BUCKETS)


def test_request_sums_non_finite(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "s.jsonl",
        ['{"request_id": "a", "family": "f", "rounds": 2, "retained_tokens": Infinity}'],
    )
    with pytest.raises(
        SpecReplayError, match=_line(path, 1, "retained_tokens = inf is not a finite number")
    ):
        read_arm(path, buckets=BUCKETS)
    pq = tmp_path / "s.parquet"
    pl.DataFrame(
        {
            "request_id": ["a", "b"],
            "family": ["f", "f"],
            "rounds": [2, 2],
            "retained_tokens": [3.0, float("nan")],
        }
    ).write_parquet(pq)
    with pytest.raises(
        SpecReplayError, match=_row(pq, 1, "retained_tokens = nan is not a finite number")
    ):
        read_arm(pq, buckets=BUCKETS)


# ---------------------------------------------------------------------------------------------
# Detection and file-level problems


def test_detect_every_kind(tmp_path: Path) -> None:
    assert detect_kind(_round_trip(tmp_path, ROUNDS, "jsonl", "r")) == "round-traces"
    assert detect_kind(_round_trip(tmp_path, ROUNDS, "parquet", "r")) == "round-traces"
    assert detect_kind(_round_trip(tmp_path, SUMS, "jsonl", "s")) == "request-sums"
    assert detect_kind(_round_trip(tmp_path, SUMS, "parquet", "s")) == "request-sums"
    assert detect_kind(EAGLE) == "spec-bench"
    assert detect_kind(M7) == "medusa"
    assert set(KINDS) == {"round-traces", "request-sums", "spec-bench", "medusa"}


def test_detection_is_by_content_not_name(tmp_path: Path) -> None:
    odd = tmp_path / "looks-like.parquet"
    odd.write_bytes(EAGLE.read_bytes())
    assert detect_kind(odd) == "spec-bench"
    txt = tmp_path / "rounds.txt"
    pl.DataFrame(ROUNDS).write_parquet(txt)
    assert detect_kind(txt) == "round-traces"
    assert read_arm(txt, buckets=BUCKETS).sums.rows() == _round_direct(ROUNDS)


def test_detection_skips_leading_blank_lines(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "x.jsonl", ["", "   ", json.dumps(SUMS[0])])
    assert detect_kind(path) == "request-sums"


def test_unknown_format_names_file_and_expectation(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "x.jsonl", ["", '{"foo": 1, "bar": 2}'])
    with pytest.raises(
        SpecReplayError,
        match=_line(path, 2, "cannot tell the format from keys [bar, foo]: expected round traces"),
    ):
        detect_kind(path)
    pq = tmp_path / "x.parquet"
    pl.DataFrame({"foo": [1]}).write_parquet(pq)
    with pytest.raises(
        SpecReplayError,
        match=_err(pq, "", "cannot tell the format from Parquet columns ['foo']: expected"),
    ):
        read_arm(pq, buckets=BUCKETS)


def test_position_trace_is_not_an_observed_arm(tmp_path: Path) -> None:
    row = {"request_id": "r", "family": "f", "round": 0, "position": 1, "accepted": True}
    path = _write_jsonl(tmp_path / "pos.jsonl", [row])
    with pytest.raises(SpecReplayError, match=r"looks like a position-trace archive"):
        detect_kind(path)


@pytest.mark.parametrize(
    ("content", "where", "message"),
    [
        (b"", "", "empty file (no JSON line): expected round traces"),
        (b"\n\n  \n", "", "empty file (no JSON line)"),
        (
            b"\n{nope\n",
            ":line 2",
            "neither Parquet nor JSON Lines: invalid JSON: Expecting property name",
        ),
        (b'"just a string"\n', ":line 1", "neither Parquet nor JSON Lines: expected a JSON object"),
        (b"\xff\xfe\x00garbage\n", ":line 1", "neither Parquet nor JSON Lines: not valid UTF-8"),
        (b"PAR1 but not really", "", "cannot read as Parquet"),
    ],
)
def test_unreadable_files(tmp_path: Path, content: bytes, where: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(SpecReplayError, match=_err(path, where, message)):
        read_arm(path, buckets=BUCKETS)


def test_missing_path_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(
        SpecReplayError, match=_err(tmp_path / "nope", "", "no such file or directory")
    ):
        read_arm(tmp_path / "nope", buckets=BUCKETS)
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        SpecReplayError,
        match=_err(tmp_path / "empty", "", "directory holds no .parquet or .jsonl shard"),
    ):
        detect_kind(tmp_path / "empty")


def test_directory_of_mixed_formats(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    _write_jsonl(folder / "a.jsonl", ROUNDS)
    _write_jsonl(folder / "b.jsonl", SUMS)
    msg = f"holds request-sums but {folder / 'a.jsonl'} holds round-traces: every shard"
    with pytest.raises(SpecReplayError, match=_err(folder / "b.jsonl", "", msg)):
        read_arm(folder, buckets=BUCKETS)


def test_options_a_format_does_not_use_are_errors(tmp_path: Path) -> None:
    rounds = _round_trip(tmp_path, ROUNDS, "jsonl")
    with pytest.raises(
        SpecReplayError,
        match=_err(
            rounds, "", "--drafted applies to Spec-Bench answers only; this is round-traces"
        ),
    ):
        read_arm(rounds, buckets=BUCKETS, drafted=5)
    with pytest.raises(SpecReplayError, match=_err(rounds, "", "--choice applies to Spec-Bench")):
        read_arm(rounds, buckets=BUCKETS, choice=1)
    with pytest.raises(
        SpecReplayError,
        match=_err(
            QUESTIONS,
            "",
            f"--question-file applies to FastChat/Medusa answers only; {EAGLE} is spec-bench",
        ),
    ):
        read_arm(EAGLE, buckets=BUCKETS, question_file=QUESTIONS)
    with pytest.raises(SpecReplayError, match=re.escape("--drafted 0: must be ≥ 1")):
        read_arm(EAGLE, buckets=BUCKETS, drafted=0)
    with pytest.raises(SpecReplayError, match=re.escape("--choice -1: must be ≥ 0")):
        read_arm(EAGLE, buckets=BUCKETS, choice=-1)


def test_round_traces_carry_their_depth_only_when_every_round_records_drafted(
    tmp_path: Path,
) -> None:
    """The clamp's depth (issue 10): the largest ``drafted`` when no round leaves it null, else
    unknown; ``pair_arms`` passes both arms' depths to the comparison, or none if one is unknown."""
    from specreplay.stats.pairing import pair_arms

    some_null = read_arm(_round_trip(tmp_path, ROUNDS, "parquet"), buckets=BUCKETS)
    assert some_null.depth is None
    filled = [{**r, "drafted": r["drafted"] if r["drafted"] is not None else 7} for r in ROUNDS]
    full = read_arm(_round_trip(tmp_path, filled, "jsonl"), buckets=BUCKETS)
    assert full.depth == max(r["drafted"] for r in filled)
    shallower = [{**r, "drafted": 6, "accepted": min(r["accepted"], 6)} for r in filled]
    other = read_arm(_round_trip(tmp_path, shallower, "jsonl", stem="b"), buckets=BUCKETS)
    assert other.depth == 6
    assert pair_arms(full, other, buckets=BUCKETS)[0].depths == (7, 6)
    assert pair_arms(full, some_null, buckets=BUCKETS)[0].depths is None

"""Schema v2's tails: read, validated, reported, and never replayed as if they were not there.

Issue 15, item 4 (first part): ``draft_tail`` and ``target_tail`` record the mass outside a
row's candidates. ``validate`` checks "kept mass + tail = 1" and prints the kept-mass quantiles;
a replay refuses positive tails with one line (the tail-aware replay is the rest of item 4), and
an archive whose tails are all 0 or unknown replays exactly as the same archive without them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from archive_factory import clone, valid_rows, write_jsonl, write_parquet

from specreplay import api
from specreplay.errors import InvalidArchive
from tests.corpus import invoke

# the factory's laws on its 4 candidates: draft Σ 15/16 (emitted_q holds it renormalised),
# target Σ 7/8
DRAFT_Q = [0.5, 0.25, 0.125, 0.0625]


def _v2(rows: list[dict[str, Any]], draft_tail: float | None, target_tail: float | None) -> Any:
    """The factory's rows as a v2 capture would write them: emitted_q never renormalised."""
    out = clone(rows)
    for r in out:
        lp = [math.exp(x) for x in r["draft_logprobs"]]  # the draft law, permuted as the row
        if draft_tail is not None:
            r["emitted_q"] = lp
        r["draft_tail"] = draft_tail
        r["target_tail"] = target_tail
    return out


def _write(tmp_path: Path, rows: list[dict[str, Any]], form: str) -> Path:
    if form == "jsonl":
        return write_jsonl(tmp_path / "a.jsonl", rows)
    return write_parquet(
        tmp_path / "a.parquet",
        rows,
        schema_overrides={"draft_tail": pl.Float64(), "target_tail": pl.Float64()},
    )


@pytest.mark.parametrize("form", ["jsonl", "parquet"])
def test_tails_validate_and_the_kept_mass_is_reported(tmp_path: Path, form: str) -> None:
    path = _write(tmp_path, _v2(valid_rows(), 1 / 16, 1 / 8), form)
    res = api.validate(path)
    kept = res.archive.kept_mass
    assert kept.tails_recorded
    assert kept.draft.positions == kept.target.positions == 18  # 3 requests × 2 rounds × 3
    assert (kept.draft.min, kept.draft.median) == (15 / 16, 15 / 16)
    assert (kept.target.min, kept.target.median) == (7 / 8, 7 / 8)
    assert kept.draft.below_099 == kept.target.below_099 == 1.0
    out = invoke(["validate", str(path)]).stdout
    assert "kept mass (Σ on the candidates) of the draft: min 0.9375 · 1% 0.9375" in out
    assert "100.0% of positions below 0.99" in out and "tails recorded (schema v2" in out


@pytest.mark.parametrize(
    ("draft_tail", "target_tail", "rule"),
    [
        (0.1, 1 / 8, "Σ emitted_q + draft_tail is not 1 within 1e-6 (kept mass + tail = 1)"),
        (1 / 16, 0.2, "Σ target_probs + target_tail is not 1 within 1e-6 (kept mass + tail = 1)"),
        (-0.5, 1 / 8, "draft_tail or target_tail is not a number in [0, 1]"),
    ],
)
@pytest.mark.parametrize("form", ["jsonl", "parquet"])
def test_a_wrong_tail_is_one_line_naming_the_row(
    tmp_path: Path, form: str, draft_tail: float, target_tail: float, rule: str
) -> None:
    rows = _v2(valid_rows(), 1 / 16, 1 / 8)
    rows[4]["draft_tail"], rows[4]["target_tail"] = draft_tail, target_tail
    path = _write(tmp_path, rows, form)
    with pytest.raises(InvalidArchive) as info:
        api.validate(path)
    where = "line 5" if form == "jsonl" else "row 4"
    assert f"{path}:{where}: {rule}" in info.value.errors[0] or (
        f"{path}: {where}" in info.value.errors[0] and rule in info.value.errors[0]
    )


def test_an_unknown_tail_allows_a_kept_mass_below_1(tmp_path: Path) -> None:
    # null draft_tail: emitted_q is the engine's law on the candidates, its tail unknown: Σ ≤ 1
    rows = _v2(valid_rows(), 1 / 16, None)
    for r in rows:
        r["draft_tail"] = None
    api.validate(_write(tmp_path, rows, "parquet"))
    rows[0]["emitted_q"] = [0.5, 0.5, 0.5, 0.5]
    with pytest.raises(InvalidArchive, match="emitted_q does not sum to 1"):
        api.validate(_write(tmp_path, rows, "parquet"))


@pytest.mark.parametrize("verb", ["requalify", "sweep"])
def test_a_replay_refuses_positive_tails_in_one_line(tmp_path: Path, verb: str) -> None:
    path = _write(tmp_path, _v2(valid_rows(), 1 / 16, 1 / 8), "jsonl")
    out = tmp_path / "out"
    args = (
        ["--baseline", "t1@3", "--candidate", "t1@2"] if verb == "requalify" else ["--arm", "t1@3"]
    )
    res = invoke([verb, str(path), *args, "--out", str(out)])
    assert res.exit_code == 2
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"error: {path}:line 1: draft_tail = 0.0625: this archive records")
    assert "Traceback" not in res.output and not out.exists()


def test_zero_or_unknown_tails_replay_as_the_archive_without_them(tmp_path: Path) -> None:
    rows = valid_rows()
    v1 = write_parquet(tmp_path / "v1.parquet", rows)
    v2_rows = clone(rows)
    for r in v2_rows:
        r["draft_tail"] = 0.0  # emitted_q is the whole logging law
        r["target_tail"] = None  # the target's missing 1/8 unknown, as in v1
    v2 = write_parquet(
        tmp_path / "v2.parquet",
        v2_rows,
        schema_overrides={"draft_tail": pl.Float64(), "target_tail": pl.Float64()},
    )
    a = api.requalify(v1, baseline="t1@3", candidate="t1:dyadic8@3", n_boot=200)
    b = api.requalify(v2, baseline="t1@3", candidate="t1:dyadic8@3", n_boot=200)
    fa, fb = a.to_polars("arms"), b.to_polars("arms")
    assert fa.height > 0 and fa.select("arm", "role", "R").equals(fb.select("arm", "role", "R"))


def test_a_v1_archive_says_its_tails_are_not_recorded(small_archive: Path) -> None:
    out = invoke(["validate", str(small_archive)]).stdout
    assert "tails not recorded (schema v1)" in out
    res = api.validate(small_archive)
    assert res.archive.kept_mass.tails_recorded is False

"""Issue 16, item 8: a result's repr fits 20 lines and says what the result is.

The dataclass repr printed every field of every cell: 435,000 characters on one line for the
API doctest's requalification (60 requests, 30 cells), 50,000 for the Medusa interval. The
repr now names the command, the arms, the cells by level, the pooled verdict(s) with the
interval on the margin's scale, and where the rest is (``.to_polars(VIEW)``, ``.to_arviz()``).
The results are built as tests/test_api.py builds them (the same archive: 60 requests × 16
rounds, seed 0, whose requalification the API doctest shows QUALIFIED / EQUIVALENT).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from specreplay import api
from specreplay.results.model import Result, Role

BASE, CAND = "top32:t0.7@8", "top32:t0.7:dyadic24@8"
DATA = Path(__file__).parent / "data"
STEM = "temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"
MEDUSA_A = DATA / "medusa-mtbench" / f"medusa-vicuna-7b-v1.3-{STEM}"
MEDUSA_B = DATA / "medusa-mtbench" / f"medusa-vicuna-13b-v1.3-{STEM}"
QUESTIONS = DATA / "medusa-mtbench" / "question.jsonl"


@pytest.fixture(scope="module")
def requalified(tmp_path_factory: pytest.TempPathFactory) -> Result:
    archive = api.synth(tmp_path_factory.mktemp("repr") / "archive", requests=60, rounds=16)
    return api.requalify(archive.path, baseline=BASE, candidate=CAND, n_boot=200)


def _lines(result: Result) -> list[str]:
    text = repr(result)
    assert text == str(result)  # print() shows the same
    return text.splitlines()


def test_a_requalification_repr_fits_20_lines_and_says_its_verdict(requalified: Result) -> None:
    lines = _lines(requalified)
    assert len(lines) <= 20
    assert max(len(line) for line in lines) <= 140
    assert lines[0].startswith("Result(requalify, specreplay ")
    assert lines[1].startswith("  verdict: QUALIFIED (SIMULATED)")  # the verdict comes first
    text = "\n".join(lines)
    assert f"arms: {BASE}, {CAND}" in text
    # the archive's 4 families and 5 context buckets: 1 + 4 + 5 + 4 × 5 cells, 60 requests pooled
    assert "cells: 30 (1 pooled, 4 family, 5 bucket, 20 family×bucket); pooled: 60" in text
    pooled = r"^  candidate-vs-baseline: EQUIVALENT; Δ/R_a .* at 95%; SIMULATED"
    assert re.search(pooled, text, re.MULTILINE)
    assert "law tests: 16, 0 failed" in text  # 8 positions × 2 arms
    assert ".to_polars(VIEW)" in text and ".to_arviz()" in text


def test_an_interval_repr_prints_the_interval_that_decided() -> None:
    """The Medusa pair (docstring of Result.to_arviz: DIFFERENT) at the default 0.5% margin:
    the pooled line shows Δ/R_a and its interval, in percent, to 3 significant digits."""
    res = api.interval(MEDUSA_A, MEDUSA_B, question_file=QUESTIONS, n_boot=200)
    lines = _lines(res)
    assert len(lines) <= 20
    assert lines[1] == "  verdict: DIFFERENT (pooled)"
    line = next(x for x in lines if x.startswith("  b-vs-a: "))
    shown = [float(x) for x in re.findall(r"[+-][\d.]+(?:e[+-]\d+)?(?=%)", line)]
    d = res.pooled.delta(Role.B_VS_A)
    assert d is not None and d.rel is not None and d.rel_lo is not None and d.rel_hi is not None
    assert shown == pytest.approx([100 * d.rel, 100 * d.rel_lo, 100 * d.rel_hi], rel=5e-3)
    # an absolute margin: the verdict is judged in tokens/round, and so is the interval shown
    absolute = api.interval(MEDUSA_A, MEDUSA_B, question_file=QUESTIONS, n_boot=200,
                            margin=api.Margin.absolute(0.05))  # fmt: skip
    line = next(x for x in _lines(absolute) if x.startswith("  b-vs-a: "))
    assert "tokens/round" in line and "Δ/R_a" not in line
    d = absolute.pooled.delta(Role.B_VS_A)
    assert d is not None and d.point is not None and d.lo is not None and d.hi is not None
    shown = [float(x) for x in re.findall(r"[+-][\d.]+", line.split(" tokens/round")[0])]
    assert shown == pytest.approx([d.point, d.lo, d.hi], rel=5e-4)


def test_many_deltas_are_counted_not_listed(requalified: Result) -> None:
    """A pooled cell with 40 deltas (the sweep of several arms over many depths has as many):
    8 are listed, the rest counted, and the repr still ends with where to see them."""
    pooled = requalified.pooled
    many = dataclasses.replace(pooled, deltas=pooled.deltas * 10)
    res = dataclasses.replace(requalified, cells=(many, *requalified.cells[1:]))
    lines = _lines(res)
    assert len(lines) <= 20
    assert f"  … {40 - 8} more pooled deltas: .to_polars('deltas')" in lines
    assert lines[-2].startswith("  more: ")


def test_a_result_without_cells_says_so() -> None:
    res = api.lawtest(arms=["top32:t0.7:dyadic8@5"], max_draws=200_000)
    lines = _lines(res)
    assert len(lines) <= 20
    assert lines[0].startswith("Result(lawtest, ")
    assert "  cells: none" in lines
    failed = sum(t.passed is False for t in res.law_tests)
    assert f"  law tests: {len(res.law_tests)}, {failed} failed" in "\n".join(lines)


def test_a_cell_repr_fits_20_lines_and_says_its_figures(requalified: Result) -> None:
    """``result.pooled`` printed 17,000 characters; now R per arm with its label, the deltas,
    and how many figures of each other kind the cell holds."""
    pooled = requalified.pooled
    lines = repr(pooled).splitlines()
    assert len(lines) <= 20
    assert lines[0] == "Cell(pooled, 60 requests)"
    base = pooled.arms[BASE]
    assert base.R is not None
    assert f"  R {BASE}: {base.R:.4f} [" in "\n".join(lines)  # 3.2627, as the API doctest
    assert any(x.startswith("  candidate-vs-baseline: EQUIVALENT; Δ/R_a ") for x in lines)
    also = next(x for x in lines if x.startswith("  also: "))
    assert f"{len(pooled.survival)} survival" in also and "requalification QUALIFIED" in also
    empty = next(c for c in requalified.cells if c.null_reason is not None)
    assert (
        repr(empty).splitlines()[0] == f"Cell({empty.name}, 0 requests; null: {empty.null_reason})"
    )


def test_a_cell_with_many_figures_is_cut_at_20_lines(requalified: Result) -> None:
    pooled = requalified.pooled
    big = dataclasses.replace(
        pooled,
        arms={f"{k}#{i}": v for i in range(4) for k, v in pooled.arms.items()},
        deltas=pooled.deltas * 5,
    )
    lines = repr(big).splitlines()
    assert len(lines) == 20
    assert lines[-1].startswith("  more: ") and "  … 12 more arms: .arms" in lines

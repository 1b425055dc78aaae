"""The typed statistics map onto the results model exactly as the dict-shaped ones did.

``tests/data/from_stats/cells.json`` holds the results.json cells and law tests that the results
layer built from the statistics layer's dicts before issue 11 (its PROVENANCE.md gives the commit
and the script); the same seeded inputs (``stats_cases``) through the typed statistics and
:mod:`specreplay.results.from_stats` must give the same JSON, key for key and value for value.
The cases reach every kind of delta (computed, null for too few requests, for an unsupported arm,
for too few resamples; forced INCONCLUSIVE; identical inputs; the large-margin warning; HDI/ETI).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
import stats_cases as sc

from specreplay.replay.lawcases import SkippedLawTest, run_cases
from specreplay.results import from_stats
from specreplay.results.io import dump
from specreplay.results.model import Cell, LawTest
from specreplay.results.schema import read_part
from specreplay.stats.cells import measured_cells
from specreplay.stats.compare import Comparison, compare, parse_margin

FIXTURE = Path(__file__).parent / "data" / "from_stats" / "cells.json"


@pytest.fixture(scope="module")
def before() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return doc


def _compare(name: str) -> Comparison:
    ps, kw = sc.COMPARISONS[name]()
    kw = dict(kw)
    if "margin" in kw:
        kw["margin"] = parse_margin(kw["margin"])
    return compare(ps, arm_a="a", arm_b="b", **kw)


def _same(got: Any, want: Any) -> bool:
    """Equal key for key; floats within 1e-12 relative or 1e-14 absolute, the rest exactly.

    The fixture was written on one machine: NumPy dispatches exp/log to the CPU's SIMD target
    (AVX-512 or AVX2 kernels differ by an ulp), so a statistic built on them moves in the last
    bits from one CPU to another (seen: the G statistic, 20.675381581646768 vs …674), and a
    total variation that is rounding noise around 0 (identical laws) is 7.9e-19 on one CPU and
    7.6e-18 on another. 1e-14 is about 45 ulps of 1, the scale of the probabilities summed (16
    categories of a few ulps each). A mapping bug moves a value by far more, or a key, a label
    or a null.
    """
    if isinstance(got, float) and isinstance(want, float):
        return math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-14)
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(_same(got[k], want[k]) for k in got)
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(_same(a, b) for a, b in zip(got, want, strict=True))
    return type(got) is type(want) and bool(got == want)


ADDED_SINCE = {"policies": []}
"""Cell keys results.json gained after the fixture was written, with the value every cell of a
comparison holds (issue 14's ``policies``: only a sweep with ``--policy`` fills them)."""


def _since(cell: dict[str, Any]) -> dict[str, Any]:
    """Return ``cell`` without the keys added since the fixture, checking their values."""
    for key, value in ADDED_SINCE.items():
        assert cell.pop(key) == value, key
    return cell


def _json(x: Any) -> Any:
    """What results.json holds for ``x`` (through the same encoder, NaN refused)."""
    return json.loads(json.dumps(dump(x), allow_nan=False, ensure_ascii=False))


@pytest.mark.parametrize("name", list(sc.COMPARISONS))
def test_comparison_cells_map_to_the_json_of_before(name: str, before: dict[str, Any]) -> None:
    comp = _compare(name)
    if name == "relative":  # the interval command: HDI/ETI on every computed delta
        from specreplay.stats.arviz_bridge import hdi_eti

        comp = hdi_eti(comp, prob=0.95)
    cells = [from_stats.comparison_cell(c) for c in comp.cells]
    want = before["comparisons"][name]
    assert len(cells) == len(want)
    for got, exp in zip(cells, want, strict=True):
        assert _same(_since(_json(got)), exp), (got.level, got.family, got.bucket)
    # the mapping is the inverse of reading results.json back: read(dump(cell)) == cell
    assert all(read_part(Cell, _json(c)) == c for c in cells)


def test_each_compared_cell_has_exactly_one_delta_of_its_arms() -> None:
    comp = _compare("unsupported")
    for c in comp.cells:
        assert (c.delta.a, c.delta.b) == (c.arm_a.name, c.arm_b.name) == ("a", "b")
        assert len(from_stats.comparison_cell(c).deltas) == 1
    f1 = [c for c in comp.cells if c.spec.family == "f1"]
    assert f1 and all(c.arm_b.R is None and c.arm_a.R is not None for c in f1)
    assert all(c.delta.null_reason == "3 rounds record fewer than 4 positions" for c in f1)


@pytest.mark.parametrize("has_accepted", [True, False])
def test_measured_cells_map_to_the_json_of_before(
    has_accepted: bool, before: dict[str, Any]
) -> None:
    m, fams, bk = sc.measured_inputs()
    cells = measured_cells(m, arm="log@3", families=fams, buckets=bk, has_accepted=has_accepted)
    got = [_since(_json(from_stats.measured_cell(c))) for c in cells]
    assert _same(got, before["measured"][str(has_accepted).lower()])


def test_law_tests_map_to_the_json_of_before(before: dict[str, Any]) -> None:
    cases, skipped, kw = sc.law_cases()
    records = run_cases(cases, skipped, **kw)
    assert all(isinstance(s, SkippedLawTest) for s in records[len(cases) :])
    tests = from_stats.law_tests(records)
    assert _same([_json(t) for t in tests], before["law_tests"])
    assert all(read_part(LawTest, _json(t)) == t for t in tests)


def test_a_bare_hand_made_delta_maps_field_for_field() -> None:
    """Every field of the model's Delta that the statistics hold is copied (none forgotten)."""
    comp = _compare("absolute_warning")
    d = comp.pooled.delta
    mapped = from_stats.delta(d)
    shared = {f.name for f in dataclasses.fields(d)} - {"bca", "bonferroni", "tost", "hdi", "eti"}
    shared -= {"coverage_at_size", "role", "label"}
    assert all(getattr(mapped, k) == getattr(d, k) for k in shared)
    assert mapped.role.value == d.role and mapped.label.value == d.label
    assert d.tost is not None and mapped.tost is not None
    assert (mapped.tost.margin, mapped.tost.kind, mapped.tost.text) == (5.0, "absolute", "5")
    assert d.warning is not None and d.warning.startswith("absolute margin 5 tokens/round")

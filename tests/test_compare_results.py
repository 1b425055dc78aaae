"""Tests of bench/compare_results.py (the figure-by-figure comparison of two run folders)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "compare_results.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compare_results", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


def _write(root: Path, rel: str, doc: dict[str, object]) -> None:
    path = root / rel / "results.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc), encoding="utf-8")


POOLED = {"level": "pooled", "family": None, "bucket": None}


def _doc(r: float, s: float, verdict: str, run: str) -> dict[str, object]:
    return {
        "created_utc": f"2026-01-0{run}T00:00:00Z",
        "environment": {"threads": int(run)},
        "inputs": [{"path": f"/tmp/run{run}/a.parquet", "sha256": run * 8, "rows": 80}],
        "options": {"archive": f"/tmp/run{run}", "level": 0.95, "baseline": "top32:t0.7@5"},
        "cells": [POOLED | {"verdict": verdict, "R": r, "S": s, "passed": True}],
    }


def test_identical_folders_up_to_run_metadata(tmp_path: Path) -> None:
    _write(tmp_path / "old", ".", _doc(2.0, 3.0, "EQUIVALENT", "1"))
    _write(tmp_path / "new", ".", _doc(2.0, 3.0, "EQUIVALENT", "2"))
    assert _load().main([str(tmp_path / "old"), str(tmp_path / "new")]) == 0


def test_reports_verdicts_and_relative_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path / "old", "sub", _doc(2.0, 3.0, "EQUIVALENT", "1"))
    _write(tmp_path / "new", "sub", _doc(2.0 + 2e-10, 3.3, "INCONCLUSIVE", "2"))
    assert _load().main([str(tmp_path / "old"), str(tmp_path / "new")]) == 1
    out = capsys.readouterr().out
    assert "verdict differences: 1" in out
    assert "sub/results.json:cells.pooled|None|None.verdict: 'EQUIVALENT' -> 'INCONCLUSIVE'" in out
    # figures: rows, level, R, S = 4 numbers; R moves by 2e-10/(2 + 2e-10) ≈ 1e-10 (below 1e-9)
    assert "numeric figures compared: 4 (2 identical)" in out
    # |3.3 − 3| / 3.3 = 0.0909…
    assert (
        "largest relative change: 0.0909 at sub/results.json:cells.pooled|None|None.S: 3.0 -> 3.3"
        in out
    )
    assert "figures changing by more than 1e-09 relative: 1\n" in out


def test_cells_are_paired_by_identity_and_law_tests_can_be_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mod = _load()
    cells = [
        {"level": "pooled", "family": None, "bucket": None, "R": 3.0},
        {"level": "family", "family": "chat", "bucket": None, "R": 2.9},
        {"level": "family", "family": "code", "bucket": None, "R": 3.6},
    ]
    law = [{"arm": "x", "position": 1, "tv": 0.1, "passed": False}]
    _write(tmp_path / "a", ".", {"cells": cells, "law_tests": law})
    moved = [{"arm": "x", "position": 4, "tv": 0.2, "passed": False}]
    _write(tmp_path / "b", ".", {"cells": [cells[0], cells[2], cells[1]], "law_tests": moved})
    assert mod.main([str(tmp_path / "a"), str(tmp_path / "b"), "--law-test-counts"]) == 0
    assert "numeric figures compared: 6 (6 identical)" in capsys.readouterr().out
    # without counting, the law test at another position is a difference
    assert mod.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1

"""Projection (issue 8, item 2): a pass reads only the columns it needs, and says which it skipped.

The archive is the factory's (dyadic laws, every optional column) plus a carried ``note``
column. An invalid ``emitted_q`` law at one row is the witness that a column was really not
read: a pass that reads it fails at that row, one that does not read it replays.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from archive_factory import clone, valid_rows, write_parquet
from typer.testing import CliRunner

from specreplay.cli import app
from specreplay.errors import SpecReplayError
from specreplay.replay.engine import OpenArchive
from specreplay.replay.shard import needed_columns
from specreplay.sim.arms import parse_arm

ARMS = [parse_arm("top4:t1@3"), parse_arm("top4:t1:dyadic8@3")]
BASE = ["--baseline", "top4:t1@3", "--candidate", "top4:t1:dyadic8@3", "--min-requests", "2",
        "--n-boot", "200", "-q", "--force"]  # fmt: skip


def _archive(tmp: Path, *, bad_eq: bool = False, note: bool = True) -> Path:
    rows = clone(valid_rows(n_requests=12, n_rounds=3, depth=3))
    for r in rows:
        if note:  # constant within a request, so it can code --by cells
            r["note"] = f"n{int(r['request_id'].split('-')[1]) % 3}"
    if bad_eq:
        rows[7]["emitted_q"] = [0.5, 0.5, 0.5, 0.5]  # sums to 2: not a law
    extra = {"note": pl.String()} if note else {}
    return write_parquet(
        tmp / ("bad.parquet" if bad_eq else "a.parquet"), rows, schema_overrides=extra
    )


def test_needed_columns_follow_the_estimators() -> None:
    assert "emitted_q" not in (needed_columns("analytic") or ())
    assert "emitted_q" in (needed_columns("analytic", "importance") or ())
    assert "worker" in (needed_columns("analytic", None, ("family", "worker")) or ())


def test_an_unread_column_is_not_validated(tmp_path: Path) -> None:
    path = _archive(tmp_path, bad_eq=True)
    with pytest.raises(SpecReplayError, match=r"row 7 \(0-based\).*emitted_q"):
        OpenArchive(path).replay(ARMS)
    res = OpenArchive(path, columns=needed_columns("analytic")).replay(ARMS)
    assert res.unread == ("emitted_q", "note")
    assert "emitted_q" not in res.columns


def test_projection_changes_no_figure(tmp_path: Path) -> None:
    path = _archive(tmp_path)
    every = OpenArchive(path).replay(ARMS)
    some = OpenArchive(path, columns=needed_columns("analytic")).replay(ARMS)
    assert every.unread == () and some.unread == ("emitted_q", "note")
    for arm in ARMS:
        a, b = every.sums[arm.canonical], some.sums[arm.canonical]
        for name in ("n", "t"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_array_equal(every.measured.sums.n, some.measured.sums.n)


def test_requalify_lists_the_columns_it_did_not_read(tmp_path: Path) -> None:
    path = _archive(tmp_path)
    runner = CliRunner()
    out = tmp_path / "out"
    r = runner.invoke(app, ["requalify", str(path), *BASE, "--out", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "results.json").read_text())
    assert doc["columns_not_read"] == ["note"]  # the importance companion reads emitted_q
    assert "Columns not read" in (out / "TABLES.md").read_text()
    by = tmp_path / "by"
    r = runner.invoke(app, ["requalify", str(path), *BASE, "--by", "note", "--out", str(by)])
    assert r.exit_code == 0, r.output
    assert json.loads((by / "results.json").read_text()).get("columns_not_read") is None
    (tmp_path / "plain").mkdir()
    plain = _archive(tmp_path / "plain", note=False)
    po = tmp_path / "po"
    r = runner.invoke(app, ["requalify", str(plain), *BASE, "--out", str(po)])
    assert r.exit_code == 0, r.output
    a, b = doc, json.loads((po / "results.json").read_text())
    assert a["cells"] == b["cells"] and a["law_tests"] == b["law_tests"]

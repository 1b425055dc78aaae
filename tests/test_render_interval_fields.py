"""The interval fields of issue 10, item 4 in every output: results.json, TABLES.md, REPORT.md,
cells.parquet and the forest plot, read back from hand-made cells.

Each cell's figures are chosen here (method, df, requests that differ, the small-sample flag
with the study's coverage at its size, the reason a rule forced the verdict) and each output is
checked for them by looking the cell up independently: a table row by its header and cell name,
a REPORT.md bullet by its cell name, a results.json key by ``json``, a forest dot by the face
colour matplotlib holds for it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specreplay.results.io import read_result, write_result
from specreplay.results.model import (
    ArmFigure,
    Cell,
    CoverageAtSize,
    Delta,
    IntervalMethod,
    Label,
    Level,
    Requalification,
    Result,
    Role,
    Tost,
)

METHOD = IntervalMethod(
    method="cr2-eff",
    description="CR2 / Bell–McCaffrey variance, t with effective degrees of freedom",
    min_requests=10,
    min_differing=5,
    study="python bench/calibration.py --datasets 1000 --seed 20261201",
)
COV_10 = CoverageAtSize(coverage=0.93, mc_se=0.004, n_requests=10, setting="skew-zero")
COV_20 = CoverageAtSize(coverage=0.941, mc_se=0.0035, n_requests=20, setting="sparse-crn")
FEW = "3 requests differ < 5 (study threshold): INCONCLUSIVE"
SAME = "identical inputs"

# per cell: (level, family, requests, df, differing, small, coverage, verdict, reason)
CELLS: list[tuple[Level, str | None, int, float | None, int, bool, Any, str, str | None]] = [
    (Level.POOLED, None, 60, 57.25, 33, False, None, "EQUIVALENT", None),
    (Level.FAMILY, "chat", 12, 9.5, 3, True, COV_10, "INCONCLUSIVE", FEW),
    (Level.FAMILY, "code", 24, None, 0, True, COV_20, "EQUIVALENT", SAME),
    (Level.FAMILY, "math", 24, 21.75, 30, False, None, "DIFFERENT", None),
]
COVERAGE_10 = (
    "small sample: in the study's hardest setting (skew-zero), 95% intervals of 10 requests "
    "covered 0.93 ± 0.004"
)
COVERAGE_20 = (
    "small sample: in the study's hardest setting (sparse-crn), 95% intervals of 20 requests "
    "covered 0.941 ± 0.004"
)


def _delta(role: Role, k: int, row: tuple[Any, ...]) -> Delta:
    _, _, _, df, differing, small, cov, verdict, reason = row
    point = 0.0 if reason == SAME else 0.01 * (k + 1)
    return Delta(
        a="base", b="cand", role=role, point=point, rel=point / 3.0, lo=point - 0.02,
        hi=point + 0.03, rel_lo=(point - 0.02) / 3.0, rel_hi=(point + 0.03) / 3.0,
        method="cr2-eff", level=0.95, adjusted=False, bca=None, bonferroni=None,
        tost=Tost(0.05, 0.005, "relative", "0.5%", 0.0, 0.0, 0.9), p_difference=0.5,
        p_equivalence=0.01, verdict=verdict, smallest_equivalent_margin=None,
        requests_for_margin=None, n_boot=2000, n_boot_valid=None, warning=None,
        label=Label.SIMULATED, null_reason=None, df=df, n_differing=differing,
        small_sample=small, coverage_at_size=cov, verdict_reason=reason,
    )  # fmt: skip


def _result(command: str) -> Result:
    role = Role.B_VS_A if command == "interval" else Role.CANDIDATE_VS_BASELINE
    cells = tuple(
        Cell(level, fam, None, n, {arm: ArmFigure(3.0, 100, Label.SIMULATED, None, None)
                                   for arm in ("base", "cand")},
             deltas=(_delta(role, k, row),),
             requalification=None if command == "interval" else Requalification(
                 "INCONCLUSIVE", f"Δ {row[7]}; law test passed", Label.SIMULATED, None))
        for k, row in enumerate(CELLS)
        for level, fam, n in [row[:3]]
    )  # fmt: skip
    return Result(
        command=command, version="0", created_utc="2026-01-01T00:00:00Z", seed=0,
        environment={"python": "3", "numba": "0", "polars": "2", "threads": 1}, inputs=(),
        options={"margin": {"margin": 0.005, "kind": "relative", "text": "0.5%"},
                 "stratify": "family"},
        assumptions=(), excluded=(), arms=("base", "cand"), law_tests=(), cells=cells,
        interval_method=METHOD, requalification=cells[0].requalification,
    )  # fmt: skip


def _name(fam: str | None) -> str:
    return "pooled" if fam is None else fam


def _table_rows(text: str, first_header: str) -> dict[str, dict[str, str]]:
    """The rows of the Markdown table whose header starts with ``| first_header``, by cell."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"| {first_header} "))
    header = [h.strip() for h in lines[start].strip("|").split("|")]
    rows = {}
    for ln in lines[start + 2 :]:
        if not ln.startswith("|"):
            break
        vals = [v.strip() for v in ln.strip("|").split("|")]
        rows[vals[0]] = dict(zip(header, vals, strict=True))
    return rows


# -- results.json ------------------------------------------------------------------------------


def test_results_json_carries_and_round_trips_the_interval_fields(tmp_path: Path) -> None:
    """results.json holds each field under its name with the value set here, and reads back to
    an equal Result (coverage_at_size and interval_method included)."""
    result = _result("interval")
    path = tmp_path / "results.json"
    write_result(path, result)
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["interval_method"] == {
        "method": "cr2-eff", "description": METHOD.description, "min_requests": 10,
        "min_differing": 5, "study": METHOD.study,
    }  # fmt: skip
    for cell, (_, fam, _, df, differing, small, cov, verdict, reason) in zip(
        doc["cells"], CELLS, strict=True
    ):
        d = cell["deltas"][0]
        assert cell["family"] == fam
        assert (d["df"], d["n_differing"], d["small_sample"]) == (df, differing, small)
        assert (d["verdict"], d["verdict_reason"]) == (verdict, reason)
        want = (
            None
            if cov is None
            else {
                "coverage": cov.coverage,
                "mc_se": cov.mc_se,
                "n_requests": cov.n_requests,
                "setting": cov.setting,
            }
        )
        assert d["coverage_at_size"] == want  # fmt: skip
    back = read_result(path)
    assert back == result
    assert back.cells[1].deltas[0].coverage_at_size == COV_10
    assert back.interval_method == METHOD


def test_results_json_without_the_fields_still_reads(tmp_path: Path) -> None:
    """A results.json written before the fields existed (keys absent) reads back with None."""
    path = tmp_path / "results.json"
    write_result(path, _result("interval"))
    doc = json.loads(path.read_text(encoding="utf-8"))
    del doc["interval_method"]
    for cell in doc["cells"]:
        for key in ("df", "n_differing", "small_sample", "coverage_at_size", "verdict_reason"):
            del cell["deltas"][0][key]
    path.write_text(json.dumps(doc), encoding="utf-8")
    back = read_result(path)
    assert back.interval_method is None
    d = back.cells[1].deltas[0]
    assert (d.df, d.n_differing, d.small_sample, d.coverage_at_size, d.verdict_reason) == (
        None, None, None, None, None,
    )  # fmt: skip


# -- TABLES.md ---------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["interval", "requalify"])
def test_tables_show_method_df_differing_small_sample_and_reason(command: str) -> None:
    """Per cell row: method, df (1 decimal), requests differing, the small-sample mark with the
    study's coverage ("no" for a cell at nominal size), and the forced verdict's reason beside
    INCONCLUSIVE and the identical-inputs EQUIVALENT (a footnote: reasons can be long); one line
    names the method and thresholds."""
    from specreplay.render.tables import TABLES

    text = TABLES[command](_result(command))
    assert (
        "Interval method: cr2-eff (CR2 / Bell–McCaffrey variance, t with effective degrees of "
        "freedom). Thresholds from the calibration study: below the verdict minimum of 10 "
        "requests a cell is never EQUIVALENT, and DIFFERENT only where the CR2 and sign-flip "
        "tests both reject at α/2; with fewer than 5 requests that differ between the arms it "
        "is decided by its conservative hull (EQUIVALENT only inside the margin, never "
        f"DIFFERENT); the study: {METHOD.study}."
    ) in text
    rows = _table_rows(text, "cell")
    small = {"chat": COVERAGE_10, "code": COVERAGE_20}
    for _, fam, _, df, differing, _, _, verdict, reason in CELLS:
        row = rows[_name(fam)]
        assert row["method"] == "cr2-eff"
        assert row["df"] == ("—" if df is None else f"{df:.1f}")
        assert row["requests differing"] == str(differing)
        assert row["small sample"] == small.get(_name(fam), "no")
        if reason is None:
            assert row["verdict"] == verdict
        else:  # a footnote marker beside the verdict, the reason under the table
            assert row["verdict"].startswith(f"{verdict} [")
            marker = row["verdict"].split(" ")[1]
            assert f"\n{marker} {reason}\n" in text
    if command == "interval":
        assert "Intervals shown are unadjusted cr2-eff intervals" in text


def test_tables_without_the_fields_keep_their_columns() -> None:
    """A result without the fields (every run before the lead fills them) renders the table it
    did: no method/df/differing/small-sample columns, no method line."""
    from dataclasses import replace

    from specreplay.render.tables import comparison_tables

    old = _result("interval")
    cells = tuple(
        replace(c, deltas=tuple(replace(d, df=None, n_differing=None, small_sample=None,
                                        coverage_at_size=None, verdict_reason=None)
                                for d in c.deltas))
        for c in old.cells
    )  # fmt: skip
    text = comparison_tables(replace(old, cells=cells, interval_method=None))
    header = next(ln for ln in text.splitlines() if ln.startswith("| cell "))
    assert "small sample" not in header and "df" not in header
    assert "Interval method" not in text
    assert "unadjusted studentized (bootstrap-t) intervals" in text


# -- REPORT.md ---------------------------------------------------------------------------------


def _bullets(text: str, title: str) -> list[str]:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return [ln for ln in text[start:end].split("\n") if ln.startswith("- ")]


@pytest.mark.parametrize("command", ["interval", "requalify"])
def test_report_says_the_same_in_prose(command: str) -> None:
    """Verdicts: each cell's line carries its method/df/differing, its small-sample coverage and
    its forced reason; choices: the method, thresholds and study; diagnostics: the small-sample
    cells grouped by coverage, and the forced verdicts with their reasons."""
    from specreplay.render.report import report_markdown

    text = report_markdown(_result(command), ["forest.png"])
    verdicts = _bullets(text, "Verdicts")
    for _, fam, n, df, differing, _, _, verdict, reason in CELLS:
        line = next(v for v in verdicts if v.startswith(f"- {_name(fam)} ({n:,} requests)"))
        method = "cr2-eff" + ("" if df is None else f", df {df:.1f}")
        assert f"interval {method}, {differing} requests differ" in line
        assert (COVERAGE_10 in line) == (fam == "chat")
        assert (COVERAGE_20 in line) == (fam == "code")
        if reason is not None:
            assert f"{verdict} ({reason})" in line.replace("**", "")
    choices = "\n".join(_bullets(text, "Assumptions and choices"))
    assert f"Intervals: cr2-eff, {METHOD.description}, at 95%" in choices
    assert f"The calibration study ({METHOD.study}) set the thresholds" in choices
    assert (
        "below the verdict minimum of 10 requests a cell is never EQUIVALENT, and DIFFERENT only "
        "where the CR2 and sign-flip tests both reject at α/2 (the hull of their intervals is "
        "printed); with fewer than 5 requests whose (n, t) differ" in choices
    )
    diag = _bullets(text, "Diagnostics")
    small = "- 1 small-sample cell(s) (below the nominal-coverage size)"
    assert f"{small}, {COVERAGE_10[14:]}: chat." in diag
    assert f"{small}, {COVERAGE_20[14:]}: code." in diag
    assert f"- 1 cell(s) INCONCLUSIVE by rule ({FEW}): chat." in diag
    assert f"- 1 cell(s) EQUIVALENT by rule ({SAME}): code." in diag


# -- cells.parquet -----------------------------------------------------------------------------


def test_cells_parquet_rows_carry_the_fields() -> None:
    """Each delta row of the cells table holds the cell's df, differing requests, flag, the
    study's coverage (its number) and the reason."""
    from specreplay.results.cells_table import cells_frame

    frame = cells_frame(_result("interval")).filter(kind="delta")
    got = {r["family"]: r for r in frame.iter_rows(named=True)}
    for _, fam, _, df, differing, small, cov, _, reason in CELLS:
        r = got[fam]
        assert (r["df"], r["n_differing"], r["small_sample"], r["verdict_reason"]) == (
            df, differing, small, reason,
        )  # fmt: skip
        assert r["coverage_at_size"] == (None if cov is None else cov.coverage)


# -- the forest plot ---------------------------------------------------------------------------


def test_forest_marks_small_sample_cells_hollow_with_a_legend_entry() -> None:
    """forest_rows flags exactly the small-sample cells; drawn, their dots have a white face
    (the others the verdict colour), and the legend holds the small-sample entry."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    from specreplay.render.plots import (
        SMALL_SAMPLE_LEGEND,
        _forest_legend,
        _forest_rows_draw,
        forest_rows,
    )

    rows = forest_rows(_result("interval").cells, Role.B_VS_A, relative=False)
    assert {r.label.split("  ")[0]: r.small_sample for r in rows} == {
        "pooled": False, "chat": True, "code": True, "math": False,
    }  # fmt: skip
    fig, ax = plt.subplots()
    try:
        _forest_rows_draw(ax, rows, 0.5)
        faces = [tuple(f) for f in ax.collections[-1].get_facecolors()]
        edges = [tuple(e) for e in ax.collections[-1].get_edgecolors()]
    finally:
        plt.close(fig)
    white = to_rgba("white")
    for r, face, edge in zip(rows, faces, edges, strict=True):
        assert (face == white) == r.small_sample, r.label
        assert edge != white
    labels = [h.get_label() for h in _forest_legend(rows, 0.5, "%")]
    assert SMALL_SAMPLE_LEGEND in labels
    plain = [r for r in rows if not r.small_sample]
    assert SMALL_SAMPLE_LEGEND not in [h.get_label() for h in _forest_legend(plain, 0.5, "%")]


def test_render_writes_the_fields_into_every_output(tmp_path: Path) -> None:
    """The whole renderer on the hand-made result: TABLES.md and REPORT.md name the small-sample
    coverage and the reasons, results.json reads back equal, the forest PNG is written."""
    from specreplay.render.files import render

    result = _result("interval")
    write_result(tmp_path / "results.json", result)
    written = render(result, tmp_path)
    assert {"TABLES.md", "forest.png", "REPORT.md"} <= set(written)
    for name in ("TABLES.md", "REPORT.md"):
        text = (tmp_path / name).read_text(encoding="utf-8")
        assert COVERAGE_10 in text and COVERAGE_20 in text, name
        assert FEW in text and SAME in text, name
    assert read_result(tmp_path / "results.json") == result

"""``specreplay budget`` (issue 6, item 4): break-even added cost and sensitivity.

See docs/methods.md#the-budget-break-even-cost.

Closed forms, computed here independently of the package: x = T·Δ_lo/R_0, remaining = x − Σ k,
and r_0·(1 + g)·τ/(τ + x). Tolerances are float64 rounding (1e-12 relative) unless a figure is
compared with a printed, rounded one (half a unit of its last printed digit).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from specreplay.cli import app
from specreplay.results.io import parse_result, read_result, result_json
from specreplay.results.model import Label, Level, Role
from specreplay.stats.budget import break_even, sensitivity

RUNNER = CliRunner()
ENV = {"COLUMNS": "300"}

# the worked example of docs/methods.md#the-budget-break-even-cost: T, Δ_lo, R_0 and the known
# B1 proxies, as first printed
T, DELTA_LO, R0, KNOWN = 48.08, 0.175370, 3.091813, 0.182813
# its break-even and remaining cost as first printed (five decimals; the page gives 2.727134)
SEED_BREAK_EVEN, SEED_REMAINING = 2.72713, 2.54432


def _run(args: list[str]) -> tuple[int, str, str]:
    res = RUNNER.invoke(app, ["budget", *args], env=ENV)
    return res.exit_code, res.stdout, res.stderr


def test_acceptance_numbers_of_the_seed() -> None:
    expected = 48.08 * 0.175370 / 3.091813  # hand: 8.431789.../3.091813
    assert expected == pytest.approx(2.727134403, abs=1e-9)
    assert expected - 0.182813 == pytest.approx(2.544321403, abs=1e-9)
    b = break_even(R0, DELTA_LO, T, [KNOWN])
    assert b.null_reason is None
    assert b.break_even_ms == pytest.approx(expected, rel=1e-12)
    assert b.remaining_ms == pytest.approx(expected - KNOWN, rel=1e-12)
    assert round(b.break_even_ms, 6) == 2.727134
    assert round(b.remaining_ms, 6) == 2.544321
    # the seed's figures are the same ones rounded to five decimals
    assert abs(b.break_even_ms - SEED_BREAK_EVEN) <= 0.5e-5
    assert abs(b.remaining_ms - SEED_REMAINING) <= 0.5e-5
    # the seed's prose prints six decimals, 2.727129 and 2.544316: 5e-6 below these, within what
    # its six-decimal inputs (each ±5e-7) allow: |∂x/∂Δ_lo|·5e-7 + |∂x/∂R_0|·5e-7 ≈ 8e-6
    assert abs(b.break_even_ms - 2.727129) < 1e-5
    assert abs(b.remaining_ms - 2.544316) < 1e-5


def test_known_costs_are_summed() -> None:
    b = break_even(R0, DELTA_LO, T, [0.1, 0.05, 0.032813])
    assert b.remaining_ms == pytest.approx(48.08 * 0.175370 / 3.091813 - 0.182813, rel=1e-12)


@pytest.mark.parametrize("delta_lo", [0.0, -0.01])
def test_no_gain_at_the_lower_bound_is_a_null_budget(delta_lo: float) -> None:
    b = break_even(R0, delta_lo, T, [KNOWN])
    assert b.break_even_ms is None and b.remaining_ms is None
    assert b.null_reason is not None and "nothing to spend" in b.null_reason


def test_sensitivity_against_hand_computation() -> None:
    # r_0 = 53.56 tok/s, τ = 40 ms, g = .0832: 53.56·1.0832·40/(40 + x)
    pts = sensitivity(53.56, 40.0, 0.0832, [0.0, 1.0, 3.0])
    hand = [58.016192, 58.016192 * 40 / 41, 58.016192 * 40 / 43]  # 53.56·1.0832 = 58.016192
    assert [p.extra_ms for p in pts] == [0.0, 1.0, 3.0]
    assert [p.rate for p in pts] == pytest.approx(hand, rel=1e-12)
    assert [p.rel_change for p in pts] == pytest.approx(
        [h / 53.56 - 1 for h in hand], rel=1e-9, abs=1e-12
    )
    assert pts[0].rel_change == pytest.approx(0.0832, rel=1e-12)


def test_cli_writes_result_tables_and_cells(tmp_path: Path) -> None:
    out = tmp_path / "b"
    code, stdout, stderr = _run(
        ["--base", str(R0), "--delta-lo", str(DELTA_LO), "--price-ms", str(T), "--known", "0.1",
         "--known", "0.082813", "--rate", "53.56", "--tau-ms", "40", "--gain", "0.0832",
         "--x-grid", "0,1,3", "--out", str(out)]
    )  # fmt: skip
    assert code == 0, stderr
    assert "2.727134" in stdout and "2.544321" in stdout
    text = (out / "results.json").read_text(encoding="utf-8")
    parse_result(text.encode())  # report's checks pass
    result = read_result(out / "results.json")
    assert result_json(result) == text  # round trip
    assert result.command == "budget"
    b = result.pooled.budget
    assert b is not None and b.label is Label.ESTIMATED
    assert b.known_ms == pytest.approx(0.182813, rel=1e-12)
    assert b.break_even_ms == pytest.approx(48.08 * 0.175370 / 3.091813, rel=1e-12)
    assert result.sensitivity is not None
    assert [s.rate_with_extra for s in result.sensitivity] == pytest.approx(
        [58.016192, 58.016192 * 40 / 41, 58.016192 * 40 / 43], rel=1e-12
    )
    assert all(s.label is Label.ESTIMATED for s in result.sensitivity)
    tables = (out / "TABLES.md").read_text(encoding="utf-8")
    assert "ESTIMATED" in tables and "2.544321" in tables and "56.60" in tables
    cells = pl.read_parquet(out / "cells.parquet")
    be = cells.filter(pl.col("kind") == "break_even_ms")
    assert be["value"].to_list() == pytest.approx([b.break_even_ms])
    assert be["label"].to_list() == ["ESTIMATED"]


def test_cli_null_budget_keeps_its_reason(tmp_path: Path) -> None:
    out = tmp_path / "b"
    code, stdout, stderr = _run(
        ["--base", "3.0", "--delta-lo", "-0.02", "--price-ms", "48", "--out", str(out)]
    )
    assert code == 0, stderr
    assert "nothing to spend" in stdout
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    budget = doc["cells"][0]["budget"]
    assert budget["break_even_ms"] is None and budget["remaining_ms"] is None
    assert "nothing to spend" in budget["null_reason"]
    assert budget["label"] == "ESTIMATED"


# -- --from a requalify results.json ----------------------------------------------------------


@pytest.fixture(scope="module")
def requalify_dirs(tmp_path_factory: pytest.TempPathFactory, small_archive: Path) -> Path:
    """Requalify runs of the small archive with and without --reference."""
    base = tmp_path_factory.mktemp("requalify")
    common = ["--baseline", "top32:t0.7@5", "--candidate", "top32:t0.7:dyadic8@5",
              "--n-boot", "1000", "--min-requests", "5", "-q"]  # fmt: skip
    for name, extra in (("ref", ["--reference", "greedy@5"]), ("noref", [])):
        res = RUNNER.invoke(
            app, ["requalify", str(small_archive), *common, *extra, "--out", str(base / name)],
            env=ENV,
        )  # fmt: skip
        assert res.exit_code in (0, 1), res.output
    return base


def test_from_requalify_per_family_equals_the_formula(requalify_dirs: Path, tmp_path: Path) -> None:
    src = requalify_dirs / "ref" / "results.json"
    out = tmp_path / "b"
    code, stdout, stderr = _run(
        ["--from", str(src), "--price-ms", "48.08", "--known", "0.182813", "--out", str(out)]
    )
    assert code == 0, stderr
    doc = json.loads(src.read_text(encoding="utf-8"))
    expected = {}
    for c in doc["cells"]:
        if c["level"] not in ("pooled", "family"):
            continue
        d = next(d for d in c["deltas"] if d["role"] == "candidate-vs-reference")
        r0 = c["arms"][d["a"]]["R"]
        expected[(c["level"], c["family"])] = (r0, d["lo"])
    assert len(expected) >= 3  # pooled and at least two families
    result = read_result(out / "results.json")
    got = {(c.level.value, c.family): c for c in result.cells}
    assert set(got) == set(expected)
    for key, (r0, lo) in expected.items():
        b = got[key].budget
        assert b is not None and b.label is Label.ESTIMATED
        assert (b.r0, b.delta_lo) == (r0, lo)
        if lo is not None and lo > 0:
            assert b.break_even_ms == pytest.approx(48.08 * lo / r0, rel=1e-12)
            assert b.remaining_ms == pytest.approx(48.08 * lo / r0 - 0.182813, rel=1e-12)
            assert b.null_reason is None
        else:
            assert b.break_even_ms is None and b.null_reason is not None
        assert got[key].delta(Role.CANDIDATE_VS_REFERENCE) is not None
    assert result.pooled.level is Level.POOLED
    assert [i.path for i in result.inputs] == [str(src)]
    for fam in {f for _, f in expected if f is not None}:
        assert fam in stdout


def test_from_a_null_delta_keeps_a_null_budget(requalify_dirs: Path, tmp_path: Path) -> None:
    """A cell whose candidate-vs-reference delta is null (too few requests) stays null."""
    src = requalify_dirs / "ref" / "results.json"
    doc = json.loads(src.read_text(encoding="utf-8"))
    fam = next(c for c in doc["cells"] if c["level"] == "family")
    d = next(d for d in fam["deltas"] if d["role"] == "candidate-vs-reference")
    for k in ("point", "rel", "lo", "hi", "rel_lo", "rel_hi"):
        d[k] = None
    d["null_reason"] = "fewer than 5 requests"
    edited = tmp_path / "results.json"
    edited.write_text(json.dumps(doc), encoding="utf-8")
    out = tmp_path / "b"
    code, _, stderr = _run(["--from", str(edited), "--price-ms", "48.08", "--out", str(out)])
    assert code == 0, stderr
    result = read_result(out / "results.json")
    cell = next(c for c in result.cells if c.family == fam["family"])
    assert cell.budget is not None and cell.budget.break_even_ms is None
    assert cell.budget.null_reason == "candidate-vs-reference delta null: fewer than 5 requests"


# -- bad inputs: one line naming the option or file, exit 2 -------------------------------------


def _bad(args: list[str], match: str) -> None:
    code, stdout, stderr = _run(args)
    assert code == 2, stdout
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert match in lines[0]
    assert "Traceback" not in stderr


def test_negative_price_is_refused(tmp_path: Path) -> None:
    out = str(tmp_path / "b")
    _bad(["--base", "3", "--delta-lo", "0.1", "--price-ms", "-48", "--out", out], "--price-ms")
    assert not (tmp_path / "b").exists()


def test_bad_options_are_refused(tmp_path: Path) -> None:
    out = str(tmp_path / "b")
    _bad(["--base", "3", "--delta-lo", "0.1", "--price-ms", "48", "--known", "-1", "--out", out],
         "--known")  # fmt: skip
    _bad(["--base", "3", "--price-ms", "48", "--out", out], "--delta-lo")
    _bad(["--base", "3", "--delta-lo", "0.1", "--price-ms", "48", "--rate", "50", "--out", out],
         "--tau-ms, --gain")  # fmt: skip
    _bad(["--base", "3", "--delta-lo", "0.1", "--price-ms", "48", "--rate", "50", "--tau-ms",
          "40", "--gain", "0.1", "--x-grid", "0,a", "--out", out], "--x-grid")  # fmt: skip


def test_unreadable_from_is_refused(tmp_path: Path) -> None:
    out = str(tmp_path / "b")
    missing = tmp_path / "nope.json"
    _bad(["--from", str(missing), "--price-ms", "48", "--out", out], str(missing))
    junk = tmp_path / "junk.json"
    junk.write_text("{not json", encoding="utf-8")
    _bad(["--from", str(junk), "--price-ms", "48", "--out", out], str(junk))


def test_wrong_command_results_json_is_refused(tmp_path: Path) -> None:
    first = tmp_path / "first"
    code, _, stderr = _run(
        ["--base", "3", "--delta-lo", "0.1", "--price-ms", "48", "--out", str(first)]
    )
    assert code == 0, stderr
    src = first / "results.json"
    _bad(["--from", str(src), "--price-ms", "48", "--out", str(tmp_path / "b")],
         f"--from {src}: a 'budget' results.json")  # fmt: skip


def test_missing_reference_delta_is_refused(requalify_dirs: Path, tmp_path: Path) -> None:
    src = requalify_dirs / "noref" / "results.json"
    _bad(["--from", str(src), "--price-ms", "48", "--out", str(tmp_path / "b")],
         f"--from {src}: no candidate-vs-reference delta")  # fmt: skip


def test_documented_example_prints_the_seed_figures(tmp_path: Path) -> None:
    """docs/commands.md's budget command runs and prints the figures its text quotes."""
    import re
    import shlex

    page = (Path(__file__).parent.parent / "docs" / "commands.md").read_text(encoding="utf-8")
    cmd = re.search(r"```bash\n(specreplay budget .*?)\n```", page, re.S)
    assert cmd is not None
    argv = shlex.split(cmd.group(1))[2:]
    code, stdout, stderr = _run([*argv, "--out", str(tmp_path / "b")])
    assert code == 0, stderr
    assert "2.727134" in stdout and "2.544321" in stdout
    assert "2.727134 ms break-even and 2.544321 ms remaining" in page


def test_from_a_folder_reads_its_results_json(requalify_dirs: Path, tmp_path: Path) -> None:
    """``--from RUN_DIR`` (as documented) reads RUN_DIR/results.json and lists that file."""
    folder = requalify_dirs / "ref"
    code, _, stderr = _run(["--from", str(folder), "--price-ms", "48.08",
                            "--out", str(tmp_path / "b")])  # fmt: skip
    assert code == 0, stderr
    result = read_result(tmp_path / "b" / "results.json")
    src = folder / "results.json"
    assert [i.path for i in result.inputs] == [str(src)]
    assert result.inputs[0].sha256 == hashlib.sha256(src.read_bytes()).hexdigest()

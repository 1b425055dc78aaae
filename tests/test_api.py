"""The Python API (specreplay.api) returns what the CLI writes, on the same inputs.

Each API function is run beside its CLI verb; results.json contents must agree except the
creation time (and the environment block, which records the process). ``to_polars()`` must equal
cells.parquet as the CLI wrote it, and every other view must hold the typed figures it flattens.
``out=None`` writes nothing; ``out=PATH`` writes the CLI's folder; errors raise SpecReplayError
naming the file (no exit, no traceback printed). These checks also back the values the module's
doctest shows (the doctest builds the same 40-request, 16-round archive with seed 0).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import polars as pl
import polars.testing
import pytest
from typer.testing import CliRunner

from specreplay import api
from specreplay.cli import app
from specreplay.errors import InvalidArchive, SpecReplayError
from specreplay.results.model import Role

BASE, CAND = "top32:t0.7@8", "top32:t0.7:dyadic24@8"  # the archive's logging arm is BASE
DATA = Path(__file__).parent / "data"
STEM = "temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"
MEDUSA_A = DATA / "medusa-mtbench" / f"medusa-vicuna-7b-v1.3-{STEM}"
MEDUSA_B = DATA / "medusa-mtbench" / f"medusa-vicuna-13b-v1.3-{STEM}"
QUESTIONS = DATA / "medusa-mtbench" / "question.jsonl"


def _cli(*args: str) -> Any:
    res = CliRunner().invoke(app, [*args, "-q"] if args[0] not in NO_QUIET else list(args))
    assert res.exit_code == 0, res.output
    return res


NO_QUIET = {"budget", "screen", "report"}


def _doc(folder: Path) -> dict[str, Any]:
    """results.json of ``folder`` without what differs between two runs of one computation."""
    doc = json.loads((folder / "results.json").read_text())
    del doc["created_utc"], doc["environment"]
    return doc


def _same_as_cli(result: api.Result, cli_out: Path, tmp: Path) -> None:
    """The API's result, written by report(), has the CLI's results.json and cells.parquet."""
    api.report(result, out=tmp / "api-written")
    assert _doc(tmp / "api-written") == _doc(cli_out)
    if (cli_out / "cells.parquet").exists():
        cli_cells = pl.read_parquet(cli_out / "cells.parquet")
        polars.testing.assert_frame_equal(result.to_polars(), cli_cells)
        polars.testing.assert_frame_equal(
            pl.read_parquet(tmp / "api-written" / "cells.parquet"), cli_cells
        )
    files = {p.name for p in cli_out.iterdir()}
    assert {p.name for p in (tmp / "api-written").iterdir()} == files


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The doctest's archive, through the API: 60 requests × 16 rounds, seed 0."""
    folder = tmp_path_factory.mktemp("api") / "archive"
    made = api.synth(folder, requests=60, rounds=16)
    assert made.path == folder and made.rows == 60 * 16 * 8 == 7680
    return folder


@pytest.fixture(scope="module")
def requalified(archive: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """(API result with out=None, CLI output folder) of the doctest's requalification."""
    tmp = tmp_path_factory.mktemp("rq")
    result = api.requalify(archive, baseline=BASE, candidate=CAND, n_boot=200)
    _cli("requalify", str(archive), "--baseline", BASE, "--candidate", CAND, "--n-boot", "200",
         "--out", str(tmp / "cli"))  # fmt: skip
    return result, tmp / "cli"


def test_synth_writes_the_cli_archive(archive: Path, tmp_path: Path) -> None:
    _cli("synth", str(tmp_path / "cli"), "--requests", "60", "--rounds", "16")
    shards = sorted(p.name for p in archive.glob("*.parquet"))
    assert shards == sorted(p.name for p in (tmp_path / "cli").glob("*.parquet"))
    for name in shards:
        polars.testing.assert_frame_equal(
            pl.read_parquet(archive / name), pl.read_parquet(tmp_path / "cli" / name)
        )


def test_requalify_equals_cli(requalified: tuple[Any, Path], tmp_path: Path) -> None:
    result, cli_out = requalified
    _same_as_cli(result, cli_out, tmp_path)
    # the doctest's figures, against the CLI's results.json
    doc = _doc(cli_out)
    assert result.requalification.verdict == doc["requalification"]["verdict"] == "QUALIFIED"
    assert round(result.pooled.arms[BASE].R, 4) == round(doc["cells"][0]["arms"][BASE]["R"], 4)


def test_requalify_out_writes_the_cli_folder(
    archive: Path, requalified: tuple[Any, Path], tmp_path: Path
) -> None:
    _, cli_out = requalified
    api.requalify(archive, baseline=BASE, candidate=CAND, n_boot=200, out=tmp_path / "o")
    assert _doc(tmp_path / "o") == _doc(cli_out)
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == sorted(
        p.name for p in cli_out.iterdir()
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]  # no temporary folder left


def test_out_none_writes_nothing(archive: Path, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    before = sorted(str(p) for p in archive.parent.rglob("*"))
    api.requalify(archive, baseline=BASE, candidate=CAND, n_boot=200)
    api.sweep(archive, arms=BASE, depths=[2, 4], n_boot=200)
    api.validate(archive)
    api.lawtest(arms=["top32:t0.7:dyadic8@5"], max_draws=200_000)
    assert list(tmp_path.iterdir()) == []
    assert sorted(str(p) for p in archive.parent.rglob("*")) == before


def test_sweep_equals_cli(archive: Path, tmp_path: Path) -> None:
    result = api.sweep(archive, arms=[BASE], depths="2,4", n_boot=200, cost="linear:1:0.05")
    _cli("sweep", str(archive), "--arm", BASE, "--depths", "2,4", "--n-boot", "200",
         "--cost", "linear:1:0.05", "--out", str(tmp_path / "cli"))  # fmt: skip
    _same_as_cli(result, tmp_path / "cli", tmp_path)
    # depths given as ints are the same option
    again = api.sweep(archive, arms=BASE, depths=[2, 4], n_boot=200, cost="linear:1:0.05")
    assert again.cells == result.cells


def test_depths_view_holds_each_depth_figure(archive: Path) -> None:
    result = api.sweep(archive, arms=[BASE], depths="2,4", n_boot=200)
    view = result.to_polars("depths")
    expected = [
        (c.level.value, c.family, c.bucket, f.arm, f.depth, f.R, f.lo, f.hi, f.label.value)
        for c in result.cells
        for f in c.depths
    ]
    cols = ["level", "family", "bucket", "arm", "depth", "R", "lo", "hi", "label"]
    assert view.select(cols).rows() == expected
    assert sum(len(c.depths) for c in result.cells) == view.height > 0
    cells = result.to_polars().filter(kind="R_at_depth")
    assert cells["value"].to_list() == view["R"].to_list()  # the same figures as cells.parquet


def test_deltas_arms_survival_and_law_test_views(requalified: tuple[Any, Path]) -> None:
    result, _ = requalified
    deltas = result.to_polars("deltas")
    assert deltas.height == sum(len(c.deltas) for c in result.cells)
    pooled = result.pooled.delta(Role.CANDIDATE_VS_BASELINE)
    row = deltas.filter(level="pooled", role="candidate-vs-baseline").row(0, named=True)
    assert (row["a"], row["b"], row["point"], row["lo"], row["hi"], row["verdict"]) == (
        pooled.a, pooled.b, pooled.point, pooled.lo, pooled.hi, pooled.verdict
    )  # fmt: skip
    assert row["level_conf"] == pooled.level and row["label"] == "SIMULATED"
    arms = result.to_polars("arms")
    assert arms.height == sum(len(c.arms) for c in result.cells)
    r_rows = result.to_polars().filter(kind="R")
    assert arms["R"].to_list() == r_rows["value"].to_list()
    assert arms["label"].to_list() == r_rows["label"].to_list()
    survival = result.to_polars("survival")
    assert survival.height == sum(len(c.survival) for c in result.cells)
    laws = result.to_polars("law_tests")
    assert laws["passed"].to_list() == [t.passed for t in result.law_tests]
    assert laws["tv"].to_list() == [t.tv for t in result.law_tests]
    with pytest.raises(SpecReplayError, match=r"view='nope': should be one of cells, arms"):
        result.to_polars("nope")


def test_validate_equals_cli(
    archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = api.validate(archive, progress=True)  # no terminal here: plain lines on stderr
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("specreplay: 0:00:") and "reading archive" in err
    _cli("validate", str(archive), "--out", str(tmp_path / "cli"))
    _same_as_cli(result, tmp_path / "cli", tmp_path)


def test_interval_equals_cli(tmp_path: Path) -> None:
    result = api.interval(MEDUSA_A, MEDUSA_B, question_file=QUESTIONS, n_boot=500)
    _cli("interval", str(MEDUSA_A), str(MEDUSA_B), "--question-file", str(QUESTIONS),
         "--n-boot", "500", "--out", str(tmp_path / "cli"))  # fmt: skip
    _same_as_cli(result, tmp_path / "cli", tmp_path)


def test_lawtest_equals_cli(archive: Path, tmp_path: Path) -> None:
    arm = "top32:t0.7:dyadic8/float64@8"
    result = api.lawtest(archive, arms=arm, positions=2, max_draws=200_000)
    _cli("lawtest", str(archive), "--arm", arm, "--positions", "2", "--max-draws", "200000",
         "--out", str(tmp_path / "cli"))  # fmt: skip
    _same_as_cli(result, tmp_path / "cli", tmp_path)


def test_budget_equals_cli(archive: Path, tmp_path: Path) -> None:
    result = api.budget(price_ms=1.25, base=2.5, delta_lo=0.1, known=[0.01],
                        rate=100.0, tau_ms=20.0, gain=0.08)  # fmt: skip
    _cli("budget", "--price-ms", "1.25", "--base", "2.5", "--delta-lo", "0.1",
         "--known", "0.01", "--rate", "100", "--tau-ms", "20", "--gain", "0.08",
         "--out", str(tmp_path / "cli"))  # fmt: skip
    _same_as_cli(result, tmp_path / "cli", tmp_path / "a")
    assert result.pooled.budget is not None
    assert result.pooled.budget.break_even_ms == pytest.approx(1.25 * 0.1 / 2.5, rel=1e-12)
    rq = tmp_path / "rq"
    _cli("requalify", str(archive), "--baseline", BASE, "--candidate", CAND,
         "--reference", "greedy@8", "--n-boot", "200", "--out", str(rq))  # fmt: skip
    # a folder: its results.json (regression: the CLI crashed hashing the folder)
    from_rq = api.budget(price_ms=1.25, source=rq)
    _cli("budget", "--price-ms", "1.25", "--from", str(rq), "--out", str(tmp_path / "cli2"))
    _same_as_cli(from_rq, tmp_path / "cli2", tmp_path / "b")


def test_screen_equals_cli(tmp_path: Path) -> None:
    run = {"suite": "s1", "worker": "w", "batch": 2, "context": 0, "request_rounds": 100,
           "accepted_position": [80, 60, 40, 20, 10], "step_p50_ms": 40.0}  # fmt: skip
    counters = tmp_path / "counters.jsonl"
    counters.write_text(json.dumps(run) + "\n")
    cfg = tmp_path / "screen.toml"
    cfg.write_text("[draft_p50_ms]\n2 = 2.0\n")
    result = api.screen([counters], config=cfg)
    _cli("screen", str(counters), "--config", str(cfg), "--out", str(tmp_path / "cli"))
    _same_as_cli(result, tmp_path / "cli", tmp_path)
    assert result.to_polars("depths").height == sum(len(c.depths) for c in result.cells) > 0


def test_read_result_and_report_in_place(requalified: tuple[Any, Path], tmp_path: Path) -> None:
    result, cli_out = requalified
    again = api.read_result(cli_out)  # a folder or its results.json
    assert again == api.read_result(cli_out / "results.json")
    assert again.cells == result.cells and again.requalification == result.requalification
    done = api.report(cli_out, out=tmp_path / "re")
    assert list(done) == [tmp_path / "re"]
    assert _doc(tmp_path / "re") == _doc(cli_out)
    polars.testing.assert_frame_equal(
        pl.read_parquet(tmp_path / "re" / "cells.parquet"), again.to_polars()
    )


def test_errors_raise_with_the_file_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(SpecReplayError, match=re.escape(f"{missing}: no such file")):
        api.requalify(missing, baseline=BASE, candidate=CAND)
    bad = tmp_path / "bad.jsonl"
    row = {"request_id": "r", "round": 0, "position": 0}
    bad.write_text(json.dumps(row) + "\n")
    with pytest.raises(SpecReplayError, match=re.escape(str(bad))):
        api.validate(bad)
    with pytest.raises(SpecReplayError, match=r"--n-boot 50: out of range \(100 to 10000000\)"):
        api.sweep(missing, arms=BASE, n_boot=50)
    with pytest.raises(SpecReplayError, match=r"--stratify: 'x' should be family or none"):
        api.interval(MEDUSA_A, MEDUSA_B, stratify="x")
    with pytest.raises(SpecReplayError, match=r"--fail-on: unknown verdict"):
        api.requalify(missing, baseline=BASE, candidate=CAND, fail_on="MAYBE")
    with pytest.raises(SpecReplayError, match=r"--level 0.2: out of range \(0.5 to 0.999\)"):
        api.requalify(missing, baseline=BASE, candidate=CAND, level=0.2)
    with pytest.raises(SpecReplayError, match=r"--logging-arm 'bogus': "):
        api.sweep(missing, arms=BASE, logging_arm="bogus")
    with pytest.raises(SpecReplayError, match=r"--requests 0: out of range \(1 to 100000000\)"):
        api.synth(tmp_path / "never", requests=0)
    with pytest.raises(SpecReplayError, match=r"report: a result needs out="):
        api.report(api.budget(price_ms=1.0, base=2.0, delta_lo=0.1))
    assert sorted(os.listdir(tmp_path)) == ["bad.jsonl"]  # nothing written by a failed call


def test_invalid_archive_lists_its_errors(archive: Path, tmp_path: Path) -> None:
    shard = sorted(archive.glob("*.parquet"))[0]
    frame = pl.read_parquet(shard)
    broken = tmp_path / "broken.parquet"
    frame.with_columns(pl.when(pl.int_range(pl.len()) == 3).then(pl.lit(-1))
                       .otherwise(pl.col("round")).cast(frame.schema["round"]).alias("round")
                       ).write_parquet(broken)  # fmt: skip
    with pytest.raises(InvalidArchive) as err:
        api.validate(broken, out=tmp_path / "o")
    assert err.value.errors and all(str(broken) in e for e in err.value.errors)
    assert str(err.value).startswith(err.value.errors[0])
    assert not (tmp_path / "o").exists()


def test_api_never_imports_typer() -> None:
    import subprocess
    import sys

    code = "import sys, specreplay.api; print('typer' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_docs_python_api_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    section = (Path(__file__).parent.parent / "docs" / "api.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None
    scope: dict[str, Any] = {}
    exec(compile(block.group(1), "docs/api.md", "exec"), scope)
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["QUALIFIED", "EQUIVALENT"]  # the values the page's comments give
    assert (scope["tmp"] / "requalify" / "results.json").is_file()
    import shutil

    shutil.rmtree(scope["tmp"])


def test_docs_in_memory_interval_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/api.md's Python block with the arms in memory prints what its comment says."""
    section = (Path(__file__).parent.parent / "docs" / "api.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    block = next(b for b in blocks if "api.interval((" in b)
    exec(compile(block, "docs/api.md", "exec"), {})
    assert capsys.readouterr().out.splitlines() == ["('A', 'B') 0.2699"]


def test_docs_recorder_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/api.md's Python block with the Recorder prints what its comment says."""
    section = (Path(__file__).parent.parent / "docs" / "api.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    block = next(b for b in blocks if "Recorder(" in b)
    scope: dict[str, Any] = {}
    exec(compile(block, "docs/api.md", "exec"), scope)
    assert capsys.readouterr().out.splitlines() == ["12 4"]
    import shutil

    shutil.rmtree(scope["folder"].parent)

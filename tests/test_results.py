"""Typed results (issue 4): results.json round trip, `specreplay report` without inputs, lookups."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from specreplay.cli import app
from specreplay.errors import SpecReplayError
from specreplay.results.io import (
    dump,
    parse_result,
    read_result,
    result_json,
)
from specreplay.results.model import Cell, Level, Role

DATA = Path(__file__).parent / "data" / "medusa-mtbench"
STEM = "temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"
RUNNER = CliRunner()
ENV = {"COLUMNS": "300"}


def _invoke(args: list[str]) -> str:
    res = RUNNER.invoke(app, args, env=ENV)
    assert res.exit_code == 0, res.output
    return res.output


@pytest.fixture(scope="module")
def interval_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An interval run on copies of the real Medusa 7B/13B answers (copies: we delete them)."""
    base = tmp_path_factory.mktemp("interval")
    inputs = base / "inputs"
    inputs.mkdir()
    for name in (
        f"medusa-vicuna-7b-v1.3-{STEM}",
        f"medusa-vicuna-13b-v1.3-{STEM}",
        "question.jsonl",
    ):
        shutil.copy(DATA / name, inputs / name)
    out = base / "run"
    _invoke(
        [
            "interval",
            str(inputs / f"medusa-vicuna-7b-v1.3-{STEM}"),
            str(inputs / f"medusa-vicuna-13b-v1.3-{STEM}"),
            "--question-file",
            str(inputs / "question.jsonl"),
            "--name-a",
            "7B",
            "--name-b",
            "13B",
            "--n-boot",
            "2000",
            "--out",
            str(out),
            "-q",
        ]
    )
    shutil.rmtree(inputs)
    return out


@pytest.fixture(scope="module")
def requalify_run(tmp_path_factory: pytest.TempPathFactory, small_archive: Path) -> Path:
    """A requalify run on a copy of the small synthetic archive (deleted after the run)."""
    base = tmp_path_factory.mktemp("requalify")
    archive = base / "archive"
    shutil.copytree(small_archive, archive)
    out = base / "run"
    _invoke(
        [
            "requalify",
            str(archive),
            "--baseline",
            "top32:t0.7@5",
            "--candidate",
            "top32:t0.7:dyadic8@5",
            "--reference",
            "greedy@5",
            "--n-boot",
            "1000",
            "--min-requests",
            "5",
            "--out",
            str(out),
            "-q",
        ]
    )
    shutil.rmtree(archive)
    return out


RUNS = ["interval_run", "requalify_run"]


@pytest.mark.parametrize("run", RUNS)
def test_results_json_round_trips_byte_for_byte(run: str, request: pytest.FixtureRequest) -> None:
    folder: Path = request.getfixturevalue(run)
    text = (folder / "results.json").read_text(encoding="utf-8")
    parse_result(text.encode())  # report's checks pass
    result = read_result(folder / "results.json")
    assert result_json(result) == text
    # typed all the way down: enums and dataclasses, not dicts
    pooled = result.pooled
    assert pooled.level is Level.POOLED
    assert all(isinstance(c, Cell) for c in result.cells)
    assert all(isinstance(d.role, Role) for c in result.cells for d in c.deltas)


@pytest.mark.parametrize("run", RUNS)
def test_report_reproduces_tables_without_inputs(run: str, request: pytest.FixtureRequest) -> None:
    """The inputs were deleted by the fixture; report re-renders from results.json alone."""
    folder: Path = request.getfixturevalue(run)
    tables = (folder / "TABLES.md").read_bytes()
    cells = pl.read_parquet(folder / "cells.parquet")
    for name in ("TABLES.md", "cells.parquet", "forest.png"):
        (folder / name).unlink()
    before = hashlib.sha256((folder / "results.json").read_bytes()).hexdigest()
    out = _invoke(["report", str(folder)])
    assert "TABLES.md" in out and "forest.png" in out
    assert (folder / "TABLES.md").read_bytes() == tables
    assert pl.read_parquet(folder / "cells.parquet").equals(cells)
    assert (folder / "forest.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert hashlib.sha256((folder / "results.json").read_bytes()).hexdigest() == before


def test_backend_line_is_read_from_results_json(requalify_run: Path, tmp_path: Path) -> None:
    # the REPORT.md line about where shards were replayed is a property of the result, read from
    # its replay_backend entry, so a result read back from disk says what the fresh one said
    from specreplay.render.report import report_markdown
    from specreplay.results.io import write_result

    result = read_result(requalify_run / "results.json")
    assert result.backend_line is None  # a local run without a cache records no entry
    assert "Shards replayed" not in report_markdown(result, [])
    files = ["a/part-1.parquet", "a/part-1.parquet", "b/part-2.parquet"]
    cache = {"folder": "c", "shards": 8, "reused": 6, "replayed": 2, "replayed_files": files}
    cache |= {"recomputed": 1, "recomputed_files": ["b/part-2.parquet"]}
    entry = {
        "runner": "dask",
        "scheduler": "tcp://h:8786",
        "workers": 3,
        "tasks": 8,
        "cache": cache,
    }
    tagged = dataclasses.replace(result, extra={**result.extra, "replay_backend": entry})
    write_result(tmp_path / "results.json", tagged)
    back = read_result(tmp_path / "results.json")
    line = (
        "Shards replayed on Dask (tcp://h:8786, 3 workers, 8 shard tasks); partial sums merged "
        "here in sorted path order; cache: 6 of 8 shards reused, 2 replayed (part-1.parquet, "
        "part-2.parquet); 1 entry failed the check, recomputed (part-2.parquet)"
    )
    assert tagged.backend_line == back.backend_line == line
    assert line in report_markdown(back, [])


def test_report_into_another_folder(requalify_run: Path, tmp_path: Path) -> None:
    target = tmp_path / "copy"
    _invoke(["report", str(requalify_run), "--out", str(target)])
    assert (target / "TABLES.md").read_bytes() == (requalify_run / "TABLES.md").read_bytes()
    assert (target / "results.json").read_bytes() == (requalify_run / "results.json").read_bytes()


def test_report_errors_name_the_folder(tmp_path: Path) -> None:
    res = RUNNER.invoke(app, ["report", str(tmp_path)], env=ENV)
    assert res.exit_code == 2
    assert f"{tmp_path}: no results.json" in res.output
    (tmp_path / "results.json").write_text('{"schema": "specreplay/results/v1"}')
    res = RUNNER.invoke(app, ["report", str(tmp_path)], env=ENV)
    assert res.exit_code == 2
    assert f"{tmp_path / 'results.json'}: $.command: missing (a required key)" in res.output
    assert "Traceback" not in res.output


def test_unknown_key_in_a_delta_is_named(requalify_run: Path, tmp_path: Path) -> None:
    doc = json.loads((requalify_run / "results.json").read_text())
    doc["cells"][0]["deltas"][0]["surprise"] = 1
    (tmp_path / "results.json").write_text(json.dumps(doc))
    res = RUNNER.invoke(app, ["report", str(tmp_path)], env=ENV)
    assert res.exit_code == 2
    assert "$.cells[0].deltas[0].surprise: unknown key (this version does not write it)" in (
        res.output
    )


def test_deltas_are_found_by_role_not_position(requalify_run: Path) -> None:
    result = read_result(requalify_run / "results.json")
    pooled = result.pooled
    roles = [d.role for d in pooled.deltas][:3]
    assert roles == [Role.CANDIDATE_VS_BASELINE, Role.CANDIDATE_VS_REFERENCE, Role.PATH_BIAS]
    # then one analytic − importance delta per arm replayed (baseline = logging arm, candidate,
    # reference); --estimator auto chose importance, so the analytic replay is the named one
    assert result.options["estimator_used"] == "importance"
    pbi = [d.b for d in pooled.deltas if d.role is Role.PATH_BIAS_IMPORTANCE]
    assert pbi == [f"{a} (analytic)" for a in ("top32:t0.7@5", "top32:t0.7:dyadic8@5", "greedy@5")]
    flipped = dataclasses.replace(pooled, deltas=tuple(reversed(pooled.deltas)))
    for role in roles:
        assert flipped.delta(role) == pooled.delta(role)
    assert pooled.delta(Role.DEPTH_VS_REFERENCE) is None
    gain = pooled.delta(Role.CANDIDATE_VS_REFERENCE)
    assert gain is not None and gain.a == "greedy@5" and gain.verdict is None
    assert gain.verdict_null_reason is not None
    # the path-bias arm's MEASURED label survives the round trip
    pb = pooled.delta(Role.PATH_BIAS)
    assert pb is not None and pooled.arms[pb.a].label.value == "MEASURED"


def test_cells_parquet_has_verdict_and_requests(requalify_run: Path) -> None:
    result = read_result(requalify_run / "results.json")
    cells = pl.read_parquet(requalify_run / "cells.parquet")
    assert {"verdict", "n_requests", "role"} <= set(cells.columns)
    deltas = cells.filter((pl.col("kind") == "delta") & (pl.col("level") == "pooled"))
    by_role = {r["role"]: r for r in deltas.iter_rows(named=True)}
    main = result.pooled.delta(Role.CANDIDATE_VS_BASELINE)
    assert main is not None
    assert by_role["candidate-vs-baseline"]["verdict"] == main.verdict
    assert by_role["candidate-vs-baseline"]["value"] == main.point
    assert by_role["candidate-vs-reference"]["verdict"] is None
    assert set(cells.get_column("n_requests").to_list()) == {c.n_requests for c in result.cells}
    # an arm's R interval is the run's default interval (cr2-eff-hall since issue 10), and its
    # bounds are results.json's
    r_rows = cells.filter((pl.col("kind") == "R") & pl.col("lo").is_not_null())
    assert r_rows.height > 0 and result.interval_method is not None
    assert set(r_rows.get_column("method").to_list()) == {result.interval_method.method}
    assert result.interval_method.method == "cr2-eff-hall"


def test_dump_writes_every_field_in_order(requalify_run: Path) -> None:
    result = read_result(requalify_run / "results.json")
    doc = dump(result)
    assert next(iter(doc)) == "schema"
    delta = doc["cells"][0]["deltas"][0]
    assert list(delta)[:4] == ["a", "b", "role", "point"]
    assert "depth" in delta and delta["depth"] is None


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (
            lambda d: d["cells"][0]["deltas"][0]["bca"].update(lo="low"),
            '$.cells[0].deltas[0].bca.lo: Input should be a valid number (got "low")',
        ),
        (
            lambda d: d["cells"][0]["survival"][0].update(label="GUESSED"),
            "$.cells[0].survival[0].label: Input should be 'MEASURED', 'SIMULATED' or "
            "'ESTIMATED' (got \"GUESSED\")",
        ),
        (
            lambda d: d["cells"][1]["offpath"][0].pop("null_reason"),
            "$.cells[1].offpath[0].null_reason: missing (a required key)",
        ),
    ],
    ids=["string-for-number", "unknown-label", "missing-key"],
)
def test_reading_rejects_a_mistyped_figure(requalify_run: Path, spoil: Any, message: str) -> None:
    """The checks describe the nested figures, not just the top level, and name the field."""
    doc = json.loads((requalify_run / "results.json").read_text())
    parse_result(json.dumps(doc).encode())  # as written: passes
    spoil(doc)
    with pytest.raises(SpecReplayError) as err:
        parse_result(json.dumps(doc).encode(), "r.json")
    assert err.value.message == f"r.json: {message}"


# docs/methods.md#the-verdict-rule: QUALIFIED when the change is EQUIVALENT and its law test passes,
# NOT QUALIFIED when it is DIFFERENT or the law test fails, else INCONCLUSIVE; no verdict → null
# with the reason.
REQUALIFICATION_TABLE = {
    ("EQUIVALENT", True): "QUALIFIED",
    ("EQUIVALENT", False): "NOT QUALIFIED",
    ("EQUIVALENT", None): "INCONCLUSIVE",
    ("DIFFERENT", True): "NOT QUALIFIED",
    ("DIFFERENT", False): "NOT QUALIFIED",
    ("DIFFERENT", None): "NOT QUALIFIED",
    ("INCONCLUSIVE", True): "INCONCLUSIVE",
    ("INCONCLUSIVE", False): "NOT QUALIFIED",
    ("INCONCLUSIVE", None): "INCONCLUSIVE",
    (None, True): None,
    (None, False): None,
    (None, None): None,
}


@pytest.mark.parametrize(("verdict", "law_pass"), list(REQUALIFICATION_TABLE))
def test_requalification_rule_over_its_whole_table(
    requalify_run: Path, verdict: str | None, law_pass: bool | None
) -> None:
    from specreplay.pipelines.requalify import requalification

    pooled = read_result(requalify_run / "results.json").pooled
    main = pooled.delta(Role.CANDIDATE_VS_BASELINE)
    assert main is not None
    why = None if verdict is not None else "5 requests < --min-requests 10"
    cell = dataclasses.replace(
        pooled,
        deltas=(dataclasses.replace(main, verdict=verdict, null_reason=why),),
    )
    got = requalification(cell, law_pass)
    assert got.verdict == REQUALIFICATION_TABLE[(verdict, law_pass)]
    assert (got.null_reason is None) == (verdict is not None)
    if verdict is None:
        assert got.null_reason == why


def test_replay_figures_per_cell_equal_a_group_by_of_the_sums(small_archive: Path) -> None:
    """Survival, off-path and R per cell, recomputed by a polars group-by over the replay's
    per-(request, bucket) sums by family and bucket name: the cell masks select the right rows."""
    from specreplay.pipelines.requalify import with_replay_figures
    from specreplay.replay.engine import replay_archive
    from specreplay.sim.arms import parse_arm

    arm = parse_arm("top32:t0.7:dyadic8@5")
    res = replay_archive(small_archive, [arm], seed=1)
    s = res.sums[arm.canonical]
    frame = pl.DataFrame(
        {
            "family": [res.families[int(f)] for f in s.family],
            "bucket": [res.buckets.names[int(b)] for b in s.bucket],
            "n": s.n,
            **{f"s{j}": s.surv[:, j - 1] for j in range(1, 6)},
            **{f"o{k}": s.offpath[:, k] for k in range(4)},
        }
    )
    data = res.arm_data(arm)
    where = [("pooled", None, None), ("family", "code", None), ("bucket", None, "<4K"),
             ("family×bucket", "chat", "4K-16K")]  # fmt: skip
    cells = tuple(Cell(Level(lv), f, b, n_requests=0, arms={}) for lv, f, b in where)
    out = with_replay_figures(cells, res, [arm])
    for c in out:
        sel = frame
        if c.family is not None:
            sel = sel.filter(pl.col("family") == c.family)
        if c.bucket is not None:
            sel = sel.filter(pl.col("bucket") == c.bucket)
        n = sel.get_column("n").sum()
        assert n > 0, c.name
        for s_ in c.survival:
            want = sel.get_column(f"s{s_.position}").sum() / n
            assert s_.value == pytest.approx(want, rel=1e-12), (c.name, s_.position)
        off = c.offpath[0]
        want_acc = sel.get_column("o1").sum() / sel.get_column("o0").sum()
        assert off.accepted_offpath_share == pytest.approx(want_acc, rel=1e-12), c.name
    assert data.sums.height == frame.height


def _table_rows(text: str, first_header: str) -> list[dict[str, str]]:
    """Rows of the first Markdown table whose header starts with ``first_header``."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"| {first_header}"))
    header = [h.strip() for h in lines[start].strip("|").split("|")]
    rows = []
    for ln in lines[start + 2 :]:
        if not ln.startswith("|"):
            break
        rows.append(dict(zip(header, (v.strip() for v in ln.strip("|").split("|")), strict=True)))
    return rows


def test_interval_table_shows_each_cells_figures(interval_run: Path) -> None:
    """Every row of the comparison table against the figures of results.json (read back)."""
    result = read_result(interval_run / "results.json")
    rows = {r["cell"]: r for r in _table_rows((interval_run / "TABLES.md").read_text(), "cell")}
    assert len(rows) == len(result.cells)
    for c in result.cells:
        d = c.delta(Role.B_VS_A)
        assert d is not None
        row = rows[c.name]
        assert row["requests"] == str(c.n_requests)
        assert row["R_a"] == f"{c.arms['7B'].R:.4f}" and row["R_b"] == f"{c.arms['13B'].R:.4f}"
        if d.null_reason is None:
            assert row["Δ"] == f"{d.point:+.4f}"
            assert row["95% CI"] == f"[{d.lo:+.4f}, {d.hi:+.4f}]"
            assert row["verdict"].split(" ")[0] == d.verdict
        else:
            assert row["Δ"].startswith("— [")


def test_shipped_schema_is_the_one_the_model_describes() -> None:
    """A field added to the typed model without regenerating the schema fails here.

    Regenerate: ``python -m specreplay.results.schema > specreplay/schemas/results-v1.json``.
    """
    from specreplay.results.schema import results_schema, schema_text, shipped_text

    assert schema_text() == shipped_text()
    defs = results_schema()["$defs"]
    assert defs["Delta"]["properties"]["role"] == {"$ref": "#/$defs/Role"}
    assert defs["Role"]["enum"] == [r.value for r in Role]
    assert "depth" in defs["Delta"]["properties"]
    assert "depth" not in defs["Delta"]["required"]  # added later, with a default

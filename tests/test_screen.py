"""The SP2 depth screen (docs/methods.md#the-screens-rate-sp2): hand-checked figures, the
nominal-cap identity, vLLM scrapes, bad input (exit 2, file and line, nothing written) and atomic
outputs.

The expected values below are computed in the test from the SPEC formulas written out by hand
(never through :mod:`specreplay.stats.screen`), on counts chosen so the survivals are short
decimals.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from specreplay.cli import app
from specreplay.results.io import read_result

# docs/methods.md#the-screens-rate-sp2, indexed from depth 0
H = [28.79, 31.86, 34.44, 37.76, 41.56, 43.68]
REL = 1e-12  # the figures are a handful of float operations: only rounding separates them

# Cell B2 × context 0 × w (cap 5 by default): two runs of 100 rounds.
RUN1 = {"suite": "s1", "worker": "w", "batch": 2, "context": 0, "request_rounds": 100,
        "accepted_position": [80, 60, 40, 20, 10], "step_p50_ms": 40.0}  # fmt: skip
RUN2 = {**RUN1, "suite": "s2", "accepted_position": [60, 40, 20, 10, 0], "step_p50_ms": 44.0}
# Cell B3 × context 32768 × w (cap 4 by default): one run; B2 × 32768 and B3 × 0 stay absent.
RUN3 = {**RUN1, "batch": 3, "context": 32768, "request_rounds": 200,
        "accepted_position": [150, 100, 60, 30, 10], "step_p50_ms": 50.0}  # fmt: skip
CONFIG = "[draft_p50_ms]\n2 = 2.0\n3 = 3.0\n"


def _write(tmp: Path, rows: list[dict[str, Any]], config: str = CONFIG) -> tuple[Path, Path]:
    counters = tmp / "counters.jsonl"
    counters.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tmp / "screen.toml"
    cfg.write_text(config)
    return counters, cfg


def _run(*args: str) -> Any:
    return CliRunner().invoke(app, ["screen", *args])


def _cell(doc: dict[str, Any], batch: int, context: int) -> dict[str, Any]:
    return next(c for c in doc["cells"] if (c["batch"], c["context"]) == (batch, context))


def _depth(cell: dict[str, Any], d: int) -> dict[str, Any]:
    return next(x for x in cell["depths"] if x["depth"] == d)


@pytest.fixture(scope="module")
def screened(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("screen")
    counters, cfg = _write(tmp, [RUN1, RUN2, RUN3])
    res = _run(str(counters), "--config", str(cfg), "--out", str(tmp / "out"))
    assert res.exit_code == 0, res.output
    return tmp / "out", json.loads((tmp / "out" / "results.json").read_text())


def test_hand_checked_central_rates_and_rank(screened: tuple[Path, dict[str, Any]]) -> None:
    _, doc = screened
    cell = _cell(doc, 2, 0)
    # S = (80+60, 60+40, 40+20, 20+10, 10+0) / 200 = .7, .5, .3, .15, .05 (pooled counts)
    assert [s["value"] for s in cell["survival"]] == pytest.approx([0.7, 0.5, 0.3, 0.15, 0.05])
    t_b, d_b, b = 42.0, 2.0, 2  # T_B = median(40, 44); D_B from the config
    e_ref = 0.25 * d_b + 0.30  # = 0.8
    expected = {}
    for d, tpr in ((1, 1.7), (2, 2.2), (3, 2.5), (4, 2.65), (5, 2.7)):
        rnd = t_b - e_ref + 0.5 * b * (H[d] - H[5]) + 0.25 * d_b + 0.30
        expected[d] = 1000.0 * b * tpr / rnd
    # by hand: 3400/30.18, 4400/32.76, 5000/36.08, 5300/39.88, 5400/42
    hand = {1: 3400 / 30.18, 2: 4400 / 32.76, 3: 5000 / 36.08, 4: 5300 / 39.88, 5: 5400 / 42}
    for d in range(1, 6):
        x = _depth(cell, d)
        assert x["tokens_per_s"] == pytest.approx(expected[d], rel=REL)
        assert x["tokens_per_s"] == pytest.approx(hand[d], rel=1e-9)  # hand-rounded round_ms
        assert x["label"] == "ESTIMATED" and x["supported"]
    # 138.58 (d3) > 134.31 (d2) > 132.90 (d4) > 128.57 (d5) > 112.66 (d1)
    assert [_depth(cell, d)["rank"] for d in range(1, 6)] == [5, 2, 1, 3, 4]
    assert _depth(cell, 3)["gain"] == pytest.approx(expected[3] / expected[5] - 1.0, rel=REL)
    assert cell["screen"]["step_p50_ms"] == 42.0 and cell["screen"]["e_ref_ms"] == pytest.approx(
        0.8
    )
    assert cell["screen"]["suites"] == ["s1", "s2"] and cell["screen"]["runs"] == 2


def test_hand_checked_envelope_bounds(screened: tuple[Path, dict[str, Any]]) -> None:
    """Depth 3 of B2: rate is monotone in every assumption, so the extremes are corners."""
    _, doc = screened
    x = _depth(_cell(doc, 2, 0), 3)
    e_ref, dh = 0.8, H[3] - H[5]  # ΔH = −5.92 ms
    # hi: run 1's survivals (1 + .8 + .6 + .4 = 2.8), T = 40, s = 1, overlap 1, overhead 0
    hi = 1000 * 2 * 2.8 / (40 - e_ref + 1.0 * 2 * dh + 0.0 * 2.0 + 0.0)  # 5600 / 27.36
    # lo: run 2's survivals (1 + .6 + .4 + .2 = 2.2), T = 44, s = 0, overlap 0, overhead .6
    lo = 1000 * 2 * 2.2 / (44 - e_ref + 0.0 + 1.0 * 2.0 + 0.6)  # 4400 / 45.8
    assert x["tokens_per_s_hi"] == pytest.approx(hi, rel=REL)
    assert x["tokens_per_s_lo"] == pytest.approx(lo, rel=REL)
    assert hi == pytest.approx(5600 / 27.36, rel=1e-12) and lo == pytest.approx(4400 / 45.8)
    # 1 + ΣS over each run's own survivals
    assert (x["lo"], x["hi"]) == (pytest.approx(2.2), pytest.approx(2.8))
    # paired gain over the cap: (E3/E5)·(round5/round3) − 1, round5/round3 largest at s = 1 and
    # the smallest round5 (T 40, overlap 1, overhead 0: 39.2); E3/E5 largest for run 2 (4.4/4.6)
    assert x["gain_hi"] == pytest.approx((2.2 / 2.3) * 39.2 / (39.2 + 2 * dh) - 1, rel=REL)
    assert x["gain_lo"] == pytest.approx(2.8 / 3.1 - 1, rel=REL)  # s = 0: run 1's E3/E5


def test_nominal_cap_rate_is_measured_time_proxy(screened: tuple[Path, dict[str, Any]]) -> None:
    """At c_B the central rate is 1000·E_B(c_B)/T_B (round_B(c_B) = T_B), within 1e-12."""
    _, doc = screened
    b2 = _depth(_cell(doc, 2, 0), 5)
    assert abs(b2["tokens_per_s"] - 1000 * 2 * 2.7 / 42.0) <= 1e-12 * b2["tokens_per_s"]
    b3 = _cell(doc, 3, 32768)
    # B3 cap 4: S = .75, .5, .3, .15 → E = 3·2.7; T_B = 50
    c = _depth(b3, 4)
    assert abs(c["tokens_per_s"] - 1000 * 3 * 2.7 / 50.0) <= 1e-12 * c["tokens_per_s"]
    assert c["round_ms"] == pytest.approx(50.0, rel=1e-12) and c["gain"] == 0.0


def test_unsupported_depths_and_absent_cells(screened: tuple[Path, dict[str, Any]]) -> None:
    out, doc = screened
    assert {(c["batch"], c["context"]) for c in doc["cells"]} == {(2, 0), (3, 32768)}
    assert all(c["level"] == "screen" and c["worker"] == "w" for c in doc["cells"])
    for cell in doc["cells"]:
        for d in (6, 7, 8):
            x = _depth(cell, d)
            assert not x["supported"] and x["tokens_per_s"] is None and x["rank"] is None
            assert "past the trained block (5)" in x["null_reason"]
    x = _depth(_cell(doc, 3, 32768), 5)
    assert not x["supported"] and "past the nominal cap c_B = 4" in x["null_reason"]
    tables = (out / "TABLES.md").read_text()
    assert "UNSUPPORTED" in tables and "absent" in tables and "ESTIMATED" in tables
    assert "## B2 × context 0 × w" in tables


def test_results_record_inputs_and_no_tokens(screened: tuple[Path, dict[str, Any]]) -> None:
    out, doc = screened
    assert doc["command"] == "screen"
    assert [Path(i["path"]).name for i in doc["inputs"]] == ["counters.jsonl", "screen.toml"]
    assert all(len(i["sha256"]) == 64 for i in doc["inputs"])
    assert read_result(out / "results.json").cells[0].batch == 2  # schema-valid, round trip
    text = (out / "results.json").read_text()
    assert "prompt" not in text and "token_ids" not in text


# -- vLLM ---------------------------------------------------------------------------------------

_HEAD = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
"""


def _scrape(drafts: tuple[int, int], per_pos: tuple[list[int], list[int]]) -> str:
    """Two engines; names and labels as vllm/v1/spec_decode/metrics.py registers them."""
    lines = [_HEAD.rstrip("\n")]
    for eng in (0, 1):
        lab = f'model_name="m",engine="{eng}"'
        lines.append(f"vllm:spec_decode_num_drafts_total{{{lab}}} {float(drafts[eng])}")
        lines.append(f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {3.0 * drafts[eng]}")
        lines.append(f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} "
                     f"{float(sum(per_pos[eng]))}")  # fmt: skip
        for i, v in enumerate(per_pos[eng]):
            lines.append(
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} '
                f"{float(v)}"
            )
    lines.append('vllm:num_requests_running{model_name="m",engine="0"} 3.0')  # ignored
    return "\n".join(lines) + "\n"


VLLM_CONFIG = """[draft_p50_ms]
1 = 2.0
[[vllm]]
before = "before.prom"
after = "after.prom"
suite = "vllm-bench"
worker = "vllm"
batch = 1
context = 0
step_p50_ms = 30.0
"""


def _vllm_inputs(tmp: Path, after: str | None = None) -> list[str]:
    # engine 0: drafts 60 → 360, per_pos (40, 25, 10) → (280, 175, 70)
    # engine 1: drafts 40 → 240, per_pos (30, 15, 10) → (190, 115, 40)
    (tmp / "before.prom").write_text(_scrape((60, 40), ([40, 25, 10], [30, 15, 10])))
    (tmp / "after.prom").write_text(after or _scrape((360, 240), ([280, 175, 70], [190, 115, 40])))
    (tmp / "screen.toml").write_text(VLLM_CONFIG)
    return [str(tmp / "before.prom"), str(tmp / "after.prom"), "--config", str(tmp / "screen.toml")]


def test_vllm_two_scrapes_give_survivals(tmp_path: Path) -> None:
    res = _run(*_vllm_inputs(tmp_path), "--out", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    (cell,) = doc["cells"]
    # drafts Δ = 300 + 200 = 500; per_pos Δ = (240+160, 150+100, 60+30) = (400, 250, 90)
    # S_{i+1} = per_pos[i] / drafts (already survivals): .8, .5, .18 — not .8·.5…
    assert [s["value"] for s in cell["survival"]] == pytest.approx([0.8, 0.5, 0.18], rel=REL)
    assert cell["arms"]["vllm"]["n_rounds"] == 500
    assert (cell["batch"], cell["context"], cell["worker"]) == (1, 0, "vllm")
    x = _depth(cell, 3)  # round = 30 − .8 + .5·(H3 − H5) + .5 + .3
    assert x["tokens_per_s"] == pytest.approx(1000 * 2.48 / (30 + 0.5 * (H[3] - H[5])), rel=REL)
    assert "positions 1..3" in _depth(cell, 4)["null_reason"]
    assert {Path(i["path"]).name for i in doc["inputs"]} == {"before.prom", "after.prom",
                                                               "screen.toml"}  # fmt: skip


# -- bad input ----------------------------------------------------------------------------------


def _bad(tmp: Path, args: list[str], match: str) -> None:
    out = tmp / "out"
    res = _run(*args, "--out", str(out))
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    assert match in lines[0], lines[0]
    assert not out.exists()
    assert not [p for p in tmp.iterdir() if p.name.startswith(".out")]  # no temporary folder


@pytest.mark.parametrize(
    ("line2", "match"),
    [
        ("{not json", "counters.jsonl:line 2: not JSON"),
        (json.dumps({k: v for k, v in RUN1.items() if k != "step_p50_ms"}),
         "counters.jsonl:line 2: missing key(s) ['step_p50_ms']"),
        (json.dumps({**RUN1, "accepted_position": [10, 20, 5]}),
         "counters.jsonl:line 2: accepted_position should be non-increasing"),
        (json.dumps({**RUN1, "accepted_position": [101]}),
         "counters.jsonl:line 2: accepted_position[0] = 101 exceeds the rounds (100)"),
        (json.dumps({**RUN1, "batch": 0}), "counters.jsonl:line 2: batch should be an integer ≥ 1"),
        (json.dumps({**RUN1, "step_p50_ms": -1}),
         "counters.jsonl:line 2: step_p50_ms should be a finite number > 0"),
    ],
)  # fmt: skip
def test_malformed_counters_line_is_exit_2(tmp_path: Path, line2: str, match: str) -> None:
    counters, cfg = _write(tmp_path, [RUN1])
    counters.write_text(counters.read_text() + line2 + "\n")
    _bad(tmp_path, [str(counters), "--config", str(cfg)], match)


def test_malformed_metrics_line_is_exit_2(tmp_path: Path) -> None:
    good = _scrape((360, 240), ([280, 175, 70], [190, 115, 40])).splitlines()
    good[4] = "vllm:spec_decode_num_accepted_tokens_total{model_name=m} 1"
    _bad(
        tmp_path,
        _vllm_inputs(tmp_path, "\n".join(good) + "\n"),
        "after.prom:line 5: malformed labels",
    )
    good[4] = 'vllm:spec_decode_num_drafts_total{engine="0"} many'
    _bad(
        tmp_path, _vllm_inputs(tmp_path, "\n".join(good) + "\n"), "after.prom:line 5: value 'many'"
    )


def test_counter_reset_and_unpaired_scrape_are_exit_2(tmp_path: Path) -> None:
    reset = _scrape((10, 240), ([5, 3, 1], [190, 115, 40]))
    _bad(tmp_path, _vllm_inputs(tmp_path, reset), "decreased since")
    args = _vllm_inputs(tmp_path)
    (tmp_path / "screen.toml").write_text("[draft_p50_ms]\n1 = 2.0\n")
    _bad(tmp_path, args, "before.prom: Prometheus text not named by a [[vllm]] entry")


def test_config_errors_are_exit_2(tmp_path: Path) -> None:
    counters, cfg = _write(tmp_path, [RUN1], config="[draft_p50_ms]\n3 = 2.0\n")
    _bad(tmp_path, [str(counters), "--config", str(cfg)],
         "counters.jsonl:line 1: no D_B for batch 2")  # fmt: skip
    cfg.write_text("[envelope]\noverlap = [0, 2]\n")
    _bad(
        tmp_path,
        [str(counters), "--config", str(cfg)],
        "envelope.overlap: should be a number in [0, 1.0]",
    )
    cfg.write_text("[centrall]\n")
    _bad(tmp_path, [str(counters), "--config", str(cfg)], "unknown key(s) ['centrall']")
    cfg.write_text("x = \n")
    _bad(tmp_path, [str(counters), "--config", str(cfg)], "screen.toml: not TOML")


# -- atomic outputs -----------------------------------------------------------------------------


def test_outputs_are_swapped_in_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure while writing leaves the previous OUT untouched and no temporary folder."""
    counters, cfg = _write(tmp_path, [RUN1, RUN2])
    out = tmp_path / "out"
    assert _run(str(counters), "--config", str(cfg), "--out", str(out)).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    import specreplay.commands.screen as cmd

    def half_written(result: Any, folder: Path) -> list[str]:
        (folder / "results.json").write_text("{")
        raise OSError("disk full")

    monkeypatch.setattr(cmd, "write_all", half_written)
    with pytest.raises(OSError, match="disk full"):
        cmd.run_screen([counters], config=cfg, out=out, force=False)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["counters.jsonl", "out", "screen.toml"]
    # a bad input on a rerun is refused before anything is written
    counters.write_text("{\n")
    assert _run(str(counters), "--config", str(cfg), "--out", str(out)).exit_code == 2
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_grids_are_configurable(tmp_path: Path) -> None:
    """One run and one-point grids at the central values: the envelope collapses to the centre."""
    cfg = CONFIG + "[envelope]\noverlap = [0.75]\noverhead_ms = [0.3]\nslope = [0.5]\n"
    counters, config = _write(tmp_path, [RUN1], config=cfg)
    res = _run(str(counters), "--config", str(config), "--out", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    for d in range(1, 6):
        x = _depth(doc["cells"][0], d)
        assert x["tokens_per_s_lo"] == pytest.approx(x["tokens_per_s"], rel=REL)
        assert x["tokens_per_s_hi"] == pytest.approx(x["tokens_per_s"], rel=REL)
    assert doc["options"]["envelope"] == {"overlap": [0.75], "overhead_ms": [0.3], "slope": [0.5]}


def test_report_rerenders_the_same_tables(
    screened: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    out, _ = screened
    res = CliRunner().invoke(app, ["report", str(out), "--out", str(tmp_path / "again")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "again" / "TABLES.md").read_text() == (out / "TABLES.md").read_text()


def test_cells_parquet_keys_screen_rows(screened: tuple[Path, dict[str, Any]]) -> None:
    import polars as pl

    out, doc = screened
    cells = pl.read_parquet(out / "cells.parquet")
    row = cells.filter(
        (pl.col("kind") == "tokens_per_s") & (pl.col("batch") == 2) & (pl.col("depth") == 3)
    ).row(0, named=True)
    x = _depth(_cell(doc, 2, 0), 3)
    assert (row["value"], row["lo"], row["hi"]) == (
        x["tokens_per_s"], x["tokens_per_s_lo"], x["tokens_per_s_hi"]
    )  # fmt: skip
    assert (row["level"], row["context"], row["worker"], row["label"]) == (
        "screen", 0, "w", "ESTIMATED"
    )  # fmt: skip


def test_screen_plot_is_written(screened: tuple[Path, dict[str, Any]]) -> None:
    """screen.png: one panel per batch × context cell (central rate, envelope band)."""
    png = (screened[0] / "screen.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000

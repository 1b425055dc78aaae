"""REPORT.md (issue 7, item 1): written by every run with tables and by the demo, verdicts first.

Each test reads results.json independently (``json``) or computes the expected figure in closed
form, then checks what REPORT.md says; the re-render tests delete REPORT.md and compare bytes.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from archive_factory import write_parquet
from typer.testing import CliRunner

from specreplay.cli import app
from specreplay.render.markdown import demote, figure_block, md_blocks, split_assumptions
from specreplay.render.plots import PLOT_CAPTIONS, plot_caption
from specreplay.results.io import read_result

RUNNER = CliRunner()
ENV = {"COLUMNS": "300"}
DATA = Path(__file__).parent / "data" / "medusa-mtbench"
STEM = "temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"


def _invoke(args: list[str]) -> str:
    res = RUNNER.invoke(app, args, env=ENV)
    assert res.exit_code == 0, res.output
    return res.stdout


def _doc(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "results.json").read_text(encoding="utf-8"))


def _section(text: str, title: str) -> str:
    """The body of the ``## title`` section (up to the next ``## ``)."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _bullets(text: str, title: str) -> list[str]:
    return [ln for ln in _section(text, title).split("\n") if ln.startswith("- ")]


# -- runs ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def requalify_run(tmp_path_factory: pytest.TempPathFactory, small_archive: Path) -> Path:
    """dyadic8 against float64 on the 64-request archive: family chat has 13 < 14 requests."""
    out = tmp_path_factory.mktemp("rq") / "run"
    _invoke(["requalify", str(small_archive), "--baseline", "top32:t0.7@5", "--candidate",
             "top32:t0.7:dyadic8@5", "--reference", "greedy@5", "--n-boot", "500",
             "--min-requests", "14", "--out", str(out), "-q"])  # fmt: skip
    return out


@pytest.fixture(scope="module")
def interval_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("interval") / "run"
    _invoke(["interval", str(DATA / f"medusa-vicuna-7b-v1.3-{STEM}"),
             str(DATA / f"medusa-vicuna-13b-v1.3-{STEM}"), "--question-file",
             str(DATA / "question.jsonl"), "--name-a", "7B", "--name-b", "13B", "--n-boot", "500",
             "--out", str(out), "-q"])  # fmt: skip
    return out


ALPHA, DEPTH = 0.8, 10


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Constant α = 0.8 at every position (as in tests/test_sweep.py): R(d) in closed form."""
    tmp = tmp_path_factory.mktemp("sweep")
    half = math.log(0.5)
    rows = [
        {"request_id": f"q{r}", "family": ("chat", "code")[r % 2], "context_tokens": 100 + 20 * k,
         "round": k, "position": pos, "cand_ids": [2 * pos, 2 * pos + 1],
         "draft_logprobs": [half, half], "target_probs": [ALPHA / 2, ALPHA / 2]}
        for r in range(24) for k in range(4) for pos in range(1, DEPTH + 1)
    ]  # fmt: skip
    path = write_parquet(tmp / "a.parquet", rows)
    out = tmp / "run"
    _invoke(["sweep", str(path), "--arm", f"top2:t1@{DEPTH}", "--depths", "1..10", "--cost",
             "linear:1:0.05", "--estimator", "analytic", "--n-boot", "300", "--out", str(out),
             "-q"])  # fmt: skip
    return out


@pytest.fixture(scope="module")
def screen_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two cells of run counters (the rows of tests/test_screen.py)."""
    tmp = tmp_path_factory.mktemp("screen")
    run1 = {"suite": "s1", "worker": "w", "batch": 2, "context": 0, "request_rounds": 100,
            "accepted_position": [80, 60, 40, 20, 10], "step_p50_ms": 40.0}  # fmt: skip
    run2 = {**run1, "suite": "s2", "accepted_position": [60, 40, 20, 10, 0], "step_p50_ms": 44.0}
    run3 = {**run1, "batch": 3, "context": 32768, "request_rounds": 200,
            "accepted_position": [150, 100, 60, 30, 10], "step_p50_ms": 50.0}  # fmt: skip
    counters = tmp / "counters.jsonl"
    counters.write_text("".join(json.dumps(r) + "\n" for r in (run1, run2, run3)))
    (tmp / "screen.toml").write_text("[draft_p50_ms]\n2 = 2.0\n3 = 3.0\n")
    out = tmp / "run"
    _invoke(["screen", str(counters), "--config", str(tmp / "screen.toml"), "--out", str(out)])
    return out


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One small demo (24 requests): its folder and its terminal text."""
    out = tmp_path_factory.mktemp("demo") / "demo"
    text = _invoke(["demo", "--requests", "24", "--n-boot", "500", "--out", str(out), "-q"])
    return out, text


RUNS = ["requalify_run", "interval_run", "sweep_run", "screen_run"]


def _folders(request: pytest.FixtureRequest, run: str) -> list[Path]:
    """The run folder (for the demo: the top level and every sub-run)."""
    if run == "demo_run":
        out: Path = request.getfixturevalue(run)[0]
        return [out, *sorted(p.parent for p in out.glob("*/results.json"))]
    folder: Path = request.getfixturevalue(run)
    return [folder]


# -- verdicts ------------------------------------------------------------------------------------


def test_requalify_verdicts_are_those_of_results_json(requalify_run: Path) -> None:
    """Pooled and per family: the verdict and Δ results.json holds; a null family reads — (why)."""
    text = (requalify_run / "REPORT.md").read_text(encoding="utf-8")
    doc = _doc(requalify_run)
    lines = _bullets(text, "Verdicts")
    pooled = doc["cells"][0]
    d = next(x for x in pooled["deltas"] if x["role"] == "candidate-vs-baseline")
    assert lines[0].startswith(
        f"- pooled ({pooled['n_requests']:,} requests): **{doc['requalification']['verdict']}**"
    )
    assert f"Δ {d['point']:+.4f} tokens/round [{d['lo']:+.4f}, {d['hi']:+.4f}]" in lines[0]
    families = [c for c in doc["cells"] if c["level"] == "family"]
    nulls = 0
    for c in families:
        rq = c["requalification"]
        head = f"- {c['family']} ({c['n_requests']:,} requests): "
        if rq["verdict"] is None:
            nulls += 1
            assert head + f"— ({rq['null_reason']})" in lines
        else:
            assert any(ln.startswith(head + f"**{rq['verdict']}**") for ln in lines), head
    assert nulls >= 1  # the fixture's family chat has 13 requests < --min-requests 14
    assert text.startswith("# Requalification of top32:t0.7:dyadic8@5 against top32:t0.7@5\n")
    assert text.index("## Verdicts") < text.index("## Tables") < text.index("## Assumptions")


def test_interval_verdicts_are_those_of_results_json(interval_run: Path) -> None:
    text = (interval_run / "REPORT.md").read_text(encoding="utf-8")
    doc = _doc(interval_run)
    lines = _bullets(text, "Verdicts")
    for c, line in zip(
        [doc["cells"][0], *[c for c in doc["cells"] if c["level"] == "family"]], lines, strict=False
    ):
        d = c["deltas"][0]
        name = "pooled" if c["level"] == "pooled" else c["family"]
        if d["point"] is None:
            assert line == f"- {name} ({c['n_requests']:,} requests): — ({d['null_reason']})"
        else:
            assert line.startswith(f"- {name} ({c['n_requests']:,} requests): **{d['verdict']}**")
            assert f"({d['label']})" in line
    assert "13B" in text.split("\n")[2] and "±" in text.split("\n")[2]  # the question


def test_sweep_verdict_is_the_closed_form_best_depth(sweep_run: Path) -> None:
    """tokens/s(d) = 1000(1 − α^{d+1})/((1 − α)(1 + 0.05d)) is largest at d = 8 (3092.1)."""
    rate = {d: 1000 * (1 - ALPHA ** (d + 1)) / ((1 - ALPHA) * (1 + 0.05 * d)) for d in range(1, 11)}
    best = max(rate, key=lambda d: rate[d])
    text = (sweep_run / "REPORT.md").read_text(encoding="utf-8")
    first = _bullets(text, "Verdicts")[0]
    assert f"**best depth {best}**, {rate[best]:.1f} tokens/s" in first
    assert "(ESTIMATED)" in first and "(SIMULATED)" in first
    assert "(depths.png)" in _section(text, "Figures")


def test_screen_verdicts_name_each_cells_best_rank(screen_run: Path) -> None:
    text = (screen_run / "REPORT.md").read_text(encoding="utf-8")
    lines = _bullets(text, "Verdicts")
    cells = [c for c in _doc(screen_run)["cells"] if c["level"] == "screen"]
    assert len(lines) == len(cells) == 2
    for c, line in zip(cells, lines, strict=True):
        best = next(d for d in c["depths"] if d["rank"] == 1)
        assert line.startswith(f"- B{c['batch']} × context {c['context']} × {c['worker']}: ")
        assert f"**best depth {best['depth']}**, {best['tokens_per_s']:.1f} tokens/s" in line
        assert line.endswith("(ESTIMATED)")


# -- figures, links and re-rendering --------------------------------------------------------------


@pytest.mark.parametrize("run", [*RUNS, "demo_run"])
def test_every_png_is_embedded_and_every_link_exists(
    run: str, request: pytest.FixtureRequest
) -> None:
    for folder in _folders(request, run):
        text = (folder / "REPORT.md").read_text(encoding="utf-8")
        embedded = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", text)
        for png in sorted(p.name for p in folder.glob("*.png")):
            assert png in embedded, (folder, png)
            result = read_result(folder / "results.json")
            caption = plot_caption(png, result)  # policies.png's names the series it draws
            assert f"*{png}* (" in text and caption in text, (folder, png)
        for link in re.findall(r"\]\(([^)]+)\)", text):
            assert not Path(link).is_absolute(), link  # relative: the folder can be moved
            assert (folder / link).exists(), (folder, link)


@pytest.mark.parametrize("run", [*RUNS, "demo_run"])
def test_report_rerenders_the_same_bytes(
    run: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Delete every REPORT.md, run ``specreplay report``: the same bytes, in place and in --out."""
    folders = _folders(request, run)
    before = {f: (f / "REPORT.md").read_bytes() for f in folders}
    for f in folders:
        (f / "REPORT.md").unlink()
    top = folders[0]
    _invoke(["report", str(top)])
    for f in folders:
        assert (f / "REPORT.md").read_bytes() == before[f], f
    copy = tmp_path / "copy"
    _invoke(["report", str(top), "--out", str(copy)])
    for f in folders:
        assert (copy / f.relative_to(top) / "REPORT.md").read_bytes() == before[f], f


# -- the demo ------------------------------------------------------------------------------------


def test_demo_report_states_the_terminal_verdicts(demo_run: tuple[Path, str]) -> None:
    """The demo's REPORT.md has the terminal's VERDICTS lines, the chapters and their plots."""
    out, terminal = demo_run
    text = (out / "REPORT.md").read_text(encoding="utf-8")
    block = terminal.split("VERDICTS (pooled; SIMULATED replays of the MEASURED archive)\n")[1]
    # the terminal folds a line over 160 characters into indented continuation lines
    said = block.split("\n\n")[0].replace("\n  ", " ").split("\n")
    rq = _doc(out / "requalify")
    bullets = _bullets(text, "Verdicts")  # the verdicts, then one line per arm on the weights
    assert said and [x.replace("**", "") for x in bullets[: len(said)]] == said  # no bold
    weights = [x for x in bullets[len(said) :] if x.startswith("- Estimator importance for ")]
    assert len(weights) == len(bullets) - len(said) == len(rq["arms"])
    assert f"vs top32:t0.7@8: {rq['requalification']['verdict']} (" in text
    for title in ("1. The archive (MEASURED)", "2. Requalification of", "3. Mismatched verifier",
                  "4. Depth sweep of top32:t0.7@8", "5. Would adaptive drafting pay?",
                  "6. Budget of the gain"):  # fmt: skip
        assert f"\n## {title}" in text, title
    assert "![" in text and "](requalify/forest.png)" in text and "](sweep/depths.png)" in text
    assert "(requalify/REPORT.md)" in text


def test_demo_lawtest_report_counts_the_failures(demo_run: tuple[Path, str]) -> None:
    out, _ = demo_run
    doc = _doc(out / "lawtest")
    arm = "top32:t0.7:dyadic8/float64@8"
    ran = [t for t in doc["law_tests"] if t["arm"] == arm and t["passed"] is not None]
    failed = sum(1 for t in ran if not t["passed"])
    line = next(ln for ln in _bullets((out / "lawtest" / "REPORT.md").read_text(), "Verdicts")
                if ln.startswith(f"- {arm}:"))  # fmt: skip
    if failed:
        assert f"law test **FAILED** at {failed} of {len(ran)} positions" in line
    else:
        assert f"law test passed at all {len(ran)} positions" in line


def test_demo_report_without_its_sub_runs_says_why(
    demo_run: tuple[Path, str], tmp_path: Path
) -> None:
    """The top-level result alone: verdicts read — with the reason; the archive chapter stays."""
    folder = tmp_path / "alone"
    folder.mkdir()
    shutil.copy(demo_run[0] / "results.json", folder / "results.json")
    _invoke(["report", str(folder)])
    text = (folder / "REPORT.md").read_text(encoding="utf-8")
    assert _bullets(text, "Verdicts") == [
        "- — (requalify/results.json not found: the demo's sub-runs are incomplete)"
    ]
    assert "\n## 1. The archive (MEASURED)" in text and "\n## 2." not in text


# -- the Markdown helpers, on hand-made text -------------------------------------------------------


def test_markdown_helpers_on_hand_made_text() -> None:
    tables = "TITLE line\nsecond line\n\n## Head\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n"
    assert md_blocks(tables) == (
        "TITLE line\n\nsecond line\n\n## Head\n\n| a | b |\n|---|--:|\n| 1 | 2 |"
    )
    assert demote("# A\ntext\n## B", 3) == "### A\ntext\n#### B"
    assert demote("### A", 3) == "### A"
    with_list = "body\n\nAssumptions:\n- one\n- two\n"
    assert split_assumptions(with_list) == "body\n"
    assert (
        split_assumptions("body\nAssumptions:\nnot a list\n") == "body\nAssumptions:\nnot a list\n"
    )
    known = figure_block("forest.png", "SIMULATED", folder="requalify/")
    assert "](requalify/forest.png)" in known and PLOT_CAPTIONS["forest.png"] in known
    unknown = figure_block("brand-new.png", "MEASURED")
    assert "](brand-new.png)" in unknown and "no caption recorded" in unknown

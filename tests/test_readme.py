"""The documented examples run: the README's example and the reference examples of docs/.

docs/commands.md holds the reference examples (its Python block, `specreplay interval`, the
requalify, lawtest, report, --ignore and --short-rounds examples), docs/inputs.md the screen's
``--model-name`` example, and README.md a short example (the requalify example of
docs/commands.md, with the lines it quotes as printed). Each runs, and prints what the text says.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from specreplay.cli import app

ROOT = Path(__file__).parent.parent
COMMANDS = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")  # the reference examples
INPUTS = (ROOT / "docs" / "inputs.md").read_text(encoding="utf-8")
FRONT = (ROOT / "README.md").read_text(encoding="utf-8")  # the README itself


def test_python_example_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    block = re.search(r"```python\n(.*?)```", COMMANDS, re.S)
    assert block is not None
    monkeypatch.chdir(ROOT)
    exec(compile(block.group(1), "docs/commands.md", "exec"), {})
    out = capsys.readouterr().out.split()
    assert out[0].startswith("2.5650") and out[1] == "DIFFERENT"


def test_interval_example_runs(tmp_path: Path) -> None:
    cmd = re.search(r"```bash\n(specreplay interval \\\n.*?)```", COMMANDS, re.S)
    assert cmd is not None
    argv = shlex.split(cmd.group(1).replace("\\\n", " "))[1:]
    argv[argv.index("--out") + 1] = str(tmp_path / "o")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        res = CliRunner().invoke(app, [*argv, "-q"])
    finally:
        os.chdir(cwd)
    assert res.exit_code == 0, res.output
    first = "VERDICT" + COMMANDS.split("prints first `VERDICT")[1].split("`")[0].replace("\n", " ")
    assert res.stdout.startswith(first)


@pytest.fixture(scope="module")
def requalify_example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any]]:
    """The requalify example, run once in a fresh folder: (folder, each line's result)."""
    block = re.search(r"```bash\n(specreplay synth demo-archive.*?)```", COMMANDS, re.S)
    assert block is not None
    lines = [ln for ln in block.group(1).splitlines() if ln.strip()]
    folder = tmp_path_factory.mktemp("readme-requalify")
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        results = [CliRunner().invoke(app, [*shlex.split(ln)[1:], "-q"]) for ln in lines]
    finally:
        os.chdir(cwd)
    return folder, results


def test_requalify_example_runs(requalify_example: tuple[Path, list[Any]]) -> None:
    _, results = requalify_example
    for res in results:
        assert res.exit_code == 0, res.output
    first = COMMANDS.split("prints first `REQUALIFICATION")[1].split("`")[0]
    assert results[-1].stdout.startswith("REQUALIFICATION" + first)


def test_lawtest_example_runs(tmp_path: Path) -> None:
    block = re.search(r"```bash\n(specreplay lawtest .*?)```", COMMANDS, re.S)
    assert block is not None
    argv = shlex.split(block.group(1))[1:]
    argv[argv.index("--out") + 1] = str(tmp_path / "lt")
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, res.output
    first = COMMANDS.split("prints first `LAW TESTS")[1].split("`")[0]
    assert res.stdout.startswith("LAW TESTS" + first)


def test_report_example_runs(requalify_example: tuple[Path, list[Any]], tmp_path: Path) -> None:
    """The report example after the requalify example, with the archive deleted."""
    report = re.search(r"```bash\n(rm -rf demo-archive\n.*?)```", COMMANDS, re.S)
    assert report is not None
    shutil.copytree(requalify_example[0], tmp_path, dirs_exist_ok=True)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        tables = Path("rq-demo/TABLES.md").read_bytes()
        Path("rq-demo/TABLES.md").unlink()
        rm, cmd = report.group(1).strip().splitlines()
        assert shlex.split(rm)[:2] == ["rm", "-rf"]
        shutil.rmtree(shlex.split(rm)[2])
        res = CliRunner().invoke(app, shlex.split(cmd)[1:])
        assert res.exit_code == 0, res.output
        assert Path("rq-demo/TABLES.md").read_bytes() == tables
    finally:
        os.chdir(cwd)
    first = COMMANDS.split("prints one line per run (`")[1].split("`")[0]
    assert res.stdout.splitlines()[0] == first


def _run_in(folder: Path, line: str) -> Any:
    """Run one documented command line in ``folder`` (as a user would from there)."""
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        return CliRunner().invoke(app, [*shlex.split(line)[1:], "-q"], env={"COLUMNS": "300"})
    finally:
        os.chdir(cwd)


def test_ignore_example_runs(tmp_path: Path) -> None:
    """``validate my-archive --ignore '_SUCCESS' --ignore '*.crc'`` (issue 9, item 4)."""
    block = re.search(r"```bash\n\s*(specreplay validate my-archive --ignore [^\n]*)", COMMANDS)
    assert block is not None
    line = block.group(1).strip()
    res = _run_in(tmp_path, "specreplay synth my-archive --requests 20")
    assert res.exit_code == 0, res.output
    (tmp_path / "my-archive" / "_SUCCESS").write_bytes(b"")
    (tmp_path / "my-archive" / ".part-00000.parquet.crc").write_bytes(b"\0" * 8)
    refused = _run_in(tmp_path, line.split(" --ignore")[0])
    assert refused.exit_code == 2 and "--ignore" in refused.stderr, refused.output
    assert "my-archive/_SUCCESS" in refused.stderr or ".crc" in refused.stderr, refused.output
    res = _run_in(tmp_path, line)
    assert res.exit_code == 0, res.output
    assert "VALID" in res.stdout
    for glob, name in (("_SUCCESS", "_SUCCESS"), ("*.crc", ".part-00000.parquet.crc")):
        assert f"skipped by --ignore '{glob}': my-archive/{name}" in res.stdout, res.stdout


def test_model_name_example_runs(tmp_path: Path) -> None:
    """``screen before.prom after.prom --config screen.toml --model-name M`` on a two-model
    scrape: the named model's R = 1 + Δaccepted/Δdrafts (worked out in test_safety_screen)."""
    from test_safety_screen import CONFIG, TWO_AFTER, TWO_BEFORE, scrape

    block = re.search(
        r"```bash\n\s*(specreplay screen before.prom [^\n]*--model-name [^\n]*)", INPUTS
    )
    assert block is not None
    line = block.group(1).strip()
    model = shlex.split(line)[-1]
    rename = {"a": model, "b": "other-model"}
    (tmp_path / "before.prom").write_text(scrape({rename[k]: v for k, v in TWO_BEFORE.items()}))
    (tmp_path / "after.prom").write_text(scrape({rename[k]: v for k, v in TWO_AFTER.items()}))
    (tmp_path / "screen.toml").write_text(CONFIG)
    without = _run_in(tmp_path, line.rsplit(" --model-name", 1)[0])
    assert without.exit_code == 2 and "--model-name" in without.stderr, without.output
    res = _run_in(tmp_path, line)
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "specreplay-out" / "screen" / "results.json").read_text())
    assert doc["options"]["model_name"] == model
    (cell,) = doc["cells"]
    r = 1 + sum(s["value"] for s in cell["survival"])
    assert r == pytest.approx(3.2, rel=1e-12)  # model "a" of test_safety_screen: 1 + 440/200


def test_short_rounds_example_runs(requalify_example: tuple[Path, list[Any]]) -> None:
    """``requalify … --short-rounds exclude`` (issue 9, item 6) on the documented demo archive.

    The synthetic archive records every round at full depth 8, so nothing is excluded and every
    figure equals the default run's (the documented requalify example, ``--short-rounds capped``
    since issue 16).
    """
    block = re.search(
        r"```bash\n\s*(specreplay requalify [^\n]*--short-rounds exclude[^\n]*)", COMMANDS
    )
    assert block is not None
    folder, _ = requalify_example
    res = _run_in(folder, block.group(1).strip())
    assert res.exit_code == 0, res.output
    out = shlex.split(block.group(1))[-1]
    doc = json.loads((folder / out / "results.json").read_text())
    ref = json.loads((folder / "rq-demo" / "results.json").read_text())
    assert doc["options"]["short_rounds"] == "exclude"
    assert ref["options"]["short_rounds"] == "capped"
    key = ("level", "family", "bucket")
    ref_cells = {tuple(c[k] for k in key): c for c in ref["cells"]}
    for cell in doc["cells"]:
        assert cell["excluded"] == 0, cell
        other = ref_cells[tuple(cell[k] for k in key)]
        for arm in ("top32:t0.7@8", "top32:t0.7:dyadic24@8"):
            assert cell["arms"][arm]["R"] == other["arms"][arm]["R"], (cell, arm)
            assert cell["arms"][arm]["n_rounds"] == other["arms"][arm]["n_rounds"]


def test_the_readme_example_is_the_requalify_example(
    requalify_example: tuple[Path, list[Any]],
) -> None:
    """README.md's short example: the same two commands, and what it quotes is what they print."""
    block = re.search(r"```bash\n(specreplay synth demo-archive.*?)```", FRONT, re.S)
    reference = re.search(r"```bash\n(specreplay synth demo-archive.*?)```", COMMANDS, re.S)
    assert block is not None and reference is not None
    assert block.group(1) == reference.group(1)
    _, results = requalify_example
    printed = results[-1].stdout
    answer = re.search(r"The first line is the answer:\n\n```\n(.*?)\n```", FRONT, re.S)
    assert answer is not None
    assert printed.splitlines()[0] == answer.group(1)
    prose = re.sub(r"```.*?```", "", FRONT[FRONT.index("## A short example") :], flags=re.S)
    prose = prose[: prose.index("\n## ")]
    quoted = [q.rstrip("…").rstrip() for q in re.findall(r"`([^`]+)`", prose)
              if re.search(r"\d", q) or q.startswith("Estimator")]  # fmt: skip
    assert len(quoted) >= 2, quoted
    flat = " ".join(printed.replace("|", " ").split())  # table cells quoted as one figure
    for q in quoted:
        assert " ".join(q.split()) in flat, q


def test_policy_example_runs(requalify_example: tuple[Path, list[Any]]) -> None:
    """``sweep --policy`` (issue 14) on the documented demo archive prints what the text quotes."""
    section = COMMANDS[COMMANDS.index("### Policies") :]
    block = re.search(r"```bash\n(specreplay sweep demo-archive.*?)```", section, re.S)
    assert block is not None
    folder, _ = requalify_example
    res = _run_in(folder, block.group(1).replace("\\\n", " ").strip())
    assert res.exit_code == 0, res.output
    prose = section[block.end() : section.index("\n\n", block.end() + 2)]
    quoted = re.findall(r"`([^`]+)`", prose)
    assert quoted[0] == "DOES NOT PAY" and len(quoted) == 4, quoted
    # the console says the held-out verdict; its table is in TABLES.md (issue 16, item 5)
    tables = (folder / "specreplay-out" / "sweep" / "TABLES.md").read_text(encoding="utf-8")
    held = next(ln for ln in tables.splitlines() if ln.startswith("| held-out"))
    ins = next(ln for ln in tables.splitlines() if ln.startswith("| in-sample"))
    assert "DOES NOT PAY (stop-below:0.5@5 against depth 5)" in res.stdout.splitlines()[2]
    cells = [c.strip() for c in held.split("|")[1:-1]]
    assert cells[1] == "stop-below:0.5@5" and cells[2] == "5"
    assert cells[3] == quoted[1] and cells[6] == quoted[2] and cells[8] == quoted[0]
    assert ins.split("|")[7].strip() == quoted[3]
    doc = json.loads((folder / "specreplay-out" / "sweep" / "results.json").read_text())
    assert doc["options"]["policies"] == [
        *(f"stop-below:{t}@5" for t in ("0.05", "0.1", "0.2", "0.3", "0.4", "0.5")),
        "depth-by-bucket:<4K=5/>=4K=3",
    ]
    (choice,) = doc["policy_choice"]
    assert choice["held_out"]["verdict"] == "DOES NOT PAY" and choice["selected_depth"] == 5

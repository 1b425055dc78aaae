"""The README's examples run: its Python block and its `specreplay interval` command."""

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
README = (ROOT / "README.md").read_text()
README = README[README.index("\n## Commands") :]  # the reference examples, not the tour


def test_python_example_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    block = re.search(r"```python\n(.*?)```", README, re.S)
    assert block is not None
    monkeypatch.chdir(ROOT)
    exec(compile(block.group(1), "README.md", "exec"), {})
    out = capsys.readouterr().out.split()
    assert out[0].startswith("2.5650") and out[1] == "DIFFERENT"


def test_interval_example_runs(tmp_path: Path) -> None:
    cmd = re.search(r"```bash\n(specreplay interval \\\n.*?)```", README, re.S)
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
    first = "VERDICT" + README.split("prints first `VERDICT")[1].split("`")[0].replace("\n", " ")
    assert res.stdout.startswith(first)


@pytest.fixture(scope="module")
def requalify_example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any]]:
    """The README's requalify example, run once in a fresh folder: (folder, each line's result)."""
    block = re.search(r"```bash\n(specreplay synth demo-archive.*?)```", README, re.S)
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
    first = README.split("prints first `REQUALIFICATION")[1].split("`")[0]
    assert results[-1].stdout.startswith("REQUALIFICATION" + first)


def test_lawtest_example_runs(tmp_path: Path) -> None:
    block = re.search(r"```bash\n(specreplay lawtest .*?)```", README, re.S)
    assert block is not None
    argv = shlex.split(block.group(1))[1:]
    argv[argv.index("--out") + 1] = str(tmp_path / "lt")
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, res.output
    first = README.split("prints first `LAW TESTS")[1].split("`")[0]
    assert res.stdout.startswith("LAW TESTS" + first)


def test_report_example_runs(requalify_example: tuple[Path, list[Any]], tmp_path: Path) -> None:
    """The report example after the requalify example, with the archive deleted."""
    report = re.search(r"```bash\n(rm -rf demo-archive\n.*?)```", README, re.S)
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
    first = README.split("prints one line per run (`")[1].split("`")[0]
    assert res.stdout.splitlines()[0] == first


def _run_in(folder: Path, line: str) -> Any:
    """Run one README command line in ``folder`` (as a user would from there)."""
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        return CliRunner().invoke(app, [*shlex.split(line)[1:], "-q"], env={"COLUMNS": "300"})
    finally:
        os.chdir(cwd)


def test_ignore_example_runs(tmp_path: Path) -> None:
    """``validate my-archive --ignore '_SUCCESS' --ignore '*.crc'`` (issue 9, item 4)."""
    block = re.search(r"```bash\n\s*(specreplay validate my-archive --ignore [^\n]*)", README)
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
        r"```bash\n\s*(specreplay screen before.prom [^\n]*--model-name [^\n]*)", README
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

"""The README's examples run: its Python block and its `specreplay interval` command."""

from __future__ import annotations

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

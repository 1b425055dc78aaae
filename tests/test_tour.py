"""The ten-minute tour (docs/tour.md) runs: every block of it, in order, in a scratch folder.

Python blocks are executed; every line of a bash block is a ``specreplay`` command run through the
CLI (with ``-q``). Each backquoted figure of the tour's prose (a snippet holding a digit, other than
an option or a path) must appear in what the commands printed, tables' pipes and line breaks
aside: a change that moves a quoted figure fails here until docs/tour.md says the new one.
"""

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
TOUR = (ROOT / "docs" / "tour.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(python|bash)\n(.*?)```", TOUR, re.S)


NAMESPACES: dict[int, dict[str, Any]] = {}
"""What each Python block of the tour left behind, by block index."""


def _flat(text: str) -> str:
    return " ".join(text.replace("|", " ").split())


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, int, str]]]:
    """Run the tour once: (its folder, each command with its exit code and output)."""
    folder = tmp_path_factory.mktemp("tour")
    shutil.copytree(ROOT / "tests" / "data", folder / "tests" / "data")
    shutil.copytree(ROOT / "examples", folder / "examples")
    runs: list[tuple[str, int, str]] = []
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        for i, (kind, body) in enumerate(BLOCKS):
            if kind == "python":
                namespace: dict[str, Any] = {"__name__": "tour"}
                exec(compile(body, "docs/tour.md", "exec"), namespace)
                NAMESPACES[i] = namespace
                continue
            for line in body.splitlines():
                if line.strip():
                    argv = shlex.split(line)
                    assert argv[0] == "specreplay", line
                    res = CliRunner().invoke(app, [*argv[1:], "-q"])
                    runs.append((line, res.exit_code, res.stdout))
    finally:
        os.chdir(cwd)
    return folder, runs


def test_the_tour_covers_what_the_issue_lists() -> None:
    commands = [ln.split()[1] for kind, body in BLOCKS if kind == "bash"
                for ln in body.splitlines() if ln.strip()]  # fmt: skip
    for verb in ("validate", "requalify", "sweep", "budget", "interval", "screen", "report"):
        assert verb in commands, verb
    # issue 12: the stand-in engine feeds the recorder API (which writes through TraceWriter)
    assert any(
        "Recorder(" in body and "rec.round(" in body for kind, body in BLOCKS if kind == "python"
    )
    assert "drafted_id" in TOUR and "emitted_q" in TOUR and "path assumption" in TOUR


def test_every_tour_command_succeeds(tour: tuple[Path, list[tuple[str, int, str]]]) -> None:
    folder, runs = tour
    for line, code, out in runs:
        assert code == 0, f"{line}\n{out}"
    for sub in ("requalify", "sweep", "budget", "spec-bench", "medusa", "screen", "requalify-ipc"):
        assert (folder / "tour" / sub / "results.json").is_file(), sub


def test_every_figure_the_tour_quotes_is_printed(
    tour: tuple[Path, list[tuple[str, int, str]]],
) -> None:
    printed = _flat("\n".join(out for _, _, out in tour[1]))
    prose = re.sub(r"```.*?```", "", TOUR, flags=re.S)
    quoted = [q for q in re.findall(r"`([^`]+)`", prose)
              if re.search(r"\d", q) and not q.startswith(("--", "specreplay/"))]  # fmt: skip
    assert len(quoted) >= 10
    for q in quoted:
        assert _flat(q.rstrip("…").rstrip()) in printed, q


def test_the_python_step_gives_the_cli_figures(
    tour: tuple[Path, list[tuple[str, int, str]]],
) -> None:
    """Step 10's ``api.requalify`` is step 3's run: the same verdict and the same pooled Δ."""
    import json

    from specreplay.results.model import Role

    rq = next(ns["rq"] for ns in NAMESPACES.values() if "rq" in ns)
    doc = json.loads((tour[0] / "tour" / "requalify" / "results.json").read_text())
    cli = next(d for d in doc["cells"][0]["deltas"] if d["role"] == Role.CANDIDATE_VS_BASELINE)
    api = rq.pooled.delta(Role.CANDIDATE_VS_BASELINE)
    assert rq.requalification.verdict == doc["requalification"]["verdict"] == "QUALIFIED"
    assert (api.point, api.lo, api.hi) == (cli["point"], cli["lo"], cli["hi"])


def test_the_ipc_and_dask_step_gives_step_3s_figures(
    tour: tuple[Path, list[tuple[str, int, str]]],
) -> None:
    """Step 11 (the archive converted to Arrow IPC, replayed on 2 Dask workers with a cache)
    writes step 3's figures bit for bit; only its inputs and replay_backend differ."""
    import json

    docs = [json.loads((tour[0] / "tour" / s / "results.json").read_text())
            for s in ("requalify", "requalify-ipc")]  # fmt: skip
    for key in ("cells", "law_tests", "requalification", "path_bias", "arms"):
        assert json.dumps(docs[0][key]) == json.dumps(docs[1][key]), key
    backend = docs[1]["replay_backend"]
    assert backend["runner"] == "dask" and backend["workers"] == 2
    assert backend["cache"]["replayed"] == 1 and "replay_backend" not in docs[0]
    assert [Path(i["path"]).suffix for i in docs[1]["inputs"]] == [".arrow"]


def test_the_tour_writes_only_ignored_folders(
    tour: tuple[Path, list[tuple[str, int, str]]],
) -> None:
    """Issue 9, item 12: followed from the repository root, the tour leaves the clone clean."""
    from test_repo_hygiene import ignored

    folder, _ = tour
    gitignore = (ROOT / ".gitignore").read_text(encoding="utf-8")
    written = sorted(p.name for p in folder.iterdir() if p.name not in ("tests", "examples"))
    assert "tour" in written and "my-archive" in written, written
    for name in written:
        assert ignored(name, gitignore), f"the tour writes {name}, which .gitignore does not list"

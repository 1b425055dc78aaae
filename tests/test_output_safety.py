"""Output safety: bad input or a dangerous ``--out`` is exit 2, inputs untouched.

See docs/inputs.md#position-traces-schema-v1, docs/outputs.md.

Each case asserts the exit code, the one-line message and that every file under the input paths
is byte-for-byte unchanged afterwards (SHA-256 of every file before and after the run).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import polars as pl
import pytest
from archive_factory import clone, valid_rows, write_jsonl, write_parquet
from corpus import error_lines
from typer.testing import CliRunner, Result

from specreplay.cli import app
from specreplay.errors import SpecReplayError
from specreplay.replay.archive.reader import ArchiveReader
from specreplay.results import output
from specreplay.results.output import MARKER, check_out, output_dir

REPO = Path(__file__).resolve().parents[1]
MEDUSA = REPO / "tests" / "data" / "medusa-mtbench"
STEM = "temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"
BASE, CAND = "top32:t0.7@5", "top32:t0.7:dyadic24@5"
FAST = ["-q", "--n-boot", "200"]


def digest(*paths: Path) -> dict[str, str]:
    """SHA-256 of every file under ``paths`` (folders listed too, so a deletion shows)."""
    out: dict[str, str] = {}
    for root in paths:
        found = [root, *sorted(root.rglob("*"))] if root.is_dir() else [root]
        for p in found:
            if p.is_dir():
                out[str(p)] = "<folder>"
            elif p.exists():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def run(args: Sequence[str]) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "300"})


def assert_error(res: Result, *fragments: str) -> str:
    """Exit 2, one ``error:`` line on stderr holding every fragment, no traceback."""
    assert res.exit_code == 2, res.output
    lines = error_lines(res)
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: "), lines
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    assert "Traceback" not in res.output
    return lines[0]


@pytest.fixture(scope="module")
def synth_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An archive written by ``specreplay synth``: 24 requests × 4 rounds in 3 shards."""
    arch = tmp_path_factory.mktemp("synth") / "arch"
    res = run(["synth", arch, "--requests", "24", "--rounds", "4", "--shard-requests", "8", "-q"])
    assert res.exit_code == 0, res.output
    return arch


@pytest.fixture
def arch(synth_once: Path, tmp_path: Path) -> Path:
    """A private copy of the synth archive under ``tmp_path``."""
    return Path(shutil.copytree(synth_once, tmp_path / "arch"))


@pytest.fixture
def medusa(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Copies of two Medusa answer files (each in its own folder) and the question file."""
    paths = []
    names = {"a": f"medusa-vicuna-7b-v1.3-{STEM}", "b": f"medusa-vicuna-13b-v1.3-{STEM}",
             "q": "question.jsonl"}  # fmt: skip
    for sub, name in names.items():
        (tmp_path / sub).mkdir()
        paths.append(Path(shutil.copy(MEDUSA / name, tmp_path / sub / name)))
    return paths[0], paths[1], paths[2]


# -- 1. --out against the inputs -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "how"), [("same", "is"), ("inside", "lies inside"), ("parent", "contains")]
)
def test_requalify_refuses_out_that_is_in_or_around_the_archive(
    arch: Path, tmp_path: Path, where: str, how: str
) -> None:
    out = {"same": arch, "inside": arch / "report", "parent": tmp_path}[where]
    before = digest(tmp_path)
    res = run(["requalify", arch, "--baseline", BASE, "--candidate", CAND, "--out", out,
               "--force", *FAST])  # fmt: skip
    assert_error(res, f"--out {out} {how} the input {arch}", "refused even with --force")
    assert digest(tmp_path) == before  # archive intact, nothing written beside it


def test_out_that_resolves_to_the_input_through_a_symlink_is_refused(
    arch: Path, tmp_path: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(arch, target_is_directory=True)
    before = digest(arch)
    res = run(["validate", link, "--out", arch, "--force"])
    assert_error(res, f"--out {arch} is the input {link}")
    assert digest(arch) == before


def test_demo_folder_copy_is_not_replaced_by_a_report_on_its_own_archive(
    arch: Path, tmp_path: Path
) -> None:
    """Regression: ``--out DEMO`` on DEMO/archive deleted the archive (DEMO has the marker)."""
    demo = tmp_path / "demo"
    demo.mkdir()
    (demo / MARKER).write_text("written by specreplay; safe to overwrite\n")
    shutil.move(arch, demo / "archive")
    before = digest(demo)
    res = run(["requalify", demo / "archive", "--baseline", BASE, "--candidate", CAND,
               "--out", demo, *FAST])  # fmt: skip
    assert_error(res, f"--out {demo} contains the input {demo / 'archive'}")
    assert digest(demo) == before


def test_validate_out_on_its_input_file_is_refused(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", valid_rows())
    before = digest(path)
    assert_error(run(["validate", path, "--out", path, "--force"]), f"--out {path} is the input")
    assert_error(run(["validate", path, "--out", tmp_path]), f"--out {tmp_path} contains the input")
    assert digest(path) == before and sorted(os.listdir(tmp_path)) == ["a.jsonl"]


@pytest.mark.parametrize("which", ["a", "b", "question"])
def test_interval_refuses_out_containing_any_input(
    medusa: tuple[Path, Path, Path], tmp_path: Path, which: str
) -> None:
    a, b, q = medusa
    out = {"a": a.parent, "b": b.parent, "question": q.parent}[which]
    given = {"a": a, "b": b, "question": q}[which]
    before = digest(tmp_path)
    res = run(["interval", a, b, "--question-file", q, "--out", out, "--force", *FAST])
    assert_error(res, f"--out {out} contains the input {given}")
    assert digest(tmp_path) == before


def test_lawtest_refuses_out_inside_its_archive(arch: Path, tmp_path: Path) -> None:
    before = digest(tmp_path)
    res = run(["lawtest", arch, "--arm", CAND, "--out", arch / "law"])
    assert_error(res, f"--out {arch / 'law'} lies inside the input {arch}")
    assert digest(tmp_path) == before


def test_check_out_passes_a_sibling_of_the_input(tmp_path: Path) -> None:
    (tmp_path / "arch").mkdir()
    check_out(tmp_path / "report", force=False, inputs=[tmp_path / "arch"])  # no error
    with pytest.raises(SpecReplayError, match=r"--out .*arch2 lies inside the input .*arch\b"):
        check_out(tmp_path / "arch" / "arch2", force=False, inputs=[tmp_path / "arch"])


# -- 2. the marker goes into reports only ------------------------------------------------------


def test_synth_archive_has_no_marker_and_is_not_overwritten_without_force(arch: Path) -> None:
    assert not (arch / MARKER).exists()
    assert sorted(p.name for p in arch.iterdir()) == [
        "SYNTH.json", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet",
    ]  # fmt: skip
    before = digest(arch)
    res = run(["synth", arch, "--requests", "8", "--rounds", "2", "-q"])
    assert_error(res, f"{arch}: holds an archive specreplay wrote (SYNTH.json); use --force")
    assert digest(arch) == before
    # with --force the archive is replaced (atomically), still without a marker
    res = run(["synth", arch, "--requests", "8", "--rounds", "2", "-q", "--force"])
    assert res.exit_code == 0, res.output
    assert res.stderr.startswith(f"replaced {arch} (written ")  # an earlier run's folder
    assert sorted(p.name for p in arch.iterdir()) == ["SYNTH.json", "part-00000.parquet"]
    assert json.loads((arch / "SYNTH.json").read_text())["options"]["requests"] == 8
    assert sorted(p.name for p in arch.parent.iterdir()) == ["arch"]  # no temporary left


def test_a_report_into_another_archive_needs_force(arch: Path, tmp_path: Path) -> None:
    other = Path(shutil.copytree(arch, tmp_path / "other"))
    before = digest(arch, other)
    res = run(["validate", arch, "--out", other])
    assert_error(res, f"{other}: holds an archive specreplay wrote (SYNTH.json); use --force")
    assert digest(arch, other) == before
    res = run(["validate", arch, "--out", tmp_path / "report"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "report" / MARKER).exists()  # a report folder carries the marker
    assert digest(arch, other) == before


# -- 3. SIGTERM and stale temporary folders ------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


def test_sigterm_mid_run_leaves_no_temporary_folder(tmp_path: Path) -> None:
    out = tmp_path / "big"
    cmd = [sys.executable, "-m", "specreplay.cli", "synth", str(out), "--requests", "4000",
           "--shard-requests", "250", "-q"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=_env(), stderr=subprocess.PIPE, text=True)
    tmp = tmp_path / f".big.tmp-{proc.pid}"
    deadline = time.monotonic() + 120
    # mid-run: the temporary folder exists and holds a first shard (16 shards in all)
    while not (tmp.is_dir() and any(tmp.glob("*.parquet"))):
        assert proc.poll() is None, "synth ended before it could be killed"
        assert time.monotonic() < deadline, "no shard written within 120 s"
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    lines = [x for x in err.strip().splitlines() if not x.startswith("compiling kernels")]
    assert lines == ["error: synth terminated (SIGTERM); nothing written, no partial output left"]
    assert list(tmp_path.iterdir()) == []  # neither the temporary folder nor a partial OUT


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_temporary_folders_of_dead_runs_are_removed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    dead = _dead_pid()
    stale_tmp = tmp_path / f".out.tmp-{dead}"
    stale_tmp.mkdir()
    (stale_tmp / "results.json").write_text("half")
    alive = tmp_path / f".out.tmp-{os.getppid()}"  # a live process's run: left alone
    alive.mkdir()
    unrelated = tmp_path / f".other.tmp-{dead}"  # another folder's temporary: left alone
    unrelated.mkdir()
    with output_dir(out, force=False) as tmp:
        (tmp / "results.json").write_text("{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out", alive.name, unrelated.name])
    assert (out / "results.json").read_text() == "{}"
    # an earlier run that died while swapping left OUT set aside as .out.old-PID, later run
    # deletes it once OUT exists again
    stale_old = tmp_path / f".out.old-{dead}"
    shutil.copytree(out, stale_old)
    with output_dir(out, force=False) as tmp:
        (tmp / "results.json").write_text('{"run": 2}')
    assert not stale_old.exists() and (out / "results.json").read_text() == '{"run": 2}'


def test_stale_old_folder_is_restored_when_out_is_missing(tmp_path: Path) -> None:
    """A run killed between the two renames of the swap: OUT comes back, then the check runs."""
    dead = _dead_pid()
    old = tmp_path / f".arch.old-{dead}"
    old.mkdir()
    (old / "part-00000.parquet").write_bytes(b"previous archive")
    with (
        pytest.raises(SpecReplayError, match="not empty and was not written by specreplay"),
        output_dir(tmp_path / "arch", force=False, marker=False),
    ):
        pass
    assert (tmp_path / "arch" / "part-00000.parquet").read_bytes() == b"previous archive"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arch"]


def test_stale_tmp_is_removed_by_a_cli_run(arch: Path, tmp_path: Path) -> None:
    dead = _dead_pid()
    stale = tmp_path / f".report.tmp-{dead}"
    (stale / "sub").mkdir(parents=True)
    before = digest(arch)
    res = run(["validate", arch, "--out", tmp_path / "report"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arch", "report"]
    assert digest(arch) == before


# -- 4. an --out that cannot be created ----------------------------------------------------------


@pytest.mark.parametrize("command", ["validate", "requalify", "interval", "lawtest"])
def test_out_under_a_regular_file_is_a_clean_error(
    arch: Path, medusa: tuple[Path, Path, Path], tmp_path: Path, command: str
) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a folder")
    out = blocker / "sub" / "report"
    a, b, q = medusa
    args = {
        "validate": ["validate", arch],
        "requalify": ["requalify", arch, "--baseline", BASE, "--candidate", CAND, *FAST],
        "interval": ["interval", a, b, "--question-file", q, *FAST],
        "lawtest": ["lawtest", arch, "--arm", CAND],
    }[command]
    before = digest(tmp_path)
    res = run([*args, "--out", out])
    assert_error(res, f"--out {out}: cannot be created: {blocker} is a file, not a folder")
    assert digest(tmp_path) == before


def test_out_in_a_folder_without_write_permission(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root may write anywhere, so the permission probe is faked: the message is what is tested."""
    monkeypatch.setattr(output.os, "access", lambda path, mode: False)
    with pytest.raises(SpecReplayError, match=r"cannot be created: no write permission in "):
        check_out(tmp_path / "report", force=False)
    assert list(tmp_path.iterdir()) == []


def test_out_folder_that_cannot_be_made_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OSError while making the folders (here a faked read-only file system) is one line."""

    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(Path, "mkdir", refuse)
    out = tmp_path / "new" / "report"
    with (
        pytest.raises(SpecReplayError, match=r"--out .*report: cannot be created: Read-only"),
        output_dir(out, force=False),
    ):
        pass
    assert list(tmp_path.iterdir()) == []


def test_root_folder_is_not_an_output_folder() -> None:
    with pytest.raises(SpecReplayError, match=r"^--out /: the root folder cannot be an output"):
        check_out(Path("/"), force=True)


# -- 5. every archive access goes through the validating reader ----------------------------------


def test_requalify_on_a_truncated_first_shard_names_the_file(arch: Path) -> None:
    shard = arch / "part-00000.parquet"
    shard.write_bytes(shard.read_bytes()[:64])
    before = digest(arch)
    res = run(["requalify", arch, "--baseline", BASE, "--candidate", CAND, "--out",
               arch.parent / "rq", *FAST])  # fmt: skip
    assert_error(res, f"{shard}: cannot read as Parquet")
    assert digest(arch) == before
    assert not (arch.parent / "rq").exists()


def test_sample_requests_on_a_truncated_later_shard_names_the_file(arch: Path) -> None:
    shard = arch / "part-00002.parquet"
    shard.write_bytes(shard.read_bytes()[:64])
    before = digest(arch)
    res = run(["requalify", arch, "--baseline", BASE, "--candidate", CAND, "--out",
               arch.parent / "rq", "--sample-requests", "5", *FAST])  # fmt: skip
    assert_error(res, f"{shard}: cannot read as Parquet")
    assert digest(arch) == before


def _corrupt_pages(shard: Path) -> None:
    """Damage the first page header of a Parquet shard, keeping its footer (the schema reads).

    Bytes 4..64 follow the ``PAR1`` magic: the header of the first page of the first column,
    request_id, so any read of that column (the request sample's too) fails.
    """
    data = bytearray(shard.read_bytes())
    data[4:64] = b"Z" * 60
    shard.write_bytes(bytes(data))


@pytest.mark.parametrize("command", ["validate", "requalify", "requalify-sample", "lawtest"])
def test_corrupt_pages_in_a_later_shard_name_the_file(
    arch: Path, tmp_path: Path, command: str
) -> None:
    """Regression: a damaged data page raised a polars traceback from the reader itself."""
    shard = arch / "part-00001.parquet"
    _corrupt_pages(shard)
    rq = ["requalify", arch, "--baseline", BASE, "--candidate", CAND, "--out", tmp_path / "o"]
    args = {
        "validate": ["validate", arch],
        "requalify": [*rq, *FAST],
        "requalify-sample": [*rq, "--sample-requests", "5", *FAST],
        "lawtest": ["lawtest", arch, "--arm", CAND, "--out", tmp_path / "o"],
    }[command]
    before = digest(arch)
    line = assert_error(run(args), f"{shard}: cannot read as Parquet")
    # every command reads through the streaming reader, which cites where it stopped (the
    # request sample is drawn after the one pass)
    assert f"{shard}: cannot read as Parquet at row 0 (0-based) or later: " in line
    assert digest(arch) == before and sorted(os.listdir(tmp_path)) == ["arch"]


# -- 6. --fail-on INCONCLUSIVE fails on a null pooled verdict -------------------------------------


@pytest.mark.parametrize(("fail_on", "code"), [("DIFFERENT,INCONCLUSIVE", 1), ("DIFFERENT", 0)])
def test_interval_null_pooled_verdict_fails_inconclusive_gate(
    medusa: tuple[Path, Path, Path], tmp_path: Path, fail_on: str, code: int
) -> None:
    a, b, q = medusa
    before = digest(a, b, q)
    res = run(["interval", a, b, "--question-file", q, "--min-requests", "81", "--fail-on",
               fail_on, "--out", tmp_path / "iv", *FAST])  # fmt: skip
    assert res.exit_code == code, res.output
    assert res.stdout.startswith("VERDICT (pooled): — (80 requests < --min-requests 81)")
    pooled = json.loads((tmp_path / "iv" / "results.json").read_text())["cells"][0]["deltas"][0]
    assert pooled["verdict"] is None
    assert digest(a, b, q) == before


@pytest.mark.parametrize(
    ("fail_on", "code"), [("NOT QUALIFIED,INCONCLUSIVE", 1), ("NOT QUALIFIED", 0)]
)
def test_requalify_null_pooled_verdict_fails_inconclusive_gate(
    arch: Path, fail_on: str, code: int
) -> None:
    before = digest(arch)
    out = arch.parent / "rq"
    res = run(["requalify", arch, "--baseline", BASE, "--candidate", CAND, "--min-requests",
               "25", "--fail-on", fail_on, "--out", out, *FAST])  # fmt: skip
    assert res.exit_code == code, res.output
    assert res.stdout.startswith("REQUALIFICATION (pooled): — (24 requests < --min-requests 25)")
    doc = json.loads((out / "results.json").read_text())
    assert doc["requalification"]["verdict"] is None
    assert digest(arch) == before


@pytest.mark.parametrize("command", ["interval", "requalify"])
def test_fail_on_help_says_a_null_verdict_fails_inconclusive(command: str) -> None:
    res = run([command, "--help"])
    assert res.exit_code == 0
    assert "with INCONCLUSIVE a null pooled verdict" in " ".join(res.stdout.split())


# -- 7. a bad logging arm is exit 2 ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_bad_logging_arm_column_is_an_error_at_its_row(tmp_path: Path, kind: str) -> None:
    rows = clone(valid_rows())
    for r in rows:
        r["logging_arm"] = "bogus"
    path = tmp_path / f"a.{kind}"
    (write_jsonl if kind == "jsonl" else write_parquet)(path, rows)
    where = f"{path}:line 1" if kind == "jsonl" else f"{path}: row 0 (0-based)"
    message = f"{where}: logging_arm: arm 'bogus': expected exactly one '@DEPTH'"
    before = digest(path)
    res = run(["validate", path])
    assert res.exit_code == 2
    assert error_lines(res)[0].startswith(message)
    assert error_lines(res)[-1] == f"1 error(s) in {path}"
    res = run(["requalify", path, "--baseline", "top4:t1@3", "--candidate", "top4:t1:dyadic24@3",
               "--out", tmp_path / "rq", *FAST])  # fmt: skip
    assert_error(res, message)
    assert digest(path) == before and not (tmp_path / "rq").exists()


@pytest.mark.parametrize("command", ["validate", "requalify", "lawtest"])
def test_bad_logging_arm_option_is_an_error(tmp_path: Path, command: str) -> None:
    rows = clone(valid_rows())
    for r in rows:
        del r["logging_arm"]
    path = write_jsonl(tmp_path / "a.jsonl", rows)
    args = {
        "validate": ["validate", path],
        "requalify": ["requalify", path, "--baseline", "top4:t1@3", "--candidate",
                      "top4:t1:dyadic24@3", "--out", tmp_path / "o", *FAST],
        "lawtest": ["lawtest", path, "--arm", "top4:t1@3", "--out", tmp_path / "o"],
    }[command]  # fmt: skip
    before = digest(path)
    res = run([*args, "--logging-arm", "top4:t1"])
    assert_error(res, "--logging-arm 'top4:t1': arm 'top4:t1': expected exactly one '@DEPTH'")
    assert digest(path) == before and sorted(os.listdir(tmp_path)) == ["a.jsonl"]


def test_reader_rejects_a_bad_logging_arm_option(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", valid_rows())
    with pytest.raises(SpecReplayError, match=r"^--logging-arm 'greedy:t1@5': arm 'greedy:t1@5'"):
        ArchiveReader(path, logging_arm="greedy:t1@5")


# -- 8. only the data suffixes are shards ---------------------------------------------------------


def test_json_manifest_beside_jsonl_shards_is_not_a_shard(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    rows = valid_rows(n_requests=4)
    write_jsonl(shards / "part-00000.jsonl", rows[:12])
    write_jsonl(shards / "part-00001.ndjson", rows[12:])
    (shards / "SYNTH.json").write_text(json.dumps({"schema": "x", "inputs": []}, indent=2))
    before = digest(shards)
    res = run(["validate", shards])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(f"archive {shards}: VALID, 2 file(s), 24 rows\n")
    reader = ArchiveReader(shards)
    assert [f.path.name for f in reader.archive_files] == ["part-00000.jsonl", "part-00001.ndjson"]
    assert digest(shards) == before


def test_an_explicit_json_file_is_read_as_json_lines(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "trace.json", valid_rows())
    res = run(["validate", path])
    assert res.exit_code == 0, res.output
    manifest = tmp_path / "SYNTH.json"
    manifest.write_text(json.dumps({"schema": "x"}, indent=2))
    assert_error(run(["requalify", manifest, "--baseline", "top4:t1@3", "--candidate",
                      "top4:t1:dyadic24@3", "--out", tmp_path / "o", *FAST]),
                 f"{manifest}:line 1: invalid JSON")  # fmt: skip


def test_folder_of_only_json_files_holds_no_shard(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    write_jsonl(tmp_path / "d" / "trace.json", valid_rows())
    before = digest(tmp_path)
    assert_error(run(["validate", tmp_path / "d"]), "directory holds no .parquet or .jsonl shard")
    assert digest(tmp_path) == before


# -- 9. an archive without a row ------------------------------------------------------------------


@pytest.mark.parametrize("form", ["parquet", "jsonl", "blank-jsonl", "parquet-dir"])
def test_archive_without_rows_is_exit_2(tmp_path: Path, form: str) -> None:
    schema_rows = valid_rows()[:1]
    if form == "parquet":
        path = write_parquet(tmp_path / "a.parquet", schema_rows)
        path.unlink()
        pl.DataFrame(schema=pl.read_parquet(write_parquet(tmp_path / "x.parquet", schema_rows))
                     .schema).write_parquet(path)  # fmt: skip
        (tmp_path / "x.parquet").unlink()
        files = 1
    elif form == "parquet-dir":
        path = tmp_path / "shards"
        path.mkdir()
        frame = pl.read_parquet(write_parquet(tmp_path / "x.parquet", schema_rows)).clear()
        (tmp_path / "x.parquet").unlink()
        frame.write_parquet(path / "part-00000.parquet")
        frame.write_parquet(path / "part-00001.parquet")
        files = 2
    else:
        path = tmp_path / "a.jsonl"
        path.write_text("" if form == "jsonl" else "\n\n")
        files = 1
    before = digest(path)
    s = "s" if files > 1 else ""
    message = f"{path}: the archive holds no row ({files} file{s} read); there is nothing to replay"
    assert_error(run(["validate", path]), message)
    assert_error(run(["validate", path, "--all"]), message)
    assert_error(run(["requalify", path, "--baseline", "top4:t1@3", "--candidate",
                      "top4:t1:dyadic24@3", "--out", tmp_path / "o", *FAST]), message)  # fmt: skip
    assert digest(path) == before
    assert not (tmp_path / "o").exists()


# -- 10. options naming what the archive does not hold ---------------------------------------------


def test_unknown_family_is_exit_2_listing_the_known_ones(arch: Path, tmp_path: Path) -> None:
    before = digest(arch)
    args = ["requalify", arch, "--baseline", BASE, "--candidate", CAND, "--families",
            "code,nosuch", "--out", tmp_path / "o", *FAST]  # fmt: skip
    line = assert_error(run(args), "--families: nosuch not in the archive; its families are ")
    known = line.split("its families are ")[1].split(", ")
    assert "code" in known and "nosuch" not in known
    assert digest(arch) == before
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", ["lawtest", "requalify"])
def test_depth_past_the_archive_is_unsupported_exit_2(
    arch: Path, tmp_path: Path, command: str
) -> None:
    """A depth-5 archive: an arm @9 is UNSUPPORTED in both commands, never extrapolated."""
    before = digest(arch)
    deep = "top32:t0.7:dyadic8@9"
    out = ["--out", tmp_path / "o"]
    if command == "lawtest":
        args = ["lawtest", arch, "--arm", deep, *out]
    else:
        args = ["requalify", arch, "--baseline", BASE, "--candidate", deep, *out, *FAST]
    assert_error(run(args), f"{deep}: depth 9 is UNSUPPORTED: ", "fewer than 9 positions")
    assert digest(arch) == before
    assert not (tmp_path / "o").exists()

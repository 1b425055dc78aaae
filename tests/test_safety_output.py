"""Issue 9, "nothing lost, nothing mixed, nothing silent": what an output may replace.

Covers items 1 (``--force`` replaces only what specreplay made), 3 (``--cache`` is an output) and
13 (say what happened: SIGINT's one line, ``replaced OUT (written …)``):

- an existing ``--out`` (or OUT of ``synth``/``convert``) that is a regular file, FIFO, socket,
  device node, symlink, or a non-empty folder without the report marker or a manifest saying
  ``"written_by": "specreplay"`` is refused (exit 2, one line naming it) with or without
  ``--force``, and left exactly as it was (``lstat`` digest, never following a symlink);
- an archive folder ``synth`` or ``convert`` wrote is replaced with ``--force`` only, and the run
  says which earlier run's folder it replaced (the ``created_utc`` of that folder's manifest or
  results.json, read independently here);
- ``--cache DIR`` is refused when it is, holds or lies inside the archive, is not a folder, is a
  symlink, holds files but no cache marker, or others can write it;
- a real ``specreplay`` process interrupted by SIGINT exits 130 with one line and writes nothing.

Every case takes ``before = tree_digest(...)`` of its whole temporary folder and checks
:func:`corpus.assert_clean` afterwards. FIFOs, sockets and device nodes are made inside
``tmp_path``; the device node is skipped where ``mknod`` is not permitted.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from corpus import assert_clean, assert_refused, error_lines, invoke, leftovers, tree_digest

from specreplay.errors import SpecReplayError
from specreplay.replay.shardcache import CACHE_MARKER
from specreplay.results.output import MARKER, output_dir

REPO = Path(__file__).resolve().parents[1]
BASE, CAND = "top32:t0.7@5", "top32:t0.7:dyadic24@5"
FAST = ["-q", "--n-boot", "200"]
NEVER = "refused even with --force"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A synth archive (24 requests × 4 rounds, 3 shards) and a validate run of it."""
    root = tmp_path_factory.mktemp("made")
    arch, run = root / "arch", root / "run"
    res = invoke(["synth", str(arch), "--requests", "24", "--rounds", "4",
                  "--shard-requests", "8", "-q"])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = invoke(["validate", str(arch), "--out", str(run), "-q"])
    assert res.exit_code == 0, res.output
    return arch, run


@pytest.fixture
def inputs(made: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """Private copies of the archive and the run under ``tmp_path``."""
    arch = Path(shutil.copytree(made[0], tmp_path / "arch"))
    run = Path(shutil.copytree(made[1], tmp_path / "run"))
    return arch, run


def _args(command: str, out: Path, arch: Path, run: Path) -> list[str]:
    """The command line of ``command`` writing into ``out`` (small and quick)."""
    return {
        "synth": ["synth", str(out), "--requests", "8", "--rounds", "2", "-q"],
        "convert": ["convert", str(arch), str(out), "-q"],
        "report": ["report", str(run), "--out", str(out)],
        "validate": ["validate", str(arch), "--out", str(out), "-q"],
        "requalify": ["requalify", str(arch), "--baseline", BASE, "--candidate", CAND,
                      "--out", str(out), *FAST],
        "lawtest": ["lawtest", str(arch), "--arm", CAND, "--out", str(out), "-q"],
        "demo": ["demo", "--out", str(out), "--requests", "8", *FAST],
    }[command]  # fmt: skip


# -- hostile things an OUT may be --------------------------------------------------------------


def _file(p: Path) -> None:
    p.write_text("a user's notes\n")


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _socket(p: Path) -> None:
    cwd = os.getcwd()
    os.chdir(p.parent)  # bind a short relative name: socket paths are limited to ~100 bytes
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(p.name)
    finally:
        os.chdir(cwd)


def _device(p: Path) -> None:
    try:
        os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod is not permitted here (needs CAP_MKNOD)")


def _report_folder(p: Path) -> Path:
    p.mkdir()
    (p / MARKER).write_text("written by specreplay; safe to overwrite\n")
    (p / "TABLES.md").write_text("# an earlier report\n")
    return p


def _symlink_to_report(p: Path) -> None:
    """A symlink to a folder bearing the marker: the link is never followed, never replaced."""
    p.symlink_to(_report_folder(p.with_name("elsewhere")), target_is_directory=True)


def _dangling_symlink(p: Path) -> None:
    p.symlink_to(p.with_name("nowhere"))


def _foreign_folder(p: Path) -> None:
    p.mkdir()
    (p / "part-00000.parquet").write_bytes(b"someone's archive")


def _marker_symlink(p: Path) -> None:
    """The marker is a symlink to a regular file: not a marker."""
    _foreign_folder(p)
    real = p.with_name("a-file")
    real.write_text("written by specreplay; safe to overwrite\n")
    (p / MARKER).symlink_to(real)


def _marker_folder(p: Path) -> None:
    """The marker is a folder: not a marker."""
    _foreign_folder(p)
    (p / MARKER).mkdir()


def _archive_with_manifest(p: Path, written_by: object) -> None:
    """A copy of a synth archive whose SYNTH.json says ``written_by`` (absent: ``...``)."""
    shutil.copytree(p.with_name("arch"), p)
    doc = json.loads((p / "SYNTH.json").read_text())
    del doc["written_by"]
    if written_by is not ...:
        doc["written_by"] = written_by
    (p / "SYNTH.json").write_text(json.dumps(doc))


def _manifest_without_written_by(p: Path) -> None:
    _archive_with_manifest(p, ...)


def _manifest_by_someone_else(p: Path) -> None:
    _archive_with_manifest(p, "vllm")


def _our_archive_plus_a_stray_file(p: Path) -> None:
    """Our archive, and a file the manifest does not list (added since): not ours to delete."""
    shutil.copytree(p.with_name("arch"), p)
    (p / "notes.txt").write_text("mine\n")


def _manifest_symlink(p: Path) -> None:
    """SYNTH.json is a symlink to a real manifest: judged with lstat, not a manifest."""
    shutil.copytree(p.with_name("arch"), p)
    (p / "SYNTH.json").rename(p.with_name("SYNTH.json"))
    (p / "SYNTH.json").symlink_to(p.with_name("SYNTH.json"))


HOSTILE: dict[str, tuple[Callable[[Path], None], str]] = {
    "regular-file": (_file, "exists and is a regular file, not a folder"),
    "fifo": (_fifo, "exists and is a FIFO, not a folder"),
    "socket": (_socket, "exists and is a socket, not a folder"),
    "device": (_device, "exists and is a character device, not a folder"),
    "symlink-to-report": (_symlink_to_report, "exists and is a symlink, not a folder"),
    "dangling-symlink": (_dangling_symlink, "exists and is a symlink, not a folder"),
    "foreign-folder": (_foreign_folder, "folder is not empty and was not written by specreplay"),
    "marker-symlink": (_marker_symlink, "was not written by specreplay"),
    "marker-folder": (_marker_folder, "was not written by specreplay"),
    "manifest-no-written-by": (_manifest_without_written_by,
                               'SYNTH.json does not say "written_by": "specreplay"'),
    "manifest-other-writer": (_manifest_by_someone_else,
                              'SYNTH.json does not say "written_by": "specreplay"'),
    "archive-plus-stray-file": (_our_archive_plus_a_stray_file,
                                "notes.txt is not among the files SYNTH.json lists"),
    "manifest-symlink": (_manifest_symlink, "was not written by specreplay"),
}  # fmt: skip


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
@pytest.mark.parametrize("kind", list(HOSTILE))
@pytest.mark.parametrize("command", ["synth", "convert", "report"])
def test_out_that_specreplay_did_not_make_is_never_replaced(
    inputs: tuple[Path, Path], tmp_path: Path, command: str, kind: str, force: bool
) -> None:
    arch, run = inputs
    out = tmp_path / "out"
    make, fragment = HOSTILE[kind]
    make(out)
    before = tree_digest(tmp_path)
    res = invoke([*_args(command, out, arch, run), *(["--force"] if force else [])])
    assert_refused(res, str(out), fragment, NEVER)
    assert_clean(res, before, [tmp_path])


@pytest.mark.parametrize("kind", ["fifo", "symlink-to-report", "foreign-folder", "regular-file"])
@pytest.mark.parametrize("command", ["validate", "requalify", "lawtest", "demo"])
def test_the_rule_holds_for_every_commands_out(
    inputs: tuple[Path, Path], tmp_path: Path, command: str, kind: str
) -> None:
    arch, run = inputs
    out = tmp_path / "out"
    make, fragment = HOSTILE[kind]
    make(out)
    before = tree_digest(tmp_path)
    res = invoke([*_args(command, out, arch, run), "--force"])
    assert_refused(res, str(out), fragment, NEVER)
    assert_clean(res, before, [tmp_path])


def test_report_force_onto_a_foreign_archive_is_refused(
    inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    """Regression: ``report RUN --out ARCHIVE --force`` replaced an archive folder."""
    arch, run = inputs
    theirs = tmp_path / "theirs"
    shutil.copytree(arch, theirs)
    (theirs / "SYNTH.json").unlink()  # an archive specreplay did not write: shards only
    before = tree_digest(tmp_path)
    res = invoke(["report", str(run), "--out", str(theirs), "--force"])
    assert_refused(res, str(theirs), "folder is not empty and was not written by specreplay")
    assert_clean(res, before, [tmp_path])


# -- what --force may replace, and saying so ----------------------------------------------------


def _created(path: Path) -> str:
    created = json.loads(path.read_text())["created_utc"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", created), created
    return str(created)


@pytest.mark.parametrize("command", ["synth", "convert"])
def test_our_archive_is_replaced_with_force_only_and_the_run_says_so(
    inputs: tuple[Path, Path], tmp_path: Path, command: str
) -> None:
    arch, run = inputs
    out = tmp_path / "out"
    first = invoke(_args(command, out, arch, run))
    assert first.exit_code == 0, first.output
    manifest = out / ("SYNTH.json" if command == "synth" else "CONVERT.json")
    assert json.loads(manifest.read_text())["written_by"] == "specreplay"
    assert not (out / MARKER).exists()  # an archive carries its manifest, not the report marker
    created = _created(manifest)
    before = tree_digest(tmp_path)
    res = invoke(_args(command, out, arch, run))
    assert_refused(res, str(out), f"holds an archive specreplay wrote ({manifest.name})",
                   "use --force to replace it")  # fmt: skip
    assert_clean(res, before, [tmp_path])
    time.sleep(1.1)  # created_utc has whole seconds: the new manifest's differs
    keep = tree_digest(arch, run)
    res = invoke([*_args(command, out, arch, run), "--force"])
    assert res.exit_code == 0, res.output
    assert error_lines(res) == [f"replaced {out} (written {created})"]
    assert _created(manifest) != created
    assert_clean(res, keep, [arch, run])
    assert not leftovers(tmp_path)


def test_an_earlier_report_is_replaced_without_force_and_the_run_says_so(
    inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    arch, run = inputs
    out = tmp_path / "out"
    assert invoke(_args("report", out, arch, run)).exit_code == 0
    created = _created(out / "results.json")
    before = tree_digest(arch, run)
    res = invoke(_args("report", out, arch, run))
    assert res.exit_code == 0, res.output
    assert error_lines(res) == [f"replaced {out} (written {created})"]
    assert_clean(res, before, [arch, run])


SMALL_LAWTEST = ["--positions", "2", "--max-draws", "2000"]  # the figures do not matter here


def test_the_default_out_replaced_is_named_as_given(
    inputs: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``specreplay-out/lawtest`` (the default ``--out``), relative, as the user would see it."""
    arch, _ = inputs
    monkeypatch.chdir(tmp_path)
    first = invoke(["lawtest", str(arch), "--arm", CAND, *SMALL_LAWTEST, "-q"])
    assert first.exit_code == 0, first.output
    assert error_lines(first) == []  # nothing replaced the first time
    created = _created(tmp_path / "specreplay-out" / "lawtest" / "results.json")
    before = tree_digest(arch)
    res = invoke(["lawtest", str(arch), "--arm", CAND, *SMALL_LAWTEST, "-q"])
    assert res.exit_code == 0, res.output
    assert error_lines(res) == [f"replaced specreplay-out/lawtest (written {created})"]
    assert_clean(res, before, [arch])


def test_a_report_folder_without_a_time_is_written_at_an_unknown_time(
    inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    arch, run = inputs
    out = _report_folder(tmp_path / "out")  # the marker, but no results.json
    res = invoke(_args("report", out, arch, run))
    assert res.exit_code == 0, res.output
    assert error_lines(res) == [f"replaced {out} (written at an unknown time)"]


def test_an_empty_folder_is_written_and_nothing_is_said(
    inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    arch, run = inputs
    out = tmp_path / "out"
    out.mkdir()
    res = invoke(_args("synth", out, arch, run))
    assert res.exit_code == 0, res.output
    assert error_lines(res) == []
    assert (out / "SYNTH.json").is_file()


@pytest.mark.parametrize("where", [".", ".."])
def test_out_that_is_or_holds_the_current_folder_is_refused(
    inputs: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    _, run = inputs
    (tmp_path / "a").mkdir()  # ".." is then a folder without the inputs
    here = _report_folder(tmp_path / "a" / "here")  # a report folder: replaceable, but the cwd
    monkeypatch.chdir(here)
    before = tree_digest(tmp_path)
    res = invoke(["report", str(run), "--out", where, "--force"])
    how = "is" if where == "." else "holds"
    assert_refused(res, f"--out {where} {how} the current folder", NEVER)
    assert_clean(res, before, [tmp_path])


# -- the swap judges again: an OUT that appears or changes during the run --------------------------


def _foreign_in_place(p: Path) -> None:
    shutil.rmtree(p)
    _foreign_folder(p)


def _symlink_in_place(p: Path) -> None:
    shutil.rmtree(p)
    _symlink_to_report(p)


RACES: dict[str, tuple[Callable[[Path], None] | None, Callable[[Path], None]]] = {
    "fifo-appears": (None, _fifo),
    "symlink-appears": (None, _symlink_to_report),
    "foreign-folder-appears": (None, _foreign_folder),
    "report-becomes-foreign": (_report_folder, _foreign_in_place),
    "report-becomes-symlink": (_report_folder, _symlink_in_place),
}


@pytest.mark.parametrize("race", list(RACES))
def test_an_out_that_changes_during_the_run_is_left_as_it_was(tmp_path: Path, race: str) -> None:
    """Judged fine before the work, made hostile while the run writes: the swap refuses."""
    setup, change = RACES[race]
    out = tmp_path / "out"
    if setup is not None:
        setup(out)
    with (
        pytest.raises(SpecReplayError, match=re.escape(str(out)) + ": "),
        output_dir(out, force=True) as tmp,
    ):
        (tmp / "results.json").write_text("{}")
        change(out)
        before = tree_digest(tmp_path)
    after = tree_digest(tmp_path)
    assert after == {k: v for k, v in before.items() if ".tmp-" not in k}, (before, after)
    assert not leftovers(tmp_path)


# -- --cache DIR is an output, and a private one -------------------------------------------------


def _cache_args(arch: Path, cache: Path, out: Path) -> list[str]:
    return ["requalify", str(arch), "--baseline", BASE, "--candidate", CAND, "--out", str(out),
            "--estimator", "analytic", "--cache", str(cache), *FAST]  # fmt: skip


@pytest.mark.parametrize(("where", "how"), [("same", "is"), ("inside", "lies inside"),
                                            ("parent", "holds")])  # fmt: skip
def test_cache_around_the_archive_is_refused(
    inputs: tuple[Path, Path], tmp_path: Path, where: str, how: str
) -> None:
    """Regression: ``--cache ARCHIVE`` wrote the cache's entries into the archive folder."""
    arch, _ = inputs
    cache = {"same": arch, "inside": arch / "cache", "parent": tmp_path}[where]
    out = tmp_path.parent / f"{tmp_path.name}-out"  # outside tmp_path: only the cache is at fault
    before = tree_digest(tmp_path)
    res = invoke(_cache_args(arch, cache, out))
    assert_refused(res, f"--cache {cache} {how} the input {arch}", "the cache is an output")
    assert_clean(res, before, [tmp_path])
    assert not out.exists()


def _group_writable(p: Path) -> None:
    p.mkdir()
    p.chmod(0o770)


def _world_writable(p: Path) -> None:
    p.mkdir()
    p.chmod(0o707)


def _cache_with_marker_symlink(p: Path) -> None:
    p.mkdir(mode=0o700)
    real = p.with_name("a-file")
    real.write_text("x")
    (p / CACHE_MARKER).symlink_to(real)


def _symlink_to_private_folder(p: Path) -> None:
    real = p.with_name("real-cache")
    real.mkdir(mode=0o700)
    p.symlink_to(real, target_is_directory=True)


def _another_owner(p: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    p.mkdir(mode=0o700)
    os.chown(p, 4242, -1)


CACHE_HOSTILE: dict[str, tuple[Callable[[Path], None], str]] = {
    "regular-file": (_file, "not a folder"),
    "fifo": (_fifo, "not a folder"),
    "symlink-to-folder": (_symlink_to_private_folder, "is a symlink"),
    "foreign-folder": (_foreign_folder, f"is not a specreplay cache (no {CACHE_MARKER} file)"),
    "marker-symlink": (_cache_with_marker_symlink, "is not a specreplay cache"),
    "group-writable": (_group_writable, "others can write it (mode 770)"),
    "world-writable": (_world_writable, "others can write it (mode 707)"),
    "another-owner": (_another_owner, "owned by another user (uid 4242)"),
}  # fmt: skip


@pytest.mark.parametrize("kind", list(CACHE_HOSTILE))
def test_cache_that_is_not_a_private_cache_folder_is_refused(
    inputs: tuple[Path, Path], tmp_path: Path, kind: str
) -> None:
    arch, _ = inputs
    cache, out = tmp_path / "cache", tmp_path / "out"
    make, fragment = CACHE_HOSTILE[kind]
    make(cache)
    before = tree_digest(tmp_path)
    res = invoke(_cache_args(arch, cache, out))
    assert_refused(res, f"--cache {cache}", fragment)
    assert_clean(res, before, [tmp_path])


def test_a_new_cache_is_private_and_marked_and_is_reused(
    inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    arch, _ = inputs
    cache = tmp_path / "cache"
    before = tree_digest(arch)
    first = invoke(_cache_args(arch, cache, tmp_path / "o1"))
    assert first.exit_code == 0, first.output
    assert stat.S_IMODE(os.lstat(cache).st_mode) == 0o700
    assert (cache / CACHE_MARKER).is_file() and not (cache / CACHE_MARKER).is_symlink()
    again = invoke(_cache_args(arch, cache, tmp_path / "o2"))
    assert again.exit_code == 0, again.output
    assert re.search(r"^Reused: cache: (\d+) of \1 shards reused, 0 replayed", again.stdout, re.M)
    assert_clean(again, before, [arch])


# -- SIGINT: one line, exit 130, nothing written ---------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_sigint_mid_run_says_so_in_one_line_and_writes_nothing(
    tmp_path: Path, inherited: str
) -> None:
    """A real process (as from a shell; "ignored": started with SIGINT ignored, as a background
    job of a shell without job control is), interrupted while writing its third shard of 16."""
    out = tmp_path / "big"
    cmd = [sys.executable, "-m", "specreplay.cli", "synth", str(out), "--requests", "4000",
           "--shard-requests", "250", "-q"]  # fmt: skip
    start = _ignore_sigint if inherited == "ignored" else None
    proc = subprocess.Popen(cmd, env=_env(), stderr=subprocess.PIPE, text=True, preexec_fn=start)
    tmp = tmp_path / f".big.tmp-{proc.pid}"
    deadline = time.monotonic() + 120
    while not (tmp.is_dir() and len(list(tmp.glob("*.parquet"))) >= 2):
        assert proc.poll() is None, "synth ended before it could be interrupted"
        assert time.monotonic() < deadline, "no shard written within 120 s"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, err
    lines = [x for x in err.strip().splitlines() if not x.startswith("compiling kernels")]
    assert lines == ["error: synth interrupted (SIGINT); nothing written, no partial output left"]
    assert not os.path.lexists(out)
    assert list(tmp_path.iterdir()) == []  # neither the temporary folder nor a partial OUT


# -- the documented examples that use --force (README.md and docs/) -------------------------------


def _readme_force_lines() -> list[str]:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    text = "\n".join(p.read_text(encoding="utf-8") for p in pages)
    blocks = re.findall(r"```(?:bash|sh|console)\n(.*?)```", text, re.S)
    lines = [ln.strip() for b in blocks for ln in b.replace("\\\n", " ").splitlines()]
    found = [ln for ln in lines if ln.startswith("specreplay ") and "--force" in shlex.split(ln)]
    return list(dict.fromkeys(found))  # the README repeats an example of docs/commands.md


def test_readme_examples_with_force_follow_the_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each documented line with --force: runs in a fresh folder, runs again replacing its own
    output (saying so), and is refused onto a folder of the same name that specreplay did not
    write."""
    lines = _readme_force_lines()
    assert lines, "neither the README nor docs/ has an example with --force"
    for k, line in enumerate(lines):
        argv = [*shlex.split(line)[1:], "-q"]
        if "--out" in argv:
            out = Path(argv[argv.index("--out") + 1])
        else:  # OUT is an argument: synth's first, convert's second
            out = Path(argv[{"synth": 1, "convert": 2}[argv[0]]])
        for fresh in (f"run-{k}", f"foreign-{k}"):
            (tmp_path / fresh).mkdir()
        monkeypatch.chdir(tmp_path / f"run-{k}")
        first = invoke(argv)
        assert first.exit_code == 0, (line, first.output)
        created = _created(out / "SYNTH.json") if (out / "SYNTH.json").exists() else None
        again = invoke(argv)
        assert again.exit_code == 0, (line, again.output)
        if created is not None:
            assert error_lines(again) == [f"replaced {out} (written {created})"]
        monkeypatch.chdir(tmp_path / f"foreign-{k}")
        _foreign_folder(out)
        before = tree_digest(out)
        res = invoke(argv)
        assert_refused(res, str(out), "was not written by specreplay", NEVER)
        assert_clean(res, before, [out])

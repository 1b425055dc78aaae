"""Issue 17, item 1: a full disk (ENOSPC) or a file-size limit (EFBIG) while a command writes.

Every case runs in a child process, so the limit or the fault touches that process only:

- **the size limit**: ``RLIMIT_FSIZE`` set in the child (``preexec_fn``), a few KiB, above what the
  caches write per file and below each command's outputs (Python ignores SIGXFSZ, so the write
  fails with EFBIG); every command of the issue runs in one child, through :func:`corpus.invoke`;
- **an injected ENOSPC**: a 60-line ``LD_PRELOAD`` shim compiled here with ``cc`` makes
  ``write``/``pwrite``/``writev``/``pwritev`` (and their 64 and v2 variants) of files under one
  folder fail with ENOSPC once a byte budget is spent: it reaches polars' and pyarrow's writers,
  which Python-level patching does not (skipped without a compiler or on a libc that does not
  honour ``LD_PRELOAD``);
- **a small tmpfs**: a 64 KiB tmpfs mounted in the child's own mount namespace (``unshare -m`` as
  root, ``unshare -rm`` otherwise), the real entry point writing onto it (skipped where mounting
  is not permitted);
- **the caches**: ``--cache``, the input-hash cache and Numba's cache on a disk that takes
  nothing: the run exits 0 with one note per cache and the figures of a run without the cache.

Each refused case checks the corpus harness' rules (:mod:`corpus`): exit 2, one ``error:`` line
naming the file under the output folder and the cause, no traceback, the inputs byte-identical,
an earlier output (a ``--force`` replacement, a report folder) intact, no temporary name left.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from corpus import assert_clean, assert_refused, error_lines, invoke, leftovers, tree_digest

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
BASE, CAND = "top32:t0.7@5", "top32:t0.7:dyadic24@5"
LIMIT = 2048
"""The children's file-size limit (bytes): over every cache file, under every command's output."""
EFBIG = "file too large for the file-size limit (ulimit -f) or the file system (errno 27)"
ENOSPC = "no space left on device (errno 28)"

# the child: run each command line through corpus.invoke, print the outcomes as one JSON line
DRIVER = """
import json, sys
from corpus import invoke
done = []
for args in json.loads(sys.argv[1]):
    r = invoke(args)
    bad = r.exception is not None and not isinstance(r.exception, SystemExit)
    done.append({"exit_code": r.exit_code, "stdout": r.stdout, "stderr": r.stderr,
                 "exception": repr(r.exception) if bad else None})
print(json.dumps(done))
"""
ENTRY = "from specreplay.entry import main; main()"


@dataclass
class Ran:
    """A child's outcome, shaped as the corpus helpers read a CliRunner result (duck-typed)."""

    exit_code: int
    stdout: str
    stderr: str
    exception: BaseException | None = None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(REPO), str(TESTS), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "COLUMNS": "300", **extra}


def _limit(n: int) -> Callable[[], None]:
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))

    return set_limit


def _batch(
    cases: Sequence[Sequence[str]],
    cwd: Path,
    *,
    limit: int | None = None,
    env: dict[str, str] | None = None,
) -> list[Ran]:
    """Run command lines in one child (corpus.invoke each), under ``limit`` bytes per file."""
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps([list(c) for c in cases])],
        cwd=cwd,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=_limit(limit) if limit is not None else None,
    )
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout.strip().splitlines()[-1])
    return [
        Ran(d["exit_code"], d["stdout"], d["stderr"],
            RuntimeError(d["exception"]) if d["exception"] else None)
        for d in done
    ]  # fmt: skip


def _refused(res: Ran, out: Path, cause: str, before: dict[str, str], roots: list[Path]) -> str:
    """The one line names a file under ``out`` and the cause; nothing changed or left behind."""
    line = assert_refused(res, f"error: {out}/", cause, "while writing", f"{out} left as it was")
    assert_clean(res, before, roots)  # roots hold the earlier outputs
    return line


# -- inputs, made once ---------------------------------------------------------------------------

ROUNDS = [
    {"request_id": f"r{i // 3}", "family": ("code", "chat")[i // 3 % 2], "context_tokens": 100 + i,
     "round": i % 3, "drafted": 4, "accepted": i % 5 % 4}
    for i in range(36)
]  # fmt: skip
COUNTERS = [
    {"suite": "s1", "worker": "w", "batch": 2, "context": 0, "request_rounds": 100,
     "accepted_position": [80, 60, 40, 20, 10], "step_p50_ms": 40.0},
    {"suite": "s2", "worker": "w", "batch": 2, "context": 0, "request_rounds": 100,
     "accepted_position": [70, 50, 30, 20, 10], "step_p50_ms": 40.0},
]  # fmt: skip


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Inputs of every command: an archive, round traces, counters, a budget run (for report)."""
    root = tmp_path_factory.mktemp("inputs")
    res = invoke(["synth", str(root / "arch"), "--requests", "16", "--rounds", "4",
                  "--shard-requests", "8", "-q"])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = invoke(["budget", "--price-ms", "40", "--base", "3.2", "--delta-lo", "0.05",
                  "--out", str(root / "run")])  # fmt: skip
    assert res.exit_code == 0, res.output
    for name, rows in (("a.jsonl", ROUNDS), ("b.jsonl", [{**r, "accepted": 4 - r["accepted"]}
                                                         for r in ROUNDS]),
                       ("counters.jsonl", COUNTERS)):  # fmt: skip
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "screen.toml").write_text("[draft_p50_ms]\n2 = 2.0\n")
    return root


@pytest.fixture
def inputs(made: Path, tmp_path: Path) -> Path:
    """Private copies of the inputs under ``tmp_path/in``; outputs go to ``tmp_path/out``."""
    (tmp_path / "out").mkdir()
    return Path(shutil.copytree(made, tmp_path / "in"))


def _commands(i: Path, o: Path) -> dict[str, list[str]]:
    """Each command of the issue writing into ``o/NAME`` (small and quick)."""
    return {
        "synth": ["synth", str(o / "synth"), "--requests", "8", "--rounds", "2", "-q"],
        "convert": ["convert", str(i / "arch"), str(o / "convert"), "-q"],
        "requalify": ["requalify", str(i / "arch"), "--baseline", BASE, "--candidate", CAND,
                      "--out", str(o / "requalify"), "-q", "--n-boot", "200"],
        "sweep": ["sweep", str(i / "arch"), "--arm", BASE, "--depths", "1..3",
                  "--out", str(o / "sweep"), "-q", "--n-boot", "200"],
        "lawtest": ["lawtest", "--arm", CAND, "--max-draws", "2000", "--out", str(o / "lawtest"),
                    "-q"],
        "interval": ["interval", str(i / "a.jsonl"), str(i / "b.jsonl"), "-q", "--n-boot", "200",
                     "--out", str(o / "interval")],
        "budget": ["budget", "--price-ms", "40", "--base", "3.2", "--delta-lo", "0.05",
                   "--out", str(o / "budget"), "-q"],
        "screen": ["screen", str(i / "counters.jsonl"), "--config", str(i / "screen.toml"),
                   "--out", str(o / "screen"), "-q"],
        "report": ["report", str(i / "run"), "--out", str(o / "report"), "-q"],
        "demo": ["demo", "--out", str(o / "demo"), "--requests", "8", "-q", "--n-boot", "200"],
    }  # fmt: skip


# -- the size limit: every command -------------------------------------------------------------


def test_every_command_under_a_file_size_limit_is_one_line(inputs: Path, tmp_path: Path) -> None:
    """RLIMIT_FSIZE in the child: each command exits 2 with one line naming the file under its
    output folder and EFBIG; no traceback, the inputs unchanged, no temporary name left. The
    polars writers (synth's and convert's shards) give the same line as Python's."""
    o = tmp_path / "out"
    commands = _commands(inputs, o)
    before = tree_digest(inputs, o)
    done = _batch(list(commands.values()), tmp_path, limit=LIMIT)
    lines = {
        name: _refused(res, o / name, EFBIG, before, [inputs, o])
        for name, res in zip(commands, done, strict=True)
    }
    # the file each command writes first past the limit (polars: synth's, convert's shards)
    assert lines["synth"].startswith(f"error: {o}/synth/part-00000.parquet: {EFBIG}")
    assert lines["convert"].startswith(f"error: {o}/convert/part-00000.arrow: {EFBIG}")
    assert lines["demo"].startswith(f"error: {o}/demo/archive/part-00000.parquet: {EFBIG}")
    assert lines["requalify"].startswith(f"error: {o}/requalify/results.json: {EFBIG}")
    assert all("ulimit -f" in line for line in lines.values())


def test_a_force_replacement_and_a_report_under_the_limit_keep_the_earlier_run(
    inputs: Path, tmp_path: Path
) -> None:
    """Under the limit: ``synth --force`` and ``convert --force --format parquet`` (polars'
    ``sink_parquet``) over an earlier archive, ``requalify`` over an earlier report and
    ``report`` in place leave the earlier folders byte-identical; one line each."""
    o = tmp_path / "out"
    shutil.copytree(inputs / "arch", o / "synth")
    shutil.copytree(inputs / "arch", o / "convert")
    shutil.copytree(inputs / "run", o / "requalify")  # an earlier report: replaced on success
    commands = _commands(inputs, o)
    cases = {
        "synth": [*commands["synth"], "--force"],
        "convert": [*commands["convert"], "--force", "--format", "parquet"],
        "requalify": commands["requalify"],
    }
    before = tree_digest(inputs, o)
    done = _batch([*cases.values(), ["report", str(inputs / "run"), "-q"]], tmp_path, limit=LIMIT)
    kept = tree_digest(inputs / "arch", o)
    for name, res in zip(cases, done[:-1], strict=True):  # inputs/run: report in place, below
        _refused(res, o / name, EFBIG, kept, [inputs / "arch", o])
    assert "replaced" not in done[0].stderr
    # report in place: one line naming the file; the files rendered before it hold the same
    # bytes (rewritten whole: their mtimes move), the rest are as they were
    run = inputs / "run"
    assert_refused(done[-1], f"error: {run}/", EFBIG, "not written, any earlier one kept")
    assert "Traceback" not in done[-1].output
    after = tree_digest(inputs, o)
    assert {k: v.split(" mtime ")[0] for k, v in after.items()} == {
        k: v.split(" mtime ")[0] for k, v in before.items()
    }
    assert not leftovers(run, inputs)


# -- an injected ENOSPC (LD_PRELOAD) -----------------------------------------------------------

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

/* writes to files under $ENOSPC_DIR fail with ENOSPC once $ENOSPC_AFTER bytes were written */
static long long budget = -1;
static const char *dir;
static size_t dirlen;
static int ready;

static int refuse(int fd, size_t count) {
    char link[64], target[4096];
    if (!ready) {
        const char *b = getenv("ENOSPC_AFTER");
        dir = getenv("ENOSPC_DIR");
        budget = b ? atoll(b) : -1;
        dirlen = dir ? strlen(dir) : 0;
        ready = 1;
    }
    if (budget < 0 || dirlen == 0 || fd < 3 || count == 0) return 0;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) return 0;
    target[n] = 0;
    if (strncmp(target, dir, dirlen) != 0 || (target[dirlen] != '/' && target[dirlen] != 0))
        return 0;
    if (__atomic_sub_fetch(&budget, (long long)count, __ATOMIC_SEQ_CST) >= 0) return 0;
    __atomic_store_n(&budget, 0, __ATOMIC_SEQ_CST);
    errno = ENOSPC;
    return 1;
}

static size_t total(const struct iovec *iov, int cnt) {
    size_t s = 0;
    for (int i = 0; i < cnt; i++) s += iov[i].iov_len;
    return s;
}

#define NEXT(name) static __typeof__(name) *real; if (!real) real = dlsym(RTLD_NEXT, #name)
#define VEC(v) refuse(fd, total(iov, cnt)) ? -1 : v

ssize_t write(int fd, const void *buf, size_t count) {
    NEXT(write); return refuse(fd, count) ? -1 : real(fd, buf, count); }
ssize_t pwrite(int fd, const void *buf, size_t count, off_t off) {
    NEXT(pwrite); return refuse(fd, count) ? -1 : real(fd, buf, count, off); }
ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t off) {
    NEXT(pwrite64); return refuse(fd, count) ? -1 : real(fd, buf, count, off); }
ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    NEXT(writev); return VEC(real(fd, iov, cnt)); }
ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
    NEXT(pwritev); return VEC(real(fd, iov, cnt, off)); }
ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off) {
    NEXT(pwritev64); return VEC(real(fd, iov, cnt, off)); }
ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) {
    NEXT(pwritev2); return VEC(real(fd, iov, cnt, off, flags)); }
ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags) {
    NEXT(pwritev64v2); return VEC(real(fd, iov, cnt, off, flags)); }
"""


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ENOSPC shim, compiled here; skipped without a C compiler or a working LD_PRELOAD."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc) to build the LD_PRELOAD ENOSPC shim")
    root = tmp_path_factory.mktemp("shim")
    (root / "enospc.c").write_text(SHIM)
    so = root / "enospc.so"
    built = subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(so), str(root / "enospc.c"),
                            "-ldl"], capture_output=True, text=True)  # fmt: skip
    if built.returncode != 0:
        pytest.skip(f"the LD_PRELOAD shim does not build here: {built.stderr.strip()[:200]}")
    probe = root / "probe"
    probe.mkdir()
    check = subprocess.run(
        [sys.executable, "-c", f"open({str(probe / 'x')!r}, 'w').write('x' * 10)"],
        env={**os.environ, "LD_PRELOAD": str(so), "ENOSPC_DIR": str(probe), "ENOSPC_AFTER": "0"},
        capture_output=True,
        text=True,
    )
    if "[Errno 28]" not in check.stderr:
        pytest.skip(f"LD_PRELOAD is not honoured here (the probe wrote: {check.stderr[-200:]!r})")
    return so


def _shimmed(so: Path, folder: Path, after: int, **extra: str) -> dict[str, str]:
    return _env(LD_PRELOAD=str(so), ENOSPC_DIR=str(folder), ENOSPC_AFTER=str(after), **extra)


def test_an_injected_enospc_is_one_line(inputs: Path, tmp_path: Path, shim: Path) -> None:
    """ENOSPC after 2 KiB under the output folder: Python's writes (requalify), polars' IPC and
    Parquet sinks (convert) and writer (synth --format ipc), and report --out each give one line
    naming the file and ENOSPC; the earlier archive replaced with --force is intact."""
    o = tmp_path / "out"
    shutil.copytree(inputs / "arch", o / "synth")
    commands = _commands(inputs, o)
    cases = {
        "requalify": commands["requalify"],
        "convert": [*commands["convert"], "--format", "parquet"],
        "synth": [*commands["synth"], "--force", "--format", "ipc"],
        "report": commands["report"],
    }
    before = tree_digest(inputs, o)
    done = _batch(list(cases.values()), tmp_path, env=_shimmed(shim, o, 2048))
    lines = {
        name: _refused(res, o / name, ENOSPC, before, [inputs, o])
        for name, res in zip(cases, done, strict=True)
    }
    assert lines["convert"].startswith(f"error: {o}/convert/part-00000.parquet: {ENOSPC}")
    assert lines["synth"].startswith(f"error: {o}/synth/part-00000.arrow: {ENOSPC}")
    assert "free space or choose another output folder" in lines["requalify"]


# -- a small tmpfs ---------------------------------------------------------------------------


def _unshare(folder: Path) -> list[str]:
    """The command that runs a child in its own mount namespace; skip when none is permitted."""
    tool = shutil.which("unshare")
    if tool is None:
        pytest.skip("no unshare(1) to give the child its own mount namespace")
    args = [tool, "-m"] if os.geteuid() == 0 else [tool, "-rm"]
    probe = [*args, "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$1" 2>&1', "sh", str(folder)]
    ok = subprocess.run(probe, capture_output=True, text=True)
    if ok.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {ok.stdout.strip()[:200]}")
    return args


def test_requalify_onto_a_full_tmpfs_is_one_line(inputs: Path, tmp_path: Path) -> None:
    """The issue's case: requalify --out on a 64 KiB tmpfs (the real entry point) exits 2 with
    one line naming the file and ENOSPC; the tmpfs is left empty (listed before it goes)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    unshare = _unshare(disk)
    listing = tmp_path / "listing.txt"
    out = disk / "rq"
    script = ('mount -t tmpfs -o size=64k tmpfs "$1" || exit 99; shift; "$@"; rc=$?; '
              f'ls -A {disk} > {listing}; exit $rc')  # fmt: skip
    cmd = ["requalify", str(inputs / "arch"), "--baseline", BASE, "--candidate", CAND,
           "--out", str(out), "-q", "--n-boot", "200"]  # fmt: skip
    before = tree_digest(inputs)
    proc = subprocess.run(
        [*unshare, "sh", "-c", script, "sh", str(disk), sys.executable, "-c", ENTRY, *cmd],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    res = Ran(proc.returncode, proc.stdout, proc.stderr)
    assert_refused(res, f"error: {out}/results.json: {ENOSPC} while writing", "free space")
    assert_clean(res, before, [inputs])
    assert listing.read_text() == ""  # nothing on the tmpfs: no temporary folder either


# -- the caches: a note, not a failure ---------------------------------------------------------


def test_caches_on_a_full_disk_are_notes_and_the_run_completes(
    inputs: Path, tmp_path: Path, shim: Path
) -> None:
    """sweep --cache with the shard cache, the input-hash cache and the validation marks on a
    disk that takes no byte: exit 0, one note per cache naming it and ENOSPC, the cells of a run
    without any cache."""
    caches = tmp_path / "caches"
    caches.mkdir()
    o = tmp_path / "out"
    sweep = _commands(inputs, o)["sweep"]
    cached = [*sweep[:-4], str(o / "cached"), *sweep[-3:], "--cache", str(caches / "shards")]
    env = _shimmed(shim, caches, 0, SPECREPLAY_CACHE_DIR=str(caches / "user"))
    before = tree_digest(inputs)
    [res] = _batch([cached], tmp_path, env=env)
    assert res.exit_code == 0, res.output
    assert_clean(res, before, [inputs])
    notes = error_lines(res)
    assert sorted(notes) == sorted([
        f"note: the shard cache (--cache) {caches / 'shards'} not written: {ENOSPC}; the "
        "shards replayed in this run are replayed again next run (the run is unaffected)",
        f"note: the input-hash cache {caches / 'user' / 'hashes'} not written: {ENOSPC}; its "
        "inputs are hashed again next run",
        f"note: the validation marks {caches / 'user' / 'validated'} not written: {ENOSPC}; "
        "its rows are checked again next run",
    ]), notes  # fmt: skip
    assert not [p for p in caches.rglob("*") if p.name.startswith(".tmp-")]
    plain = invoke([*sweep[:-4], str(o / "plain"), *sweep[-3:]])
    assert plain.exit_code == 0, plain.output
    got = pl.read_parquet(o / "cached" / "cells.parquet")
    want = pl.read_parquet(o / "plain" / "cells.parquet")
    assert got.equals(want)


def test_numba_cache_on_a_full_disk_is_a_note(tmp_path: Path, shim: Path) -> None:
    """A cold Numba cache on a disk that takes no byte: Numba raises the failed save into the
    kernel call on Linux; specreplay's kernels note it and return the right value (splitmix64's
    first output from state 0, 0xE220A8397B1DCDAF, a published constant)."""
    cache = tmp_path / "numba"
    code = (
        "import numpy as np; from specreplay.sim.rng import stream_bits_each; "
        "from specreplay.diskfull import cache_notes; "
        "v = stream_bits_each(np.zeros(1, np.uint64), 0); "
        "print(hex(int(v[0]))); print(*[n.line() for n in cache_notes()], sep='\\n')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=_shimmed(shim, cache, 0, NUMBA_CACHE_DIR=str(cache)),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    value, *notes = proc.stdout.splitlines()
    assert value == "0xe220a8397b1dcdaf"
    assert len(notes) == 1, notes
    assert notes[0].startswith(f"note: Numba's kernel cache {cache}/")
    cost = "kernels compiled for this run only, compiled again next run"
    assert notes[0].endswith(f" not written: {ENOSPC}; {cost}")
    assert not [p for p in cache.rglob("*") if ".tmp." in p.name]


# -- TraceWriter on its own ---------------------------------------------------------------------

WRITER = """
import json, sys
from pathlib import Path
from specreplay.replay.archive.synthetic import synth_frames
from specreplay.replay.archive.writer import TraceWriter
from specreplay.sim.synth import SynthConfig
out = Path(sys.argv[1])
cfg = SynthConfig(n_requests=4, rounds=2, requests_per_shard=4)
try:
    with TraceWriter(out, format=sys.argv[2]) as w:
        for frame in synth_frames(cfg, seed=1):
            w.append_frame(frame)
    print(json.dumps({"ok": True}))
except OSError as exc:  # DiskFull is an OSError too: code catching OSError still sees it
    print(json.dumps({"type": type(exc).__name__, "errno": exc.errno, "message": str(exc),
                      "path": str(getattr(exc, "path", ""))}))
"""


@pytest.mark.parametrize("form", ["parquet-dir", "ipc"])
def test_a_trace_writer_under_the_limit_names_the_shard_where_it_was_to_go(
    tmp_path: Path, form: str
) -> None:
    """A TraceWriter (a folder, staged beside its path; a single file) under the size limit
    raises DiskFull, an OSError with EFBIG, naming the file at its final path, not the staging
    folder; nothing is left, neither the folder nor a temporary name."""
    out = tmp_path / ("cap" if form == "parquet-dir" else "cap.arrow")
    proc = subprocess.run(
        [sys.executable, "-c", WRITER, str(out), form], cwd=tmp_path, env=_env(),
        capture_output=True, text=True, timeout=300, preexec_fn=_limit(LIMIT),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    shard = out / "part-00000.parquet" if form == "parquet-dir" else out
    assert got == {
        "type": "DiskFull",
        "errno": 27,
        "path": str(shard),
        "message": f"{shard}: {EFBIG} while writing; not written, any earlier one kept: raise "
        "the limit (ulimit -f) or choose another place to write",
    }
    assert sorted(os.listdir(tmp_path)) == []


# -- the command line's last resort ------------------------------------------------------------


@pytest.mark.parametrize(
    "raised",
    [
        pl.exceptions.ComputeError("parquet: underlying IO error: File too large (os error 27)"),
        OSError(28, "No space left on device"),
    ],
)
def test_a_disk_error_no_write_site_mapped_is_one_line_naming_the_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: Exception
) -> None:
    """An error escaping every write site (planted in budget's run) is still one line naming
    --out and the cause, exit 2; any other error is not swallowed."""
    import specreplay.commands.budget as budget

    def full(*args: object, **kwargs: object) -> str:
        raise raised

    monkeypatch.setattr(budget, "run_budget", full)
    out = tmp_path / "b"
    res = invoke(["budget", "--price-ms", "40", "--base", "3.2", "--delta-lo", "0.05",
                  "--out", str(out), "-q"])  # fmt: skip
    size_limit = isinstance(raised, pl.exceptions.ComputeError)
    cause = EFBIG if size_limit else ENOSPC
    todo = "raise the limit (ulimit -f)" if size_limit else "free space"  # the cause's own advice
    assert_refused(
        res, f"error: {out}: {cause} while writing; budget stopped",
        f"no partial output left: {todo} or choose another output folder",
    )  # fmt: skip
    monkeypatch.setattr(budget, "run_budget", lambda *a, **k: 1 / 0)
    res = invoke(["budget", "--price-ms", "40", "--base", "3.2", "--delta-lo", "0.05",
                  "--out", str(out), "-q"])  # fmt: skip
    assert isinstance(res.exception, ZeroDivisionError)


# -- output_dir's own cleanup --------------------------------------------------------------------


def test_a_folder_that_cannot_be_removed_is_emptied_never_through_a_symlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where deleting needs space (rmtree fails: planted), output_dir's cleanup truncates the
    regular files it made, never a symlink's target, and returns the folder for the line."""
    from specreplay.results import output

    foreign = tmp_path / "notes.txt"
    foreign.write_text("a user's notes\n")
    tmp = tmp_path / ".out.tmp-1"
    (tmp / "sub").mkdir(parents=True)
    (tmp / "sub" / "cells.parquet").write_bytes(b"x" * 1000)
    (tmp / "link").symlink_to(foreign)
    monkeypatch.setattr(output.shutil, "rmtree", lambda *a, **k: None)
    assert output._remove(tmp) == tmp
    assert (tmp / "sub" / "cells.parquet").stat().st_size == 0
    assert foreign.read_text() == "a user's notes\n"
    monkeypatch.undo()
    assert output._remove(tmp) is None
    assert not tmp.exists() and foreign.exists()


def test_leftovers_helper_sees_a_temporary_folder(tmp_path: Path) -> None:
    """The harness check the cases rely on finds an output's temporary folder (a planted one)."""
    (tmp_path / ".out.tmp-123").mkdir()
    assert leftovers(tmp_path) == [str(tmp_path / ".out.tmp-123")]

"""Dask runner and per-shard cache (issue 8, item 4): same figures, fewer replays.

One real ``distributed.LocalCluster`` (2 worker processes, spawned, one Numba thread each) serves
the whole module. The archive is 4 Parquet shards cut from one synthetic frame, shard 0 the
largest (so it tends to come back last) and one request split across shards 0 and 1 at a round
boundary: folding in completion order instead of sorted path order then raises the cross-file
"comes after a later round" error (or lists the files in another order), so the equality tests
fail on that planted bug; :func:`test_completion_order_does_not_matter` makes shard 0 finish last
on purpose.

Numba: a kernel compiled in this process once differed in the last bits from the same kernel
loaded from the Numba cache (fast-math reassociation, removed in issue 8; see
``tests/test_jit_determinism.py``); the bit-for-bit comparisons of the command line still run both
sides as subprocesses after a warm-up, and the engine-level ones compare two Dask runs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from corpus import leftovers, tree_digest

from specreplay import api
from specreplay.errors import SpecReplayError
from specreplay.replay.distributed import DaskRunner, ShardFailure, replay_task
from specreplay.replay.engine import ReplayResult, replay_archive
from specreplay.replay.shard import ReplayOptions, ShardSums
from specreplay.results.model import Level
from specreplay.sim.arms import Arm, parse_arm

distributed = pytest.importorskip("distributed")

BASE, CAND = "top32:t0.7@5", "top32:t0.7:dyadic24@5"
ARMS = [BASE, CAND, "greedy@5"]
FAST = ["--n-boot", "200", "--estimator", "analytic", "-q"]
REPO = Path(__file__).resolve().parents[1]
RUN_SPECIFIC = ("created_utc", "replay_backend", "outputs")


def _write_shards(frame: pl.DataFrame, out: Path, cuts: Sequence[Sequence[int]]) -> None:
    """Write the requests of each cut (indices into the request list) as one Parquet shard.

    Request 12 is split at a round boundary: rounds 0-2 end shard 0, rounds 3.. start shard 1.
    """
    ids = frame.get_column("request_id").unique(maintain_order=True).to_list()
    split = ids[12]
    out.mkdir(parents=True)
    for k, cut in enumerate(cuts):
        part = frame.filter(pl.col("request_id").is_in([ids[j] for j in cut]))
        if k == 0:
            part = part.filter((pl.col("request_id") != split) | (pl.col("round") < 3))
        if k == 1:
            head = frame.filter((pl.col("request_id") == split) & (pl.col("round") >= 3))
            part = pl.concat([head, part])
        part.write_parquet(out / f"part-{k}.parquet")


CUTS = [list(range(13)), list(range(13, 17)), list(range(17, 21)), list(range(21, 24))]


@pytest.fixture(scope="module")
def frame() -> pl.DataFrame:
    """24 requests × 6 rounds × 5 positions, with drafted_id and emitted_q."""
    from specreplay.replay.archive.synthetic import synth_frames
    from specreplay.sim.synth import SynthConfig

    cfg = SynthConfig(n_requests=24, rounds=6, requests_per_shard=24)
    return pl.concat(list(synth_frames(cfg, seed=11)))


@pytest.fixture(scope="module")
def archive(frame: pl.DataFrame, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 4-shard archive; its kernels compiled into the Numba cache before any cluster."""
    out = tmp_path_factory.mktemp("dask") / "archive"
    _write_shards(frame, out, CUTS)
    replay_archive(out, [parse_arm(a) for a in ARMS], estimator="analytic", law_positions=8)
    return out


@pytest.fixture(scope="module")
def client(archive: Path) -> Iterator[Any]:
    """A real LocalCluster: 2 worker processes, one thread each, NUMBA_NUM_THREADS=1."""
    from specreplay import numba_cache_dir

    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
        env={"NUMBA_NUM_THREADS": "1", "NUMBA_CACHE_DIR": numba_cache_dir()},
    )  # fmt: skip
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def _cli(args: list[str]) -> str:
    """Run the command line in a fresh process (kernels from the Numba cache); dask unimported
    unless a Dask option is given (checked in the child). Return its stdout and stderr."""
    dask = any(a in ("--scheduler", "--workers") for a in args)
    code = (
        "import sys\n"
        "from specreplay.cli import app\n"
        f"try:\n    app({args!r})\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        f"assert ('distributed' in sys.modules) == {dask!r}, 'dask imported: ' + {str(dask)!r}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def _doc(out: Path) -> dict[str, Any]:
    doc = json.loads((out / "results.json").read_text())
    return {k: v for k, v in doc.items() if k not in RUN_SPECIFIC}


def _requalify(archive: Path, out: Path, *extra: str) -> list[str]:
    return ["requalify", str(archive), "--baseline", BASE, "--candidate", CAND,
            "--reference", "greedy@5", *FAST, "--out", str(out), *extra]  # fmt: skip


def test_dask_run_equals_local_run(archive: Path, client: Any, tmp_path: Path) -> None:
    """(a) requalify --scheduler equals the local run bit for bit (every figure, as bytes)."""
    _cli(_requalify(archive, tmp_path / "local"))
    addr = client.scheduler.address
    err = _cli(
        _requalify(archive, tmp_path / "dask", "--scheduler", addr, "--cache", str(tmp_path / "c"))
    )
    names = ", ".join(f"part-{k}.parquet" for k in range(4))
    # line 2 of the console says what the run reused (issue 16, item 5)
    line = f"Reused: cache: 0 of 4 shards reused, 4 replayed ({names}); nothing excluded"
    assert err.splitlines()[1] == line
    local, dask = _doc(tmp_path / "local"), _doc(tmp_path / "dask")
    assert json.dumps(dask["cells"]) == json.dumps(local["cells"])
    assert json.dumps(dask["law_tests"]) == json.dumps(local["law_tests"])
    assert json.dumps(dask, sort_keys=True) == json.dumps(local, sort_keys=True)
    backend = json.loads((tmp_path / "dask" / "results.json").read_text())["replay_backend"]
    assert backend["runner"] == "dask" and backend["scheduler"] == addr
    assert backend["workers"] == 2 and backend["tasks"] == 4
    assert backend["cache"]["replayed"] == 4 and backend["cache"]["reused"] == 0
    assert "replay_backend" not in json.loads((tmp_path / "local" / "results.json").read_text())
    report = (tmp_path / "dask" / "REPORT.md").read_text()
    assert f"Shards replayed on Dask ({addr}, 2 workers, 4 shard tasks)" in report
    assert "cache: 0 of 4 shards reused, 4 replayed" in report
    assert "Shards replayed" not in (tmp_path / "local" / "REPORT.md").read_text()


def _arms() -> list[Arm]:
    return [parse_arm(a) for a in ARMS]


def _same(a: ReplayResult, b: ReplayResult) -> None:
    """Every replayed figure equal, bit for bit."""
    assert a.requests == b.requests and a.families == b.families
    assert [(f.path, f.rows) for f in a.files] == [(f.path, f.rows) for f in b.files]
    assert a.positions == b.positions
    for c, s in a.sums.items():
        t = b.sums[c]
        for name in ("request", "bucket", "n", "t", "var", "short"):
            np.testing.assert_array_equal(getattr(s, name), getattr(t, name), err_msg=name)
    np.testing.assert_array_equal(a.measured.sums.t, b.measured.sums.t)
    np.testing.assert_array_equal(a.request_rows, b.request_rows)
    for f in dataclasses.fields(a.law_sample):
        x, y = getattr(a.law_sample, f.name), getattr(b.law_sample, f.name)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=f.name)


def slow_first(path: Path, arms: Sequence[Arm], options: ReplayOptions) -> Any:
    """A task whose shard 0 comes back last: it waits until every other shard's task has
    finished (each leaves a marker beside the archive; a fixed sleep was not enough on a cold
    cluster, where a shard queued behind shard 0 on the same worker came back after it; Dask
    moves such a queued task to the idle worker)."""
    markers = path.parent.parent / "slow-first"
    markers.mkdir(exist_ok=True)
    if path.name != "part-0.parquet":
        out = replay_task(path, arms, options)
        (markers / path.name).touch()
        return out
    others = [p.name for p in path.parent.glob("*.parquet") if p.name != path.name]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all((markers / n).exists() for n in others):
        time.sleep(0.05)
    return replay_task(path, arms, options)


def kill_once(path: Path, arms: Sequence[Arm], options: ReplayOptions) -> Any:
    """A task that makes its worker process exit the first time it meets shard 1."""
    marker = path.parent.parent / "killed"
    if path.name == "part-1.parquet":
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.close(fd)
            os._exit(1)
    return replay_task(path, arms, options)


@pytest.fixture(scope="module")
def dask_reference(archive: Path, client: Any) -> ReplayResult:
    return replay_archive(archive, _arms(), estimator="analytic", law_positions=8,
                          runner=DaskRunner(client))  # fmt: skip


def test_completion_order_does_not_matter(
    archive: Path, client: Any, dask_reference: ReplayResult
) -> None:
    """Shard 0 finishes last; the fold still runs in sorted path order (the planted-bug check)."""
    seen: list[int] = []
    runner = DaskRunner(client, task=slow_first)
    res = replay_archive(archive, _arms(), estimator="analytic", law_positions=8,
                         runner=runner, progress=seen.append)  # fmt: skip
    _same(res, dask_reference)
    assert sum(seen) == res.positions  # the bar moves by each shard's positions
    assert seen[-1] == dask_reference.files[0].rows  # shard 0 came back last


def test_worker_killed_mid_run(archive: Path, client: Any, dask_reference: ReplayResult) -> None:
    """(b) a worker process dies while replaying shard 1: the task is retried, same figures."""
    marker = archive.parent / "killed"
    marker.unlink(missing_ok=True)
    res = replay_archive(archive, _arms(), estimator="analytic", law_positions=8,
                         runner=DaskRunner(client, task=kill_once))  # fmt: skip
    assert marker.exists()  # a worker did exit
    _same(res, dask_reference)
    client.wait_for_workers(2, timeout=30)  # the nanny restarted it, for the next tests


def _cache_run(archive: Path, cache: Path, **kw: Any) -> api.Result:
    return api.requalify(archive, baseline=BASE, candidate=CAND, reference="greedy@5",
                         estimator="analytic", n_boot=200, cache=cache, **kw)  # fmt: skip


def _figures(result: api.Result) -> str:
    return json.dumps([_asdict(result.cells), _asdict(result.law_tests)])


def _asdict(x: Any) -> Any:
    return [dataclasses.asdict(c) for c in x]


def _cache(result: api.Result) -> dict[str, Any]:
    entry: dict[str, Any] = result.extra["replay_backend"]["cache"]
    return entry


def test_cache_replays_only_the_added_shard(archive: Path, tmp_path: Path) -> None:
    """(c) 3 shards cached, a 4th added: only it is replayed; figures equal a cold 4-shard run."""
    grown = tmp_path / "grown"
    grown.mkdir()
    for k in range(3):
        shutil.copy(archive / f"part-{k}.parquet", grown)
    cache = tmp_path / "cache"
    first = _cache(_cache_run(grown, cache))
    assert (first["reused"], first["replayed"]) == (0, 3)
    shutil.copy(archive / "part-3.parquet", grown)
    warm = _cache_run(grown, cache)
    c = _cache(warm)
    assert (c["shards"], c["reused"], c["replayed"]) == (4, 3, 1)
    assert c["replayed_files"] == [str(grown / "part-3.parquet")]
    cold = api.requalify(archive, baseline=BASE, candidate=CAND, reference="greedy@5",
                         estimator="analytic", n_boot=200)  # fmt: skip
    assert "replay_backend" not in cold.extra
    assert _figures(warm) == _figures(cold)
    # a renamed shard is still a hit (the path is not in the key); it keeps its new name
    (grown / "part-3.parquet").rename(grown / "part-3b.parquet")
    moved = _cache_run(grown, cache)
    assert (_cache(moved)["reused"], _cache(moved)["replayed"]) == (4, 0)
    assert moved.inputs[3].path.endswith("part-3b.parquet")
    assert _figures(moved) == _figures(cold)


def test_cache_misses_on_a_key_change_and_recomputes_a_corrupt_entry(
    archive: Path, tmp_path: Path
) -> None:
    """(d) another seed or arm misses; a corrupt or truncated entry is replayed, never trusted."""
    cache = tmp_path / "cache"
    base = _cache_run(archive, cache)
    assert _cache(base)["replayed"] == 4
    assert _cache(_cache_run(archive, cache, seed=1))["reused"] == 0
    other = api.requalify(archive, baseline=BASE, candidate="top32:t0.7:dyadic16@5",
                          estimator="analytic", n_boot=200, cache=cache)  # fmt: skip
    assert _cache(other)["reused"] == 0
    assert _cache(_cache_run(archive, cache, families="chat,code"))["reused"] == 0
    entries = sorted(cache.glob("*.shard"))
    assert len(entries) == 16 and not list(cache.glob(".tmp-*"))
    again = _cache_run(archive, cache)
    assert (_cache(again)["reused"], _cache(again)["replayed"]) == (4, 0)
    # corrupt two entries of the base run (the oldest four): garbage, and a truncated pickle
    victims = sorted(entries, key=lambda p: p.stat().st_mtime_ns)[:4]
    victims[0].write_bytes(b"not a pickle")
    victims[1].write_bytes(victims[1].read_bytes()[:100])
    fixed = _cache_run(archive, cache)
    c = _cache(fixed)
    assert (c["reused"], c["replayed"]) == (2, 2)
    assert c["recomputed"] == 2 and sorted(c["recomputed_files"]) == sorted(c["replayed_files"])
    assert _figures(fixed) == _figures(base)
    assert (_cache(_cache_run(archive, cache))["reused"]) == 4  # rewritten


def test_bad_row_in_a_worker_is_the_local_message(
    frame: pl.DataFrame, client: Any, tmp_path: Path
) -> None:
    """(e) a bad row in shards 1 and 3: the Dask run raises the local run's line (shard 1's)."""
    bad = tmp_path / "bad"
    _write_shards(frame, bad, CUTS)
    for k in (1, 3):
        f = bad / f"part-{k}.parquet"
        rows = pl.read_parquet(f)
        wrong = pl.when(pl.int_range(pl.len()) == 7).then(10**6).otherwise(pl.col("drafted_id"))
        rows.with_columns(wrong.cast(rows.schema["drafted_id"]).alias("drafted_id")).write_parquet(
            f
        )
    with pytest.raises(SpecReplayError) as local:
        replay_archive(bad, _arms(), estimator="analytic")
    with pytest.raises(SpecReplayError) as dask:
        replay_archive(bad, _arms(), estimator="analytic", runner=DaskRunner(client))
    assert str(dask.value) == str(local.value)
    assert str(local.value).startswith(f"{bad / 'part-1.parquet'}: row 7 (0-based): drafted_id")
    assert isinstance(replay_task(bad / "part-3.parquet", _arms(), ReplayOptions()), ShardFailure)


def test_no_dask_installed(archive: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without dask, --workers/--scheduler is a one-line error telling what to install."""
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed → ImportError
    with pytest.raises(SpecReplayError, match=r"pip install 'specreplay\[dask\]'"):
        api.requalify(archive, baseline=BASE, candidate=CAND, workers=2, n_boot=200)


def test_shard_sums_pickle_round_trip(archive: Path) -> None:
    """What a worker sends back and the cache stores survives pickling, bit for bit."""
    import pickle

    s = replay_task(archive / "part-2.parquet", _arms(), ReplayOptions(max_depth=5))
    assert isinstance(s, ShardSums)
    back = pickle.loads(pickle.dumps(s))
    for c in s.arms:
        np.testing.assert_array_equal(back.arms[c].t, s.arms[c].t)


def test_cache_key_is_the_same_in_every_process(archive: Path, tmp_path: Path) -> None:
    """The key of a shard does not depend on the process's string-hash seed (a set printed as
    text does): two processes with different PYTHONHASHSEED name the same entry."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from specreplay.replay.shard import ReplayOptions, needed_columns\n"
        "from specreplay.replay.shardcache import ShardCache\n"
        "from specreplay.sim.arms import parse_arm\n"
        "c = ShardCache(Path(sys.argv[1]))\n"
        "opts = ReplayOptions(estimators=('analytic', 'importance'), "
        "columns=needed_columns('analytic', "
        "'importance'))\n"
        "arms = [parse_arm(a) for a in ('top32:t0.7@5', 'greedy@5')]\n"
        "print(c.key(c.key_fields(Path(sys.argv[2]), arms, opts)))\n"
    )
    keys = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": seed}
        argv = [sys.executable, "-c", code, str(tmp_path), str(archive / "part-0.parquet")]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        keys.add(done.stdout.strip())
    assert len(keys) == 1 and len(next(iter(keys))) == 64


def test_by_on_dask_equals_the_local_run_in_one_pass(
    frame: pl.DataFrame, client: Any, tmp_path: Path
) -> None:
    """``--by worker`` on Dask: its one pass goes through the runner (one task per shard, no
    extra pass for the ``by`` cells), and every cell (the worker and family × bucket × worker
    cells too) equals the local run's."""
    ids = frame.get_column("request_id").unique(maintain_order=True).to_list()
    worker = {r: f"w{i % 2}" for i, r in enumerate(ids)}  # constant within a request
    tagged = frame.with_columns(pl.col("request_id").replace_strict(worker).alias("worker"))
    out = tmp_path / "by"
    _write_shards(tagged, out, CUTS)
    kw: dict[str, Any] = dict(baseline=BASE, candidate=CAND, estimator="analytic", n_boot=200,
                              by="worker")  # fmt: skip
    local = api.requalify(out, **kw)
    dask = api.requalify(out, scheduler=client.scheduler.address, **kw)
    assert sum(c.level == Level.BY for c in local.cells) == 2  # w0 and w1
    assert _figures(dask) == _figures(local)
    assert dask.extra["replay_backend"]["tasks"] == 4  # one pass over the 4 shards


SLOW_TEARDOWN = """
import sys, time
import distributed
close = distributed.LocalCluster.close
def slow(self, *a, **k):
    time.sleep({pause})  # the workers keep heartbeating and cancelling while we wait
    return close(self, *a, **k)
distributed.LocalCluster.close = slow
sys.argv[0] = "specreplay"
from specreplay.entry import main
main()
"""


@pytest.mark.parametrize("pause", [0.0, 2.0])
def test_a_bad_row_under_workers_is_the_only_line_with_q(
    frame: pl.DataFrame, tmp_path: Path, pause: float
) -> None:
    """Issue 17, item 5: `requalify --workers 2 -q` on an archive with a bad row prints exactly
    the local run's line on stderr, also when the cluster's teardown is slowed on purpose (the
    workers' own loggers, in other processes, used to print 37 lines of heartbeat and cancelled-
    task warnings before it); exit 2, no output folder."""
    bad = tmp_path / "bad"
    _write_shards(frame, bad, CUTS)
    f = bad / "part-1.parquet"
    rows = pl.read_parquet(f)
    wrong = pl.when(pl.int_range(pl.len()) == 7).then(10**6).otherwise(pl.col("drafted_id"))
    rows.with_columns(wrong.cast(rows.schema["drafted_id"]).alias("drafted_id")).write_parquet(f)
    with pytest.raises(SpecReplayError) as local:
        replay_archive(bad, _arms(), estimator="analytic")
    before = tree_digest(bad)
    args = ["requalify", str(bad), "--baseline", BASE, "--candidate", CAND,
            "--workers", "2", "-q", "--out", str(tmp_path / "out"), "--n-boot", "200",
            "--estimator", "analytic"]  # fmt: skip
    res = subprocess.run(
        [sys.executable, "-c", SLOW_TEARDOWN.format(pause=pause), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.splitlines() == [f"error: {local.value}"]
    assert not (tmp_path / "out").exists()
    assert tree_digest(bad) == before and leftovers(tmp_path, bad) == []  # the corpus's checks

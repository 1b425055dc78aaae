"""The recorder (specreplay.capture.Recorder, issue 12 item 1): what it writes, counts and drops.

Rows are checked against rows built here independently (numpy top-k by a full stable sort,
log-softmax, gather); the logging law against a numpy softmax over the top-K candidates (float64
arm) and against the replay's own law (dyadic arm, bit for bit). The queue-full test gates the
background thread with an Event so that the queue fills deterministically.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numba
import numpy as np
import polars as pl
import pytest

from specreplay import api
from specreplay.capture import CaptureCounts, Recorder, sample_keeps
from specreplay.capture import recorder as recorder_module
from specreplay.errors import SpecReplayError
from specreplay.sim.arms import parse_arm
from specreplay.sim.policy import arm_laws
from tests.corpus import invoke, leftovers

V = 50  # vocabulary of the stand-in engine


def _rows(path: Path) -> pl.DataFrame:
    return pl.read_parquet(sorted(path.glob("part-*.parquet")))


def _capture(path: Path) -> dict[str, Any]:
    manifest = json.loads((path / "CAPTURE.json").read_text(encoding="utf-8"))
    (writer,) = manifest["writers"]
    capture: dict[str, Any] = writer["capture"]
    return capture


def _valid(path: Path) -> str:
    res = invoke(["validate", str(path), "-q"])
    assert res.exit_code == 0, res.stdout + res.stderr
    assert "VALID" in res.stdout
    return res.stdout


def _point_mass(rec: Recorder, rid: str, rnd: int, drafted: list[int], acc: int) -> bool:
    n = len(drafted)
    d = np.array(drafted)
    return rec.round(
        rid,
        rnd,
        drafted_ids=d,
        target_probs=np.full((n, 1), 0.5),
        accepted=acc,
        family="code",
        context_tokens=100 + rnd,
        cand_ids=d[:, None],
        emitted_q=np.ones((n, 1)),
        draft_logprobs=np.zeros((n, 1)),
    )


# ------------------------------------------------------------------------------------------------
# independent references
# ------------------------------------------------------------------------------------------------


def _ref_candidates(logits: np.ndarray, k: int, drafted: int) -> np.ndarray:
    """Top-k by a full stable sort of −logits (ties to the lower id), the drafted id appended."""
    ids = np.argsort(-logits, kind="stable")[:k]
    return ids if drafted in ids else np.append(ids, drafted)


def _ref_log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    return x - (x.max() + np.log(np.sum(np.exp(x - x.max()))))


def _ref_topk_temperature(lp: np.ndarray, k: int, t: float) -> np.ndarray:
    """softmax(lp / t) over the k largest lp (ties to the lower index), zero elsewhere."""
    keep = np.argsort(-lp, kind="stable")[:k]
    q = np.zeros_like(lp)
    w = np.exp((lp[keep] - lp[keep].max()) / t)
    q[keep] = w / w.sum()
    return q


def _engine_round(rng: np.random.Generator, n: int, temp: float, k_arm: int | None):
    """A stand-in engine round: logits, target probabilities and drafts from the arm's law."""
    logits = rng.normal(0.0, 2.0, size=(n, V)).astype(np.float32)
    logits[:, 7] = logits[:, 3]  # a tie on every row: ties go to the lower id
    target = rng.dirichlet(np.full(V, 0.3), size=n)
    drafted = np.empty(n, dtype=np.int64)
    for j in range(n):
        lp = _ref_log_softmax(logits[j])
        q = _ref_topk_temperature(lp, k_arm if k_arm else V, temp)
        drafted[j] = rng.choice(V, p=q)
    return logits, target, drafted


# ------------------------------------------------------------------------------------------------
# logits mode, exact-q mode, point mass
# ------------------------------------------------------------------------------------------------


def test_logits_mode_rows_equal_numpy_and_validate(tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    top_k, arm = 6, "top4:t0.7@3"
    fed = []
    with Recorder(tmp_path / "a", logging_arm=arm, top_k=top_k, engine="stand-in") as rec:
        for r in range(6):
            for t in range(4):
                n = int(rng.integers(1, 4))
                logits, target, drafted = _engine_round(rng, n, 0.7, 4)
                acc = int(rng.integers(0, n + 1))
                kw = {"family": f"f{r % 2}", "context_tokens": 50 + t, "draft_logits": logits}
                assert rec.round(f"req{r}", t, drafted, target, acc, **kw)
                fed.append((f"req{r}", t, logits, target, drafted, acc))
    _valid(tmp_path / "a")
    rows = _rows(tmp_path / "a")
    assert rows.height == sum(f[4].shape[0] for f in fed)
    i = 0
    for rid, t, logits, target, drafted, acc in fed:
        for j in range(drafted.shape[0]):
            row = rows.row(i, named=True)
            i += 1
            lp_full = _ref_log_softmax(logits[j])
            ids = _ref_candidates(logits[j], top_k, int(drafted[j]))
            assert (row["request_id"], row["round"], row["position"]) == (rid, t, j + 1)
            assert row["cand_ids"] == ids.tolist()
            np.testing.assert_allclose(row["draft_logprobs"], lp_full[ids], rtol=1e-14, atol=0)
            assert row["target_probs"] == target[j, ids].tolist()  # a gather: exact
            assert row["drafted_id"] == int(drafted[j])
            assert row["accepted"] == (j < acc)
            assert row["logging_arm"] == arm
            q = _ref_topk_temperature(np.array(row["draft_logprobs"]), 4, 0.7)
            np.testing.assert_allclose(row["emitted_q"], q, rtol=1e-13, atol=1e-300)
            assert [x == 0 for x in row["emitted_q"]] == [x == 0 for x in q]
    # the tie at ids 3 and 7: where both are kept, 3 comes first
    assert any(r.index(3) < r.index(7) for r in rows["cand_ids"].to_list() if 3 in r and 7 in r)


def test_logits_mode_appends_a_drafted_id_outside_the_top_k(tmp_path: Path) -> None:
    logits = np.array([[5.0, 4.0, 3.0, -1.0, 2.0]])
    with Recorder(tmp_path / "a", logging_arm="t1@2", top_k=2) as rec:
        rec.round("r", 0, [3], np.full((1, 5), 0.2), 0, draft_logits=logits)
    (row,) = _rows(tmp_path / "a").iter_rows(named=True)
    assert row["cand_ids"] == [0, 1, 3]
    np.testing.assert_allclose(row["draft_logprobs"], _ref_log_softmax(logits[0])[[0, 1, 3]])
    e = np.exp(np.array([5.0, 4.0, -1.0]))
    np.testing.assert_allclose(row["emitted_q"], e / e.sum(), rtol=1e-14)
    _valid(tmp_path / "a")


def test_logits_mode_dyadic_arm_is_the_replays_law_bit_for_bit(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    arm = "top8:t0.7:dyadic8/float64@4"
    with Recorder(tmp_path / "a", logging_arm=arm, top_k=10) as rec:
        for r in range(20):
            logits, target, drafted = _engine_round(rng, 4, 0.7, 8)
            rec.round(f"r{r}", 0, drafted, target, 1, draft_logits=logits)
    rows = _rows(tmp_path / "a")
    lengths = rows["cand_ids"].list.len().to_numpy().astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    lp = np.concatenate(rows["draft_logprobs"].to_list())
    law = arm_laws(parse_arm(arm), offsets, lp).q_sampler  # the sampler: dyadic8, before "/"
    q = np.concatenate(rows["emitted_q"].to_list())
    assert np.array_equal(q, law)
    assert np.array_equal(q * 256, np.round(q * 256))  # multiples of 2^-8
    assert rows["logging_arm"].unique().to_list() == [parse_arm(arm).canonical]


def test_exact_q_mode_writes_the_given_rows(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    fed = []
    with Recorder(tmp_path / "a", logging_arm="top32:t0.7@5") as rec:
        for r in range(8):
            n, k = 5, 32
            cand = np.stack([rng.permutation(1000)[:k] for _ in range(n)])
            q = rng.dirichlet(np.ones(k), size=n).astype(np.float32)
            lp = np.log(q.astype(np.float64)) - 0.25  # full-vocabulary log-probs: below log q
            target = rng.dirichlet(np.ones(k + 1), size=n)[:, :k]
            drafted = cand[np.arange(n), rng.integers(0, k, n)]
            if r % 2:  # a full-vocabulary target, gathered at cand_ids
                full = np.zeros((n, 1000))
                np.put_along_axis(full, cand, target, axis=1)
                given = full
            else:
                given = target
            acc = np.arange(n) < (r % 6)  # bools
            kw = {"cand_ids": cand, "emitted_q": q, "draft_logprobs": lp if r < 4 else None}
            rec.round(f"r{r}", 0, drafted, given, acc, family="chat", context_tokens=r, **kw)
            fed.append((cand, q, lp if r < 4 else np.log(q.astype(np.float64)), target, acc))
    rows = _rows(tmp_path / "a")
    for r, (cand, q, lp, target, acc) in enumerate(fed):
        got = rows.filter(pl.col("request_id") == f"r{r}").sort("position")
        assert got["cand_ids"].to_list() == cand.tolist()
        assert got["emitted_q"].to_list() == q.astype(np.float64).tolist()
        assert got["draft_logprobs"].to_list() == lp.tolist()
        assert got["target_probs"].to_list() == target.tolist()
        assert got["accepted"].to_list() == acc.tolist()
        assert got["context_tokens"].to_list() == [r] * 5
    _valid(tmp_path / "a")


def test_point_mass_rows_validate(tmp_path: Path) -> None:
    with Recorder(tmp_path / "a", logging_arm="greedy@3", drafter="point-mass (ngram)") as rec:
        assert _point_mass(rec, "a", 0, [4, 9, 2], 2)
        assert _point_mass(rec, "a", 1, [8], 0)
    rows = _rows(tmp_path / "a")
    assert rows["cand_ids"].to_list() == [[4], [9], [2], [8]]
    assert rows["emitted_q"].to_list() == [[1.0]] * 4
    assert rows["draft_logprobs"].to_list() == [[0.0]] * 4
    assert rows["logging_arm"].unique().to_list() == ["greedy@3"]
    assert _capture(tmp_path / "a")["drafter"] == "point-mass (ngram)"
    _valid(tmp_path / "a")


def test_measured_from_the_archive_equals_the_accepted_counts_fed_in(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    accepted: list[int] = []
    with Recorder(tmp_path / "a", logging_arm="greedy@4") as rec:
        for r in range(40):
            for t in range(int(rng.integers(1, 6))):
                a = int(rng.integers(0, 5))
                _point_mass(rec, f"r{r}", t, [1, 2, 3, 4], a)
                accepted.append(a)
    res = api.validate(tmp_path / "a")
    (pooled,) = [c for c in res.cells if c.family is None and c.bucket is None]
    fig = pooled.arms["greedy@4"]
    a = np.array(accepted)
    assert fig.n_rounds == a.shape[0]
    measured_r = fig.R
    assert measured_r == pytest.approx(np.sum(1 + a) / a.shape[0], rel=1e-12)
    for s in pooled.survival:
        assert s.value == pytest.approx(np.mean(a >= s.position), rel=1e-12), s.position


# ------------------------------------------------------------------------------------------------
# the queue, sampling, exit
# ------------------------------------------------------------------------------------------------


def test_a_full_queue_stops_the_request_keeps_its_earlier_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    frame = recorder_module.Recorder._frame

    def gated(self: Recorder, batch: list[Any]) -> pl.DataFrame:
        entered.set()
        assert release.wait(30)
        return frame(self, batch)

    monkeypatch.setattr(recorder_module.Recorder, "_frame", gated)
    rec = Recorder(tmp_path / "a", logging_arm="greedy@2", queue_rounds=3)
    assert _point_mass(rec, "A", 0, [1, 2], 1)
    assert entered.wait(30)  # the thread holds A0 and waits: the queue is empty
    assert _point_mass(rec, "A", 1, [1, 2], 2)
    assert _point_mass(rec, "B", 0, [3], 0)
    assert _point_mass(rec, "A", 2, [1, 2], 0)  # the queue holds 3 rounds: full
    t0 = time.perf_counter()
    assert not _point_mass(rec, "A", 3, [1, 2], 1)  # full: A stops here
    assert time.perf_counter() - t0 < 0.5  # never blocks (loose: a loaded machine)
    assert not rec.sampled("A") and rec.sampled("B")
    assert not _point_mass(rec, "A", 4, [1, 2], 1)  # and stays stopped
    release.set()
    counts = rec.close()
    assert not _point_mass(rec, "B", 1, [3], 0)  # closed: nothing more is queued
    assert not rec.sampled("B")
    expect = CaptureCounts(
        requests_seen=2,
        requests_sampled=2,
        requests_incomplete=1,
        incomplete_ids=("A",),
        rounds_offered=6,
        rounds_recorded=4,
        rounds_dropped_queue_full=2,
        rows=7,
    )
    assert counts == expect
    assert _capture(tmp_path / "a")["counts"] == expect.as_json()
    rows = _rows(tmp_path / "a")
    got = rows.group_by("request_id").agg(pl.col("round").unique().sort()).sort("request_id")
    assert got.rows() == [("A", [0, 1, 2]), ("B", [0])]
    line = "recorded 2 of 2 requests (sample 1, 1 writer) · 1 incomplete · 4 of 6 rounds · 7 rows"
    assert line in _valid(tmp_path / "a").splitlines()


def test_the_queue_is_also_bounded_in_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    frame = recorder_module.Recorder._frame

    def gated(self: Recorder, batch: list[Any]) -> pl.DataFrame:
        entered.set()
        assert release.wait(30)
        return frame(self, batch)

    monkeypatch.setattr(recorder_module.Recorder, "_frame", gated)
    # a point-mass round of 2 positions copies 5 arrays of 2 float64/int64 = 80 bytes
    rec = Recorder(tmp_path / "a", logging_arm="greedy@2", queue_bytes=200)
    assert _point_mass(rec, "A", 0, [1, 2], 1)
    assert entered.wait(30)  # held by the thread: still counted until its frame is built
    assert _point_mass(rec, "A", 1, [1, 2], 1)  # 160 bytes
    assert not _point_mass(rec, "B", 0, [1, 2], 1)  # 240 > 200: B stops
    assert _point_mass(rec, "C", 0, [1], 1)  # 40 more bytes fit: 200
    release.set()
    deadline = time.monotonic() + 30
    while rec._bytes_out < 200 and time.monotonic() < deadline:  # written rounds free their bytes
        time.sleep(0.01)
    assert _point_mass(rec, "D", 0, [1, 2], 1)
    counts = rec.close()
    assert (counts.rounds_recorded, counts.incomplete_ids) == (4, ("B",))
    _valid(tmp_path / "a")


def test_sampling_keeps_whole_requests_by_hash(tmp_path: Path) -> None:
    ids = [f"req-{i}" for i in range(20_000)]
    threshold = round(0.01 * 2**64)

    def keep(s: str) -> bool:  # the documented rule, computed here
        h = int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "big")
        return h < threshold

    expected = {s for s in ids if keep(s)}
    # binomial(20000, 0.01): mean 200, SD 14.07; 3.5 SD fails by chance ~5e-4 (a fixed set here)
    assert abs(len(expected) - 200) <= 3.5 * math.sqrt(20_000 * 0.01 * 0.99)
    with Recorder(tmp_path / "a", logging_arm="greedy@2", sample=0.01) as rec:
        kept = {s for s in ids if rec.sampled(s)}
        for t in range(3):
            for s in ids:
                assert _point_mass(rec, s, t, [5, 6], t % 3) == (s in expected)
    assert kept == expected == {s for s in ids if sample_keeps(s, 0.01)}
    rows = _rows(tmp_path / "a")
    per = rows.group_by("request_id").agg(pl.col("round").n_unique())
    assert set(per["request_id"]) == expected
    assert per["round"].to_list() == [3] * len(expected)  # every round of a kept request
    c = _capture(tmp_path / "a")["counts"]
    assert (c["requests_seen"], c["requests_sampled"]) == (20_000, len(expected))
    assert (c["rounds_offered"], c["rounds_recorded"]) == (3 * len(expected),) * 2


_CHILD = """
import sys
import numpy as np
from specreplay.capture import Recorder
rec = Recorder(sys.argv[1], logging_arm="greedy@2", engine="child")
for t in range(3):
    d = np.array([t + 1, t + 2])
    rec.round("r", t, d, np.full((2, 1), 0.5), 1, cand_ids=d[:, None], emitted_q=np.ones((2, 1)))
"""


def test_a_process_that_exits_without_close_commits(tmp_path: Path) -> None:
    out = tmp_path / "a"
    root = Path(__file__).parent.parent
    subprocess.run([sys.executable, "-c", _CHILD, str(out)], check=True, cwd=root, timeout=300)
    assert _capture(out)["counts"]["rows"] == 6
    assert _rows(out).height == 6
    assert leftovers(tmp_path) == []
    _valid(out)


_FORKER = """
import os, sys
import numpy as np
from specreplay.capture import Recorder
rec = Recorder(sys.argv[1], logging_arm="greedy@2")

def one(rid, t):
    d = np.array([t + 1, t + 2])
    q = np.ones((2, 1))
    return rec.round(rid, t, d, np.full((2, 1), 0.5), 1, cand_ids=d[:, None], emitted_q=q)

assert one("parent", 0)
pid = os.fork()
if pid == 0:  # the child: the recorder is the parent's; its exit (atexit) must write nothing
    ok = not one("child", 0) and not rec.sampled("child")
    rec.close()
    sys.exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
assert one("parent", 1)
"""


def test_a_forked_child_leaves_the_parents_run_alone(tmp_path: Path) -> None:
    out = tmp_path / "a"
    root = Path(__file__).parent.parent
    subprocess.run([sys.executable, "-c", _FORKER, str(out)], check=True, cwd=root, timeout=300)
    rows = _rows(out)
    assert rows["request_id"].to_list() == ["parent"] * 4
    assert rows["round"].to_list() == [0, 0, 1, 1]
    assert leftovers(tmp_path) == []
    _valid(out)


_KILLED = """
import os, signal, sys, time
import numpy as np
from specreplay.capture import Recorder
rec = Recorder(sys.argv[1], logging_arm="greedy@2", shard_rows=4, commit_idle_seconds=None)
for t in range(5):
    d = np.array([t + 1, t + 2])
    rec.round("r", t, d, np.full((2, 1), 0.5), 1, cand_ids=d[:, None], emitted_q=np.ones((2, 1)))
while rec.counts.rounds_recorded < 5:
    time.sleep(0.01)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_process_leaves_path_alone_and_its_staged_shards(tmp_path: Path) -> None:
    out = tmp_path / "cap"
    root = Path(__file__).parent.parent
    proc = subprocess.run([sys.executable, "-c", _KILLED, str(out)], cwd=root, timeout=300)
    assert proc.returncode == -9  # SIGKILL: no close, no atexit
    assert not out.exists()
    (stage,) = [p for p in tmp_path.iterdir() if p.name.startswith(".cap.tmp-")]
    assert not (stage / "CAPTURE.json").exists()
    # shards are cut at a round boundary once 4 rows are buffered, keeping the last round back:
    # rounds 0-3 are on disk (in 1 or 2 shards, as the batches fell), round 4 was in memory
    assert all(p.name.startswith("part-0000") for p in stage.iterdir())
    assert "requests 1 · rounds 4 · positions 8" in _valid(stage)
    res = invoke(["validate", str(tmp_path)])
    assert res.exit_code == 2 and f"{stage.name}: a sub-folder" in res.stderr


_KILLED_AFTER_COMMITS = """
import json, os, signal, sys, time
import numpy as np
from specreplay.capture import Recorder
rec = Recorder(sys.argv[1], logging_arm="greedy@2", commit_rounds=3, commit_seconds=None,
               mode="append", writer_id="w")
for t in range(8):
    d = np.array([t + 1, t + 2])
    rec.round("r", t, d, np.full((2, 1), 0.5), 1, cand_ids=d[:, None], emitted_q=np.ones((2, 1)))
    while rec.counts.rounds_recorded < t + 1:  # one round per batch: commits fall after 3 and 6
        time.sleep(0.005)
print(json.dumps({"commits": rec.commits}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_periodic_commits_survive_a_sigkill(tmp_path: Path) -> None:
    """Every round up to the last commit is in ``path``, readable, the writer marked open."""
    out = tmp_path / "cap"
    root = Path(__file__).parent.parent
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_AFTER_COMMITS, str(out)],
        cwd=root,
        timeout=300,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == -9, proc.stderr  # SIGKILL: no close, no atexit
    assert json.loads(proc.stdout)["commits"] == 2
    rows = _rows(out)
    assert rows["round"].unique().sort().to_list() == list(range(6))  # rounds 0-5: 2 commits
    (writer,) = json.loads((out / "CAPTURE.json").read_text())["writers"]
    assert writer["state"] == "open" and writer["capture"]["counts"]["rounds_recorded"] == 6
    assert writer["shards"] == ["part-w-00000.parquet", "part-w-00001.parquet"]
    assert "requests 1 · rounds 6 · positions 12" in _valid(out)
    assert "1 writer is not closed" in invoke(["validate", str(out)]).stdout


@pytest.mark.parametrize(
    "when", [{"commit_seconds": 0.2, "commit_idle_seconds": None}, {"commit_seconds": None,
             "commit_idle_seconds": 0.2}], ids=["timed", "idle"])  # fmt: skip
def test_a_timed_or_idle_commit_puts_an_idle_engines_rounds_in_place(
    tmp_path: Path, when: dict[str, Any]
) -> None:
    out = tmp_path / "cap"
    rec = Recorder(out, logging_arm="greedy@2", commit_rounds=None, **when)
    _point_mass(rec, "r", 0, [1, 2], 1)
    deadline = time.monotonic() + 30
    while rec.commits == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert rec.commits == 1 and _rows(out)["round"].to_list() == [0, 0]
    (writer,) = json.loads((out / "CAPTURE.json").read_text())["writers"]
    assert writer["state"] == "open"
    _point_mass(rec, "r", 1, [3, 4], 2)
    rec.close()
    assert _rows(out)["round"].to_list() == [0, 0, 1, 1]
    (writer,) = json.loads((out / "CAPTURE.json").read_text())["writers"]
    assert writer["state"] == "closed" and len(writer["shards"]) == 2
    assert leftovers(tmp_path) == []


def test_no_commit_before_its_time(tmp_path: Path) -> None:
    # the defaults (10,000 rounds, 60 s) do not commit a short run: path appears at close only
    rec = Recorder(tmp_path / "cap", logging_arm="greedy@2")
    for t in range(20):
        _point_mass(rec, "r", t, [1, 2], 1)
    time.sleep(0.3)
    assert rec.commits == 0 and not (tmp_path / "cap").exists()
    rec.close()
    assert rec.commits == 0 and _rows(tmp_path / "cap").height == 40  # new: one rename


def test_a_failure_after_commits_keeps_them_and_marks_the_writer_failed(tmp_path: Path) -> None:
    out = tmp_path / "cap"
    rec = Recorder(out, logging_arm="greedy@1", commit_rounds=1, commit_seconds=None)
    _point_mass(rec, "r", 0, [1], 1)
    deadline = time.monotonic() + 30
    while rec.commits == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    _disk_full(rec)
    _point_mass(rec, "r", 1, [2], 1)
    with pytest.raises(SpecReplayError, match=r"kept only its 1 earlier commits.*No space left"):
        rec.close()
    (writer,) = json.loads((out / "CAPTURE.json").read_text())["writers"]
    assert writer["state"].startswith("failed: OSError: [Errno 28] No space left on device")
    assert _rows(out)["round"].to_list() == [0]
    assert leftovers(tmp_path) == []


def test_wide_rows_are_cut_into_shards_by_bytes(tmp_path: Path) -> None:
    # 256 candidates a position: the recorder's 64 MiB cut, scaled down, writes shards as it goes
    out = tmp_path / "cap"
    rec = Recorder(out, logging_arm="t1@2", top_k=256, commit_rounds=None, commit_seconds=None,
                   commit_idle_seconds=None)  # fmt: skip
    rec._writer.shard_bytes = 200_000  # about 10 rounds of 2 × 256 candidates
    v = np.arange(256)
    for t in range(40):
        rec.round("r", t, [1, 2], np.full((2, 256), 1 / 256), 1, cand_ids=np.stack([v, v]),
                  emitted_q=np.full((2, 256), 1 / 256))  # fmt: skip
        while rec.counts.rounds_recorded < t + 1:  # one round a frame
            time.sleep(0.002)
    rec.close()
    shards = sorted(out.glob("*.parquet"))
    assert len(shards) >= 3  # cut by bytes (50,000 rows would have made one)
    assert _rows(out)["round"].unique().sort().to_list() == list(range(40))
    _valid(out)


def test_commit_settings_are_checked() -> None:
    for bad in (
        {"commit_rounds": 0},
        {"commit_seconds": 0.0},
        {"commit_seconds": float("nan")},
        {"commit_idle_seconds": -1.0},
    ):
        with pytest.raises(SpecReplayError, match="commit_"):
            Recorder("/nonexistent/never", logging_arm="greedy@1", **bad)


def test_an_exception_inside_with_commits_and_propagates(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="engine crashed"),
        Recorder(tmp_path / "a", logging_arm="greedy@2") as rec,
    ):
        _point_mass(rec, "r", 0, [1, 2], 2)
        raise RuntimeError("engine crashed")
    assert _rows(tmp_path / "a")["drafted_id"].to_list() == [1, 2]
    _valid(tmp_path / "a")


def _disk_full(rec: Recorder) -> None:
    """Make the recorder's next shard write fail as a full disk does (ENOSPC)."""

    def full(frame: pl.DataFrame) -> None:
        raise OSError(28, "No space left on device")

    rec._writer.append_frame = full  # type: ignore[method-assign]


def test_a_background_failure_makes_close_raise_and_writes_nothing(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "a", logging_arm="greedy@1")
    _disk_full(rec)
    _point_mass(rec, "r", 0, [1], 1)
    with pytest.raises(
        SpecReplayError, match=r"background thread.*OSError: \[Errno 28\] No space left"
    ):
        rec.close()
    with pytest.raises(SpecReplayError, match="background thread"):
        rec.close()  # idempotent: the same error
    assert not (tmp_path / "a").exists() and leftovers(tmp_path) == []


def test_logits_mode_runs_numba_on_one_core_and_exact_q_leaves_numba_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one Numba thread: a count of 1 would not tell")
    caller = numba.get_num_threads()
    calls: list[int] = []
    seen: list[int] = []
    frame = recorder_module.Recorder._frame
    set_threads = numba.set_num_threads

    def counting(n: int) -> None:
        calls.append(n)
        set_threads(n)

    def spy(self: Recorder, batch: list[Any]) -> pl.DataFrame:
        out = frame(self, batch)
        seen.append(numba.get_num_threads())  # on the background thread
        return out

    monkeypatch.setattr(numba, "set_num_threads", counting)
    monkeypatch.setattr(recorder_module.Recorder, "_frame", spy)
    with Recorder(tmp_path / "a", logging_arm="greedy@2") as rec:
        _point_mass(rec, "r", 0, [1, 2], 2)
    assert calls == [] and seen == [caller]  # exact-q: Numba's threads untouched
    logits = np.log(np.full((1, 5), 0.2))
    with Recorder(tmp_path / "b", logging_arm="t1@2", top_k=2) as rec:
        rec.round("r", 0, [3], np.full((1, 5), 0.2), 0, draft_logits=logits)
        rec.round("r", 1, [3], np.full((1, 5), 0.2), 0, draft_logits=logits)
    # set once, on the background thread, before its first logits batch
    assert calls == [1] and len(seen) >= 2 and set(seen[1:]) == {1}
    assert numba.get_num_threads() == caller  # the count is per thread: the caller keeps its own


def test_a_failing_numba_thread_count_stops_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(n: int) -> None:
        raise ValueError("no threading layer")

    monkeypatch.setattr(numba, "set_num_threads", refuse)
    logits = np.log(np.full((1, 5), 0.2))
    rec = Recorder(tmp_path / "a", logging_arm="t1@2", top_k=2)
    rec.round("r", 0, [3], np.full((1, 5), 0.2), 0, draft_logits=logits)
    with pytest.raises(SpecReplayError, match=r"background thread.*ValueError: no threading layer"):
        rec.close()
    assert not (tmp_path / "a").exists() and leftovers(tmp_path) == []


def test_an_exception_inside_with_keeps_its_type_when_close_fails_too(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="engine crashed") as info,
        Recorder(tmp_path / "a", logging_arm="greedy@1") as rec,
    ):
        _disk_full(rec)
        _point_mass(rec, "r", 0, [1], 1)
        raise RuntimeError("engine crashed")
    assert any("background thread" in note for note in info.value.__notes__)
    assert not (tmp_path / "a").exists() and leftovers(tmp_path) == []


def test_an_append_the_folder_refuses_makes_close_raise(tmp_path: Path) -> None:
    with Recorder(tmp_path / "a", logging_arm="greedy@2", mode="append", writer_id="w0") as rec:
        _point_mass(rec, "r", 0, [1, 2], 1)
    rec = Recorder(tmp_path / "a", logging_arm="greedy@3", mode="append", writer_id="w1")
    _point_mass(rec, "s", 0, [1, 2], 1)
    with pytest.raises(SpecReplayError, match="one archive has one logging arm"):
        rec.close()
    _valid(tmp_path / "a")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("form", ["ipc-dir", "jsonl-dir"])
def test_the_other_folder_forms(tmp_path: Path, form: str) -> None:
    with Recorder(tmp_path / "a", logging_arm="greedy@2", format=form) as rec:
        _point_mass(rec, "r", 0, [1, 2], 1)
        _point_mass(rec, "r", 1, [3, 4], 0)
    assert "2 of 2 rounds · 4 rows" in _valid(tmp_path / "a")


def test_two_writers_append_to_one_folder(tmp_path: Path) -> None:
    for w in ("rank0", "rank1"):
        with Recorder(tmp_path / "a", logging_arm="greedy@2", mode="append", writer_id=w) as rec:
            _point_mass(rec, f"{w}-r", 0, [1, 2], 1)
    manifest = json.loads((tmp_path / "a" / "CAPTURE.json").read_text(encoding="utf-8"))
    assert [w["writer"] for w in manifest["writers"]] == ["rank0", "rank1"]
    assert [w["capture"]["counts"]["rows"] for w in manifest["writers"]] == [2, 2]
    line = "recorded 2 of 2 requests (sample 1, 2 writers) · 0 incomplete · 2 of 2 rounds · 4 rows"
    assert line in _valid(tmp_path / "a").splitlines()
    capture = api.validate(tmp_path / "a", out=tmp_path / "v").extra["capture"]
    assert api.read_result(tmp_path / "v").extra["capture"] == capture  # results.json round trip
    assert capture == {
        "writers": 2,
        "writers_open": 0,
        "writers_failed": 0,
        "sample": [1.0],
        "requests_seen": 2,
        "requests_sampled": 2,
        "requests_incomplete": 0,
        "rounds_offered": 2,
        "rounds_recorded": 2,
        "rounds_dropped_queue_full": 0,
        "rows": 4,
        "rounds_dropped_bad": 0,  # issue 17: bad rounds dropped by the recorders
        "rounds_dropped_after_bad": 0,
        "dropped_reasons": {},
    }


def test_a_folder_no_recorder_wrote_prints_no_capture_line(tmp_path: Path) -> None:
    from specreplay.replay.archive.writer import TraceWriter

    with TraceWriter(tmp_path / "a") as w:
        w.append(
            {
                "request_id": "r",
                "family": "f",
                "context_tokens": 1,
                "round": 0,
                "position": 1,
                "cand_ids": [1],
                "draft_logprobs": [0.0],
                "target_probs": [0.5],
            }
        )
    assert not any(x.startswith("recorded ") for x in _valid(tmp_path / "a").splitlines())
    assert "capture" not in api.validate(tmp_path / "a").extra


# ------------------------------------------------------------------------------------------------
# bad calls: one line, nothing recorded
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"logging_arm": "top32:t0.7"}, "top32:t0.7"),
        ({"logging_arm": "t1@5", "top_k": 0}, r"top_k=0 should be an integer >= 1"),
        ({"logging_arm": "t1@5", "sample": 0.0}, r"sample=0.0 should be in \(0, 1\]"),
        ({"logging_arm": "t1@5", "sample": 1.5}, r"sample=1.5 should be in \(0, 1\]"),
        ({"logging_arm": "t1@5", "queue_rounds": 0}, r"queue_rounds=0"),
        ({"logging_arm": "t1@5", "queue_bytes": 0.5}, r"queue_bytes=0.5 should be an integer"),
        ({"logging_arm": "top64:t0.7@5", "top_k": 32}, r"keeps 64 candidates, more than top_k=32"),
        ({"logging_arm": "t1@5", "format": "csv"}, r"unknown format 'csv'"),
        ({"logging_arm": "t1@5", "format": "parquet"}, r"format='parquet' is a single file"),
    ],
)
def test_bad_arguments_are_refused(tmp_path: Path, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(SpecReplayError, match=match):
        Recorder(tmp_path / "a", **kwargs)
    assert not (tmp_path / "a").exists()


def _call(rec: Recorder, **over: Any) -> bool:
    args: dict[str, Any] = {
        "request_id": "r",
        "round": 0,
        "drafted_ids": np.array([1, 2]),
        "target_probs": np.full((2, 3), 0.3),
        "accepted": 1,
        "cand_ids": np.array([[1, 0, 2], [2, 1, 0]]),
        "emitted_q": np.full((2, 3), 1 / 3),
    }
    args.update(over)
    return rec.round(**args)


@pytest.mark.parametrize(
    ("over", "match"),
    [
        (
            {"drafted_ids": np.array([1, 5])},
            r"drafted id 5 at position 2 is not among its cand_ids",
        ),
        (
            {"drafted_ids": np.array([1, 2, 0, 1])},
            r"4 drafted tokens, more than the logging arm's depth",
        ),
        (
            {"drafted_ids": np.array([], dtype=int)},
            r"drafted_ids should be integers of shape \(n,\)",
        ),
        ({"drafted_ids": np.array([1.0, 2.0])}, r"drafted_ids should be integers"),
        ({"target_probs": np.full((3, 3), 0.3)}, r"target_probs should be floats of shape \(n=2"),
        ({"emitted_q": np.full((2, 2), 0.5)}, r"emitted_q should be floats of cand_ids' shape"),
        ({"draft_logprobs": np.zeros((2, 4))}, r"draft_logprobs should be floats of cand_ids'"),
        ({"cand_ids": np.zeros((2, 3))}, r"cand_ids should be integers of shape"),
        ({"accepted": 3}, r"accepted=3 should be in 0..2"),
        ({"accepted": np.array([False, True])}, r"has a True after a False"),
        ({"accepted": np.array([1, 0])}, r"accepted should be an int 0..2 or bools"),
        ({"emitted_q": None}, r"pass draft_logits \(logits mode\) or both cand_ids and emitted_q"),
        ({"draft_logits": np.zeros((2, 3))}, r"not both"),
        ({"round": -1}, r"round -1 after round -1"),
        ({"round": True}, r"round True after round -1"),
        ({"round": 1.0}, r"round 1.0 after round -1"),
        ({"family": 3}, r"family 3 should be a str"),
        ({"target_probs": [[0.5, 0.5], [0.5]]}, r"target_probs cannot be read as a numpy array"),
        ({"request_id": ["r"]}, r"request_id \['r'\] should be a str"),
        ({"request_id": 7}, r"request_id 7 should be a str"),
    ],
)
def test_a_bad_call_is_counted_stops_its_request_and_never_raises(
    tmp_path: Path, over: dict[str, Any], match: str
) -> None:
    """Issue 17 item 3: round() never raises into the engine; a refused call is a bad round."""
    with Recorder(tmp_path / "a", logging_arm="t1@3") as rec:
        assert _call(rec, **over) is False
        c = rec.counts
        assert (c.rounds_offered, c.rounds_dropped_bad, c.rounds_recorded) == (1, 1, 0)
        assert dict(c.dropped_reasons) == {recorder_module.BAD_CALL: 1}
        assert re.search(match, c.first_bad)
        if isinstance(over.get("request_id", "r"), str):  # its request records no later round
            assert not _call(rec, **{**over, "round": 5}) and not rec.sampled("r")
            assert rec.counts.rounds_dropped_after_bad == 1
            assert rec.counts.incomplete_ids == ("r",)
        assert _call(rec, request_id="s")  # another request records normally
    assert rec.counts.rows == 2
    assert _rows(tmp_path / "a")["request_id"].unique().to_list() == ["s"]


def test_logits_mode_shape_checks(tmp_path: Path) -> None:
    d = np.array([1, 2])
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("a", r"target_probs has 3 columns, draft_logits 4", {"draft_logits": np.zeros((2, 4))}),
        ("b", r"drafted id is outside the vocabulary 0..2",
         {"drafted_ids": np.array([1, 3]), "draft_logits": np.zeros((2, 3))}),
    ]  # fmt: skip
    for rid, match, over in calls:
        with Recorder(tmp_path / rid, logging_arm="t1@3", top_k=2) as rec:
            args = {"drafted_ids": d, "target_probs": np.full((2, 3), 0.3), "accepted": 0}
            assert not rec.round(rid, 0, **{**args, **over})
        assert re.search(match, rec.counts.first_bad)
    with Recorder(tmp_path / "c", logging_arm="t1@3", top_k=2) as rec:
        assert rec.round("r", 0, d, np.full((2, 3), 0.3), 0, draft_logits=np.zeros((2, 3)))
        assert not rec.round("r", 0, d, np.full((2, 3), 0.3), 0, draft_logits=np.zeros((2, 3)))
    assert "round 0 after round 0" in rec.counts.first_bad
    assert rec.counts.rounds_recorded == 1


def test_top_candidates_match_a_stable_sort_with_ties() -> None:
    rng = np.random.default_rng(21)
    for _ in range(2000):  # few distinct values: ties at the k-th place on most draws
        v = int(rng.integers(1, 40))
        k = int(rng.integers(1, v + 3))
        x = rng.integers(0, 5, size=v).astype(np.float64)
        expect = np.argsort(-x, kind="stable")[:k]
        assert recorder_module.top_candidates(x, k).tolist() == expect.tolist(), (x, k)


def test_a_renormalising_adapter_is_said_by_validate(tmp_path: Path) -> None:
    """An adapter's manifest note on the draft mass it renormalised away (the vLLM plugin's,
    schema v1) is summed over writers, weighted by positions, and printed by validate."""
    notes = {"a": (10, 0.5, 0.9), "b": (30, 0.1, 0.3)}
    for w, (n, mean, mx) in notes.items():
        extra = {"draft_mass_outside": {"positions": n, "mean": mean, "max": mx}}
        with Recorder(tmp_path / "cap", logging_arm="greedy@2", mode="append", writer_id=w,
                      manifest_extra=lambda e=extra: e) as rec:  # fmt: skip
            _point_mass(rec, f"{w}-r", 0, [1, 2], 1)
    capture = api.validate(tmp_path / "cap").extra["capture"]
    assert capture["draft_mass_outside"] == {
        "positions": 40,
        "mean": pytest.approx((10 * 0.5 + 30 * 0.1) / 40, rel=1e-12),
        "max": 0.9,
        "renormalised": True,  # a note without the key is from a schema-v1 capture
    }
    out = _valid(tmp_path / "cap")
    assert "the capture renormalised emitted_q on its candidates: the engine's draft mass " in out
    assert "outside them was 0.2 on average, 0.9 at most, over 40 positions" in out


def test_tails_are_written_as_schema_v2(tmp_path: Path) -> None:
    out = tmp_path / "cap"
    with Recorder(out, logging_arm="t1@2", tails=True) as rec:
        rec.round("r", 0, [5, 6], np.array([[0.3, 0.2], [0.5, 0.1]]), 1,
                  cand_ids=[[5, 6], [6, 5]], emitted_q=np.array([[0.6, 0.3], [0.7, 0.2]]),
                  draft_tail=[0.1, 0.1], target_tail=[0.5, 0.4])  # fmt: skip
        rec.round("r", 1, [5], np.array([[1.0]]), 0, cand_ids=[[5]], emitted_q=[[1.0]])
    rows = _rows(out)
    assert rows["draft_tail"].to_list() == [0.1, 0.1, None]  # a round without: null (unknown)
    assert rows["target_tail"].to_list() == [0.5, 0.4, None]
    res = api.validate(out)
    assert res.archive.kept_mass.tails_recorded
    assert res.archive.kept_mass.draft.min == pytest.approx(0.9)
    with Recorder(tmp_path / "v1", logging_arm="t1@2") as rec:  # schema v1: no tails
        assert not rec.round("r", 0, [5], np.array([[1.0]]), 0, cand_ids=[[5]],
                             emitted_q=[[1.0]], draft_tail=[0.0])  # fmt: skip
    assert "made without tails=True" in rec.counts.first_bad
    with Recorder(tmp_path / "bad", logging_arm="t1@2", tails=True) as rec:
        assert not rec.round("r", 0, [5], np.array([[1.0]]), 0, cand_ids=[[5]],
                             emitted_q=[[1.0]], draft_tail=[1.5])  # fmt: skip
    assert "draft_tail should be 1 numbers in [0, 1]" in rec.counts.first_bad


@pytest.mark.parametrize("arm", ["t1@2", "t0.7:dyadic8@2", "top3:t1@2", "greedy@2"])
def test_logits_mode_tails_are_the_whole_vocabulary_laws(tmp_path: Path, arm: str) -> None:
    """Logits mode with tails=True keeps 3 of 10 ids: emitted_q is the logging arm's law over all
    10 ids at the kept ones (not renormalised), draft_tail its rest, target_tail the target's."""
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(2, 10))
    target = rng.dirichlet(np.ones(10), size=2)
    out = tmp_path / "cap"
    with Recorder(out, logging_arm=arm, top_k=3, tails=True) as rec:
        drafted = [int(np.argmax(logits[0])), int(np.argmax(logits[1]))]
        rec.round("r", 0, drafted, target, 1, draft_logits=logits)
    rows = _rows(out)
    parsed = parse_arm(arm)
    for j in range(2):
        cand = rows["cand_ids"][j].to_list()
        # the package's own law of the arm over all 10 ids (independent of the recorder's path)
        lp = logits[j] - np.log(np.exp(logits[j]).sum())
        full = arm_laws(parsed, np.array([0, 10]), lp).q_sampler
        truncated = parsed.policy.greedy or parsed.policy.top_k is not None
        want = full[cand] if not truncated else None
        got = np.array(rows["emitted_q"][j].to_list())
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-12)
            assert rows["draft_tail"][j] == pytest.approx(1 - want.sum(), abs=1e-12)
            assert rows["draft_tail"][j] > 0.01  # the truncation is real
        else:
            assert rows["draft_tail"][j] == 0.0 and got.sum() == pytest.approx(1.0)
        assert rows["target_tail"][j] == pytest.approx(1 - target[j, cand].sum(), abs=1e-12)
    assert api.validate(out).archive.kept_mass.tails_recorded


def test_a_foreign_file_between_commits_is_left_alone_and_said(tmp_path: Path) -> None:
    """Someone drops a file and a FIFO into the capture folder after a commit: the next commit
    refuses the folder, touches neither, keeps the committed shard, and the error says the
    manifest could not be marked failed (it still says open)."""
    out = tmp_path / "cap"
    rec = Recorder(out, logging_arm="greedy@1", commit_rounds=1, commit_seconds=None,
                   commit_idle_seconds=None)  # fmt: skip
    _point_mass(rec, "r", 0, [1], 1)
    deadline = time.monotonic() + 30
    while rec.commits == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    (out / "notes.txt").write_text("mine")
    os.mkfifo(out / "pipe")
    _point_mass(rec, "r", 1, [2], 1)
    with pytest.raises(SpecReplayError, match=r"kept only its 1 earlier commits \(CAPTURE.json "
                       r"could not be updated: it still says the writer is open\)"):  # fmt: skip
        rec.close()
    assert (out / "notes.txt").read_text() == "mine" and stat.S_ISFIFO(
        os.lstat(out / "pipe").st_mode
    )
    assert pl.read_parquet(out / "part-00000.parquet")["round"].to_list() == [0]
    (writer,) = json.loads((out / "CAPTURE.json").read_text())["writers"]
    assert writer["state"] == "open"

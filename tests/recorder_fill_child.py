"""A stand-in engine that records until its disk fills (run by tests/test_capture_disk_full.py).

``python tests/recorder_fill_child.py FOLDER WIDE [--validate] [--exit-open]``: records 3
periodic commits of small rounds, then rounds of WIDE candidates until the recorder's writer fails
(a file-size limit or a full disk the parent set up), then 200 more rounds as an engine would; it
times every ``round()`` call and every commit, and prints one JSON line. With ``--validate`` it
validates the folder itself (a tmpfs mounted in its own mount namespace vanishes with it). With
``--exit-open`` it leaves the recorder open: the process's exit closes it (atexit). Its log
(stderr) is the engine's: what the recorder says there is what a user would see.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from specreplay.capture import Recorder

TIMEOUT = 60.0  # seconds a phase may wait for the background thread (a loaded CI host)


def _wait(done: Any) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not done() and time.monotonic() < deadline:
        time.sleep(0.005)


def main() -> None:
    """Record, fill the disk, go on recording; print what happened as one JSON line."""
    folder, wide = Path(sys.argv[1]), int(sys.argv[2])
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(message)s")
    rng = np.random.default_rng(0)
    calls: list[float] = []
    commits: list[float] = []

    def offer(rec: Recorder, rid: str, k: int) -> bool:
        q = rng.dirichlet(np.ones(k), 3)
        p = rng.dirichlet(np.ones(k), 3)
        t0 = time.perf_counter()
        ok = rec.round(rid, 0, np.array([0, 1, 2]), p, 1, cand_ids=np.tile(np.arange(k), (3, 1)),
                       emitted_q=q, draft_logprobs=np.log(q))  # fmt: skip
        calls.append(time.perf_counter() - t0)
        return ok

    rec = Recorder(folder, logging_arm="t1@3", commit_rounds=10, commit_seconds=None,
                   commit_idle_seconds=None)  # fmt: skip
    commit = rec._writer.commit

    def timed_commit() -> bool:
        t0 = time.perf_counter()
        try:
            return commit()
        finally:
            commits.append(time.perf_counter() - t0)

    rec._writer.commit = timed_commit  # type: ignore[method-assign]
    with contextlib.nullcontext() if "--exit-open" in sys.argv else rec:
        for c in range(3):  # three periodic commits of 10 small rounds each
            for i in range(10):
                assert offer(rec, f"s{c}-{i}", 4)
            _wait(lambda c=c: rec.commits > c)
        wide_queued = sum(offer(rec, f"w{i}", wide) for i in range(60))
        _wait(lambda: rec.failure is not None)
        after = [offer(rec, f"z{i}", 4) for i in range(200)]  # the engine goes on
    out: dict[str, Any] = {
        "commits": rec.commits,
        "failure": rec.failure,
        "wide_queued": wide_queued,
        "after_queued": sum(after),
        "max_call": max(calls),
        "median_call": float(np.median(calls)),
        "max_commit": max(commits),
        "calls": len(calls),
    }
    if "--validate" in sys.argv:
        from specreplay import api

        res = api.validate(folder)
        assert res.archive is not None
        out["capture"] = res.extra["capture"]
        out["rows"] = res.archive.rows
    print(json.dumps(out))


if __name__ == "__main__":
    main()

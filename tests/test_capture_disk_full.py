"""A recorder that cannot write stops recording; the engine goes on (issue 17, item 1's recorders).

What a user expects when the disk fills at 3 a.m.: the engine keeps serving (``round()`` stays
fast and returns False, nothing raises, the process exits 0), the engine's log says once what
happened and what to do, and the capture so far stays readable (``validate`` reads the committed
rounds and says the writer failed). Two real failures, each in a child process (the stand-in
engine ``tests/recorder_fill_child.py``): a file-size limit (``RLIMIT_FSIZE``: Python ignores
SIGXFSZ, so the write fails with EFBIG, which polars raises as ``os error 27``) on every host, and
a full 256 KiB tmpfs (ENOSPC) mounted in the child's own mount namespace where that is permitted
(CI runs as root). In-process tests inject the failures (an OSError, a polars error carrying
``os error 28``) to check the ``with`` block and the line.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from specreplay.capture import Recorder
from specreplay.capture import recorder as recorder_module
from specreplay.errors import SpecReplayError
from tests.corpus import invoke, leftovers

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).with_name("recorder_fill_child.py")
LIMIT = 64 * 1024  # bytes: the small commits' shards (~8 KB) fit, a shard of wide rounds does not
WIDE = 300  # candidates of a wide round: 10 of them make a shard of ~200 KB


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}


def _stopped_lines(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if "recording stopped" in x]


def _check_child(res: subprocess.CompletedProcess[str], folder: Path, cause: str) -> dict[str, Any]:
    """Exit 0, one line in the log, round() fast and False after the failure; return the JSON."""
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    (line,) = _stopped_lines(res.stderr)
    assert line.startswith(f"ERROR specreplay recorder {folder}: recording stopped (the engine ")
    assert cause in line and "its 3 commits stay readable (CAPTURE.json marks this writer " in line
    assert "then record into a new folder" in line
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["commits"] == 3 and out["failure"] and out["after_queued"] == 0
    # never blocked: each call copies a few arrays and puts them on a queue; a commit writes and
    # renames a shard. 0.25 s is far above a call on a loaded 2-core host (~2 ms measured at
    # worst here, 11 µs median) and below what one blocking write of a shard would add
    assert out["max_call"] < 0.25 and out["median_call"] < 0.005, out
    return out


def _check_folder(folder: Path) -> None:
    """The committed rounds validate; the writer is said failed, with the cause, in the manifest."""
    (writer,) = json.loads((folder / "CAPTURE.json").read_text())["writers"]
    assert writer["state"].startswith("failed: ")
    assert writer["capture"]["counts"]["rounds_recorded"] == 30  # as of the last commit
    assert writer["rows"] == 90  # the rows committed: a shard whose write failed counts none
    res = invoke(["validate", str(folder), "-q"])
    assert res.exit_code == 0 and "VALID" in res.stdout, res.output
    assert "recorded 30 of 30 requests (sample 1, 1 writer) · 0 incomplete · 30 of 30 rounds · " \
           "90 rows" in res.stdout  # fmt: skip
    assert "1 writer failed after committing (CAPTURE.json says why)" in res.stdout
    assert pl.read_parquet(sorted(folder.glob("part-*.parquet"))).height == 90
    assert leftovers(folder.parent) == []  # the staged run was removed


@pytest.mark.parametrize("ending", ["with", "--exit-open"])
def test_a_file_size_limit_stops_recording_and_the_engine_goes_on(
    tmp_path: Path, ending: str
) -> None:
    """The recorder ends with a ``with`` block, or at the process's exit (atexit): exit 0."""
    folder = tmp_path / "cap"

    def limit() -> None:  # in the child only
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))

    res = subprocess.run(
        [sys.executable, str(CHILD), str(folder), str(WIDE), ending],
        preexec_fn=limit,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    out = _check_child(res, folder, "file too large: the file-size limit was reached (EFBIG")
    assert "(errno 27) while writing" in out["failure"]  # DiskFull, naming the shard
    _check_folder(folder)
    (writer,) = json.loads((folder / "CAPTURE.json").read_text())["writers"]
    assert "(errno 27) while writing" in writer["state"]


def test_a_full_tmpfs_stops_recording_and_the_engine_goes_on(tmp_path: Path) -> None:
    """ENOSPC for real: a 256 KiB tmpfs in the child's own mount namespace (root only)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    unshare = shutil.which("unshare")
    probe = (
        subprocess.run(
            [unshare, "-m", "sh", "-c", f"mount -t tmpfs -o size=4k tmpfs '{mnt}'"],
            capture_output=True,
            text=True,
        )
        if unshare
        else None
    )
    if probe is None or probe.returncode != 0:
        pytest.skip(
            "cannot mount a tmpfs in a new mount namespace here (needs unshare and root): "
            + (probe.stderr.strip() if probe is not None else "no unshare")
        )
    folder = mnt / "cap"
    script = (
        f"mount -t tmpfs -o size=256k tmpfs '{mnt}' && "
        f"exec '{sys.executable}' '{CHILD}' '{folder}' {WIDE} --validate"
    )
    res = subprocess.run(
        [unshare, "-m", "sh", "-c", script], capture_output=True, text=True, env=_env(),
        timeout=300,
    )  # fmt: skip
    out = _check_child(res, folder, "no space left on device (ENOSPC, errno 28)")
    # the folder vanished with the child's namespace: the child validated it
    cap = out["capture"]
    assert (cap["writers_failed"], cap["rounds_recorded"], out["rows"]) == (1, 30, 90)


# ------------------------------------------------------------------------------------------------
# in process: injected failures
# ------------------------------------------------------------------------------------------------


def _point_mass(rec: Recorder, rid: str, rnd: int) -> bool:
    return rec.round(rid, rnd, np.array([1]), np.full((1, 1), 0.5), 1, cand_ids=[[1]],
                     emitted_q=[[1.0]])  # fmt: skip


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (OSError(28, "No space left on device"), "no space left on device (ENOSPC, errno 28)"),
        (
            pl.exceptions.ComputeError("parquet: underlying IO error: No space left (os error 28)"),
            "no space left on device (ENOSPC, errno 28)",
        ),
        (OSError(27, "File too large"), "file too large: the file-size limit was reached"),
        (PermissionError(13, "Permission denied"), "PermissionError: [Errno 13] Permission"),
    ],
)
def test_a_write_failure_is_said_once_and_the_with_block_does_not_raise(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, error: BaseException, said: str
) -> None:
    folder = tmp_path / "cap"

    def fail(frame: pl.DataFrame) -> None:
        raise error

    with (
        caplog.at_level(logging.INFO, logger=recorder_module.LOGGER),
        Recorder(folder, logging_arm="greedy@1") as rec,
    ):
        rec._writer.append_frame = fail  # type: ignore[method-assign]
        assert _point_mass(rec, "r", 0)  # queued: the write fails on the background thread
        deadline = time.monotonic() + 30
        while rec.failure is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert rec.failure is not None
        assert not _point_mass(rec, "s", 0) and not rec.sampled("s")  # recording stopped
    # the with block ended without raising (the engine's code goes on)
    lines = [r for r in caplog.records if "recording stopped" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.ERROR
    assert said in lines[0].getMessage() and str(folder) in lines[0].getMessage()
    assert "nothing of this writer's run was committed" in lines[0].getMessage()
    with pytest.raises(SpecReplayError, match="the recorder failed on its background thread"):
        rec.close()  # an explicit close still says it
    assert not folder.exists() and leftovers(tmp_path) == []

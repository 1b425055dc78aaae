"""Stage timers (specreplay.timing): totals, nesting, an exit-time write that destroys nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from specreplay import timing


@pytest.fixture(autouse=True)
def _fresh_totals(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from no totals, start-up already recorded (so it adds no stage)."""
    monkeypatch.setattr(timing, "_totals", {})
    monkeypatch.setattr(timing, "_started", True)


def test_stage_adds_each_entry_and_nests(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([10.0, 10.5, 11.0, 13.0, 20.0, 20.25])  # outer 10→13 holds inner 10.5→11

    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    with timing.stage("outer"), timing.stage("inner"):
        pass
    with timing.stage("inner"):
        pass
    assert timing.totals() == {"inner": 0.5 + 0.25, "outer": 3.0}


def test_stage_counts_a_block_that_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([1.0, 3.5])
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    with pytest.raises(ValueError), timing.stage("failing"):
        raise ValueError
    assert timing.totals() == {"failing": 2.5}


_CHILD = (
    "from specreplay.timing import stage\n"
    "with stage('replay'):\n"
    "    pass\n"
    "with stage('plots'):\n"
    "    pass\n"
)


def _child(target: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop(timing.ENV, None)
    if target is not None:
        env[timing.ENV] = target
    return subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=120
    )


def test_exit_appends_one_json_line_and_keeps_what_was_there(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    out.write_text("kept\n")
    assert _child(str(out)).returncode == 0
    assert _child(str(out)).returncode == 0
    lines = out.read_text().splitlines()
    assert lines[0] == "kept" and len(lines) == 3
    for line in lines[1:]:
        got = json.loads(line)
        assert set(got) == {"start-up", "replay", "plots"} and all(v >= 0 for v in got.values())


def test_unset_writes_nothing(tmp_path: Path) -> None:
    proc = _child(None)
    assert proc.returncode == 0 and proc.stderr == "" and list(tmp_path.iterdir()) == []


def test_a_symlink_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "link").symlink_to(victim)
    proc = _child(str(tmp_path / "link"))
    assert proc.returncode == 0 and "not written" in proc.stderr
    assert victim.read_text() == "precious\n"


def test_a_fifo_is_left_alone(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = _child(str(fifo))  # no reader: the open fails at once instead of blocking
    assert proc.returncode == 0 and "not written" in proc.stderr


def test_a_device_is_not_written(tmp_path: Path) -> None:
    proc = _child("/dev/null")  # a character device: opened, checked, closed unwritten
    assert proc.returncode == 0 and "not a regular file" in proc.stderr


def test_timed_counts_the_producer_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # a clock both sides move: producing an item takes 1 s, the consumer's work on it 10 s
    now = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])

    def produce() -> Iterator[str]:
        for x in "ab":
            now[0] += 1.0
            yield x

    got = []
    for x in timing.timed("reading", produce()):
        got.append(x)
        now[0] += 10.0
    assert got == ["a", "b"]
    assert timing.totals() == {"reading": 2.0}  # 22.0 if the consumer's time were counted


def test_timed_counts_a_producer_that_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> Iterator[int]:
        yield 1
        raise ValueError("bad row")

    clock = iter([0.0, 1.0, 2.0, 4.0])
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    got = []
    with pytest.raises(ValueError, match="bad row"):
        for x in timing.timed("reading", broken()):
            got.append(x)
    assert got == [1]
    assert timing.totals() == {"reading": 1.0 + 2.0}


def test_a_requalify_run_reports_its_phases_and_stages(
    small_archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The glue: every phase reaches the display and the timers, the pass's stages nest in it."""
    from contextlib import contextmanager

    from specreplay.commands.requalify import run_requalify
    from specreplay.pipelines.options import RequalifyOptions

    seen: list[tuple[str, int | None, int]] = []

    @contextmanager
    def progress(what: str, total: int | None) -> Iterator[Callable[[int], None]]:
        done = [0]

        def advance(n: int) -> None:
            done[0] += n

        yield advance
        seen.append((what, total, done[0]))

    opts = RequalifyOptions.build(
        baseline="top32:t0.7@5", candidate="top32:t0.7:dyadic24@5", n_boot=200
    )
    run_requalify(small_archive, opts, out=tmp_path / "o", force=False, progress=progress)
    phases = [what for what, _, _ in seen]
    assert phases == [
        "replaying",
        "tail check (auto)",
        "resampling",
        "comparisons and law tests",
        "plots and files",
    ]
    rows = 64 * 8 * 5
    assert seen[0][1:] == (rows, rows)  # the replay phase counts every position once
    t = timing.totals()
    assert set(phases) <= set(t)
    # the default pass (analytic with the importance companion) replays every arm in one kernel
    inner = ["arms (all)", "accumulating", "shard totals (tails cut)", "fold"]
    assert "arms (analytic)" not in t and "arms (importance)" not in t
    assert all(t[s] > 0 for s in inner), t
    # stages inside the pass add up to no more than the pass (plus the first batch, read
    # and validated when the archive is opened, before the pass)
    assert sum(t[s] for s in inner) <= t["replaying"]
    assert t["plots: drawing and saving"] <= t["plots and files"]


def test_stage_as_a_decorator_times_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([0.0, 2.0, 10.0, 10.5])
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))

    @timing.stage("fold")
    def merge(a: int, b: int) -> int:
        return a + b

    assert merge(1, 2) == 3 and merge(3, 4) == 7
    assert timing.totals() == {"fold": 2.0 + 0.5}


_LATE_CHILD = (
    "import time\n"
    "time.sleep(0.3)  # before specreplay is imported: start-up still counts it\n"
    "from specreplay.timing import STARTED_AT, stage\n"
    "assert STARTED_AT == 'process', STARTED_AT\n"
    "time.sleep(0.2)\n"
    "with stage('work'):\n"
    "    time.sleep(0.1)\n"
)


def test_start_up_runs_from_the_process_start_to_the_first_stage(tmp_path: Path) -> None:
    """The child sleeps 0.3 s before importing specreplay and 0.2 s more before its first stage:
    start-up holds both (≥ 0.5 s, so it counts from the process's start, not from the import)
    and no more than the child's whole life as the parent saw it; the stage after it is its own.
    """
    out = tmp_path / "t.jsonl"
    env = dict(os.environ, **{timing.ENV: str(out)})
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", _LATE_CHILD], env=env, check=True, timeout=120)
    wall = time.perf_counter() - t0
    got = json.loads(out.read_text())
    assert set(got) == {"start-up", "work"}
    assert 0.5 <= got["start-up"] <= wall - got["work"]
    assert 0.1 <= got["work"] < wall


def test_start_up_is_recorded_once_at_the_first_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([7.0, 8.0, 9.0, 9.5])  # the process started at 5.0 (the origin)
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(timing, "_ORIGIN", 5.0)
    monkeypatch.setattr(timing, "_started", False)
    with timing.stage("first"):
        pass
    with timing.stage("second"):
        pass
    assert timing.totals() == {"start-up": 2.0, "first": 1.0, "second": 0.5}


def test_start_ticks_reads_field_22_past_a_command_name_with_spaces() -> None:
    # fields 3.. after the name: state, ppid, …; field 22 (starttime) is the 20th of them
    tail = " ".join(["S", *(str(n) for n in range(4, 22)), "123456", "99", "100"])
    assert timing.start_ticks(f"4242 (a) (b c)) {tail}\n".encode()) == 123456
    with pytest.raises(ValueError):
        timing.start_ticks(b"4242 no name here")


def test_without_proc_start_up_counts_from_the_package_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import specreplay

    monkeypatch.setattr(timing, "_process_age", lambda: None)
    assert timing._origin() == (specreplay.IMPORTED_AT, "import")

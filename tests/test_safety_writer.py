"""Issue 9, item 9: ``TraceWriter`` never mixes runs.

A folder that holds an earlier run (or anything) is refused unless the writer is opened with
``mode="replace"`` (only a folder a TraceWriter wrote, known by its ``CAPTURE.json``) or
``mode="append"`` (schema, logging arm and request ids checked; several processes may append at
once, each shard named ``part-<writer>-NNNNN``). ``validate`` is the judge of what a reader then
sees: its row count is computed here from the rows written, and every case checks that a refusal
leaves the folder as it was and nothing half-written beside it (``tests/corpus.py``).
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from archive_factory import valid_rows
from corpus import invoke, leftovers, tree_digest

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.writer import MANIFEST, TraceWriter


def _rows(prefix: str, n_requests: int, seed: int) -> list[dict[str, Any]]:
    """Seeded valid rows, request ids renamed ``<prefix>-req-N`` (3 positions × 2 rounds each)."""
    rows = valid_rows(n_requests=n_requests, seed=seed)
    for r in rows:
        r["request_id"] = f"{prefix}-{r['request_id']}"
    return rows


def _write(path: Path, rows: list[dict[str, Any]], **kw: Any) -> list[Path]:
    with TraceWriter(path, shard_rows=6, **kw) as w:
        for r in rows:
            w.append(r)
    return w.written


def _valid_rows(path: Path) -> int:
    """Run ``specreplay validate``; return the row count it reports (exit 0, VALID)."""
    res = invoke(["validate", str(path)])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.stdout.splitlines() if ": VALID, " in x)
    return int(line.rsplit(", ", 1)[1].removesuffix(" rows").replace(",", ""))


def _refused(path: Path, call: Any, *fragments: str) -> None:
    """``call()`` raises naming every fragment; the folder is unchanged, nothing left beside it."""
    before = tree_digest(path)
    with pytest.raises(SpecReplayError) as err:
        call()
    for f in fragments:
        assert f in str(err.value), (f, str(err.value))
    assert tree_digest(path) == before
    assert not leftovers(path.parent, path), leftovers(path.parent, path)


def test_folder_with_an_old_run_is_refused(tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    _write(arch, _rows("old", 4, 1))
    _refused(arch, lambda: TraceWriter(arch), f"{arch}: the folder is not empty", 'mode="replace"')
    # a folder holding anything at all, too
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    _refused(other, lambda: TraceWriter(other), f"{other}: the folder is not empty", "notes.txt")


def test_replace_leaves_only_the_new_run(tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    # 5 requests × 2 rounds × 3 positions = 30 rows; a shard is cut at the round boundary
    # before row 6 is buffered again: 10 shards of one round (3 rows) each
    old = _write(arch, _rows("old", 5, 1))
    assert len(old) == 10 and _valid_rows(arch) == 30
    new = _rows("new", 2, 2)  # 12 rows, 4 shards
    _write(arch, new, mode="replace")
    assert sorted(p.name for p in arch.iterdir()) == [
        MANIFEST,
        *(f"part-{i:05d}.parquet" for i in range(4)),
    ]
    assert _valid_rows(arch) == len(new) == 12
    manifest = json.loads((arch / MANIFEST).read_text())
    assert manifest["written_by"] == "specreplay"
    assert manifest["writers"][0]["rows"] == 12
    assert not leftovers(tmp_path)


def test_replace_and_append_take_an_empty_or_absent_folder(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    _write(empty, _rows("n", 1, 1), mode="replace")
    _write(tmp_path / "absent", _rows("n", 1, 1), mode="append", writer_id="first")
    assert _valid_rows(empty) == _valid_rows(tmp_path / "absent") == 6
    assert sorted(p.name for p in (tmp_path / "absent").iterdir()) == [
        MANIFEST,
        "part-first-00000.parquet",
        "part-first-00001.parquet",
    ]
    assert not leftovers(tmp_path)


def test_replace_refuses_a_folder_without_manifest(tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    _write(arch, _rows("old", 2, 1))
    (arch / MANIFEST).unlink()  # shards a TraceWriter did not vouch for
    _refused(arch, lambda: TraceWriter(arch, mode="replace"), f"{arch}: no {MANIFEST}")
    # and a TraceWriter folder that someone added a file to
    ours = tmp_path / "ours"
    _write(ours, _rows("old", 2, 1))
    (ours / "notes.txt").write_text("mine")
    _refused(ours, lambda: TraceWriter(ours, mode="replace"), f"{ours}: holds notes.txt")


def test_run_left_by_an_exception_writes_nothing(tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    _write(arch, _rows("old", 2, 1))
    before = tree_digest(arch)
    with pytest.raises(RuntimeError), TraceWriter(arch, mode="replace", shard_rows=6) as w:
        for r in _rows("new", 3, 2):
            w.append(r)
        raise RuntimeError("engine crashed")
    assert tree_digest(arch) == before and not leftovers(tmp_path)


def test_single_file_refused_unless_replace(tmp_path: Path) -> None:
    f = tmp_path / "a.jsonl"
    _write(f, _rows("old", 2, 1))
    _refused(f, lambda: TraceWriter(f), f"{f}: exists", 'mode="replace"')
    _refused(f, lambda: TraceWriter(f, mode="append"), "cannot be appended to")
    _write(f, _rows("new", 1, 2), mode="replace")
    assert _valid_rows(f) == 6


def _append_worker(path: str, prefix: str, n_requests: int, seed: int) -> None:
    _write(Path(path), _rows(prefix, n_requests, seed), mode="append", writer_id=prefix)


def test_two_processes_append_at_once(tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    first = _rows("base", 2, 1)  # a run written first, then two writers append together
    _write(arch, first)
    ctx = multiprocessing.get_context("spawn")  # fork is unsafe once polars' threads run
    procs = [
        ctx.Process(target=_append_worker, args=(str(arch), "a", 3, 11)),
        ctx.Process(target=_append_worker, args=(str(arch), "b", 4, 12)),
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    assert _valid_rows(arch) == (2 + 3 + 4) * 6
    # one round (3 rows) a shard: 4 shards of the first run, 6 of writer a, 8 of writer b, each
    # writer's shards together in sorted path order
    assert sorted(p.name for p in arch.iterdir()) == [
        MANIFEST,
        *(f"part-{i:05d}.parquet" for i in range(4)),
        *(f"part-a-{i:05d}.parquet" for i in range(6)),
        *(f"part-b-{i:05d}.parquet" for i in range(8)),
    ]
    manifest = json.loads((arch / MANIFEST).read_text())
    assert sorted(str(w["writer"]) for w in manifest["writers"]) == ["None", "a", "b"]
    assert sum(w["rows"] for w in manifest["writers"]) == 54
    assert not leftovers(tmp_path)


def test_append_request_id_collision_names_it(tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    _write(arch, _rows("x", 3, 1))
    clash = _rows("x", 1, 5)  # x-req-0 again
    before = tree_digest(arch)
    with pytest.raises(SpecReplayError, match=r"request id 'x-req-0' of this writer is already "
                       r"in part-00000\.parquet"):  # fmt: skip
        _write(arch, clash, mode="append", writer_id="late")
    assert tree_digest(arch) == before and not leftovers(tmp_path)


def test_append_with_another_logging_arm_is_refused(tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    _write(arch, _rows("x", 2, 1))
    other = _rows("y", 2, 2)
    for r in other:
        r["logging_arm"] = "top8@3"
    before = tree_digest(arch)
    with pytest.raises(SpecReplayError, match=r"logs arm\(s\) \['top8@3'\].*one logging arm"):
        _write(arch, other, mode="append")
    assert tree_digest(arch) == before and not leftovers(tmp_path)


def test_append_with_another_schema_is_refused(tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    _write(arch, _rows("x", 2, 1))
    other = _rows("y", 2, 2)
    for r in other:
        del r["emitted_q"]
    before = tree_digest(arch)
    with pytest.raises(SpecReplayError, match=r"columns differ from the folder's .*emitted_q"):
        _write(arch, other, mode="append")
    assert tree_digest(arch) == before and not leftovers(tmp_path)


def test_option_and_target_messages(tmp_path: Path) -> None:
    with pytest.raises(SpecReplayError, match=r"unknown mode 'merge' \(expected new, replace"):
        TraceWriter(tmp_path / "a", mode="merge")
    with pytest.raises(SpecReplayError, match=r"writer_id 'w-1' should be a letter then letters"):
        TraceWriter(tmp_path / "a", mode="append", writer_id="w-1")
    f = tmp_path / "file"
    f.write_text("x")
    _refused(f, lambda: TraceWriter(f, format="parquet-dir"), f"{f}: exists and is not a folder")
    arch = tmp_path / "arch"
    _write(arch, _rows("x", 1, 1))
    _refused(
        arch,
        lambda: TraceWriter(arch, format="jsonl-dir", mode="append"),
        f"{arch}: {MANIFEST} says format 'parquet-dir'; this writer writes 'jsonl-dir'",
    )
    assert not (tmp_path / "a").exists()


def test_append_sees_another_appenders_manifest_update(tmp_path: Path) -> None:
    """A writer opening while another rewrites CAPTURE.json sees ``.CAPTURE.json.tmp-PID`` for an
    instant: it is the other writer's, not a stranger's file (CI caught the race once). A
    symlink or folder of that name, or another hidden name, is still refused."""
    arch = tmp_path / "arch"
    _write(arch, _rows("base", 2, 1))
    in_flight = arch / ".CAPTURE.json.tmp-4242"
    in_flight.write_text("{}")
    _write(arch, _rows("a", 1, 2), mode="append", writer_id="a")
    in_flight.unlink()
    assert _valid_rows(arch) == 3 * 6
    for name, make in [
        (".CAPTURE.json.tmp-4242", lambda p: p.symlink_to(arch / MANIFEST)),
        (".CAPTURE.json.tmp-4243", lambda p: p.mkdir()),
        (".CAPTURE.json.tmp-x", lambda p: p.write_text("{}")),
    ]:
        make(arch / name)
        before = tree_digest(arch)
        with pytest.raises(SpecReplayError, match=f"{arch}: holds {name}".replace(".", r"\.")):
            TraceWriter(arch, mode="append", writer_id="c")
        assert tree_digest(arch) == before
        p = arch / name
        p.rmdir() if p.is_dir() and not p.is_symlink() else p.unlink()


def test_a_later_commit_refuses_a_request_another_writer_committed(tmp_path: Path) -> None:
    """Periodic commits: each commit's request ids are checked against the other writers'
    shards, not only the first one's (a request's rows come from one writer)."""
    folder = tmp_path / "cap"
    rows_a = _rows("a", 2, 1)
    a = TraceWriter(folder, mode="append", writer_id="a")
    for r in rows_a:
        a.append(r)
    a.commit()
    b = TraceWriter(folder, mode="append", writer_id="b")
    for r in _rows("b", 1, 2):
        b.append(r)
    assert b.commit()  # its first commit: no clash
    for r in [x for x in rows_a if x["request_id"] == rows_a[0]["request_id"]]:
        b.append(r)  # a request writer a committed
    with pytest.raises(
        SpecReplayError, match=r"request id 'a-req-0' of this writer is already in part-a-"
    ):
        b.commit()
    a.close()

"""Issue 18, item 1: validate once per content, and issue 9's cache attacks on the marks.

A file that passed a full check is not checked row by row again while its stamp, its digest and
the validator are unchanged (:mod:`specreplay.replay.archive.validated`). Each attack leads to a
full check; "a full check ran" is shown by a defect only the full check catches (a duplicate
cand_id: the guards do not look for one), named with its line in exit 2's one error line. A
forged mark on a file with such a defect is honoured while it is intact (exit 0: the control that
proves the attack's run would have skipped), so each attack's exit 2 is the full check's doing.

The archive: :func:`archive_factory.valid_rows` as one JSON Lines shard (all optional columns).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from archive_factory import LOGGING_ARM, clone, valid_rows, write_jsonl
from corpus import assert_clean, assert_refused, error_lines, invoke, tree_digest

from specreplay.replay.archive import guards, validated
from specreplay.replay.archive.filehash import Stamp, file_sha256, new_run
from specreplay.replay.archive.schema import SCHEMA_V1

CAND = "top4:t1:dyadic24@3"
FAST = ["-q", "--n-boot", "100", "--min-requests", "2"]
ROWS = valid_rows(n_requests=6, n_rounds=3, seed=11)
DUP_ROW = next(
    i for i, r in enumerate(ROWS) if len(str(r["cand_ids"][0])) == len(str(r["cand_ids"][1]))
)
LINE = DUP_ROW + 1  # JSON Lines: row i is line i + 1


@pytest.fixture(autouse=True)
def _honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Marks honoured (tests/conftest.py turns them off), an input-hash cache of the test's own."""
    monkeypatch.setattr(validated, "HONOURED", True)
    monkeypatch.setenv("SPECREPLAY_CACHE_DIR", str(tmp_path / "home"))


def _text(rows: list[dict[str, Any]], tmp: Path) -> bytes:
    p = write_jsonl(tmp / "scratch.jsonl", rows)
    data = p.read_bytes()
    p.unlink()
    return data


def _dup_rows() -> list[dict[str, Any]]:
    """The rows with row DUP_ROW's second cand_id set to its first: same bytes count."""
    rows = clone(ROWS)
    rows[DUP_ROW]["cand_ids"][1] = rows[DUP_ROW]["cand_ids"][0]
    return rows


@pytest.fixture
def shard(tmp_path: Path) -> Path:
    archive = tmp_path / "archive"
    archive.mkdir()
    p = archive / "part-0.jsonl"
    p.write_bytes(_text(ROWS, tmp_path))
    return p


def _run(shard: Path, out: str, *extra: str) -> Any:
    return invoke(["requalify", str(shard.parent), "--baseline", LOGGING_ARM, "--candidate", CAND,
                   *FAST, "--out", str(shard.parent.parent / out), *extra])  # fmt: skip


def _figures(out: Path) -> str:
    doc = json.loads((out / "results.json").read_text())
    return json.dumps([doc["cells"], doc["law_tests"], doc["requalification"]], sort_keys=True)


def _forge(path: Path) -> Path:
    """Write a mark for ``path`` as it is now (what a full pass would write); return the mark."""
    new_run()
    digest = file_sha256(path)  # its input-hash cache entry, which the mark is tied to
    stamp = Stamp.of(path)
    validated.write_mark(stamp, digest, frozenset(SCHEMA_V1))
    return validated._mark_path(stamp)


def _refused_full(shard: Path, res: Any, before: dict[str, str]) -> None:
    """The full check ran: the duplicate's line named, exit 2, nothing else changed."""
    assert_refused(res, "part-0.jsonl", f"line {LINE}", "duplicate cand_ids")
    assert_clean(res, before, [shard.parent])


def _rewrite_in_place(path: Path, data: bytes) -> None:
    st = path.stat()
    with path.open("r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_ino, path.stat().st_size, path.stat().st_mtime_ns) == (
        st.st_ino, st.st_size, st.st_mtime_ns)  # fmt: skip


def _recreate(path: Path, data: bytes) -> None:
    st = path.stat()
    path.unlink()
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # cp -p, rsync -t, tar x


# ---------------------------------------------------------------------------------------------
# the positive case


def test_a_second_run_skips_says_so_on_line_2_and_gives_the_same_figures(shard: Path) -> None:
    first = _run(shard, "first")
    assert first.exit_code == 0, first.output
    assert first.stdout.splitlines()[1] == "Excluded: nothing"  # nothing was marked before
    doc = json.loads((shard.parent.parent / "first" / "results.json").read_text())
    assert doc["validation"] == {"files": 1, "validated_earlier": 0,
                                 "validator": validated.validator_hash()}  # fmt: skip
    second = _run(shard, "second")
    assert second.exit_code == 0, second.output
    short = validated.validator_hash()[:8]
    assert second.stdout.splitlines()[1] == (
        f"Reused: rows validated earlier: 1 of 1 file unchanged since a full check (validator "
        f"{short}); --revalidate checks every row; nothing excluded"
    )
    doc = json.loads((shard.parent.parent / "second" / "results.json").read_text())
    assert doc["validation"]["validated_earlier"] == 1
    assert _figures(shard.parent.parent / "second") == _figures(shard.parent.parent / "first")
    third = _run(shard, "third", "--revalidate")
    assert third.exit_code == 0, third.output
    assert third.stdout.splitlines()[1] == "Excluded: nothing"


def test_a_forged_mark_is_honoured_until_revalidate_or_validate(shard: Path) -> None:
    """The control of every attack below: an intact mark on a bad file skips its row rules."""
    shard.write_bytes(_text(_dup_rows(), shard.parent.parent))
    _forge(shard)
    before = tree_digest(shard.parent)
    res = _run(shard, "skipped")
    assert res.exit_code == 0, res.output  # the duplicate went unseen: the mark was honoured
    _refused_full(shard, _run(shard, "revalidated", "--revalidate"), before)
    res = invoke(["validate", str(shard.parent)])
    assert res.exit_code == 2 and f"line {LINE}: duplicate cand_ids" in res.stderr, res.output


# ---------------------------------------------------------------------------------------------
# the attacks: each leads to a full check


@pytest.mark.parametrize("change", [_rewrite_in_place, _recreate], ids=["in-place", "recreated"])
def test_a_file_changed_behind_its_mtime_is_checked_in_full(shard: Path, change: Any) -> None:
    first = _run(shard, "first")
    assert first.exit_code == 0, first.output
    assert list((shard.parent.parent / "home" / "validated").rglob("*")), "no mark written"
    change(shard, _text(_dup_rows(), shard.parent.parent))
    before = tree_digest(shard.parent)
    _refused_full(shard, _run(shard, "second"), before)


def test_a_flipped_byte_in_the_mark_is_a_full_check(shard: Path) -> None:
    shard.write_bytes(_text(_dup_rows(), shard.parent.parent))
    mark = _forge(shard)
    data = mark.read_bytes()
    # a letter of a column the file lacks: still a mark that would match, but not the sealed bytes
    i = data.index(b'"target_tail"') + 2
    mark.write_bytes(data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :])
    before = tree_digest(shard.parent)
    _refused_full(shard, _run(shard, "second"), before)


def test_a_flipped_byte_in_the_digest_entry_is_a_full_check(shard: Path) -> None:
    """The mark is tied to the SHA-256 of the input-hash cache's entry of the same stamp."""
    shard.write_bytes(_text(_dup_rows(), shard.parent.parent))
    _forge(shard)
    (entry,) = (shard.parent.parent / "home" / "hashes").rglob("*/*")
    data = entry.read_bytes()
    entry.write_bytes(data[:-5] + bytes([data[-5] ^ 0x01]) + data[-4:])
    before = tree_digest(shard.parent)
    _refused_full(shard, _run(shard, "second"), before)


@pytest.mark.parametrize("how", ["group-writable", "other-writable", "another-owner"])
def test_marks_in_a_folder_another_user_can_write_are_ignored(
    shard: Path, how: str, tmp_path: Path
) -> None:
    def expose(folder: Path) -> None:
        if how == "another-owner":
            os.chown(folder, 65534, 65534)
        else:
            folder.chmod(0o775 if how == "group-writable" else 0o757)

    shard.write_bytes(_text(_dup_rows(), shard.parent.parent))
    expose(_forge(shard).parent)  # the entry's folder only
    before = tree_digest(shard.parent)
    _refused_full(shard, _run(shard, "second"), before)
    # a valid file in such a cache: the run completes, checks every row, says why on stderr
    shard.write_bytes(_text(ROWS, tmp_path))
    expose(_forge(shard).parent.parent)  # the folder of every mark
    res = _run(shard, "third")
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[1] == "Excluded: nothing"
    notes = [x for x in error_lines(res) if x.startswith("note: the validation marks")]
    assert len(notes) == 1 and "every row is checked this run" in notes[0], res.stderr
    assert ("another user" if how == "another-owner" else "writable by group or others") in notes[0]


def test_a_mark_of_another_validator_is_a_full_check(
    shard: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shard.write_bytes(_text(_dup_rows(), shard.parent.parent))
    monkeypatch.setattr(validated, "validator_hash", lambda: "0" * 64)
    _forge(shard)
    monkeypatch.undo()  # the validator's own hash again (and the fixture's settings with it)
    monkeypatch.setattr(validated, "HONOURED", True)
    monkeypatch.setenv("SPECREPLAY_CACHE_DIR", str(shard.parent.parent / "home"))
    before = tree_digest(shard.parent)
    _refused_full(shard, _run(shard, "second"), before)


def test_a_forged_mark_on_a_nan_row_still_fails_on_the_guards(
    shard: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = clone(ROWS)
    rows[DUP_ROW]["target_probs"][2] = float("nan")
    shard.write_bytes(_text(rows, shard.parent.parent))
    _forge(shard)
    fired: list[bool] = []
    real = guards.fired

    def spy(*args: Any) -> bool:
        fired.append(real(*args))
        return fired[-1]

    monkeypatch.setattr(guards, "fired", spy)
    before = tree_digest(shard.parent)
    res = _run(shard, "second")
    assert fired == [True]  # the mark was honoured: the guards, not the row rules, saw the row
    assert_refused(res, "part-0.jsonl", f"line {LINE}", "NaN or inf in target_probs")
    assert_clean(res, before, [shard.parent])


# ---------------------------------------------------------------------------------------------
# what a mark covers


def test_a_mark_covers_only_the_columns_its_pass_read(shard: Path) -> None:
    new_run()
    validated.new_run(honour=True)
    digest = file_sha256(shard)
    validated.write_mark(Stamp.of(shard), digest, frozenset({"cand_ids", "target_probs"}))
    assert validated.skips(shard, frozenset({"cand_ids"}))
    validated.new_run(honour=True)
    assert not validated.skips(shard, frozenset({"cand_ids", "emitted_q"}))
    validated.new_run(honour=False)  # --revalidate, validate, a Dask worker
    assert not validated.skips(shard, frozenset({"cand_ids"}))
    validated.new_run(honour=True)
    assert validated.skips(shard, frozenset({"cand_ids"}))  # the first batch, read locally
    validated.dask_run()  # --workers / --scheduler: the workers read every shard again
    assert not validated.skips(shard, frozenset({"cand_ids"}))
    assert validated.summary([shard]) == validated.Validation(1, 0, validated.validator_hash())


def test_lawtest_says_which_files_it_validated_earlier(shard: Path) -> None:
    args = ["lawtest", str(shard.parent), "--arm", CAND, "--positions", "20", "--max-draws",
            "20000", "-q"]  # fmt: skip
    first = invoke([*args, "--out", str(shard.parent.parent / "first")])
    assert first.exit_code == 0 and "validated earlier" not in first.stdout, first.output
    second = invoke([*args, "--out", str(shard.parent.parent / "second")])
    assert second.exit_code == 0, second.output
    reused = [x for x in second.stdout.splitlines() if x.startswith("Reused: ")]
    assert reused == [
        f"Reused: rows validated earlier: 1 of 1 file unchanged since a full check (validator "
        f"{validated.validator_hash()[:8]}); --revalidate checks every row"
    ]

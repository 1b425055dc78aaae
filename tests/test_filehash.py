"""The input-hash cache: digests equal hashlib's, and a changed file is hashed again."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from specreplay.replay.archive.filehash import file_sha256, hash_stats, reset_hash_stats


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("SPECREPLAY_CACHE_DIR", str(folder))
    reset_hash_stats()
    return folder


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_second_read_comes_from_the_cache(tmp_path: Path, cache: Path) -> None:
    f = tmp_path / "a.parquet"
    f.write_bytes(os.urandom(3 << 20) + b"tail")
    assert file_sha256(f) == _sha(f)
    assert file_sha256(f) == _sha(f)
    s = hash_stats()
    assert (s.computed, s.hits, s.bytes_read) == (1, 1, f.stat().st_size)
    assert len(list(cache.rglob("*"))) > 0  # the entry lives under the cache folder …
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.parquet", "cache"]  # … not beside


def test_a_file_rewritten_in_place_is_hashed_again(tmp_path: Path, cache: Path) -> None:
    f = tmp_path / "a.jsonl"
    f.write_bytes(b"x" * 1000)
    first = file_sha256(f)
    st = f.stat()
    with f.open("r+b") as fh:  # same size, same inode, new content and modification time
        fh.write(b"y")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert f.stat().st_ino == st.st_ino and f.stat().st_size == st.st_size
    assert file_sha256(f) == _sha(f) != first
    assert hash_stats().computed == 2


def test_a_file_replaced_by_rename_is_hashed_again(tmp_path: Path, cache: Path) -> None:
    f = tmp_path / "a.jsonl"
    f.write_bytes(b"x" * 1000)
    file_sha256(f)
    st = f.stat()
    new = tmp_path / "b.tmp"
    new.write_bytes(b"z" * 1000)
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and time, another inode
    keep = tmp_path / "keep"  # hold the old inode so the new file cannot reuse its number
    os.link(f, keep)
    os.replace(new, f)
    assert f.stat().st_ino != st.st_ino
    assert file_sha256(f) == _sha(f)
    assert hash_stats().computed == 2


def test_an_unwritable_cache_costs_only_the_hashing(tmp_path: Path, cache: Path) -> None:
    cache.write_text("a file where the folder should be")
    f = tmp_path / "a.parquet"
    f.write_bytes(b"abc")
    assert file_sha256(f) == file_sha256(f) == _sha(f)
    assert hash_stats().computed == 2


def test_no_cache_writes_nothing(tmp_path: Path, cache: Path) -> None:
    f = tmp_path / "a.parquet"
    f.write_bytes(b"abc")
    assert file_sha256(f, cache=False) == _sha(f)
    assert not cache.exists()


def test_requalify_hashes_each_input_once_then_reads_the_cache(
    small_archive: Path, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first run reads every shard for its SHA-256 and says what it cost; a second run takes
    the digests from the cache (the same digests in results.json) and says nothing."""
    import json

    from typer.testing import CliRunner

    from specreplay import cli

    monkeypatch.setattr(cli, "HASH_NOTE_SECONDS", 0.0)
    shards = sorted(small_archive.glob("*.parquet"))
    args = ["requalify", str(small_archive), "--baseline", "top32:t0.7@5", "--candidate",
            "top32:t0.7:dyadic24@5", "--n-boot", "200", "--min-requests", "5", "-q"]  # fmt: skip
    runs = []
    for k in range(2):
        out = tmp_path / f"run{k}"
        res = CliRunner().invoke(cli.app, [*args, "--out", str(out)])
        assert res.exit_code == 0, res.output
        runs.append((res.stderr, hash_stats(), json.loads((out / "results.json").read_text())))
    (err0, s0, doc0), (err1, s1, doc1) = runs
    assert (s0.computed, s0.hits) == (len(shards), 0)
    assert s0.bytes_read == sum(p.stat().st_size for p in shards)
    assert f"hashed {len(shards)} input files (" in err0
    assert (s1.computed, s1.hits) == (0, len(shards)) and "hashed" not in err1
    assert [i["sha256"] for i in doc1["inputs"]] == [_sha(p) for p in shards]
    assert doc0["inputs"] == doc1["inputs"]

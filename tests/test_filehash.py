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

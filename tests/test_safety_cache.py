"""Issue 9, item 2: caches never serve a stale or corrupt figure.

Cases, each checked against a run WITHOUT any cache on the current bytes (same figures) and with
:func:`corpus.assert_clean` (no traceback, inputs as they were, nothing half-written):

- a shard rewritten in place at the same size with its modification time put back (``os.utime``
  with nanoseconds), and a shard deleted and re-created with its modification time preserved (as
  ``cp -p`` leaves it; the inode number may or may not be reused: the change time catches both),
  served neither from ``--cache`` nor from the input-hash cache; ``inputs[].sha256`` is the new
  digest;
- a cache entry damaged (one payload byte flipped, truncated, header only), in the per-shard
  cache and in the input-hash cache alike: recomputed, counted in results.json
  (``replay_backend.cache.recomputed`` / ``cache.recomputed``) and on the stderr cache line;
- a shard changed between its digest and the check after the replay (a callback changes it while
  the run is in progress): exit 2, one line ``PATH: changed during the run``, nothing written.

The archive: :func:`archive_factory.valid_rows` as one JSON Lines shard. The rewritten shard
holds the same rows with every target law reversed: the same multiset of numbers, so the same
bytes count, and a different acceptance (checked: the figures differ).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from archive_factory import LOGGING_ARM, clone, valid_rows, write_jsonl
from corpus import assert_clean, assert_refused, error_lines, invoke, leftovers, tree_digest

from specreplay.replay.archive import filehash
from specreplay.replay.archive.filehash import Stamp, file_sha256, hash_stats, new_run
from specreplay.replay.archive.sealed import seal, unseal

BASE, CAND = LOGGING_ARM, "top4:t1:dyadic24@3"
FAST = ["-q", "--n-boot", "100", "--min-requests", "2"]


def _rows(reverse: bool) -> list[dict[str, Any]]:
    rows = clone(valid_rows(n_requests=6, n_rounds=3, seed=11))
    if reverse:
        for r in rows:
            r["target_probs"] = r["target_probs"][::-1]
    return rows


def _text(reverse: bool, tmp: Path) -> bytes:
    p = write_jsonl(tmp / f"scratch-{reverse}.jsonl", _rows(reverse))
    data = p.read_bytes()
    p.unlink()
    return data


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """An archive folder with one shard, a --cache folder, an input-hash cache under tmp_path."""
    monkeypatch.setenv("SPECREPLAY_CACHE_DIR", str(tmp_path / "hashes-home"))
    archive = tmp_path / "archive"
    archive.mkdir()
    shard = archive / "part-0.jsonl"
    old, new = _text(False, tmp_path), _text(True, tmp_path)
    assert len(old) == len(new) and old != new
    shard.write_bytes(old)
    return {"tmp": tmp_path, "archive": archive, "shard": shard, "old": old, "new": new,
            "cache": tmp_path / "shard-cache"}  # fmt: skip


def _run(s: dict[str, Any], out: str, *, cache: bool) -> tuple[Any, dict[str, Any]]:
    args = ["requalify", str(s["archive"]), "--baseline", BASE, "--candidate", CAND, *FAST,
            "--out", str(s["tmp"] / out)]  # fmt: skip
    if cache:
        args += ["--cache", str(s["cache"])]
    res = invoke(args)
    assert res.exit_code == 0, res.output
    return res, json.loads((s["tmp"] / out / "results.json").read_text())


def _figures(doc: dict[str, Any]) -> str:
    return json.dumps([doc["cells"], doc["law_tests"], doc["requalification"]], sort_keys=True)


def _reference(s: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A run without any cache on the current bytes (its own, empty input-hash cache)."""
    monkeypatch.setenv("SPECREPLAY_CACHE_DIR", str(s["tmp"] / "fresh-hashes"))
    _, doc = _run(s, "reference", cache=False)
    monkeypatch.setenv("SPECREPLAY_CACHE_DIR", str(s["tmp"] / "hashes-home"))
    return doc


def _rewrite_in_place(shard: Path, data: bytes) -> None:
    st = shard.stat()
    with shard.open("r+b") as fh:
        fh.write(data)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = shard.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (st.st_ino, st.st_size,
                                                                st.st_mtime_ns)  # fmt: skip


def _recreate(shard: Path, data: bytes) -> None:
    st = shard.stat()
    shard.unlink()
    shard.write_bytes(data)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))  # cp -p, rsync -t, tar x
    assert (shard.stat().st_size, shard.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)


CHANGES: dict[str, Callable[[Path, bytes], None]] = {
    "rewritten-in-place": _rewrite_in_place,
    "deleted-and-recreated": _recreate,
}


# ---------------------------------------------------------------------------------------------
# stale: a shard whose bytes changed behind a restored modification time


@pytest.mark.parametrize("cache", [True, False], ids=["shard-cache", "input-hash-cache-only"])
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_changed_shard_is_never_served_stale(
    setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch, change: str, cache: bool
) -> None:
    s = setup
    _, first = _run(s, "first", cache=cache)
    CHANGES[change](s["shard"], s["new"])
    before = tree_digest(s["archive"])
    res, doc = _run(s, "second", cache=cache)
    assert_clean(res, before, [s["archive"]])
    reference = _reference(s, monkeypatch)
    assert _figures(doc) == _figures(reference) != _figures(first)
    new_digest = hashlib.sha256(s["new"]).hexdigest()
    assert [i["sha256"] for i in doc["inputs"]] == [new_digest]
    assert first["inputs"][0]["sha256"] == hashlib.sha256(s["old"]).hexdigest()
    if cache:
        c = doc["replay_backend"]["cache"]
        assert (c["reused"], c["replayed"], c["recomputed"]) == (0, 1, 0)
    assert doc["cache"] == {"recomputed": 0, "recomputed_files": []}


def test_the_input_hash_cache_keys_the_change_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same device, inode, size and mtime, new bytes: the change time alone tells them apart."""
    monkeypatch.setenv("SPECREPLAY_CACHE_DIR", str(tmp_path / "c"))
    new_run()
    f = tmp_path / "a.bin"
    f.write_bytes(b"x" * 4096)
    first = Stamp.of(f)
    assert file_sha256(f) == hashlib.sha256(b"x" * 4096).hexdigest()
    _rewrite_in_place(f, b"y" * 4096)
    second = Stamp.of(f)
    assert second.ctime_ns != first.ctime_ns  # the one field no user can set
    assert (second.dev, second.ino, second.size, second.mtime_ns) == (
        first.dev, first.ino, first.size, first.mtime_ns)  # fmt: skip
    assert file_sha256(f) == hashlib.sha256(b"y" * 4096).hexdigest()
    assert (hash_stats().hits, hash_stats().computed) == (0, 2)
    assert file_sha256(f) == hashlib.sha256(b"y" * 4096).hexdigest()
    assert hash_stats().hits == 1


# ---------------------------------------------------------------------------------------------
# corrupt: a cache entry whose payload changed, was truncated or holds only its header


def _flip(data: bytes) -> bytes:
    head = data.index(b"\n") + 1
    i = head + (len(data) - head) // 2
    return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]


DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "payload-byte-flipped": _flip,
    "truncated": lambda d: d[: len(d) - max(1, (len(d) - d.index(b"\n")) // 2)],
    "header-only": lambda d: d[: d.index(b"\n") + 1],
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_shard_cache_entry_is_recomputed_and_counted(
    setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    s = setup
    _, first = _run(s, "first", cache=True)
    (entry,) = s["cache"].glob("*.shard")
    entry.write_bytes(DAMAGE[damage](entry.read_bytes()))
    before = tree_digest(s["archive"])
    res, doc = _run(s, "second", cache=True)
    assert_clean(res, before, [s["archive"]])
    assert _figures(doc) == _figures(_reference(s, monkeypatch)) == _figures(first)
    c = doc["replay_backend"]["cache"]
    assert (c["reused"], c["replayed"], c["recomputed"]) == (0, 1, 1)
    assert c["recomputed_files"] == [str(s["shard"])]
    # the shard cache's note is line 2 of stdout ("Reused: cache: …", folded at 160 characters)
    flat = " ".join(x.strip() for x in res.stdout.splitlines())
    assert "Reused: cache:" in flat and not any("cache:" in x for x in error_lines(res))
    assert "1 entry failed the check, recomputed (part-0.jsonl)" in flat
    # the entry was rewritten whole: the next run reuses it
    _, third = _run(s, "third", cache=True)
    assert third["replay_backend"]["cache"]["reused"] == 1
    assert _figures(third) == _figures(first)


def _other_digest(data: bytes) -> bytes:
    """Change one hex digit of the cached digest: the payload still parses, only the seal tells."""
    i = data.index(b'"sha256": "') + len(b'"sha256": "') + 10
    return data[:i] + (b"1" if data[i : i + 1] == b"0" else b"0") + data[i + 1 :]


HASH_DAMAGE = {**DAMAGE, "digest-digit-changed": _other_digest}


@pytest.mark.parametrize("damage", sorted(HASH_DAMAGE))
def test_a_damaged_input_hash_entry_is_recomputed_and_counted(
    setup: dict[str, Any], damage: str
) -> None:
    s = setup
    _, first = _run(s, "first", cache=False)
    (entry,) = [p for p in (s["tmp"] / "hashes-home" / "hashes").rglob("*") if p.is_file()]
    entry.write_bytes(HASH_DAMAGE[damage](entry.read_bytes()))
    before = tree_digest(s["archive"])
    res, doc = _run(s, "second", cache=False)
    assert_clean(res, before, [s["archive"]])
    assert doc["inputs"] == first["inputs"]
    assert doc["inputs"][0]["sha256"] == hashlib.sha256(s["old"]).hexdigest()
    assert _figures(doc) == _figures(first)
    assert doc["cache"] == {"recomputed": 1, "recomputed_files": [str(s["shard"])]}
    (line,) = [x for x in error_lines(res) if x.startswith("cache:")]
    assert "1 input-hash entry failed the check, recomputed (part-0.jsonl)" in line
    _, third = _run(s, "third", cache=False)
    assert third["cache"]["recomputed"] == 0  # rewritten whole


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_unseal_refuses_every_damage(damage: str) -> None:
    entry = seal("fmt/1", b'{"sha256": "00"}')
    assert unseal("fmt/1", entry) == b'{"sha256": "00"}'
    assert unseal("fmt/2", entry) is None  # another format or version
    assert unseal("fmt/1", DAMAGE[damage](entry)) is None


# ---------------------------------------------------------------------------------------------
# changed during the run: the digest's stamp is checked again after the replay


@pytest.mark.parametrize("cache", [True, False], ids=["shard-cache", "no-cache"])
def test_a_shard_changed_during_the_run_is_refused(
    setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch, cache: bool
) -> None:
    """The replay is done and its sums are in; then, before the digest is recorded, the shard
    is rewritten at the same size with its modification time put back."""
    from specreplay.pipelines import requalify as pipeline

    s = setup
    seen: dict[str, Any] = {}
    original = pipeline.requalify_result

    def changed_then_original(*args: Any, **kw: Any) -> Any:
        if not seen:
            _rewrite_in_place(s["shard"], s["new"])
            seen["tree"] = tree_digest(s["archive"])
        return original(*args, **kw)

    monkeypatch.setattr(pipeline, "requalify_result", changed_then_original)
    out = s["tmp"] / "out"
    args = ["requalify", str(s["archive"]), "--baseline", BASE, "--candidate", CAND, *FAST,
            "--out", str(out), *(["--cache", str(s["cache"])] if cache else [])]  # fmt: skip
    res = invoke(args)
    line = assert_refused(res)
    assert line == f"error: {s['shard']}: changed during the run"
    assert_clean(res, seen["tree"], [s["archive"]])
    assert not out.exists() and not leftovers(s["tmp"])


def test_hashing_checks_the_stamp_after_the_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file changed while it is hashed is refused, and no entry is written for it."""
    from specreplay.errors import SpecReplayError

    monkeypatch.setenv("SPECREPLAY_CACHE_DIR", str(tmp_path / "c"))
    f = tmp_path / "a.bin"
    f.write_bytes(b"x" * 100)
    real = filehash.Stamp.of
    calls: list[int] = []

    def stamp_then_change(path: Path) -> Stamp:
        calls.append(1)
        if len(calls) == 2:  # the check after the read
            _rewrite_in_place(f, b"z" * 100)
        return real(path)

    monkeypatch.setattr(filehash.Stamp, "of", staticmethod(stamp_then_change))
    with pytest.raises(SpecReplayError, match=r"a\.bin: changed during the run$"):
        file_sha256(f)
    assert not (tmp_path / "c").exists()


# ---------------------------------------------------------------------------------------------
# the logging arm travels parsed (issue 11, item 3): it pickles, and it keys the cache


def test_the_shard_cache_key_follows_the_parsed_logging_arm(
    setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ReplayOptions.logging_arm`` is an Arm: it crosses to a worker by pickle unchanged, and
    the key changes whenever the arm does (its canonical form), and with its spelling (the
    sums carry it as the pass's logging arm), never otherwise."""
    import pickle
    from dataclasses import replace

    from specreplay.replay.shard import ReplayOptions
    from specreplay.replay.shardcache import ShardCache
    from specreplay.sim.arms import parse_arm

    cache = ShardCache(setup["cache"])
    arms = [parse_arm(BASE), parse_arm(CAND)]
    plain = ReplayOptions(logging_arm=parse_arm("top4:t1@3"))
    back = pickle.loads(pickle.dumps(plain))
    assert back == plain and back.logging_arm is not None
    assert (back.logging_arm.canonical, back.logging_arm.spelled) == ("top4@3", "top4:t1@3")

    def key(options: ReplayOptions) -> str:
        return cache.key(cache.key_fields(setup["shard"], arms, options))

    same = replace(plain, logging_arm=parse_arm("top4:t1@3"))
    other_arm = replace(plain, logging_arm=parse_arm("top4:t1:dyadic24@3"))
    other_depth = replace(plain, logging_arm=parse_arm("top4:t1@4"))
    respelled = replace(plain, logging_arm=parse_arm("top4:t1.0@3"))
    assert respelled.logging_arm == plain.logging_arm  # the same arm, spelled otherwise
    keys = [key(o) for o in (plain, other_arm, other_depth, respelled, ReplayOptions())]
    assert key(same) == keys[0]
    assert len(set(keys)) == len(keys)
    fields = cache.key_fields(setup["shard"], arms, plain)
    assert fields["options"]["logging_arm"] == ["top4@3", "top4:t1@3"]

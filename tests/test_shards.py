"""Shard-level replay (issue 4): the same rows cut into 1, 3 or 8 files give the same figures.

Whole requests per file: every per-request sum is accumulated from the same rounds in the same
order whatever the file layout, and every later aggregation follows the canonical order (request
key, bucket), so the figures must be equal **bit for bit** (``assert_array_equal``, ``==``), not
approximately. Cross-file rules are checked at the merge with the whole-archive reader's messages:
each test takes the message the reader gives on the same files and expects exactly that line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from archive_factory import clone, valid_rows, write_jsonl, write_parquet
from typer.testing import CliRunner

from specreplay.cli import app
from specreplay.errors import SpecReplayError
from specreplay.replay.archive.reader import ArchiveReader
from specreplay.replay.engine import ReplayResult, replay_archive
from specreplay.replay.shard import ReplayOptions, merge_shards, replay_shard
from specreplay.sim.arms import parse_arm

ARMS = ["top32:t0.7@5", "top32:t0.7:dyadic8@5", "greedy@5", "top32:t0.7:dyadic12/float64@5"]
LAYOUTS = [(1, False), (3, False), (8, False), (3, True), (8, True)]
N_REQUESTS = 24


@pytest.fixture(scope="module")
def whole() -> pl.DataFrame:
    """The synthetic archive's rows: 24 requests × 6 rounds × 5 positions, one frame."""
    from specreplay.replay.archive.synthetic import synth_frames
    from specreplay.sim.synth import SynthConfig

    cfg = SynthConfig(n_requests=N_REQUESTS, rounds=6, requests_per_shard=N_REQUESTS)
    return pl.concat(list(synth_frames(cfg, seed=11)))


def _write_layout(frame: pl.DataFrame, out: Path, n_files: int, reverse: bool) -> Path:
    """Cut ``frame`` at request boundaries into ``n_files`` files; ``reverse`` names them so that
    sorted path order is the reverse of request order (the files are read in that order)."""
    out.mkdir()
    ids = frame.get_column("request_id").unique(maintain_order=True).to_list()
    groups = np.array_split(np.arange(len(ids)), n_files)
    for i, g in enumerate(groups):
        part = frame.filter(pl.col("request_id").is_in([ids[j] for j in g]))
        k = n_files - 1 - i if reverse else i
        part.write_parquet(out / f"part-{k:03d}.parquet")
    return out


def _replays(whole: pl.DataFrame, tmp: Path, **kw: Any) -> dict[tuple[int, bool], ReplayResult]:
    arms = [parse_arm(a) for a in ARMS]
    out = {}
    for n, rev in LAYOUTS:
        path = _write_layout(whole, tmp / f"n{n}{'r' if rev else ''}", n, rev)
        out[(n, rev)] = replay_archive(path, arms, law_positions=6, **kw)
    return out


def _assert_same(a: ReplayResult, b: ReplayResult) -> None:
    assert a.requests == b.requests and a.families == b.families
    np.testing.assert_array_equal(a.request_family, b.request_family)
    for c in a.sums:
        x, y = a.sums[c], b.sums[c]
        for f in ("request_key", "bucket", "request", "family", "n", "short", "t", "var",
                  "surv", "offpath"):  # fmt: skip
            np.testing.assert_array_equal(getattr(x, f), getattr(y, f), err_msg=f"{c} {f}")
        arm = parse_arm(c)
        assert a.arm_data(arm).sums.equals(b.arm_data(arm).sums)
        assert a.mcse(arm) == b.mcse(arm)
    assert a.measured_data().sums.equals(b.measured_data().sums)
    for f in ("survival_hits", "survival_rounds", "min_depth", "max_depth"):
        np.testing.assert_array_equal(getattr(a.measured, f), getattr(b.measured, f))
    s, t = a.law_sample, b.law_sample
    for f in ("hash", "request_key", "round", "position", "offsets", "draft_logprobs",
              "target_probs"):  # fmt: skip
        np.testing.assert_array_equal(getattr(s, f), getattr(t, f), err_msg=f)
    assert (a.positions, a.flagged_rows, a.logging_arm) == (
        b.positions,
        b.flagged_rows,
        b.logging_arm,
    )


@pytest.mark.parametrize("estimator", ["analytic", "montecarlo"])
def test_same_figures_for_1_3_8_shards_and_reversed_names(
    whole: pl.DataFrame, tmp_path: Path, estimator: str
) -> None:
    res = _replays(whole, tmp_path, estimator=estimator, replicates=4, seed=3, batch_rows=333)
    base = res[(1, False)]
    assert len(base.requests) == N_REQUESTS and base.law_sample.size == 6
    for layout, r in res.items():
        assert len(r.files) == layout[0]
        _assert_same(base, r)


def test_requalify_figures_equal_for_1_and_8_reversed_shards(
    whole: pl.DataFrame, tmp_path: Path
) -> None:
    """End to end: results.json cells (R, Δ, survival, off-path), path bias and law tests."""
    docs = []
    for n, rev in [(1, False), (8, True)]:
        path = _write_layout(whole, tmp_path / f"a{n}", n, rev)
        out = tmp_path / f"rq{n}"
        args = ["requalify", str(path), "--baseline", "top32:t0.7@5", "--candidate",
                "top32:t0.7:dyadic12@5", "--reference", "greedy@5", "--out", str(out), "-q",
                "--n-boot", "300", "--min-requests", "3"]  # fmt: skip
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        docs.append(json.loads((out / "results.json").read_text()))
    a, b = docs
    assert a["cells"] == b["cells"]
    assert a["law_tests"] == b["law_tests"] and a["law_tests"]
    assert a["path_bias"] == b["path_bias"]


def test_shard_sums_merge_like_one_pass(whole: pl.DataFrame, tmp_path: Path) -> None:
    """merge_shards(replay_shard(f1), replay_shard(f2)) == replay of the two-file archive."""
    path = _write_layout(whole, tmp_path / "two", 2, False)
    arms = [parse_arm(a) for a in ARMS[:2]]
    opts = ReplayOptions(max_depth=5, law_positions=4)
    files = sorted(path.iterdir())
    merged = merge_shards(replay_shard(files[0], arms, opts), replay_shard(files[1], arms, opts))
    one = replay_archive(path, arms, law_positions=4)
    assert merged.requests.ids == one.requests
    for c in merged.arms:
        np.testing.assert_array_equal(merged.arms[c].t, one.sums[c].t)
        np.testing.assert_array_equal(merged.arms[c].request, one.sums[c].request)
    np.testing.assert_array_equal(merged.law_sample.hash, one.law_sample.hash)


def test_request_split_across_shards_is_summed(tmp_path: Path) -> None:
    """A request whose rounds span two files: rounds and tokens add up (float bits may differ)."""
    rows = valid_rows(n_requests=2, n_rounds=4, depth=3)
    cut = 3 * 2  # request req-0: rounds 0, 1 in the first file, 2, 3 in the second
    d = tmp_path / "split"
    d.mkdir()
    write_parquet(d / "a.parquet", rows[:cut])
    write_parquet(d / "b.parquet", rows[cut:])
    write_parquet(tmp_path / "one.parquet", rows)
    arm = parse_arm("top4:t1@3")
    x = replay_archive(d, [arm]).sums[arm.canonical]
    y = replay_archive(tmp_path / "one.parquet", [arm]).sums[arm.canonical]
    np.testing.assert_array_equal(x.n, y.n)
    np.testing.assert_allclose(x.t, y.t, rtol=1e-15)


def _reader_message(path: Path) -> str:
    with pytest.raises(SpecReplayError) as err:
        ArchiveReader(path).validate()
    return str(err.value)


def _two_files(tmp: Path, first: list[dict[str, Any]], second: list[dict[str, Any]]) -> Path:
    d = tmp / "arch"
    d.mkdir()
    write_parquet(d / "part-0.parquet", first)
    write_parquet(d / "part-1.parquet", second)
    return d


def _expect_reader_message(path: Path, fragment: str) -> None:
    msg = _reader_message(path)
    assert fragment in msg and "part-1.parquet: row" in msg, msg
    with pytest.raises(SpecReplayError, match=f"^{re.escape(msg)}$"):
        replay_archive(path, [parse_arm("top4:t1@3")])


def test_merge_rejects_round_split_across_files(tmp_path: Path) -> None:
    rows = valid_rows(n_requests=2, n_rounds=2, depth=3)
    path = _two_files(tmp_path, rows[:4], rows[4:])  # round 1 of req-0: position 1 | 2, 3
    _expect_reader_message(path, "round 1 of request 'req-0' is split across files")


def _four_files(tmp: Path, parts: list[list[dict[str, Any]]]) -> Path:
    d = tmp / "arch4"
    d.mkdir()
    for i, rows in enumerate(parts):
        write_parquet(d / f"part-{i}.parquet", rows)
    return d


@pytest.mark.parametrize("case", ["split", "starts"])
def test_tree_fold_judges_a_round_continued_from_a_distant_file(tmp_path: Path, case: str) -> None:
    """The fold is a tree ((0, 1), (2, 3)): a round that starts past position 1 in file 3 is
    judged against the files before it, not only file 2, with the whole-archive reader's message
    (split across files when file 0 holds the round's start; else starts at position 2)."""
    rows = valid_rows(n_requests=4, n_rounds=2, depth=3)  # 6 rows per request
    req = [rows[6 * i : 6 * i + 6] for i in range(4)]
    if case == "split":
        parts = [req[0][:4], req[1], req[2], req[0][4:] + req[3]]
        want = "part-3.parquet: row 0 (0-based): round 1 of request 'req-0' is split across files"
    else:
        parts = [req[0], req[1], req[2], req[3][1:]]
        want = "part-3.parquet: row 0 (0-based): round 0 of request 'req-3' starts at position 2"
    path = _four_files(tmp_path, parts)
    msg = _reader_message(path)
    assert want in msg, msg
    with pytest.raises(SpecReplayError, match=f"^{re.escape(msg)}$"):
        replay_archive(path, [parse_arm("top4:t1@3")])


def test_merge_rejects_duplicate_round_in_two_files(tmp_path: Path) -> None:
    rows = valid_rows(n_requests=2, n_rounds=2, depth=3)
    path = _two_files(tmp_path, rows[:6], clone(rows[3:6]) + rows[6:])
    _expect_reader_message(path, "round 1 of request 'req-0' is split across files")


def test_merge_rejects_rounds_out_of_order_across_files(tmp_path: Path) -> None:
    rows = valid_rows(n_requests=2, n_rounds=3, depth=2)
    r0 = [r for r in rows if r["request_id"] == "req-0"]
    r1 = [r for r in rows if r["request_id"] == "req-1"]
    path = _two_files(tmp_path, r0[2:] + r1, r0[:2])  # req-0 rounds 1, 2 then round 0
    _expect_reader_message(path, "round 0 of request 'req-0' comes after a later round")


def test_merge_rejects_family_change_across_files(tmp_path: Path) -> None:
    rows = valid_rows(n_requests=2, n_rounds=2, depth=3)
    second = clone(rows[9:12])  # round 1 of req-1
    for r in second:
        r["family"] = "math"
    path = _two_files(tmp_path, rows[:9], second)
    _expect_reader_message(path, "request 'req-1' changes family to 'math'")


def test_merge_rejects_logging_arm_change_across_files(tmp_path: Path) -> None:
    rows = valid_rows(n_requests=2, n_rounds=2, depth=3)
    second = clone(rows[6:])
    for r in second:
        r["logging_arm"] = "greedy@3"
    path = _two_files(tmp_path, rows[:6], second)
    _expect_reader_message(path, "logging_arm 'greedy@3' differs from 'top4:t1@3'")


def test_merge_rejects_optional_columns_differing_across_files(tmp_path: Path) -> None:
    rows = valid_rows(n_requests=2, n_rounds=2, depth=3)
    second = [{k: v for k, v in r.items() if k != "emitted_q"} for r in rows[6:]]
    path = _two_files(tmp_path, rows[:6], second)
    msg = _reader_message(path)
    assert "optional columns ['emitted_q'] differ" in msg
    with pytest.raises(SpecReplayError, match=f"^{re.escape(msg)}$"):
        replay_archive(path, [parse_arm("top4:t1@3")])


def test_jsonl_shards_cite_lines(tmp_path: Path) -> None:
    rows = valid_rows(n_requests=2, n_rounds=2, depth=3)
    d = tmp_path / "j"
    d.mkdir()
    write_jsonl(d / "a.jsonl", rows[:4])
    write_jsonl(d / "b.jsonl", rows[4:])
    msg = _reader_message(d)
    assert "b.jsonl:line 1: round 1 of request 'req-0' is split across files" in msg
    with pytest.raises(SpecReplayError, match=f"^{re.escape(msg)}$"):
        replay_archive(d, [parse_arm("top4:t1@3")])


def test_law_positions_are_the_k_smallest_hashes_of_the_archive(
    whole: pl.DataFrame, tmp_path: Path
) -> None:
    """The sample equals a slow reference: hash every row of the whole archive, sort, take k."""
    from numba import njit

    from specreplay.sim.rng import STREAM_LAW_POSITIONS, request_key, uniform_bits

    @njit
    def bits(seed: int, key: np.uint64, rnd: int, pos: int, stream: int) -> np.uint64:
        return uniform_bits(np.uint64(seed), key, rnd, pos, stream)

    path = _write_layout(whole, tmp_path / "h", 3, True)
    res = replay_archive(path, [parse_arm("greedy@5")], seed=17, law_positions=7)
    ref = sorted(
        (int(bits(17, request_key(rid), rnd, pos, STREAM_LAW_POSITIONS)), rid, rnd, pos, i)
        for i, (rid, rnd, pos) in enumerate(
            whole.select("request_id", "round", "position").iter_rows()
        )
    )[:7]
    s = res.law_sample
    assert [int(h) for h in s.hash] == [r[0] for r in ref]
    assert s.round.tolist() == [r[2] for r in ref] and s.position.tolist() == [r[3] for r in ref]
    for j, r in enumerate(ref):
        row = whole.row(r[4], named=True)
        lo, hi = s.offsets[j], s.offsets[j + 1]
        assert s.target_probs[lo:hi].tolist() == row["target_probs"]
        assert s.draft_logprobs[lo:hi].tolist() == row["draft_logprobs"]


def test_lawtest_past_the_archive_depth_exits_2_like_requalify(
    small_archive: Path, tmp_path: Path
) -> None:
    """A depth-5 archive: lawtest --arm …@9 stops with requalify's UNSUPPORTED reason."""
    why = "top32:t0.7:dyadic8@9: depth 9 is UNSUPPORTED"
    runs = [
        ["lawtest", str(small_archive), "--arm", "top32:t0.7:dyadic8@9", "--out",
         str(tmp_path / "l")],
        ["requalify", str(small_archive), "--baseline", "top32:t0.7@5", "--candidate",
         "top32:t0.7:dyadic8@9", "--out", str(tmp_path / "r"), "-q", "--n-boot", "200"],
    ]  # fmt: skip
    for args in runs:
        res = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
        assert res.exit_code == 2, res.output
        assert why in res.stderr and "fewer than 9 positions" in res.stderr, res.stderr
        assert "Traceback" not in res.output


def test_a_registered_estimator_gets_whole_batches_with_emitted_q(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A third estimator is one class and one registry entry: the engine finds it by name and
    hands it every batch, emitted_q included (what the importance estimator needs)."""
    from specreplay.replay import estimators
    from specreplay.replay.estimators.analytic import AnalyticEstimator

    seen: list[int] = []

    class Recording(AnalyticEstimator):
        name = "recording"

        def rounds(self, batch, arm, cache, *, seed, replicates, max_depth, logging=None):  # type: ignore[no-untyped-def]
            seen.append(int(batch.emitted_q.shape[0]))
            assert batch.emitted_q.shape == batch.target_probs.shape
            return super().rounds(
                batch, arm, cache, seed=seed, replicates=replicates, max_depth=max_depth
            )

    monkeypatch.setitem(estimators.ESTIMATORS, "recording", Recording())
    path = write_parquet(tmp_path / "a.parquet", valid_rows(n_requests=3, n_rounds=2, depth=3))
    arm = parse_arm("top4:t1@3")
    rec = replay_archive(path, [arm], estimator="recording")
    ref = replay_archive(path, [arm], estimator="analytic")
    assert seen and all(n > 0 for n in seen) and sum(seen) == 3 * 2 * 3 * 4
    np.testing.assert_array_equal(rec.sums[arm.canonical].t, ref.sums[arm.canonical].t)
    with pytest.raises(
        SpecReplayError, match="should be analytic or montecarlo or importance or recording"
    ):
        replay_archive(path, [arm], estimator="nosuch")


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_an_empty_shard_among_others_is_no_error(
    whole: pl.DataFrame, tmp_path: Path, where: str
) -> None:
    """Regression: each shard's reader used to raise "the archive holds no row" for an empty
    shard; only an archive with no row at all is an error (checked after every shard)."""
    folder = _write_layout(whole, tmp_path / "a", 2, False)
    name = {"first": "part-", "middle": "part-000a", "last": "part-999"}[where]  # sorted order
    whole.head(0).write_parquet(folder / f"{name}.parquet")
    arms = [parse_arm(a) for a in ARMS]
    got = replay_archive(folder, arms, seed=3)
    ref = replay_archive(_write_layout(whole, tmp_path / "b", 2, False), arms, seed=3)
    for a in ARMS:
        np.testing.assert_array_equal(got.sums[a].t, ref.sums[a].t)
    assert sum(f.rows for f in got.files) == whole.height
    assert len(got.files) == 3


def test_an_archive_of_empty_shards_is_one_error(whole: pl.DataFrame, tmp_path: Path) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    for i in range(2):
        whole.head(0).write_parquet(folder / f"part-{i}.parquet")
    with pytest.raises(
        SpecReplayError, match=re.escape(f"{folder}: the archive holds no row (2 files read)")
    ):
        replay_archive(folder, [parse_arm(ARMS[0])])


def test_a_logging_arm_column_is_parsed_once_per_distinct_value(
    whole: pl.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11, item 3: the column is data, parsed where it is read, once per distinct value.

    Eight shards, each read by its own reader, all holding the same logging_arm value: a counter
    around the arm parser sees that text parsed once in the whole pass (the readers share a
    cache by text), and the pass carries the arm it names.
    """
    from specreplay.replay.archive import reader as reader_module
    from specreplay.sim import arms as arms_module

    arms = [parse_arm(a) for a in ARMS]
    path = _write_layout(whole, tmp_path / "n8", 8, False)
    logged = str(whole.get_column("logging_arm")[0])
    parsed: list[str] = []
    real = arms_module._Parser.arm

    def counted(self: Any) -> Any:
        parsed.append(self.text)
        return real(self)

    reader_module._parsed_arm.cache_clear()
    monkeypatch.setattr(arms_module._Parser, "arm", counted)
    res = replay_archive(path, arms, estimator="importance")
    assert parsed == [logged]
    assert res.logging_arm == logged
    assert set(res.replays) == {"importance"}

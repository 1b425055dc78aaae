"""Writer → reader round trips, streaming equivalence, buckets, outputs (issue 1)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.batch import RoundBatch, concat_batches
from specreplay.replay.archive.reader import ArchiveReader
from specreplay.replay.archive.writer import TraceWriter
from specreplay.results.io import parse_result
from specreplay.results.output import output_dir
from specreplay.sim.rng import request_key, uniform_py
from specreplay.stats.buckets import DEFAULT_BUCKETS, Buckets


def _rows(seed: int = 0, n_req: int = 7, n_rounds: int = 3, depth: int = 4) -> list[dict[str, Any]]:
    """Valid position rows with ragged candidate counts, -inf log-probs and a carried column."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(n_req):
        ctx = int(rng.integers(100, 100_000))
        for rd in range(n_rounds):
            rejected = False
            for p in range(1, depth + 1):
                k = int(rng.integers(1, 6))
                ids = rng.choice(1000, size=k, replace=False).tolist()
                q = rng.dirichlet(np.ones(k)) * 0.9
                lp = np.log(q).tolist()
                if k > 1:
                    lp[-1] = -math.inf
                tp = (rng.dirichlet(np.ones(k)) * 0.7).tolist()
                acc = (not rejected) and bool(rng.random() < 0.6)
                rejected = rejected or not acc
                eq = rng.dirichlet(np.ones(k)).tolist()
                rows.append(
                    {
                        "request_id": f"req-{r}",
                        "family": ["code", "chat", "math"][r % 3],
                        "context_tokens": ctx,
                        "round": rd,
                        "position": p,
                        "cand_ids": ids,
                        "draft_logprobs": lp,
                        "target_probs": tp,
                        "drafted_id": ids[0],
                        "accepted": acc,
                        "logging_arm": "t0.7@5",  # rows of 1..5 candidates: no top-K
                        "emitted_q": eq,
                        "worker": f"w{r % 2}",
                    }
                )
            ctx += 3
    return rows


def _expected(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    return {
        "cand_ids": np.array([x for r in rows for x in r["cand_ids"]], dtype=np.int64),
        "draft_logprobs": np.array([x for r in rows for x in r["draft_logprobs"]]),
        "target_probs": np.array([x for r in rows for x in r["target_probs"]]),
        "emitted_q": np.array([x for r in rows for x in r["emitted_q"]]),
        "position": np.array([r["position"] for r in rows]),
        "accepted": np.array([int(r["accepted"]) for r in rows], dtype=np.int8),
        "offsets": np.concatenate([[0], np.cumsum([len(r["cand_ids"]) for r in rows])]),
    }


def _read_all(path: Path, **kw: Any) -> tuple[RoundBatch, ArchiveReader]:
    reader = ArchiveReader(path, **kw)
    return concat_batches(list(reader)), reader


@pytest.mark.parametrize("form", ["parquet-dir", "parquet", "jsonl"])
def test_round_trip_all_three_forms(tmp_path: Path, form: str) -> None:
    rows = _rows()
    path = tmp_path / {"parquet-dir": "shards", "parquet": "a.parquet", "jsonl": "a.jsonl"}[form]
    with TraceWriter(path, format=form, shard_rows=10) as w:
        for row in rows:
            w.append(row)
    if form == "parquet-dir":
        assert len(w.written) > 3  # really sharded
    batch, reader = _read_all(path, batch_rows=9, chunk_rows=5)
    exp = _expected(rows)
    for name, want in exp.items():
        np.testing.assert_array_equal(getattr(batch, name), want, err_msg=name)
    assert batch.drafted_idx.tolist() == [0] * len(rows)
    assert reader.requests == [f"req-{r}" for r in range(7)]
    assert reader.families == ["code", "chat", "math"]
    assert reader.logging_arm == "t0.7@5"
    assert batch.extras.get_column("worker").to_list() == [r["worker"] for r in rows]
    # per round: request, round index, context, MEASURED A (leading True count)
    rounds = {}
    for r in rows:
        rounds.setdefault((r["request_id"], r["round"]), []).append(r)
    assert batch.n_rounds == len(rounds)
    for i, ((rid, rd), rr) in enumerate(rounds.items()):
        assert reader.requests[batch.round_request[i]] == rid
        assert batch.round_index[i] == rd
        assert batch.round_context[i] == rr[0]["context_tokens"]
        lead = 0
        for x in rr:
            if not x["accepted"]:
                break
            lead += 1
        assert batch.measured_accepted[i] == lead
        assert batch.round_key[i] == request_key(rid)


def test_streaming_multishard_in_small_batches_equals_whole_read(small_archive: Path) -> None:
    assert len(list(small_archive.glob("*.parquet"))) == 4
    whole, _ = _read_all(small_archive, batch_rows=10**9, chunk_rows=10**9)
    parts = list(ArchiveReader(small_archive, batch_rows=37, chunk_rows=53))
    assert len(parts) > 10
    for b in parts:  # every batch holds whole rounds
        assert b.round_offsets[0] == 0 and b.round_offsets[-1] == b.n_positions
        assert (b.round_depth == 5).all()
    streamed = concat_batches(parts)
    for name in RoundBatch.__dataclass_fields__:
        a, b = getattr(streamed, name), getattr(whole, name)
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b, err_msg=name)
            assert a.dtype == b.dtype, name
        else:
            assert a.equals(b), name


def test_measured_R_matches_a_direct_polars_computation(small_archive: Path) -> None:
    from specreplay.replay.scan import scan_archive

    scan = scan_archive(small_archive, buckets=DEFAULT_BUCKETS)
    df = pl.read_parquet(small_archive / "*.parquet")
    a = (
        df.with_columns(
            lead=pl.col("accepted").cast(pl.Int64).cum_prod().over("request_id", "round")
        )
        .group_by("request_id", "round", "family")
        .agg(A=pl.col("lead").sum())
    )
    cells = scan.cells()
    pooled = cells[0]
    assert pooled.spec.level == "pooled"
    want = float((1 + a.get_column("A")).mean())
    assert pooled.arm.name == "top32:t0.7@5"
    assert pytest.approx(want, rel=1e-12) == pooled.arm.R
    for fam, part in a.group_by("family"):
        cell = next(c for c in cells if c.spec.level == "family" and c.spec.family == fam[0])
        got = cell.arm.R
        assert got == pytest.approx(float((1 + part.get_column("A")).mean()), rel=1e-12)
    # survival P(A >= j), pooled
    for s in pooled.survival:
        want_j = float((a.get_column("A") >= s.position).mean())
        assert s.value == pytest.approx(want_j, rel=1e-12)
        assert s.label == "MEASURED"


# -- buckets ------------------------------------------------------------------------------------


def test_default_buckets_and_K_units() -> None:
    b = Buckets.parse(DEFAULT_BUCKETS)
    assert b.names[:5] == ("<4K", "4K-16K", "16K-32K", "32K-64K", ">=64K")
    codes = b.assign([0, 4095, 4096, 16383, 16384, 65535, 65536, 10**9, -1])
    assert [b.names[c] for c in codes] == [
        "<4K", "<4K", "4K-16K", "4K-16K", "16K-32K", "32K-64K", ">=64K", ">=64K", "unknown",
    ]  # fmt: skip


def test_gap_goes_to_unbucketed() -> None:
    b = Buckets.parse("a:<1K,b:2K-3K")
    assert [b.names[c] for c in b.assign([1023, 1024, 2047, 2048, 3072])] == [
        "a", "unbucketed", "unbucketed", "b", "unbucketed",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("a:<4K,b:2K-8K", "--buckets: ranges of 'a' and 'b' overlap"),
        ("a:4K", "should be LO-HI, <HI or >=LO"),
        ("a:<4Q", "cannot read '4Q'"),
        ("a:8K-4K", "range of 'a' is empty"),
        ("unknown:<4K", "reserved or repeated"),
        ("a:<1K,a:>=2K", "reserved or repeated"),
        ("", "no bucket given"),
    ],
)
def test_bad_bucket_specs(spec: str, message: str) -> None:
    with pytest.raises(SpecReplayError, match=message.replace("(", r"\(")):
        Buckets.parse(spec)


def test_unbucketed_rounds_counted_in_pooled_not_in_bucket_cells(small_archive: Path) -> None:
    from specreplay.replay.scan import scan_archive
    from specreplay.stats.cells import excluded_unbucketed

    scan = scan_archive(small_archive, buckets="short:<4K,long:>=32K")
    cells = scan.cells()
    assert all(c.arm.name == scan.arm for c in cells)
    pooled = cells[0].arm.n_rounds
    by_bucket = sum(c.arm.n_rounds for c in cells if c.spec.level == "bucket")
    df = pl.read_parquet(small_archive / "*.parquet").filter(pl.col("position") == 1)
    gap = df.filter((pl.col("context_tokens") >= 4096) & (pl.col("context_tokens") < 32768))
    assert gap.height > 0
    assert pooled == df.height
    assert by_bucket == df.height - gap.height
    assert excluded_unbucketed(scan.measured, scan.buckets)[0]["rounds"] == gap.height


# -- counter-based randomness -------------------------------------------------------------------


def test_request_key_is_stable_blake2b() -> None:
    # golden value: BLAKE2b-64 of b"req-0", little-endian; must never change across versions,
    # since every common-random-number stream is keyed by it
    assert int(request_key("req-0")) == 9480165055676730190
    assert request_key("req-0") != request_key("req-1")


def test_uniforms_are_uniform_and_keyed() -> None:
    u = np.array(
        [uniform_py(3, 11, r, p, s) for r in range(40) for p in range(5) for s in range(5)]
    )
    n = u.size
    # mean and variance of U(0,1): 1/2 and 1/12; 5-sigma bounds (false failure ~ 6e-7 each)
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / n)
    assert abs((u**2).mean() - 1 / 3) < 5 * math.sqrt((1 / 5 - 1 / 9) / n)
    assert len(np.unique(u)) == n
    assert uniform_py(3, 11, 0, 1, 0) == uniform_py(3, 11, 0, 1, 0)
    assert uniform_py(3, 11, 0, 1, 0) != uniform_py(4, 11, 0, 1, 0)


# -- outputs ------------------------------------------------------------------------------------


def test_output_dir_refuses_foreign_folder_and_is_atomic(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("mine")
    for force in (False, True):  # a folder specreplay did not write: never, even with force
        with (
            pytest.raises(SpecReplayError, match="not empty and was not written by specreplay"),
            output_dir(out, force=force),
        ):
            pass
    assert (out / "precious.txt").read_text() == "mine"
    (out / "precious.txt").unlink()  # an empty folder is written
    with output_dir(out, force=False) as tmp:
        (tmp / "results.json").write_text("{}")
    assert (out / "results.json").exists()
    # a run that dies leaves the previous output untouched and no temporary folder behind
    with pytest.raises(RuntimeError), output_dir(out, force=False) as tmp:
        (tmp / "results.json").write_text("half")
        raise RuntimeError("killed")
    assert (out / "results.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_demo_outputs_follow_the_contract(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from specreplay.cli import app

    out = tmp_path / "demo"
    args = ["demo", "--requests", "24", "--n-boot", "500", "--out", str(out), "-q"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "MEASURED R" in res.stdout and "top32:t0.7@8" in res.stdout
    doc = json.loads((out / "results.json").read_text())
    parse_result(json.dumps(doc).encode())  # report's checks pass
    assert doc["command"] == "demo" and doc["seed"] == 0
    assert {Path(i["path"]).parent for i in doc["inputs"]} == {out / "archive"}
    levels = {c["level"] for c in doc["cells"]}
    assert levels == {"pooled", "family", "bucket", "family×bucket"}
    cells = pl.read_parquet(out / "cells.parquet")
    assert {"level", "family", "bucket", "kind", "arm", "value", "label", "null_reason"} <= set(
        cells.columns
    )
    assert set(cells.get_column("label").unique()) == {"MEASURED"}
    assert (out / "TABLES.md").read_text().startswith("## MEASURED R")
    # the demo's archive validates, and a second demo replaces the output it wrote itself
    res2 = CliRunner().invoke(app, ["validate", str(out / "archive")])
    assert res2.exit_code == 0 and "VALID" in res2.stdout
    res3 = CliRunner().invoke(
        app, ["demo", "--requests", "8", "--n-boot", "500", "--out", str(out)]
    )
    assert res3.exit_code == 0


def test_schema_check_catches_a_broken_document() -> None:
    bad = {"schema": "specreplay/results/v1", "cells": [{"level": "galaxy"}]}
    level = r"^x.json: \$\.cells\[0\]\.level: Input should be 'pooled'"
    with pytest.raises(SpecReplayError, match=level):
        parse_result(json.dumps(bad).encode(), "x.json")
    del bad["cells"]
    with pytest.raises(SpecReplayError, match=r"^x.json: \$\.command: missing \(a required key\)$"):
        parse_result(json.dumps(bad).encode(), "x.json")

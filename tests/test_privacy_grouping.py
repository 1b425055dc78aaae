"""Privacy and grouping (issue 7, item 7): ``--hash-ids`` and ``--by COLUMN``.

The archive is the factory's (``tests/archive_factory.py``): 24 requests × 4 rounds × 3 positions
with dyadic laws, a carried ``worker`` column (w0 for even requests, w1 for odd ones); every
round of a w1 request is rejected at position 1 and its target law is its draft law, so the
workers differ in MEASURED and in SIMULATED acceptance.
Expected figures are computed here from the rows with numpy, never read from the code's output.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from archive_factory import clone, valid_rows, write_jsonl, write_parquet
from typer.testing import CliRunner

from specreplay.cli import app
from specreplay.results import privacy
from specreplay.results.model import Excluded, Level
from specreplay.results.privacy import IdHasher, hash_result

N_REQ = 24
BASE = ["--baseline", "top4:t1@3", "--candidate", "top4:t1:dyadic8@3"]
FAST = ["--estimator", "analytic", "--n-boot", "200", "--min-requests", "2", "-q"]
SALT = bytes(range(16))


def _rows() -> list[dict[str, Any]]:
    rows = valid_rows(n_requests=N_REQ, n_rounds=4, depth=3)
    for r in rows:
        k = int(r["request_id"].split("-")[1])
        r["request_id"] = f"zz-secret-{k:04d}"
        r["worker"] = f"w{k % 2}"
        if k % 2:  # w1: every draft rejected, and target = draft law (α = Σ q = 15/16)
            r["accepted"] = False
            r["target_probs"] = [math.exp(x) for x in r["draft_logprobs"]]
    return rows


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    return write_parquet(path, rows, schema_overrides={"worker": pl.String()})


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("privacy") / "a.parquet", _rows())


def _invoke(args: list[str], code: int = 0) -> str:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
    return res.output


def _found(folder: Path, needles: list[str]) -> dict[str, set[str]]:
    """Return, per output file, the needles found in it: its raw bytes and, for Parquet, its
    decoded string cells (Parquet pages are compressed, so raw bytes alone could miss them)."""
    hits: dict[str, set[str]] = {}
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        blob = f.read_bytes()
        if f.suffix == ".parquet":
            frame = pl.read_parquet(f)
            cells = [str(v) for c in frame.columns for v in frame.get_column(c).to_list()]
            blob += "\n".join(cells).encode()
        got = {n for n in needles if n.encode() in blob}
        if got:
            hits[f.name] = got
    return hits


@pytest.fixture(scope="module")
def runs(archive: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """requalify plain, with --hash-ids (salt pinned), and with --by worker."""
    root = tmp_path_factory.mktemp("runs")
    out = {k: root / k for k in ("plain", "hashed", "by")}
    _invoke(["requalify", str(archive), *BASE, *FAST, "--out", str(out["plain"])])
    mp = pytest.MonkeyPatch()
    mp.setattr(privacy.os, "urandom", lambda n: SALT[:n])
    try:
        _invoke(
            ["requalify", str(archive), *BASE, *FAST, "--hash-ids", "--out", str(out["hashed"])]
        )
    finally:
        mp.undo()
    _invoke(["requalify", str(archive), *BASE, *FAST, "--by", "worker", "--out", str(out["by"])])
    return out


def _doc(folder: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((folder / "results.json").read_text())
    return doc


def _ids() -> list[str]:
    return sorted({r["request_id"] for r in _rows()})


# -- --hash-ids ------------------------------------------------------------------------------


def test_grep_finds_ids_where_they_are_written(
    archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grep can fail: it finds every id in the (compressed) Parquet archive, and in outputs
    written from a result that names ids (a quoted id in a reason, a ``request`` field), which
    the same result hashed does not."""
    from specreplay.render.files import write_all

    monkeypatch.delenv("SPECREPLAY_CHECK_WRITTEN")  # the planted top-level key no command writes

    ids = _ids()
    assert _found(archive.parent, ids)["a.parquet"] == set(ids)
    doc = _doc_result(archive, tmp_path)
    named = dataclasses.replace(
        doc, excluded=(Excluded(f"request {ids[0]!r} dropped"),), extra={"request": ids[1]}
    )
    (tmp_path / "raw").mkdir()
    write_all(named, tmp_path / "raw")
    # the two planted ids, and the law tests' archive positions (their ``request``)
    law = {t["request"] for t in _doc(tmp_path / "rq")["law_tests"] if t["request"] is not None}
    assert law and _found(tmp_path / "raw", ids)["results.json"] == {ids[0], ids[1]} | law
    (tmp_path / "hashed").mkdir()
    write_all(hash_result(named, IdHasher(ids)), tmp_path / "hashed")
    assert _found(tmp_path / "hashed", ids) == {}


def _doc_result(archive: Path, tmp_path: Path) -> Any:
    from specreplay.results.io import read_result

    out = tmp_path / "rq"
    _invoke(["requalify", str(archive), *BASE, *FAST, "--out", str(out)])
    return read_result(out / "results.json")


def test_hash_ids_no_request_id_in_any_output(runs: dict[str, Path]) -> None:
    """Every file of the --hash-ids run (JSON, Markdown, Parquet, PNG): no id of the input."""
    files = sorted(p.name for p in runs["hashed"].rglob("*") if p.is_file())
    assert {"results.json", "TABLES.md", "cells.parquet"} <= set(files)
    assert _found(runs["hashed"], _ids()) == {}
    assert _doc(runs["hashed"])["options"]["hash_ids"] is True
    assert _doc(runs["plain"])["options"]["hash_ids"] is False


def test_hash_ids_changes_no_figure(runs: dict[str, Path]) -> None:
    a, b = _doc(runs["plain"]), _doc(runs["hashed"])
    assert a["cells"] == b["cells"]
    assert a["excluded"] == b["excluded"]
    hashed = [t.pop("request") for t in b["law_tests"]]
    plain = [t.pop("request") for t in a["law_tests"]]
    assert a["law_tests"] == b["law_tests"]  # every figure; only the request names differ
    assert all(h.startswith("h:") for h in hashed) and len(set(hashed)) == len(set(plain))


def test_salt_is_in_no_output(runs: dict[str, Path]) -> None:
    """The run's salt was pinned to bytes 0..15: neither the bytes nor their hex are written."""
    for f in runs["hashed"].rglob("*"):
        if f.is_file():
            blob = f.read_bytes()
            assert SALT not in blob and SALT.hex().encode() not in blob, f.name


def test_hashes_are_salted_keyed_blake2b() -> None:
    """Independent reference: hashlib's keyed BLAKE2b; same id, same salt → same hash; two
    hashers (two runs) → different hashes; quoted ids in text are replaced, others left."""
    import hashlib

    h = IdHasher(["r-1"], salt=SALT)
    want = "h:" + hashlib.blake2b(b"r-1", key=SALT, digest_size=8).hexdigest()
    assert h("r-1") == want and len(want) == 18
    assert IdHasher()("r-1") != IdHasher()("r-1")
    assert h.text("request 'r-1' and \"r-1\", not r-10 or 'r-2'") == (
        f"request '{want}' and \"{want}\", not r-10 or 'r-2'"
    )


def test_hash_ids_on_sweep_interval_lawtest_validate(archive: Path, tmp_path: Path) -> None:
    """The other commands that read request ids: no id in any output file."""
    ids = _ids()
    rt = _round_traces(_rows())
    a = write_jsonl(tmp_path / "ra.jsonl", rt)
    b = write_jsonl(tmp_path / "rb.jsonl", [dict(r, accepted=0) for r in rt][:-4])
    runs = {
        "sweep": ["sweep", str(archive), "--arm", "top4:t1@3", "--depths", "1..3",
                  "--estimator", "analytic", "--n-boot", "200", "--by", "worker", "-q"],
        "interval": ["interval", str(a), str(b), "--n-boot", "200", "--drop-unpaired", "-q"],
        "lawtest": ["lawtest", str(archive), "--arm", "top4:t1@3", "--positions", "1"],
        "validate": ["validate", str(archive), "-q"],
    }  # fmt: skip
    _invoke([*runs["lawtest"], "--out", str(tmp_path / "plain")])  # the control: ids written
    assert _found(tmp_path / "plain", ids)["results.json"]
    for name, args in runs.items():
        out = tmp_path / name
        _invoke([*args, "--hash-ids", "--out", str(out)])
        assert (out / "results.json").is_file()
        assert _found(out, ids) == {}, name
        assert _doc(out)["options"]["hash_ids"] is True, name
    want = _expected(pl.read_parquet(archive), ["worker"])
    sweep = {c["group"]["worker"]: c for c in _doc(tmp_path / "sweep")["cells"]
             if c["level"] == Level.BY.value}  # fmt: skip
    for (w,), (_, simulated) in want.items():
        at3 = next(f for f in sweep[w]["depths"] if f["arm"] == "top4@3" and f["depth"] == 3)
        assert at3["R"] == pytest.approx(simulated, rel=1e-12)
        assert f"| worker={w} " in (tmp_path / "sweep" / "TABLES.md").read_text()


def _round_traces(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rows:
        key = (r["request_id"], r["round"])
        rt = out.setdefault(key, {"request_id": r["request_id"], "family": r["family"],
                                  "context_tokens": r["context_tokens"], "round": r["round"],
                                  "drafted": 3, "accepted": 0, "_open": True})  # fmt: skip
        if rt["_open"] and r["accepted"]:
            rt["accepted"] += 1
        else:
            rt["_open"] = False
    return [{k: v for k, v in rt.items() if k != "_open"} for rt in out.values()]


# -- --by COLUMN -----------------------------------------------------------------------------


def _expected(frame: pl.DataFrame, keys: list[str]) -> dict[tuple[str, ...], tuple[float, float]]:
    """Per group of ``keys``: MEASURED R = Σ(1 + A)/rounds (A = leading accepted) and the
    analytic R = mean over rounds of 1 + Σ_k Π_{j≤k} α_j, α_j = Σ_i min(p_i, q_i), q the draft
    law renormalised over the 4 candidates (arm top4:t1), p the target probabilities."""
    sums: dict[tuple[str, ...], list[float]] = {}
    for (_, _), rnd in frame.group_by(["request_id", "round"], maintain_order=True):
        rnd = rnd.sort("position")
        q = np.exp(np.array(rnd.get_column("draft_logprobs").to_list()))
        q /= q.sum(axis=1, keepdims=True)
        p = np.array(rnd.get_column("target_probs").to_list())
        alpha = np.minimum(p, q).sum(axis=1)
        acc = rnd.get_column("accepted").to_list()
        a = next((j for j, x in enumerate(acc) if not x), len(acc))
        key = tuple(str(rnd.get_column(k)[0]) for k in keys)
        s = sums.setdefault(key, [0.0, 0.0, 0.0])
        s[0] += 1.0 + a
        s[1] += 1.0 + float(np.cumprod(alpha).sum())
        s[2] += 1
    return {k: (v[0] / v[2], v[1] / v[2]) for k, v in sums.items()}


def _figures(cell: dict[str, Any]) -> tuple[float, float]:
    measured = next(v for v in cell["arms"].values() if v["label"] == "MEASURED")
    return measured["R"], cell["arms"]["top4@3"]["R"]


def test_by_worker_cells_equal_rows(runs: dict[str, Path], archive: Path) -> None:
    frame = pl.read_parquet(archive)
    cells = _doc(runs["by"])["cells"]
    by = {c["group"]["worker"]: c for c in cells if c["level"] == Level.BY.value}
    want = _expected(frame, ["worker"])
    assert set(by) == {"w0", "w1"}
    for (w,), (measured, simulated) in want.items():
        got = _figures(by[w])
        assert got[0] == pytest.approx(measured, rel=1e-12)
        assert got[1] == pytest.approx(simulated, rel=1e-12)
        assert by[w]["n_requests"] == N_REQ // 2 and by[w]["family"] is None
    assert by["w1"]["arms"]["top4@3 (MEASURED)"]["R"] == 1.0  # every w1 round rejected at 1
    # closed forms: α = 0.7 (w0) and 15/16 (w1) at every position, R = 1 + α + α² + α³
    for w, a in (("w0", 0.7), ("w1", 15 / 16)):
        assert by[w]["arms"]["top4@3"]["R"] == pytest.approx(1 + a + a**2 + a**3, rel=1e-12)
    crossed = [c for c in cells if c["level"] == Level.FAMILY_BUCKET_BY.value]
    want3 = _expected(frame, ["family", "worker"])
    assert len(crossed) == len(want3) == 6
    for c in crossed:
        got = _figures(c)
        measured, simulated = want3[(c["family"], c["group"]["worker"])]
        assert c["bucket"] == "<4K"
        assert got[0] == pytest.approx(measured, rel=1e-12)
        assert got[1] == pytest.approx(simulated, rel=1e-12)
        assert not math.isnan(c["deltas"][0]["point"])


def test_by_leaves_the_other_cells_unchanged(runs: dict[str, Path]) -> None:
    from specreplay.results.io import parse_result

    plain, by = _doc(runs["plain"])["cells"], _doc(runs["by"])["cells"]
    parse_result(json.dumps(_doc(runs["by"])).encode())  # report's checks pass
    assert by[: len(plain)] == plain
    assert all(c["group"] is None for c in plain)
    assert _doc(runs["by"])["options"]["by"] == "worker"


def test_by_cells_in_tables_and_cells_parquet(runs: dict[str, Path]) -> None:
    tables = (runs["by"] / "TABLES.md").read_text()
    assert "| worker=w0 " in tables and "| code × <4K × worker=w1 " in tables
    frame = pl.read_parquet(runs["by"] / "cells.parquet")
    groups = set(frame.filter(pl.col("level") == "by").get_column("group").to_list())
    assert groups == {"worker=w0", "worker=w1"}
    assert frame.filter(pl.col("level") == "pooled").get_column("group").null_count() > 0


@pytest.mark.parametrize(
    ("by", "match"),
    [
        ("family", r"--by 'family': a schema-v1 column is not a grouping key"),
        ("request_id", r"--by 'request_id': a schema-v1 column"),
        ("nosuch", r"--by 'nosuch': .*a\.parquet has no such carried column \(carried: worker\)"),
    ],
)
def test_by_bad_column(archive: Path, tmp_path: Path, by: str, match: str) -> None:
    import re

    text = _invoke(["requalify", str(archive), *BASE, *FAST, "--by", by,
                    "--out", str(tmp_path / "o")], code=2)  # fmt: skip
    assert re.search(match, text), text
    assert len(text.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_by_column_varying_within_a_request(tmp_path: Path) -> None:
    """Request 3's value changes at its second round (row 3·12 + 3 = 39): one line, exit 2."""
    rows = clone(_rows())
    for r in rows:
        if r["request_id"] == "zz-secret-0003" and r["round"] >= 1:
            r["worker"] = "w9"
    path = _write(tmp_path / "bad.parquet", rows)
    text = _invoke(["requalify", str(path), *BASE, *FAST, "--by", "worker",
                    "--out", str(tmp_path / "o")], code=2)  # fmt: skip
    assert text.startswith(
        f"error: {path}: row 39 (0-based): request 'zz-secret-0003' changes worker to 'w9'; "
        "first at "
    ), text
    assert len(text.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_by_refused_with_families_and_on_round_traces(archive: Path, tmp_path: Path) -> None:
    text = _invoke(["requalify", str(archive), *BASE, *FAST, "--by", "worker", "--families",
                    "code", "--out", str(tmp_path / "o")], code=2)  # fmt: skip
    assert "--by and --families" in text
    rt = write_jsonl(tmp_path / "rt.jsonl", _round_traces(_rows()))
    text = _invoke(["sweep", str(rt), "--by", "worker", "--depths", "1..3",
                    "--out", str(tmp_path / "s")], code=2)  # fmt: skip
    assert "--by 'worker': round traces carry no grouping columns" in text

"""Archive forms (issue 8): Parquet (zstd, lz4, uncompressed), Arrow IPC (folder, one file), JSON
Lines give the same figures bit for bit; convert keeps every value's bits; projection; writers.

The reference values come from outside the code under test: the synthetic frames themselves
(:func:`synth_frames`), polars reading the written files directly, and figures computed from
the zstd Parquet archive (the form every earlier release read) compared with every other form.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from archive_factory import clone, valid_rows, write_jsonl, write_parquet
from typer.testing import CliRunner

from specreplay import api
from specreplay.cli import app
from specreplay.errors import SpecReplayError
from specreplay.replay.archive.reader import ArchiveReader
from specreplay.replay.archive.sources import (
    ArchiveFile,
    file_columns,
    list_archive,
    read_chunks,
)
from specreplay.replay.archive.synthetic import for_form, synth_frames
from specreplay.replay.archive.writer import TraceWriter, check_compression
from specreplay.results.io import result_json
from specreplay.sim.synth import SynthConfig

BASE, CAND = "top32:t0.7@5", "top32:t0.7:dyadic24@5"
CFG = SynthConfig(n_requests=36, rounds=6, requests_per_shard=12)
FORMS: dict[str, tuple[str, str, str | None, str]] = {
    # name: (TraceWriter format, path name, compression, toy_state as for_form(form) writes it)
    "parquet-zstd": ("parquet-dir", "pq-zstd", "zstd", "parquet"),
    "parquet-lz4": ("parquet-dir", "pq-lz4", "lz4", "parquet"),
    "parquet-uncompressed": ("parquet-dir", "pq-none", "uncompressed", "parquet"),
    "parquet-one-file": ("parquet", "one.parquet", None, "parquet"),
    "ipc-dir": ("ipc-dir", "ipc", None, "ipc"),
    "ipc-lz4-dir": ("ipc-dir", "ipc-lz4", "lz4", "ipc"),
    "ipc-one-file": ("ipc", "one.arrow", None, "ipc"),
    "jsonl-dir": ("jsonl-dir", "jsonl", None, "jsonl"),
    "ipc-string-state": ("ipc-dir", "ipc-s", None, "jsonl"),  # toy_state a string, as in JSONL
}


def _frames() -> Iterator[pl.DataFrame]:
    return synth_frames(CFG, seed=11)


@pytest.fixture(scope="module")
def forms(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same synthetic archive written in every form."""
    root = tmp_path_factory.mktemp("forms")
    paths = {}
    for name, (fmt, where, codec, state) in FORMS.items():
        path = root / where
        with TraceWriter(path, format=fmt, compression=codec) as w:
            for frame in _frames():
                w.append_frame(for_form(frame, state))
                w.end_shard()
        paths[name] = path
    return paths


def _figures(path: Path) -> dict[str, Any]:
    """results.json of a requalify run, without what names the input or the moment.

    ``validation`` counts the input's files (one to three here) and how many were validated
    earlier: about the input, as ``inputs`` is.
    """
    res = api.requalify(path, baseline=BASE, candidate=CAND, n_boot=200, seed=3)
    doc = json.loads(result_json(res))
    for key in ("inputs", "created_utc", "options", "environment", "validation"):
        doc.pop(key)
    return doc


def test_every_form_gives_bit_identical_figures(forms: dict[str, Path]) -> None:
    """requalify's results.json (cells, law tests, verdict) is the same text in every form."""
    ref = _figures(forms["parquet-zstd"])
    assert ref["cells"] and ref["requalification"]
    for name, path in forms.items():
        doc = _figures(path)
        for key in ref:
            assert doc[key] == ref[key], (name, key)  # JSON floats: repr, so bit for bit


def _bits(frame: pl.DataFrame) -> pl.DataFrame:
    """Float values (also inside lists) as their uint64 bit patterns, so -0.0 ≠ 0.0."""
    exprs = []
    for name, dtype in frame.schema.items():
        if dtype == pl.Float64:
            exprs.append(pl.col(name).reinterpret(signed=False))
        elif dtype == pl.List(pl.Float64):
            exprs.append(pl.col(name).list.eval(pl.element().reinterpret(signed=False)))
        else:
            exprs.append(pl.col(name))
    return frame.select(exprs)


def _read_all(path: Path) -> pl.DataFrame:
    """Every row of an archive, read by polars directly (not by specreplay's reader)."""
    readers = {".parquet": pl.read_parquet, ".arrow": pl.read_ipc, ".jsonl": None}
    frames = []
    for f in sorted(path.iterdir()) if path.is_dir() else [path]:
        if f.suffix not in readers:
            continue
        read = readers[f.suffix]
        frames.append(read(f) if read else _read_jsonl(f))
    return pl.concat(frames, how="vertical")


def _read_jsonl(path: Path) -> pl.DataFrame:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    frame = pl.DataFrame(rows, infer_schema_length=None)
    return frame.with_columns(
        pl.col("draft_logprobs", "target_probs", "emitted_q").cast(pl.List(pl.Float64))
    )


@pytest.mark.parametrize(
    ("source", "form", "codec"),
    [
        ("jsonl-dir", "ipc", None),
        ("jsonl-dir", "ipc", "zstd"),
        ("jsonl-dir", "parquet", "lz4"),
        ("ipc-string-state", "parquet", "snappy"),
        ("ipc-string-state", "jsonl", None),
        ("jsonl-dir", "jsonl", None),
    ],
)
def test_convert_keeps_every_row_bit_for_bit(
    forms: dict[str, Path], tmp_path: Path, source: str, form: str, codec: str | None
) -> None:
    """convert writes one shard per input shard; every value (floats as bits) is the source's."""
    src = forms[source]
    out = tmp_path / "out"
    c = api.convert(src, out, format=form, compression=codec)
    stems = [p.stem for p in sorted(src.iterdir()) if p.suffix != ".json"]
    assert [p.stem for p in c.files] == stems
    assert all(p.suffix == {"ipc": ".arrow", "parquet": ".parquet", "jsonl": ".jsonl"}[form]
               for p in c.files)  # fmt: skip
    expected = pl.concat([for_form(f, "jsonl") for f in _frames()], how="vertical")
    assert c.rows == expected.height
    got = _read_all(out).select(expected.columns)
    assert _bits(got).equals(_bits(expected.cast(got.schema)))  # type: ignore[arg-type]
    manifest = json.loads((out / "CONVERT.json").read_text())
    assert manifest["options"]["form"] == form
    assert manifest["options"]["compression"] == check_compression(form, codec)
    assert [o["path"] for o in manifest["outputs"]] == [p.name for p in c.files]
    assert c.bytes_out == sum(p.stat().st_size for p in c.files)


def test_convert_from_parquet_keeps_uint64_and_float_bits(
    forms: dict[str, Path], tmp_path: Path
) -> None:
    """Parquet → IPC → Parquet keeps the synthetic frames exactly, toy_state (uint64) included."""
    api.convert(forms["parquet-zstd"], tmp_path / "ipc")
    api.convert(tmp_path / "ipc", tmp_path / "back", format="parquet", compression="uncompressed")
    expected = pl.concat(list(_frames()), how="vertical")
    for path in (tmp_path / "ipc", tmp_path / "back"):
        assert _bits(_read_all(path)).equals(_bits(expected))


def test_convert_refuses_uint64_past_int64_into_jsonl(
    forms: dict[str, Path], tmp_path: Path
) -> None:
    """toy_state keys past int64 cannot be JSON Lines (the reader refuses them): one line, no
    output."""
    with pytest.raises(SpecReplayError, match=r"column 'toy_state' = \d+ does not fit in int64"):
        api.convert(forms["ipc-dir"], tmp_path / "out", format="jsonl")
    assert not (tmp_path / "out").exists()


def test_convert_cli_prints_what_it_wrote(forms: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "o"
    res = CliRunner().invoke(app, ["convert", str(forms["parquet-lz4"]), str(out), "-q"])
    assert res.exit_code == 0, res.output
    n = len(list(forms["parquet-lz4"].glob("*.parquet")))
    rows = CFG.n_requests * CFG.rounds * 5
    assert f"wrote {n} Arrow IPC shards (uncompressed) to {out}: {rows:,} rows" in res.stdout
    assert sorted(p.name for p in out.iterdir()) == ["CONVERT.json"] + [
        f"part-{i:05d}.arrow" for i in range(n)
    ]
    again = CliRunner().invoke(app, ["convert", str(forms["parquet-lz4"]), str(out), "-q"])
    assert again.exit_code == 2 and "use --force" in again.stderr  # an archive has no marker
    forced = ["convert", str(forms["parquet-lz4"]), str(out), "--force", "-q", "--format", "jsonl"]
    assert CliRunner().invoke(app, forced).exit_code == 2  # toy_state: nothing replaced
    assert sorted(p.suffix for p in out.iterdir()) == [".arrow"] * n + [".json"]


# ---------------------------------------------------------------------------------------------
# projection and file_columns


def _bad_law_rows() -> list[dict[str, Any]]:
    rows = clone(valid_rows())
    rows[4]["emitted_q"] = [0.5, 0.5, 0.5, 0.5]  # Σ = 2: not a law
    return rows


@pytest.mark.parametrize("suffix", ["parquet", "arrow", "jsonl"])
def test_a_column_not_read_is_not_validated(tmp_path: Path, suffix: str) -> None:
    """With emitted_q projected out, an invalid emitted_q law passes; read, it fails."""
    path = tmp_path / f"trace.{suffix}"
    if suffix == "jsonl":
        write_jsonl(path, _bad_law_rows())
    else:
        write_parquet(path.with_suffix(".parquet"), _bad_law_rows())
        if suffix == "arrow":
            pl.read_parquet(path.with_suffix(".parquet")).write_ipc(path)
    errors = ArchiveReader(path, max_errors=None).validate()
    assert len(errors) == 1 and "emitted_q does not sum to 1" in errors[0]
    keep = ("drafted_id", "accepted", "logging_arm")
    reader = ArchiveReader(path, max_errors=None, columns=keep)
    assert reader.validate() == []
    assert reader.columns == frozenset(keep)
    assert reader.unread == {"emitted_q"}


def test_projection_skips_decoding_and_type_checks(tmp_path: Path) -> None:
    """A column of the wrong type fails the schema check only when it is read."""
    rows = clone(valid_rows())
    for r in rows:
        r["emitted_q"] = ["x"] * len(r["cand_ids"])  # a list of strings
    path = write_parquet(
        tmp_path / "t.parquet", rows, schema_overrides={"emitted_q": pl.List(pl.String)}
    )
    pl.read_parquet(path).write_ipc(tmp_path / "t.arrow")
    for p in (path, tmp_path / "t.arrow"):
        file = list_archive(p)[0]
        with pytest.raises(SpecReplayError, match="column 'emitted_q' has type"):
            next(read_chunks(file, 100))
        frames = [c.frame for c in read_chunks(file, 4, columns=("accepted", "no_such"))]
        assert all("emitted_q" not in f.columns for f in frames)
        assert frames[0].columns == [
            *(c for c in rows[0] if c not in ("emitted_q", "drafted_id", "logging_arm")),
        ]
        assert sum(f.height for f in frames) == len(rows)


def test_projection_none_reads_every_column(tmp_path: Path) -> None:
    rows = [{**r, "worker": "w1"} for r in valid_rows()]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    file = list_archive(path)[0]
    (full,) = [c.frame for c in read_chunks(file, 100)]
    (proj,) = [c.frame for c in read_chunks(file, 100, columns=("worker",))]
    assert full.columns == list(rows[0])
    assert proj.columns == [c for c in rows[0] if c in {*REQUIRED_COLS, "worker"}]
    assert proj.equals(full.select(proj.columns))


REQUIRED_COLS = ("request_id", "family", "context_tokens", "round", "position", "cand_ids",
                 "draft_logprobs", "target_probs")  # fmt: skip


def test_file_columns(tmp_path: Path) -> None:
    rows = [{**r, "worker": "w1"} for r in valid_rows()]
    names = list(rows[0])
    pq = write_parquet(tmp_path / "t.parquet", rows, schema_overrides={"worker": pl.String()})
    pl.read_parquet(pq).write_ipc(tmp_path / "t.arrow")
    js = write_jsonl(tmp_path / "t.jsonl", rows, blank_before={0: 2})
    for p in (pq, tmp_path / "t.arrow", js):
        assert file_columns(list_archive(p)[0]) == names
    (tmp_path / "bad.jsonl").write_text("[1, 2]\n")
    assert file_columns(ArchiveFile(0, tmp_path / "bad.jsonl", "jsonl")) == []


# ---------------------------------------------------------------------------------------------
# folders, writers, synth


def test_folder_rule_only_data_suffixes_and_one_form(tmp_path: Path) -> None:
    folder = tmp_path / "a"
    folder.mkdir()
    rows = valid_rows()
    write_parquet(folder / "b.parquet", rows)
    pl.read_parquet(folder / "b.parquet").write_ipc(folder / "c.feather")
    (folder / "b.parquet").unlink()
    (folder / "SYNTH.json").write_text("{}")
    (folder / "notes.txt").write_text("x")
    (folder / ".c.feather.tmp-1").write_text("half written")
    # issue 9: other entries are errors unless skipped by --ignore globs (tests/test_safety_folders)
    skip = ("notes.txt", ".*.tmp-*")
    assert [(f.path.name, f.kind) for f in list_archive(folder, skip)] == [("c.feather", "ipc")]
    write_jsonl(folder / "d.ndjson", rows)
    with pytest.raises(SpecReplayError, match=r"mixes archive forms: Arrow IPC \(c.feather\) and "
                                               r"JSON Lines \(d.ndjson\)"):  # fmt: skip
        list_archive(folder, skip)


def test_writer_suffixes_and_compression(tmp_path: Path) -> None:
    frame = next(_frames())
    sizes = {}
    for codec in ("uncompressed", "lz4", "zstd"):
        with TraceWriter(tmp_path / f"{codec}.ipc", compression=codec) as w:
            w.append_frame(frame)
        assert w.format == "ipc"
        sizes[codec] = (tmp_path / f"{codec}.ipc").stat().st_size
        assert _bits(pl.read_ipc(tmp_path / f"{codec}.ipc")).equals(_bits(frame))
    assert sizes["zstd"] < sizes["lz4"] < sizes["uncompressed"]
    assert TraceWriter(tmp_path / "x.arrow").compression == "uncompressed"
    assert TraceWriter(tmp_path / "x.parquet").compression == "lz4"  # the measured default
    with pytest.raises(SpecReplayError, match="--compression 'gzip': parquet takes"):
        TraceWriter(tmp_path / "y.parquet", compression="gzip")
    with pytest.raises(SpecReplayError, match="unknown format 'csv'"):
        TraceWriter(tmp_path / "y", format="csv")
    assert not (tmp_path / "y").exists()


@pytest.mark.parametrize(("form", "suffix"), [("ipc", ".arrow"), ("jsonl", ".jsonl")])
def test_synth_format_option(tmp_path: Path, form: str, suffix: str) -> None:
    out = tmp_path / "s"
    res = CliRunner().invoke(app, ["synth", str(out), "--requests", "6", "--rounds", "3",
                                   "--shard-requests", "4", "--format", form, "-q"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert sorted(p.suffix for p in out.iterdir()) == sorted([".json", suffix, suffix])
    opts = json.loads((out / "SYNTH.json").read_text())["options"]
    assert (opts["form"], opts["compression"]) == (form, check_compression(form, None))
    assert ArchiveReader(out).validate() == []
    bad = CliRunner().invoke(app, ["synth", str(tmp_path / "t"), "--format", "csv", "-q"])
    assert bad.exit_code == 2 and "--format 'csv'" in bad.stderr


def test_ipc_is_read_in_chunks_with_row_locations(forms: dict[str, Path]) -> None:
    file = list_archive(forms["ipc-one-file"])[0]
    chunks = list(read_chunks(file, 100))
    n = CFG.n_requests * CFG.rounds * 5
    assert [c.frame.height for c in chunks] == [100] * (n // 100) + ([n % 100] if n % 100 else [])
    assert np.array_equal(np.concatenate([c.locs for c in chunks]), np.arange(n))
    assert file.kind == "ipc" and all(not c.issues for c in chunks)


def test_mapped_ipc_gives_the_chunks_of_its_parquet_twin(forms: dict[str, Path]) -> None:
    """The memory-mapped IPC reader yields the chunks read from the zstd Parquet twin, bit for
    bit."""
    for ipc_file, pq_file in zip(
        list_archive(forms["ipc-dir"]), list_archive(forms["parquet-zstd"]), strict=True
    ):
        got = list(read_chunks(ipc_file, 70, columns=("accepted",)))
        want = list(read_chunks(pq_file, 70, columns=("accepted",)))
        assert [c.frame.height for c in got] == [c.frame.height for c in want]
        for g, w in zip(got, want, strict=True):
            assert _bits(g.frame).equals(_bits(w.frame))
            assert np.array_equal(g.locs, w.locs)


@pytest.mark.parametrize("damage", ["truncate", "utf8", "offsets", "stream"])
def test_corrupt_ipc_is_one_error_line(tmp_path: Path, damage: str) -> None:
    """A damaged IPC file is a SpecReplayError naming the file, never a crash."""
    path = tmp_path / "t.arrow"
    frame = next(_frames())
    frame.write_ipc(path)
    raw = bytearray(path.read_bytes())
    if damage == "truncate":
        raw = raw[: len(raw) - 100]
    elif damage == "utf8":
        raw[raw.find(b"code")] = 0xFF  # an inline family string
    elif damage == "offsets":  # the cand_ids offsets: int64 0, 32, 64, … (32 candidates a row)
        at = raw.find(b"".join(int(32 * i).to_bytes(8, "little") for i in range(4)))
        assert at > 0
        raw[at + 8 * 5 + 6] = 0x7F  # the sixth offset far past the values
    else:
        frame.write_ipc_stream(path)
        raw = bytearray(path.read_bytes())
    path.write_bytes(bytes(raw))
    with pytest.raises(SpecReplayError, match=rf"^{tmp_path}/t.arrow: cannot read as Arrow IPC"):
        for _ in read_chunks(list_archive(path)[0], 1000):
            pass


def test_synth_default_is_lz4_parquet(tmp_path: Path) -> None:
    """The default chosen by measurement (commands/synth.py): Parquet shards compressed lz4."""
    a = api.synth(tmp_path / "s", requests=4, rounds=2)
    assert (a.form, a.compression) == ("parquet", "lz4")
    opts = json.loads((tmp_path / "s" / "SYNTH.json").read_text())["options"]
    assert (opts["form"], opts["compression"]) == ("parquet", "lz4")
    assert _codec_of(a.shards[0]) == "LZ4"  # the codec in the Parquet footer (pyarrow reads it)


def _codec_of(path: Path) -> str:
    import pyarrow.parquet as pq

    return str(pq.ParquetFile(path).metadata.row_group(0).column(0).compression)


def test_small_record_batches_are_regrouped_into_chunks(tmp_path: Path) -> None:
    """An IPC file of 7-row record batches is read in chunks of 50 rows, in order."""
    frame = next(_frames())
    frame.write_ipc(tmp_path / "t.arrow", record_batch_size=7)
    chunks = list(read_chunks(list_archive(tmp_path / "t.arrow")[0], 50))
    n = frame.height
    assert [c.frame.height for c in chunks] == [50] * (n // 50) + ([n % 50] if n % 50 else [])
    assert np.array_equal(np.concatenate([c.locs for c in chunks]), np.arange(n))
    got = pl.concat([c.frame for c in chunks], how="vertical")
    assert _bits(got).equals(_bits(frame))

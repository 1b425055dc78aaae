"""Issue 9, item 4: no shard is dropped silently from a folder archive; ``--ignore GLOB``.

Every entry of a folder archive (and of a folder of round traces read by ``interval`` or
``sweep``) is a shard of the folder's form, a known sidecar (``SYNTH.json``, ``CONVERT.json``,
``CAPTURE.json``; not ``SYNTH.json`` and ``CONVERT.json`` together), an entry skipped by
``--ignore GLOB``, or an error naming it. Each case below builds a folder of two valid shards
plus ONE bad entry (a dangling or looping symlink, ``PART-00002.PARQUET``, a sub-folder holding
a shard, a FIFO, a folder named ``x.parquet``, a hidden file, ``_SUCCESS``, a ``.crc`` file, a
writer's ``.part-00001.parquet.tmp-12345``, two manifests) and checks:

- ``validate`` and ``sweep`` refuse: exit 2, one ``error:`` line naming the entry and what it is,
  and suggesting ``--ignore '…'``; nothing written; the folder unchanged (:mod:`corpus`);
- with ``--ignore GLOB`` both run (exit 0), results.json lists ``inputs_ignored: [{path, glob}]``,
  ``validate`` prints it, and the figures equal those of a folder holding only the two good
  shards (the ignored entry counted nowhere).

Then one case each for requalify, lawtest, convert and interval (a folder of round traces), the
accepted entries (sidecars, a symlink to a shard outside the folder), and the globs' rules.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from archive_factory import LOGGING_ARM, valid_rows, write_jsonl, write_parquet
from corpus import assert_clean, assert_refused, invoke, leftovers, tree_digest
from typer.testing import Result

from specreplay import api
from specreplay.errors import SpecReplayError

BASE, CAND = LOGGING_ARM, "top4:t1:dyadic24@3"  # the factory's archive: 4 candidates, depth 3
FAST = ["-q", "--n-boot", "100"]
GOOD = ("part-00000.parquet", "part-00001.parquet")


def good_folder(root: Path) -> Path:
    """A folder archive of two valid Parquet shards (requests req-0, req-1 | req-2, req-3)."""
    arch = root / "arch"
    arch.mkdir(parents=True)
    rows = valid_rows(n_requests=4)
    first = {"req-0", "req-1"}
    write_parquet(arch / GOOD[0], [r for r in rows if r["request_id"] in first])
    write_parquet(arch / GOOD[1], [r for r in rows if r["request_id"] not in first])
    return arch


def extra_shard(path: Path) -> Path:
    """A valid shard of two more requests: silently read or dropped, it would move the figures."""
    rows = valid_rows(n_requests=2, seed=7)
    for r in rows:
        r["request_id"] = "extra-" + r["request_id"]
    return write_parquet(path, rows)


def _dangling(arch: Path) -> str:
    os.symlink("missing.parquet", arch / "part-00002.parquet")
    return "part-00002.parquet"


def _looping(arch: Path) -> str:
    os.symlink("part-00002.parquet", arch / "part-00002.parquet")
    return "part-00002.parquet"


def _upper(arch: Path) -> str:
    extra_shard(arch / "PART-00002.PARQUET")
    return "PART-00002.PARQUET"


def _subfolder(arch: Path) -> str:
    (arch / "more").mkdir()
    extra_shard(arch / "more" / "part-00002.parquet")
    return "more"


def _fifo(arch: Path) -> str:
    os.mkfifo(arch / "pipe")
    return "pipe"


def _folder_named_shard(arch: Path) -> str:
    (arch / "x.parquet").mkdir()
    return "x.parquet"


def _hidden(arch: Path) -> str:
    extra_shard(arch / ".part-00002.parquet")
    return ".part-00002.parquet"


def _success(arch: Path) -> str:
    (arch / "_SUCCESS").write_bytes(b"")
    return "_SUCCESS"


def _crc(arch: Path) -> str:
    (arch / "part-00000.parquet.crc").write_bytes(b"crc\x00\x01")
    return "part-00000.parquet.crc"


def _unfinished(arch: Path) -> str:
    extra_shard(arch / ".part-00001.parquet.tmp-12345")
    return ".part-00001.parquet.tmp-12345"


def _two_manifests(arch: Path) -> str:
    (arch / "SYNTH.json").write_text("{}\n")
    (arch / "CONVERT.json").write_text("{}\n")
    return "SYNTH.json"


Make = Callable[[Path], str]
CASES: dict[str, tuple[Make, str, str]] = {
    # name: (adds the bad entry and returns its name, what the error says it is, the glob)
    "dangling-symlink": (_dangling, "a dangling symlink (to missing.parquet", "part-00002.*"),
    "looping-symlink": (_looping, "a looping symlink", "part-00002.parquet"),
    "upper-case-suffix": (
        _upper,
        "shard suffix '.PARQUET' is not lower-case (rename it PART-00002.parquet)",
        "*.PARQUET",
    ),
    "sub-folder": (_subfolder, "a sub-folder (shards are read from the folder itself", "more"),
    "fifo": (_fifo, "a FIFO (named pipe), not a shard file", "pipe"),
    "folder-named-parquet": (_folder_named_shard, "a folder named like a shard", "x.parquet"),
    "hidden-file": (_hidden, "a hidden file, not a shard nor a known sidecar", ".*"),
    "success-marker": (_success, "not a shard (.arrow, .feather, .ipc, .jsonl", "_SUCCESS"),
    "crc": (
        _crc,
        "not a shard (.arrow, .feather, .ipc, .jsonl, .ndjson, .parquet) nor a known sidecar "
        "(SYNTH.json, CONVERT.json, CAPTURE.json)",
        "*.crc",
    ),
    "unfinished-shard": (
        _unfinished,
        "an unfinished shard (its writer is still running or was killed)",
        ".*.tmp-*",
    ),
    "two-manifests": (_two_manifests, "holds both CONVERT.json and SYNTH.json", "SYNTH.json"),
}


def results(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "results.json").read_text())
    return data


def figures(data: dict[str, Any]) -> Any:
    """What a run found, less where and when (paths, times and environment differ by run)."""
    return {
        "cells": data["cells"],
        "rows": [(Path(f["path"]).name, f["rows"], f["sha256"]) for f in data["inputs"]],
    }


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """validate and sweep of a folder holding only the two good shards."""
    root = tmp_path_factory.mktemp("clean")
    arch = good_folder(root)
    v = invoke(["validate", str(arch), "-q", "--out", str(root / "v")])
    assert v.exit_code == 0, v.output
    s = invoke(["sweep", str(arch), "--arm", BASE, *FAST, "--out", str(root / "s")])
    assert s.exit_code == 0, s.output
    return {"validate": results(root / "v"), "sweep": results(root / "s"), "stdout": v.stdout}


def check_clean(res: Result, before: dict[str, str], arch: Path, name: str) -> None:
    """:func:`corpus.assert_clean`, but the planted ``.NAME.tmp-PID`` is the input's own entry."""
    if ".tmp-" not in name:
        assert_clean(res, before, [arch])
        return
    assert "Traceback" not in res.output, res.output
    assert tree_digest(arch) == before
    assert leftovers(arch, arch.parent) == [str(arch / name)]


def refused_line(arch: Path, name: str, what: str) -> list[str]:
    """The fragments of the one error line: FOLDER/NAME (or the folder), what it is, the way out."""
    if name == "SYNTH.json":  # the manifests' error names the folder and both names
        return [f"error: {arch}: {what}", "--ignore 'SYNTH.json'"]
    remedy = f"; remove it or move it out of the folder, or skip it with --ignore '{name}'"
    return [f"error: {arch / name}: {what}", remedy]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", ["validate", "sweep"])
def test_bad_entry_refused(tmp_path: Path, case: str, command: str) -> None:
    make, what, _ = CASES[case]
    arch = good_folder(tmp_path)
    name = make(arch)
    out = tmp_path / "out"
    before = tree_digest(arch)
    args = {
        "validate": ["validate", str(arch), "-q", "--out", str(out)],
        "sweep": ["sweep", str(arch), "--arm", BASE, *FAST, "--out", str(out)],
    }[command]
    res = invoke(args)
    assert_refused(res, *refused_line(arch, name, what))
    check_clean(res, before, arch, name)
    assert not out.exists()


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_entry_ignored(tmp_path: Path, case: str, clean: dict[str, Any]) -> None:
    make, _, glob = CASES[case]
    arch = good_folder(tmp_path)
    name = make(arch)
    before = tree_digest(arch)
    skipped = [{"path": str(arch / name), "glob": glob}]

    v = invoke(["validate", str(arch), "-q", "--ignore", glob, "--out", str(tmp_path / "v")])
    assert v.exit_code == 0, v.output
    assert f"skipped by --ignore '{glob}': {arch / name} (not read, counted nowhere)" in v.stdout
    assert "VALID, 2 file(s), 24 rows" in v.stdout  # 4 requests × 2 rounds × 3 positions
    data = results(tmp_path / "v")
    assert data["inputs_ignored"] == skipped
    assert figures(data) == figures(clean["validate"])

    s = invoke(
        ["sweep", str(arch), "--arm", BASE, *FAST, "--ignore", glob, "--out", str(tmp_path / "s")]
    )
    assert s.exit_code == 0, s.output
    data = results(tmp_path / "s")
    assert data["inputs_ignored"] == skipped
    assert figures(data) == figures(clean["sweep"])
    check_clean(s, before, arch, name)


def test_clean_folder_reports_nothing_ignored(clean: dict[str, Any]) -> None:
    assert clean["validate"]["inputs_ignored"] == []
    assert clean["sweep"]["inputs_ignored"] == []
    assert "skipped by --ignore" not in clean["stdout"]
    rows = [f["rows"] for f in clean["validate"]["inputs"]]
    assert rows == [12, 12]  # each shard: 2 requests × 2 rounds × 3 positions


def test_glob_matched_against_the_name_not_the_path(tmp_path: Path) -> None:
    """A glob naming the folder's path matches nothing: the entry still stops the run."""
    arch = good_folder(tmp_path)
    _success(arch)
    before = tree_digest(arch)
    for glob in (f"*{arch.name}*", "arch*", f"{tmp_path.name}*"):
        res = invoke(["validate", str(arch), "-q", "--ignore", glob])
        assert_refused(res, f"error: {arch / '_SUCCESS'}: not a shard")
        assert_clean(res, before, [arch])


def test_glob_is_case_sensitive(tmp_path: Path) -> None:
    arch = good_folder(tmp_path)
    _success(arch)
    res = invoke(["validate", str(arch), "-q", "--ignore", "_success"])
    assert_refused(res, f"{arch / '_SUCCESS'}: not a shard")


def test_glob_matching_nothing_is_fine(tmp_path: Path, clean: dict[str, Any]) -> None:
    arch = good_folder(tmp_path)
    before = tree_digest(arch)
    res = invoke(["validate", str(arch), "-q", "--ignore", "*.crc", "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.output
    assert "skipped by --ignore" not in res.stdout
    assert results(tmp_path / "v")["inputs_ignored"] == []
    assert_clean(res, before, [arch])


@pytest.mark.parametrize("glob", ["", "more/part-00002.parquet", "/"])
def test_glob_no_name_can_match_is_refused(tmp_path: Path, glob: str) -> None:
    arch = good_folder(tmp_path)
    before = tree_digest(arch)
    res = invoke(["validate", str(arch), "-q", "--ignore", glob])
    assert_refused(res, f"--ignore {glob!r}: a glob is matched against the names of the folder's")
    assert_clean(res, before, [arch])


def test_ignore_can_leave_out_a_good_shard_and_says_so(tmp_path: Path) -> None:
    arch = good_folder(tmp_path)
    res = invoke(["validate", str(arch), "-q", "--ignore", GOOD[1], "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.output
    assert "VALID, 1 file(s), 12 rows" in res.stdout
    data = results(tmp_path / "v")
    assert data["inputs_ignored"] == [{"path": str(arch / GOOD[1]), "glob": GOOD[1]}]
    assert [Path(f["path"]).name for f in data["inputs"]] == [GOOD[0]]


def test_every_shard_ignored_is_an_empty_folder(tmp_path: Path) -> None:
    arch = good_folder(tmp_path)
    res = invoke(["validate", str(arch), "-q", "--ignore", "*.parquet"])
    assert_refused(
        res,
        f"{arch}: directory holds no .parquet or .jsonl shard",
        "(2 entries skipped by --ignore)",
    )


def test_folder_without_shard_says_so_then_names_its_first_bad_entry(tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    arch.mkdir()
    write_jsonl(arch / "trace.json", valid_rows())  # JSON Lines, but .json is no shard suffix
    (arch / "z.txt").write_text("x")
    before = tree_digest(arch)
    res = invoke(["validate", str(arch), "-q"])
    assert_refused(
        res,
        f"error: {arch}: directory holds no .parquet or .jsonl shard",
        f"; {arch / 'trace.json'}: not a shard (",
    )
    assert "z.txt" not in res.stderr  # the first bad entry only
    assert_clean(res, before, [arch])


def test_empty_folder_is_an_error(tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    arch.mkdir()
    (arch / "SYNTH.json").write_text("{}\n")  # a sidecar alone is no shard
    res = invoke(["validate", str(arch), "-q"])
    assert_refused(res, f"{arch}: directory holds no .parquet or .jsonl shard")
    assert "skipped" not in res.stderr


@pytest.mark.parametrize(
    "sidecars",
    [("SYNTH.json",), ("CONVERT.json",), ("CAPTURE.json",), ("CAPTURE.json", "SYNTH.json")],
)
def test_known_sidecars_accepted(tmp_path: Path, sidecars: tuple[str, ...]) -> None:
    arch = good_folder(tmp_path)
    for name in sidecars:
        (arch / name).write_text('{"written_by": "specreplay"}\n')
    res = invoke(["validate", str(arch), "-q", "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.output
    assert "VALID, 2 file(s), 24 rows" in res.stdout
    assert results(tmp_path / "v")["inputs_ignored"] == []


@pytest.mark.parametrize("name", ["synth.json", "SYNTH.json.bak", "Capture.json", "notes.json"])
def test_sidecar_names_are_exact(tmp_path: Path, name: str) -> None:
    arch = good_folder(tmp_path)
    (arch / name).write_text("{}\n")
    res = invoke(["validate", str(arch), "-q"])
    assert_refused(res, f"{arch / name}: not a shard", f"--ignore '{name}'")


def test_symlink_to_a_shard_outside_is_a_shard(tmp_path: Path, clean: dict[str, Any]) -> None:
    """Judged by its target (a regular file) and read under the link's name."""
    arch = good_folder(tmp_path / "a")
    outside = tmp_path / "elsewhere.parquet"
    shutil.move(arch / GOOD[1], outside)
    os.symlink(outside, arch / GOOD[1])
    before = tree_digest(arch, outside)
    res = invoke(["validate", str(arch), "-q", "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.output
    data = results(tmp_path / "v")
    assert figures(data) == figures(clean["validate"])
    assert_clean(res, before, [arch, outside])


def test_symlink_to_a_folder_is_refused(tmp_path: Path) -> None:
    arch = good_folder(tmp_path)
    (tmp_path / "d").mkdir()
    os.symlink(tmp_path / "d", arch / "part-00002.parquet")
    res = invoke(["validate", str(arch), "-q"])
    assert_refused(res, f"{arch / 'part-00002.parquet'}: a symlink to a folder named like a shard")


def test_requalify_refuses_then_ignores(tmp_path: Path) -> None:
    arch = good_folder(tmp_path)
    _hidden(arch)
    before = tree_digest(arch)
    args = ["requalify", str(arch), "--baseline", BASE, "--candidate", CAND, *FAST]
    res = invoke([*args, "--out", str(tmp_path / "r0")])
    assert_refused(res, f"{arch / '.part-00002.parquet'}: a hidden file")
    assert_clean(res, before, [arch])
    clean_arch = good_folder(tmp_path / "clean")
    ref = invoke([*args[:1], str(clean_arch), *args[2:], "--out", str(tmp_path / "r1")])
    assert ref.exit_code == 0, ref.output
    res = invoke([*args, "--ignore", ".*", "--out", str(tmp_path / "r2")])
    assert res.exit_code == 0, res.output
    data = results(tmp_path / "r2")
    assert data["inputs_ignored"] == [{"path": str(arch / ".part-00002.parquet"), "glob": ".*"}]
    assert figures(data) == figures(results(tmp_path / "r1"))
    assert_clean(res, before, [arch])


def test_lawtest_refuses_then_ignores(tmp_path: Path) -> None:
    arch = good_folder(tmp_path)
    _crc(arch)
    before = tree_digest(arch)
    args = ["lawtest", str(arch), "--arm", CAND, "--positions", "2", "-q"]
    res = invoke([*args, "--out", str(tmp_path / "l0")])
    assert_refused(res, f"{arch / 'part-00000.parquet.crc'}: not a shard")
    res = invoke([*args, "--ignore", "*.crc", "--out", str(tmp_path / "l1")])
    assert res.exit_code == 0, res.output
    data = results(tmp_path / "l1")
    assert data["inputs_ignored"] == [
        {"path": str(arch / "part-00000.parquet.crc"), "glob": "*.crc"}
    ]
    assert [Path(f["path"]).name for f in data["inputs"]] == list(GOOD)
    assert_clean(res, before, [arch])


def test_convert_refuses_then_ignores(tmp_path: Path) -> None:
    arch = good_folder(tmp_path)
    _unfinished(arch)
    before = tree_digest(arch)
    out = tmp_path / "conv"
    res = invoke(["convert", str(arch), str(out), "-q"])
    assert_refused(res, f"{arch / '.part-00001.parquet.tmp-12345'}: an unfinished shard")
    check_clean(res, before, arch, ".part-00001.parquet.tmp-12345")
    assert not out.exists()
    res = invoke(["convert", str(arch), str(out), "-q", "--ignore", ".*.tmp-*"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == [
        "CONVERT.json",
        "part-00000.arrow",
        "part-00001.arrow",
    ]
    manifest = json.loads((out / "CONVERT.json").read_text())
    assert manifest["inputs_ignored"] == [
        {"path": str(arch / ".part-00001.parquet.tmp-12345"), "glob": ".*.tmp-*"}
    ]
    check_clean(res, before, arch, ".part-00001.parquet.tmp-12345")
    v = invoke(["validate", str(out), "-q"])  # the converted folder (with its manifest) is valid
    assert v.exit_code == 0 and "VALID, 2 file(s), 24 rows" in v.stdout, v.output


def round_rows(first: int, n: int) -> list[dict[str, Any]]:
    """Round traces of requests r{first}..: 3 rounds each, accepted i % 5 % 4 of 4 drafted."""
    return [
        {
            "request_id": f"r{i // 3}",
            "family": ("code", "chat")[i // 3 % 2],
            "context_tokens": 100 + i,
            "round": i % 3,
            "drafted": 4,
            "accepted": i % 5 % 4,
        }
        for i in range(3 * first, 3 * (first + n))
    ]


def round_folder(root: Path) -> Path:
    b = root / "b"
    b.mkdir(parents=True)
    write_jsonl(b / "b-0.jsonl", round_rows(0, 6))
    write_jsonl(b / "b-1.jsonl", round_rows(6, 6))
    return b


def test_interval_round_trace_folder(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", [{**r, "accepted": 2} for r in round_rows(0, 12)])
    b = round_folder(tmp_path / "bad")
    extra = write_jsonl(b / "b-2.JSONL", round_rows(12, 6))
    before = tree_digest(a, b)
    args = ["interval", str(a), str(b), *FAST]
    res = invoke([*args, "--out", str(tmp_path / "i0")])
    assert_refused(res, f"{extra}: shard suffix '.JSONL' is not lower-case (rename it b-2.jsonl)")
    assert_clean(res, before, [a, b])
    res = invoke([*args, "--ignore", "*.JSONL", "--out", str(tmp_path / "i1")])
    assert res.exit_code == 0, res.output
    data = results(tmp_path / "i1")
    assert data["inputs_ignored"] == [{"path": str(extra), "glob": "*.JSONL"}]
    good = round_folder(tmp_path / "good")
    ref = invoke(["interval", str(a), str(good), *FAST, "--out", str(tmp_path / "i2")])
    assert ref.exit_code == 0, ref.output
    assert results(tmp_path / "i2")["cells"] == data["cells"]
    assert_clean(res, before, [a, b])


def test_round_trace_folder_of_two_forms_is_refused(tmp_path: Path) -> None:
    """Until issue 9 a folder with *.parquet silently left out its *.jsonl round traces."""
    a = write_jsonl(tmp_path / "a.jsonl", round_rows(0, 12))
    b = round_folder(tmp_path)
    pl.DataFrame(round_rows(12, 2)).write_parquet(b / "b-2.parquet")
    res = invoke(["interval", str(a), str(b), *FAST, "--out", str(tmp_path / "o")])
    assert_refused(res, f"{b}: directory mixes Parquet (b-2.parquet) and JSON Lines (b-0.jsonl)")


def test_sweep_proxy_round_trace_folder_ignores(tmp_path: Path) -> None:
    b = round_folder(tmp_path)
    _success(b)
    before = tree_digest(b)
    res = invoke(["sweep", str(b), *FAST, "--depths", "1,2", "--out", str(tmp_path / "s0")])
    assert_refused(res, f"{b / '_SUCCESS'}: not a shard")
    res = invoke(
        [
            "sweep",
            str(b),
            *FAST,
            "--depths",
            "1,2",
            "--ignore",
            "_SUCCESS",
            "--out",
            str(tmp_path / "s1"),
        ]
    )
    assert res.exit_code == 0, res.output
    data = results(tmp_path / "s1")
    assert data["inputs_ignored"] == [{"path": str(b / "_SUCCESS"), "glob": "_SUCCESS"}]
    assert_clean(res, before, [b])


def test_api_ignore(tmp_path: Path) -> None:
    arch = good_folder(tmp_path)
    _success(arch)
    result = api.validate(arch, ignore="_SUCCESS")  # one string is one glob
    assert [(i.path, i.glob) for i in result.inputs_ignored] == [
        (str(arch / "_SUCCESS"), "_SUCCESS")
    ]
    with pytest.raises(SpecReplayError, match=r"_SUCCESS: not a shard"):
        api.validate(arch)

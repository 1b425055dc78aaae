"""``report`` reads results.json as untrusted input (issue 17, item 2; docs/outputs.md).

Every forged file is refused before anything is rendered: ``specreplay -q report RUN --out OUT``
and ``specreplay -q report RUN`` (in place) exit 2 with ONE line naming the file and the field,
write nothing (OUT stays absent; RUN keeps its bytes: :func:`corpus.assert_clean`) and print no
traceback. Every command's real results.json reads back equal and renders.

The forged files start from a real requalify results.json (the demo's sub-run), each with one
change; the six cases issue 17 found come first.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from archive_factory import LOGGING_ARM, valid_rows, write_jsonl
from corpus import assert_clean, assert_refused, invoke, tree_digest

from specreplay.errors import SpecReplayError
from specreplay.pipelines.validate import capture_summary
from specreplay.replay.archive.writer import MANIFEST
from specreplay.results.io import MAX_BYTES, parse_result, read_result, result_json
from specreplay.results.model import CaptureSummary, ResultExtra

DATA = Path(__file__).parent / "data" / "medusa-mtbench"
STEM = "temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"


def _ok(args: list[str]) -> None:
    res = invoke(args)
    assert res.exit_code == 0, res.output


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder holding a real run of every command that writes a results.json.

    demo (itself, requalify, sweep --policy, lawtest, budget and the dyadic sub-runs), validate
    of its archive, interval, screen, requalify with --cache (``replay_backend``) and sweep
    --baseline (``fewest_bits``).
    """
    base = tmp_path_factory.mktemp("every-run")
    demo = base / "demo"
    _ok(["demo", "--requests", "24", "--n-boot", "200", "--out", str(demo), "-q"])
    archive = demo / "archive"
    _ok(["validate", str(archive), "--out", str(base / "validate"), "-q"])
    a, b = DATA / f"medusa-vicuna-7b-v1.3-{STEM}", DATA / f"medusa-vicuna-13b-v1.3-{STEM}"
    _ok(["interval", str(a), str(b), "--question-file", str(DATA / "question.jsonl"),
         "--n-boot", "200", "--out", str(base / "interval"), "-q"])  # fmt: skip
    row = {"suite": "s1", "worker": "w", "batch": 2, "context": 0, "request_rounds": 100,
           "accepted_position": [80, 60, 40, 20, 10], "step_p50_ms": 40.0}  # fmt: skip
    (base / "counters.jsonl").write_text(json.dumps(row) + "\n")
    (base / "screen.toml").write_text("[draft_p50_ms]\n2 = 2.0\n")
    _ok(["screen", str(base / "counters.jsonl"), "--config", str(base / "screen.toml"),
         "--out", str(base / "screen"), "-q"])  # fmt: skip
    cache, cached = str(base / "cache"), str(base / "cached")
    _ok(["requalify", str(archive), "--baseline", "top32:t0.7@8", "--candidate",
         "top32:t0.7:dyadic8@8", "--n-boot", "200", "--min-requests", "5", "--estimator",
         "analytic", "--cache", cache, "--out", cached, "-q"])  # fmt: skip
    _ok(["sweep", str(archive), "--arm", "top32:t0.7:dyadic{8,12}@8", "--baseline",
         "top32:t0.7@8", "--depths", "7..8", "--n-boot", "200", "--estimator", "analytic",
         "--out", str(base / "bits"), "-q"])  # fmt: skip
    shutil.rmtree(base / "cache")
    return base


def _files(runs: Path) -> list[Path]:
    return sorted(runs.rglob("results.json"))


def test_every_commands_results_json_reads_back_equal(runs: Path) -> None:
    """Each one reads, and writing what was read gives the same document (and object)."""
    files = _files(runs)
    commands = {json.loads(p.read_text())["command"] for p in files}
    assert commands == {"demo", "requalify", "sweep", "lawtest", "budget", "validate",
                        "interval", "screen"}  # fmt: skip
    extras: set[str] = set()
    for path in files:
        result = read_result(path)
        text = result_json(result)
        assert json.loads(text) == json.loads(path.read_text()), path
        assert parse_result(text.encode()) == result, path
        extras |= set(result.extra)
    # every top-level extra a command writes here, less validate's capture (below) and synth's
    assert extras == set(ResultExtra.__annotations__) - {"capture", "written_by"}


def test_every_run_renders_from_what_was_read(runs: Path, tmp_path: Path) -> None:
    res = invoke(["report", "-q", str(runs), "--out", str(tmp_path / "re")])
    assert res.exit_code == 0, res.output
    for path in _files(runs):
        again = tmp_path / "re" / path.relative_to(runs)
        assert json.loads(again.read_text()) == json.loads(path.read_text())
        assert (again.parent / "REPORT.md").is_file()


def test_the_capture_object_validate_builds_is_the_declared_one(runs: Path, tmp_path: Path) -> None:
    """capture_summary's keys are CaptureSummary's (model.py, the one declaration)."""
    counts = {k: 3 for k in CaptureSummary.__annotations__ if k.startswith(("requests", "rounds"))}
    reasons = {"dropped_reasons": {"NaN or inf in target_probs": 3}}
    capture = {"sample": 0.5, "counts": {**counts, **reasons, "rows": 12},
               "draft_mass_outside": {"positions": 4, "mean": 0.01, "max": 0.02}}  # fmt: skip
    manifest = {"writers": [{"state": "closed", "capture": capture}]}
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    summary = capture_summary(tmp_path)
    assert summary is not None and set(summary) == set(CaptureSummary.__annotations__)
    result = read_result(runs / "validate" / "results.json")
    with_capture = dataclasses.replace(result, extra={**result.extra, "capture": summary})
    assert parse_result(result_json(with_capture).encode()) == with_capture


# -- forged files --------------------------------------------------------------------------------

Doc = dict[str, Any]


def _arm(doc: Doc) -> str:
    """The arm key the pooled cell's first delta names (a side of a real comparison)."""
    return str(doc["cells"][0]["deltas"][0]["a"])


def _rename_arm(doc: Doc, new: str) -> Doc:
    arms = doc["cells"][0]["arms"]
    arms[new] = arms.pop(_arm(doc))
    return doc


def _set(path: str, value: Any) -> Callable[[Doc], Doc]:
    """Set the value at ``path`` (``cells.0.arms.@.R``; ``@`` is the first delta's arm a)."""

    def change(doc: Doc) -> Doc:
        keys: list[Any] = [
            int(k) if k.isdigit() else _arm(doc) if k == "@" else k for k in path.split(".")
        ]
        node = doc
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
        return doc

    return change


def _text(change: Callable[[str], str]) -> Callable[[Doc], bytes]:
    """A change made to the file's text (what json.dumps cannot write)."""
    return lambda doc: change(json.dumps(doc, indent=2)).encode("utf-8", "surrogateescape")


def _deep(doc: Doc) -> bytes:
    text = json.dumps(doc)
    n = 100_000
    return (text[:-1] + ', "x": ' + "[" * n + "]" * n + "}").encode()


def _first_float(text: str, literal: str) -> str:
    return re.sub(r'("R": )[0-9.]+', rf"\g<1>{literal}", text, count=1)


CASES: dict[str, tuple[Callable[[Doc], Doc | bytes], str]] = {
    # the six issue 17 found
    "nan": (_set("cells.0.arms.@.R", float("nan")), "].R: not a finite number (got NaN)"),
    "infinity": (_set("cells.0.arms.@.R", float("inf")), "].R: not a finite number (got Infinity)"),
    "arm-key-a-path": (
        lambda d: _rename_arm(d, "../../../evil"),
        "$.cells[0].arms[\"../../../evil\"] (the key): not a name: a '..' segment",
    ),
    "deep-nesting": (_deep, "not JSON: recursion limit exceeded at line 1 column"),
    "unknown-top-level-key": (_set("surprise", 1), "$.surprise: unknown key"),
    "command-a-path": (_set("command", "../../../../x"), "$.command: Input should be 'budget'"),
    "negative-count": (
        _set("cells.0.n_requests", -5),
        "$.cells[0].n_requests: Input should be greater than or equal to 0 (got -5)",
    ),
    # and the rest
    "string-for-number": (_set("cells.0.arms.@.R", "2.5"), 'valid number (got "2.5")'),
    "bool-for-int": (_set("cells.0.arms.@.n_rounds", True), "valid integer (got true)"),
    "float-for-int": (_set("cells.0.arms.@.n_rounds", 1.5), "valid integer (got 1.5)"),
    "unknown-nested-key": (_set("cells.1.deltas.0.surprise", 1), "$.cells[1].deltas[0].surprise"),
    "float-overflow": (_text(lambda t: _first_float(t, "1e999")), "not a finite number"),
    "huge-integer": (_set("seed", 10**30), "$.seed: Input should be less than or equal to"),
    "huge-integer-in-options": (
        _set("options.n_boot", 10**30),
        "$.options.n_boot: Input should be less than or equal to 18446744073709551615",
    ),
    "wrong-enum": (_set("cells.0.deltas.0.role", "b-beats-a"), "$.cells[0].deltas[0].role"),
    "duplicated-key": (
        _text(lambda t: t.replace("{", '{\n  "seed": 1,', 1)),
        "$: the key 'seed' appears twice",
    ),
    "not-utf8": (_text(lambda t: t.replace('"requalify"', '"requalify\udcff"', 1)), "not UTF-8"),
    "control-character-in-a-name": (
        lambda d: _rename_arm(d, "eagle\nx"),
        "(the key): not a name: holds '\\n'",
    ),
    "delta-names-a-missing-arm": (
        lambda d: _rename_arm(d, "ghost"),
        "$.cells[0].deltas[0].a: 'top32:t0.7@8' is not an arm of its cell",
    ),
    "options-read-mistyped": (
        _set("options.margin", {"margin": 0.01, "kind": "sideways", "text": "1%"}),
        "$.options.margin.kind: Input should be 'relative' or 'absolute'",
    ),
    "option-name-a-path": (
        lambda d: {**d, "options": {**d["options"], "../x": 1}},
        '$.options["../x"] (the key): String should match pattern',
    ),
    "no-cells": (
        _set("cells", []),
        "$.cells: empty (a requalify result has the pooled cell first)",
    ),
    "pooled-cell-not-first": (
        lambda d: {**d, "cells": d["cells"][::-1]},
        "$.cells[0].level: family×bucket (the first cell is the pooled one)",
    ),
    "read-option-missing": (
        lambda d: {**d, "options": {k: v for k, v in d["options"].items() if k != "candidate"}},
        "$.options.candidate: missing (a requalify result records it)",
    ),
    "not-an-object": (lambda d: b"[1, 2]", "$: Input should be an object"),
}


@pytest.fixture(scope="module")
def requalify_doc(runs: Path) -> Doc:
    doc: Doc = json.loads((runs / "demo" / "requalify" / "results.json").read_text())
    return doc


def _forge(tmp_path: Path, doc: Doc, change: Callable[[Doc], Doc | bytes]) -> Path:
    run = tmp_path / "run"
    run.mkdir(parents=True)
    body = change(json.loads(json.dumps(doc)))
    data = body if isinstance(body, bytes) else json.dumps(body, indent=2).encode()
    (run / "results.json").write_bytes(data)
    return run


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in-place"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_forged_results_json_is_one_line_and_nothing_written(
    case: str, in_place: bool, requalify_doc: Doc, tmp_path: Path
) -> None:
    change, fragment = CASES[case]
    run = _forge(tmp_path, requalify_doc, change)
    out = tmp_path / "out"
    before = tree_digest(run, out)
    res = invoke(["report", "-q", str(run), *([] if in_place else ["--out", str(out)])])
    line = assert_refused(res, f"{run / 'results.json'}: ", fragment)
    assert len(line) < 400, line
    assert_clean(res, before, [run, out])


def test_a_file_above_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    """A sparse file one byte above the limit: refused from its size, before a byte is read."""
    run = tmp_path / "run"
    run.mkdir()
    with (run / "results.json").open("wb") as fh:
        fh.truncate(MAX_BYTES + 1)
    before = tree_digest(run)
    res = invoke(["report", "-q", str(run)])
    assert_refused(res, f"{run / 'results.json'}: {MAX_BYTES + 1:,} bytes, above the 128 MiB")
    assert_clean(res, before, [run])


def test_a_fifo_named_results_json_is_refused_without_blocking(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "results.json")
    before = tree_digest(run)
    res = invoke(["report", "-q", str(run)])
    assert_refused(res, f"{run / 'results.json'}: not a regular file")
    assert_clean(res, before, [run])


def test_one_bad_run_among_good_ones_writes_nothing(
    runs: Path, requalify_doc: Doc, tmp_path: Path
) -> None:
    """Every results.json is checked before any is rendered, in place too."""
    tree = tmp_path / "tree"
    shutil.copytree(runs / "demo" / "lawtest", tree / "a-good")
    bad = _forge(tmp_path / "b", requalify_doc, _set("cells.0.n_requests", -1))
    shutil.copytree(bad, tree / "z-bad")
    before = tree_digest(tree)
    res = invoke(["report", "-q", str(tree)])
    assert_refused(res, f"{tree / 'z-bad' / 'results.json'}: $.cells[0].n_requests")
    assert_clean(res, before, [tree])


# -- what the checks admit renders ---------------------------------------------------------------


def test_an_older_v1_file_with_renamed_keys_reads(requalify_doc: Doc, runs: Path) -> None:
    """LawTest's ``alpha`` (renamed ``acceptance_rate`` within v1) reads; both at once do not."""
    doc: Doc = json.loads((runs / "demo" / "lawtest" / "results.json").read_text())
    test = doc["law_tests"][0]
    test["alpha"] = test.pop("acceptance_rate")
    old = parse_result(json.dumps(doc).encode())
    assert old.law_tests[0].acceptance_rate == test["alpha"] is not None
    older = json.loads(json.dumps(requalify_doc))
    for cell in older["cells"]:
        for d in cell["deltas"]:  # fields added with a default may be absent
            d.pop("verdict_reason")
            d.pop("smallest_equivalent_margin_kind")
    assert parse_result(json.dumps(older).encode()).cells[0].deltas[0].verdict_reason is None
    test["acceptance_rate"] = 0.5
    with pytest.raises(SpecReplayError, match=r"\$\.law_tests\[0\]\.alpha: unknown key"):
        parse_result(json.dumps(doc).encode())


def test_a_null_r_with_its_reason_renders(requalify_doc: Doc, tmp_path: Path) -> None:
    """R null (with its reason) everywhere the checks allow it: report renders, `—` for R."""

    def nulls(doc: Doc) -> Doc:
        for cell in doc["cells"]:
            for fig in cell["arms"].values():
                fig.update(R=None, lo=None, hi=None, null_reason="forged: no rounds")
        return doc

    run = _forge(tmp_path, requalify_doc, nulls)
    res = invoke(["report", "-q", str(run), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "—" in (tmp_path / "out" / "TABLES.md").read_text()


# -- what report refuses is never written ----------------------------------------------------------


@pytest.mark.parametrize(
    ("family", "problem"),
    [("chat\nnext", "holds '\\n'"), ("..", "a '..' segment"), ("x" * 257, "257 characters")],
)
def test_a_family_that_is_no_name_is_refused_at_its_row(
    tmp_path: Path, family: str, problem: str
) -> None:
    """The reader refuses a family report would refuse, so no command writes it."""
    rows = valid_rows(n_requests=3)
    for row in rows:
        if row["request_id"] == "req-2":
            row["family"] = family
    first = next(i for i, r in enumerate(rows) if r["request_id"] == "req-2")
    archive = write_jsonl(tmp_path / "trace.jsonl", rows)
    before = tree_digest(tmp_path)
    res = invoke(["requalify", str(archive), "--baseline", LOGGING_ARM, "--candidate",
                  "top4:t1:dyadic24@3", "--n-boot", "100", "--out", str(tmp_path / "out"),
                  "-q"])  # fmt: skip
    assert_refused(res, f"{archive}:line {first + 1}:", "family", problem)
    assert_clean(res, before, [tmp_path])


def test_an_interval_label_that_is_no_name_is_refused(tmp_path: Path) -> None:
    a = DATA / f"medusa-vicuna-7b-v1.3-{STEM}"
    before = tree_digest(tmp_path)
    res = invoke(["interval", str(a), str(a), "--name-a", "../x", "--out", str(tmp_path / "o"),
                  "-q"])  # fmt: skip
    assert_refused(res, "--name-a '../x': not a name: a '..' segment")
    assert_clean(res, before, [tmp_path])

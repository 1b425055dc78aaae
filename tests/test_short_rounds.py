"""Issue 9, item 6: a short round nulls its cells, not the run; ``--short-rounds exclude``;
issue 16, item 1: the default ``--short-rounds capped``.

A **short round** records fewer positions than an arm's depth (3 positions for ``@5``).
docs/inputs.md#position-traces-schema-v1: depth d is supported in a cell only when every round in it
has ≥ d positions. Under the default ``--short-rounds null`` the cells holding a short round are
null with the count and the first short round (file and row), the pooled cell with them (a
``--fail-on`` gate fails closed), and the other cells are computed exactly as on the archive without
that request. ``--short-rounds exclude`` leaves such rounds out of every sum, counted per cell under
``excluded``: its figures equal those of the archive with the rounds removed by hand. Every case
checks the inputs are left as they were (``assert_clean``).

The expected figures come from independent runs on archives edited by hand (rows removed before
writing), never from the code under test; the analytic estimator makes them exact, and the
bootstrap draws of a family stratum depend only on (seed, replicate, stratum, draw), so a family
cell that does not hold the short round has the same interval in both runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from archive_factory import valid_rows, write_jsonl, write_parquet
from corpus import assert_clean, assert_refused, invoke, tree_digest

BASE, CAND = "top4:t1@5", "top4:t1:dyadic8@5"
FAST = ["--estimator", "analytic", "--n-boot", "200", "--min-requests", "2", "-q"]
SHORT_REQ, SHORT_FAMILY = "req-4", "chat"  # valid_rows: family of request r is FAMILIES[r % 3]
# the figures a delta carries that do not depend on the other cells of its level (Holm-adjusted
# ones do) nor on the run's request count: BCa's jackknife runs over every request of the run (one
# outside a cell counts with the cell's own value), so its acceleration does
UNADJUSTED = ("point", "rel", "lo", "hi", "rel_lo", "rel_hi", "tost", "null_reason")


def _rows() -> list[dict[str, Any]]:
    """24 requests × 4 rounds × 5 positions; target laws scaled per row (seeded) so that
    requests differ (the factory's laws are one law permuted: every delta would be equal)."""
    rows = valid_rows(n_requests=24, n_rounds=4, depth=5)
    rng = np.random.default_rng(20261201)
    for r in rows:
        scale = float(rng.uniform(0.3, 1.0))
        r["target_probs"] = [p * scale for p in r["target_probs"]]
    return rows


def _cut(rows: list[dict[str, Any]], request: str, rnd: int, keep: int) -> list[dict[str, Any]]:
    """Return ``rows`` with round ``rnd`` of ``request`` cut to positions 1..keep."""
    return [
        r for r in rows
        if not (r["request_id"] == request and r["round"] == rnd and r["position"] > keep)
    ]  # fmt: skip


def _first_row(rows: Sequence[dict[str, Any]], request: str, rnd: int) -> int:
    """0-based index of the first row of a round in the rows as written."""
    return next(i for i, r in enumerate(rows) if r["request_id"] == request and r["round"] == rnd)


def _requalify(archive: Path, out: Path, *extra: str, arms: Sequence[str] = (BASE, CAND)) -> Any:
    """requalify with ``--short-rounds null`` unless ``extra`` names a choice (issue 9's rule;
    the default, ``capped``, is tested below)."""
    mode = [] if "--short-rounds" in extra else ["--short-rounds", "null"]
    args = ["requalify", str(archive), "--baseline", arms[0], "--candidate", arms[1],
            "--out", str(out), *FAST, *mode, *extra]  # fmt: skip
    return invoke(args)


def _doc(out: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((out / "results.json").read_text())
    return doc


def _cells(doc: dict[str, Any]) -> dict[tuple[str, str | None, str | None], dict[str, Any]]:
    return {(c["level"], c["family"], c["bucket"]): c for c in doc["cells"]}


def _same(got: Any, want: Any, where: str = "") -> None:
    """Assert equal records, floats to 1e-12 relative (the bootstrap moments are sums over
    every cell of a level, taken in an order the other cells change in the last bits)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for k in want:
            _same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and isinstance(got, float):
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15), where
    else:
        assert got == want, where


def _holds_short(key: tuple[str, str | None, str | None]) -> bool:
    """Whether the cell holds the short request (one bucket: every round is under 4K)."""
    return key[1] in (None, SHORT_FAMILY)


@pytest.fixture(scope="module")
def short_archive(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """req-4's last round records 3 positions (an end-of-generation round)."""
    rows = _cut(_rows(), SHORT_REQ, 3, 3)
    folder = tmp_path_factory.mktemp("short")
    return write_parquet(folder / "a.parquet", rows), rows


def test_a_short_round_nulls_its_cells_not_the_run(
    short_archive: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    path, rows = short_archive
    before = tree_digest(path)
    res = _requalify(path, tmp_path / "o")
    assert res.exit_code == 0, res.output
    assert_clean(res, before, [path])
    cells = _cells(_doc(tmp_path / "o"))
    row = _first_row(rows, SHORT_REQ, 3)
    assert row == 4 * 4 * 5 + 3 * 5  # requests 0..3 whole (4 rounds × 5), then 3 rounds × 5
    where = f"{path}: row {row} (0-based)"
    held = [k for k in cells if _holds_short(k)]
    assert {k[0] for k in held} == {"pooled", "family", "bucket", "family×bucket"}
    for key in held:
        c = cells[key]
        for arm in ("top4@5", "top4:dyadic8@5"):
            fig = c["arms"][arm]
            assert fig["R"] is None and fig["mcse"] is None, (key, fig)
            assert "1 round records fewer than 5 positions" in fig["null_reason"]
            assert f"first at {where}" in fig["null_reason"]
        d = next(d for d in c["deltas"] if d["role"] == "candidate-vs-baseline")
        assert d["point"] is None and d["verdict"] is None and d["lo"] is None
        assert where in d["null_reason"] and "depth 5 is UNSUPPORTED" in d["null_reason"]
        assert c["requalification"]["verdict"] is None
        # the logging arm @3 and the MEASURED figures are supported: computed
        assert c["arms"]["top4@3"]["R"] is not None
    # every other cell is computed
    for key, c in cells.items():
        if not _holds_short(key):
            assert c["arms"]["top4@5"]["R"] is not None, key
            assert c["deltas"][0]["point"] is not None, key


def test_other_cells_equal_a_run_without_the_short_request(
    short_archive: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    path, rows = short_archive
    without = write_parquet(
        tmp_path / "without.parquet", [r for r in rows if r["request_id"] != SHORT_REQ]
    )
    before = tree_digest(path, without)
    res = _requalify(path, tmp_path / "o")
    ref = _requalify(without, tmp_path / "r")
    assert res.exit_code == 0 and ref.exit_code == 0, (res.output, ref.output)
    assert_clean(res, before, [path, without])
    got, want = _cells(_doc(tmp_path / "o")), _cells(_doc(tmp_path / "r"))
    others = [k for k in got if not _holds_short(k)]
    assert len(others) == 4  # code, math and their × bucket cells
    for key in others:
        g, w = got[key], want[key]
        assert g["n_requests"] == w["n_requests"]
        for arm in ("top4@5", "top4:dyadic8@5"):
            _same(g["arms"][arm]["R"], w["arms"][arm]["R"], f"{key} {arm}")
            assert g["arms"][arm]["n_rounds"] == w["arms"][arm]["n_rounds"]
        for dg, dw in zip(g["deltas"], w["deltas"], strict=True):
            assert dg["role"] == dw["role"]
            for f in UNADJUSTED:
                _same(dg[f], dw[f], f"{key} {dg['role']} {f}")


def test_a_gate_on_the_pooled_verdict_fails_closed(
    short_archive: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    path, _ = short_archive
    before = tree_digest(path)
    res = _requalify(path, tmp_path / "o", "--fail-on", "INCONCLUSIVE,NOT QUALIFIED")
    assert res.exit_code == 1, res.output
    assert_clean(res, before, [path])
    assert _doc(tmp_path / "o")["requalification"]["verdict"] is None


def test_exclude_equals_the_archive_with_the_short_rounds_removed(tmp_path: Path) -> None:
    rows = _rows()
    cuts = [("req-4", 3, 3), ("req-7", 3, 1), ("req-10", 1, 4)]  # chat, chat, chat
    cuts += [("req-5", 3, 2)]  # math
    short = rows
    for req, rnd, keep in cuts:
        short = _cut(short, req, rnd, keep)
    gone = {(req, rnd) for req, rnd, _ in cuts}
    by_hand = [r for r in rows if (r["request_id"], r["round"]) not in gone]
    (tmp_path / "in").mkdir()
    path = write_parquet(tmp_path / "in" / "short.parquet", short)
    removed = write_parquet(tmp_path / "in" / "removed.parquet", by_hand)
    before = tree_digest(tmp_path / "in")
    res = _requalify(path, tmp_path / "o", "--short-rounds", "exclude")
    ref = _requalify(removed, tmp_path / "r")
    assert res.exit_code == 0 and ref.exit_code == 0, (res.output, ref.output)
    assert_clean(res, before, [tmp_path / "in"])
    doc, want_doc = _doc(tmp_path / "o"), _doc(tmp_path / "r")
    assert doc["options"]["short_rounds"] == "exclude"
    got, want = _cells(doc), _cells(want_doc)
    assert got.keys() == want.keys()
    per_family = {"chat": 3, "math": 1, "code": 0}
    for key, g in got.items():
        w = dict(want[key])
        expected = sum(per_family.values()) if key[1] is None else per_family[key[1]]
        assert g["excluded"] == expected, key
        assert w.pop("excluded") is None  # --short-rounds null: no count
        _same({**g, "excluded": None}, {**w, "excluded": None}, str(key))
    entry = next(e for e in doc["excluded"] if "--short-rounds exclude" in e["reason"])
    assert entry["rounds"] == 4 and entry["requests"] == 4
    text = " ".join(doc["assumptions"])
    assert "end-of-generation rounds" in text and "a choice" in text


def test_exclude_is_per_depth_a_round_of_3_is_kept_at_3(
    short_archive: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """@3 arms keep the 3-position round: nothing excluded, figures as under ``null``."""
    path, _ = short_archive
    before = tree_digest(path)
    arms = ("top4:t1@3", "top4:t1:dyadic8@3")
    res = _requalify(path, tmp_path / "o", "--short-rounds", "exclude", arms=arms)
    ref = _requalify(path, tmp_path / "r", arms=arms)
    assert res.exit_code == 0 and ref.exit_code == 0, (res.output, ref.output)
    assert_clean(res, before, [path])
    got, want = _cells(_doc(tmp_path / "o")), _cells(_doc(tmp_path / "r"))
    for key, g in got.items():
        assert g["excluded"] == 0, key
        assert g["arms"]["top4@3"]["R"] is not None
        _same({**g, "excluded": None}, {**want[key], "excluded": None}, str(key))


def test_exclude_pairs_arms_of_different_depths_on_the_same_rounds(
    short_archive: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """@3 against @5: the 3-position round is left out of both arms (paired on the same rounds)."""
    path, rows = short_archive
    removed = write_parquet(
        tmp_path / "removed.parquet",
        [r for r in rows if not (r["request_id"] == SHORT_REQ and r["round"] == 3)],
    )
    before = tree_digest(path, removed)
    arms = ("top4:t1@3", "top4:t1:dyadic8@5")
    res = _requalify(path, tmp_path / "o", "--short-rounds", "exclude", arms=arms)
    ref = _requalify(removed, tmp_path / "r", arms=arms)
    assert res.exit_code == 0 and ref.exit_code == 0, (res.output, ref.output)
    assert_clean(res, before, [path, removed])
    got, want = _cells(_doc(tmp_path / "o")), _cells(_doc(tmp_path / "r"))
    assert got[("pooled", None, None)]["excluded"] == 1
    for key, g in got.items():
        _same({**g, "excluded": None}, {**want[key], "excluded": None}, str(key))


def test_the_reason_names_the_jsonl_line(tmp_path: Path) -> None:
    rows = _cut(_rows(), SHORT_REQ, 2, 2)
    (tmp_path / "in").mkdir()
    path = write_jsonl(tmp_path / "in" / "a.jsonl", rows)
    before = tree_digest(tmp_path / "in")
    res = _requalify(path, tmp_path / "o")
    assert res.exit_code == 0, res.output
    assert_clean(res, before, [tmp_path / "in"])
    pooled = _cells(_doc(tmp_path / "o"))[("pooled", None, None)]
    line = _first_row(rows, SHORT_REQ, 2) + 1  # 1-based physical line, no blank lines
    why = pooled["deltas"][0]["null_reason"]
    assert f"first at {path}:line {line} " in why and "1 round records fewer than 5" in why


def test_the_first_short_round_across_shards(tmp_path: Path) -> None:
    """Two shards, short rounds in both: the reason names the first file's; a family cell
    holding only the second file's short round names that file and its own row."""
    rows = _cut(_cut(_rows(), "req-13", 3, 4), "req-20", 0, 2)  # a chat and a math request
    first = [r for r in rows if int(r["request_id"].split("-")[1]) < 16]
    second = [r for r in rows if int(r["request_id"].split("-")[1]) >= 16]
    folder = tmp_path / "arch"
    folder.mkdir()
    write_parquet(folder / "part-0.parquet", first)
    write_parquet(folder / "part-1.parquet", second)
    before = tree_digest(folder)
    res = _requalify(folder, tmp_path / "o")
    assert res.exit_code == 0, res.output
    assert_clean(res, before, [folder])
    cells = _cells(_doc(tmp_path / "o"))
    fam13, fam20 = ("code", "chat", "math")[13 % 3], ("code", "chat", "math")[20 % 3]
    assert fam13 != fam20
    p0 = f"{folder / 'part-0.parquet'}: row {_first_row(first, 'req-13', 3)} (0-based)"
    p1 = f"{folder / 'part-1.parquet'}: row {_first_row(second, 'req-20', 0)} (0-based)"
    pooled = cells[("pooled", None, None)]["deltas"][0]["null_reason"]
    assert "2 rounds record fewer than 5 positions" in pooled and f"first at {p0} " in pooled
    f20 = cells[("family", fam20, None)]["deltas"][0]["null_reason"]
    assert "1 round records fewer than 5" in f20 and f"first at {p1} " in f20
    other = ({"code", "chat", "math"} - {fam13, fam20}).pop()
    assert cells[("family", other, None)]["deltas"][0]["point"] is not None


def test_sweep_nulls_each_depth_where_a_round_is_shorter(
    short_archive: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    path, rows = short_archive
    before = tree_digest(path)
    args = ["sweep", str(path), "--arm", BASE, "--depths", "1..5", "--out", str(tmp_path / "o"),
            "--estimator", "analytic", "--n-boot", "200", "--min-requests", "2", "-q",
            "--short-rounds", "null"]  # fmt: skip
    res = invoke(args)
    assert res.exit_code == 0, res.output
    assert_clean(res, before, [path])
    where = f"{path}: row {_first_row(rows, SHORT_REQ, 3)} (0-based)"
    for key, c in _cells(_doc(tmp_path / "o")).items():
        figs = {f["depth"]: f for f in c["depths"]}
        for d in (1, 2, 3):
            assert figs[d]["R"] is not None and figs[d]["supported"], (key, d)
        for d in (4, 5):
            if _holds_short(key):
                assert figs[d]["R"] is None and not figs[d]["supported"], (key, d)
                assert f"fewer than {d} positions; first at {where}" in figs[d]["null_reason"]
                assert "every round here supports depth 3 (ask @3)" in figs[d]["null_reason"]
            else:
                assert figs[d]["R"] is not None, (key, d)
        for delta in c["deltas"]:  # Δ against the reference depth 5: null where 5 is short
            assert (delta["point"] is None) == _holds_short(key), (key, delta["depth"])


def test_sweep_exclude_equals_the_archive_with_the_round_removed(
    short_archive: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    path, rows = short_archive
    removed = write_parquet(
        tmp_path / "removed.parquet",
        [r for r in rows if not (r["request_id"] == SHORT_REQ and r["round"] == 3)],
    )
    before = tree_digest(path, removed)
    common = ["--arm", BASE, "--depths", "1..5", "--estimator", "analytic", "--n-boot", "200",
              "--min-requests", "2", "-q"]  # fmt: skip
    res = invoke(["sweep", str(path), "--out", str(tmp_path / "o"), "--short-rounds", "exclude",
                  *common])  # fmt: skip
    ref = invoke(["sweep", str(removed), "--out", str(tmp_path / "r"), *common,
                  "--short-rounds", "null"])  # fmt: skip
    assert res.exit_code == 0 and ref.exit_code == 0, (res.output, ref.output)
    assert_clean(res, before, [path, removed])
    got, want = _cells(_doc(tmp_path / "o")), _cells(_doc(tmp_path / "r"))
    for key, g in got.items():
        assert g["excluded"] == (1 if _holds_short(key) else 0), key
        _same({**g, "excluded": None}, {**want[key], "excluded": None}, str(key))


@pytest.mark.parametrize("command", ["requalify", "sweep"])
def test_an_unknown_short_rounds_choice_is_refused(
    short_archive: tuple[Path, list[dict[str, Any]]], tmp_path: Path, command: str
) -> None:
    path, _ = short_archive
    before = tree_digest(path)
    arms = ["--baseline", BASE, "--candidate", CAND] if command == "requalify" else ["--arm", BASE]
    res = invoke([command, str(path), *arms, "--out", str(tmp_path / "o"), "--short-rounds",
                  "drop", "-q"])  # fmt: skip
    assert_refused(res, "--short-rounds: 'drop' should be capped, null or exclude")
    assert_clean(res, before, [path])
    assert not (tmp_path / "o").exists()


def test_the_api_parses_the_choice_once() -> None:
    from specreplay.errors import SpecReplayError
    from specreplay.pipelines.shortrounds import ShortRounds, parse_short_rounds

    assert parse_short_rounds(" EXCLUDE ") is ShortRounds.EXCLUDE
    assert parse_short_rounds(ShortRounds.NULL) is ShortRounds.NULL
    assert parse_short_rounds("capped") is ShortRounds.CAPPED
    with pytest.raises(SpecReplayError, match=r"'x' should be capped, null or exclude"):
        parse_short_rounds("x")


# ------------------------------------------------------------------------------------------------
# issue 16: the default, --short-rounds capped
# ------------------------------------------------------------------------------------------------


def _measured_all(rows: Sequence[dict[str, Any]]) -> float:
    """MEASURED R over every round, by hand: Σ (1 + leading accepted) / rounds."""
    rounds: dict[tuple[str, int], list[bool]] = {}
    for r in rows:
        rounds.setdefault((r["request_id"], r["round"]), []).append(bool(r["accepted"]))
    total = 0
    for acc in rounds.values():
        lead = next((i for i, a in enumerate(acc) if not a), len(acc))
        total += 1 + lead
    return total / len(rounds)


def test_the_default_leaves_out_a_requests_last_round_as_exclude_does(
    short_archive: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """An unmarked archive whose only short round is a request's last: the default's figures are
    exclude's, the rounds counted, the MEASURED R over every round beside the kept one, and the
    second line of the output says so."""
    path, rows = short_archive
    res = _requalify(path, tmp_path / "o", "--short-rounds", "capped")
    ref = _requalify(path, tmp_path / "r", "--short-rounds", "exclude")
    default = invoke(["requalify", str(path), "--baseline", BASE, "--candidate", CAND, "--out",
                      str(tmp_path / "d"), *FAST])  # fmt: skip
    assert res.exit_code == ref.exit_code == default.exit_code == 0, res.output
    doc, want = _doc(tmp_path / "o"), _doc(tmp_path / "r")
    assert doc["options"]["short_rounds"] == "capped"
    assert _doc(tmp_path / "d")["options"]["short_rounds"] == "capped"  # the default
    for key, g in _cells(doc).items():
        _same(g, _cells(want)[key], str(key))
    (entry,) = doc["excluded"]
    assert entry["rounds"] == 1 and entry["requests"] == 1
    assert "--short-rounds capped" in entry["reason"]
    assert entry["measured_R_all"] == pytest.approx(_measured_all(rows), rel=1e-12)
    kept = [r for r in rows if not (r["request_id"] == SHORT_REQ and r["round"] == 3)]
    assert entry["measured_R_kept"] == pytest.approx(_measured_all(kept), rel=1e-12)
    table = (tmp_path / "o" / "TABLES.md").read_text().splitlines()
    assert table[1].startswith("Excluded: 1 round in 1 request (--short-rounds capped")
    assert doc["requalification"]["verdict"] is not None


@pytest.mark.parametrize("form", ["unmarked", "marked"])
def test_a_mid_request_short_round_stays_null_and_the_first_line_says_what_answers(
    tmp_path: Path, form: str
) -> None:
    """A short round in the middle of a request (a drafter's own short proposal) is not capped:
    its cells stay null, and the reason names the deepest depth every round supports and the
    option. Marked archives follow the mark: capped True leaves a mid-request round out, and a
    last round marked False stays."""
    rows = _cut(_rows(), SHORT_REQ, 1, 3)  # round 1 of 4: mid-request
    if form == "marked":
        for r in rows:
            r["capped"] = r["request_id"] == "req-9" and r["round"] == 1
        rows = _cut(_cut(rows, "req-9", 1, 2), "req-11", 3, 4)  # capped mid; last, not capped
    (tmp_path / "in").mkdir()
    path = write_parquet(tmp_path / "in" / "a.parquet", rows)
    res = _requalify(path, tmp_path / "o", "--short-rounds", "capped")
    assert res.exit_code == 0, res.output
    doc = _doc(tmp_path / "o")
    why = doc["requalification"]["null_reason"]
    short = 2 if form == "marked" else 1  # the marked archive keeps req-11's last round too
    assert f"{short} round{'s' if short > 1 else ''} record" in why
    assert "(not capped by the request's end or limit)" in why
    assert "every round here supports depth 3 (ask @3), or --short-rounds exclude" in why
    left = sum(e["rounds"] for e in doc["excluded"] if "capped" in e["reason"])
    assert left == (1 if form == "marked" else 0)  # req-9's round 1, marked capped
    text = invoke(["validate", str(path)]).stdout
    line = next(x for x in text.splitlines() if x.startswith("short rounds:"))
    assert f"{short + left} of 96 record fewer than 5 positions" in line
    assert f"leaves out {left} cut short" in line and f"keeps {short}" in line

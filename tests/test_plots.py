"""Plots (issue 7, item 2): the data each plot draws, read back from hand-made cells.

No pixel comparisons: each plot's pure rows/series function is checked against the cells it was
given, looked up independently; a smoke test checks each PNG is written and is a real PNG.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from specreplay.render.files import render
from specreplay.render.plots import (
    PLOT_CAPTIONS,
    bucket_order,
    context_series,
    forest_rows,
    survival_series,
)
from specreplay.results.model import (
    ArmFigure,
    Cell,
    Delta,
    Label,
    Level,
    Result,
    Role,
    Survival,
    Tost,
)
from specreplay.stats.buckets import DEFAULT_BUCKETS

# the default buckets as a string sort would put them (the order the issue saw drawn)
SHUFFLED = ["16K-32K", "32K-64K", "4K-16K", "<4K", ">=64K"]
NUMERIC = ["<4K", "4K-16K", "16K-32K", "32K-64K", ">=64K"]
FAMILIES = ["math", "chat"]
ROLE = Role.CANDIDATE_VS_BASELINE
NULL_CELL = ("chat", "32K-64K")
WHY = "3 requests < --min-requests 10"


def _delta(k: int, null: str | None = None) -> Delta:
    """A delta whose figures encode the cell number k (so each row is traceable to its cell)."""
    point, rel = (None, None) if null else (0.01 * k, 0.001 * k)
    lo, hi = (None, None) if null else (0.01 * k - 0.02, 0.01 * k + 0.03)
    rlo, rhi = (None, None) if null else (0.001 * k - 0.002, 0.001 * k + 0.003)
    tost = None if null else Tost(0.05, 0.005, "relative", "0.5%", 0.0, 0.0, 0.9)
    return Delta(
        a="base", b="cand", role=ROLE, point=point, rel=rel, lo=lo, hi=hi, rel_lo=rlo,
        rel_hi=rhi, method="studentized", level=0.95, adjusted=False, bca=None, bonferroni=None,
        tost=tost, p_difference=None, p_equivalence=None,
        verdict=None if null else ("EQUIVALENT", "DIFFERENT", "INCONCLUSIVE")[k % 3],
        smallest_equivalent_margin=None, requests_for_margin=None, n_boot=100,
        n_boot_valid=None, warning=None, label=Label.SIMULATED, null_reason=null,
    )  # fmt: skip


def _arms(k: int) -> dict[str, ArmFigure]:
    """Per arm an R with its interval; the MEASURED arm has none in bucket cells of odd k."""
    out = {}
    for j, (arm, label) in enumerate(
        (("base", Label.SIMULATED), ("cand", Label.SIMULATED), ("base (MEASURED)", Label.MEASURED))
    ):
        r = 3.0 - 0.1 * k + 0.01 * j
        iv = (None, None) if label == Label.MEASURED and k % 2 else (r - 0.05, r + 0.07)
        out[arm] = ArmFigure(r, 100 + k, label, None, None, lo=iv[0], hi=iv[1], level=0.95)
    return out


def _survival(k: int) -> tuple[Survival, ...]:
    return tuple(
        Survival(arm, j, 0.8**j - 0.01 * k - 0.001 * i, Label.SIMULATED, None)
        for i, arm in enumerate(("base", "cand"))
        for j in range(1, 5)
    )


def _cells() -> tuple[Cell, ...]:
    """Pooled, families, buckets and family × bucket cells, buckets in string-sorted order."""
    keys: list[tuple[Level, str | None, str | None]] = [(Level.POOLED, None, None)]
    keys += [(Level.FAMILY, f, None) for f in FAMILIES]
    keys += [(Level.BUCKET, None, b) for b in SHUFFLED]
    keys += [(Level.FAMILY_BUCKET, f, b) for f in FAMILIES for b in SHUFFLED]
    cells = []
    for k, (level, fam, bucket) in enumerate(keys):
        null = WHY if (fam, bucket) == NULL_CELL else None
        cells.append(
            Cell(
                level,
                fam,
                bucket,
                10 + k,
                _arms(k),
                deltas=(_delta(k, null),),
                survival=_survival(k),
            )
        )
    return tuple(cells)


def _result(cells: tuple[Cell, ...], command: str = "requalify") -> Result:
    return Result(
        command=command, version="0", created_utc="2026-01-01T00:00:00Z", seed=0,
        environment={}, inputs=(), options={"buckets": DEFAULT_BUCKETS,
        "margin": {"margin": 0.005, "kind": "relative", "text": "0.5%"}}, assumptions=(),
        excluded=(), arms=("base", "cand"), law_tests=(), cells=cells,
    )  # fmt: skip


def _find(cells: tuple[Cell, ...], level: Level, fam: str | None, bucket: str | None) -> Cell:
    return next(c for c in cells if (c.level, c.family, c.bucket) == (level, fam, bucket))


def test_forest_rows_draw_bucket_cells_in_numeric_order_with_family_labels() -> None:
    cells = _cells()
    rows = forest_rows(cells, ROLE, relative=True, buckets=DEFAULT_BUCKETS)
    names = [r.label.split("  (n=")[0] for r in rows]
    want = ["pooled", *(f"pooled · {b}" for b in NUMERIC)]
    for f in FAMILIES:  # families in the order the cells give them
        want += [f, *(f"{f} · {b}" for b in NUMERIC)]
    assert names == want
    # each row's figures are its own cell's (in %, the margin being relative)
    for r, name in zip(rows, want, strict=True):
        fam, _, bucket = name.partition(" · ")
        level = {(True, False): Level.POOLED, (True, True): Level.BUCKET,
                 (False, False): Level.FAMILY, (False, True): Level.FAMILY_BUCKET}[
            (fam == "pooled", bool(bucket))]  # fmt: skip
        cell = _find(cells, level, None if fam == "pooled" else fam, bucket or None)
        assert r.level == level and f"(n={cell.n_requests})" in r.label
        d = cell.delta(ROLE)
        assert d is not None
        if d.null_reason is None:
            assert d.rel is not None and d.rel_lo is not None and d.rel_hi is not None
            assert (r.point, r.lo, r.hi) == pytest.approx((100 * d.rel, 100 * d.rel_lo,
                                                           100 * d.rel_hi))  # fmt: skip
            assert r.verdict == d.verdict


def test_forest_rows_order_without_a_spec_and_by_a_custom_spec() -> None:
    # no specification: the names are read as ranges themselves
    assert forest_rows(_cells(), ROLE, relative=False)[1].label.startswith("pooled · <4K")
    assert bucket_order(SHUFFLED) == NUMERIC
    # names that are no ranges follow the specification's edges, not their spelling
    assert bucket_order(["b-long", "a-mid", "c-short"], "b-long:>=8K,c-short:<1K,a-mid:1K-8K") == [
        "c-short", "a-mid", "b-long"]  # fmt: skip


@pytest.mark.parametrize(
    "spec",
    [
        DEFAULT_BUCKETS,
        "b-long:>=8K,c-short:<1K,a-mid:1K-8K",
        "z:1.5K-3K,y:<1536,x:>=3072",  # fractional K, plain numbers, names sorting backwards
        " hi : >=100 , lo : <100 ",  # blanks around names and ranges
        "a:b:<4K,c:4K-8K",  # a name holding a colon (the range is after the last one)
    ],
)
def test_bucket_order_follows_the_stats_parser(spec: str) -> None:
    # the renderers read the run's --buckets string without importing the statistics; the
    # order they give is the one stats.buckets.Buckets parses, by lower edge
    from specreplay.stats.buckets import Buckets

    parsed = Buckets.parse(spec)
    user = list(parsed.names[: parsed.n_user])
    by_edge = [n for _, n in sorted(zip(parsed.lo, user, strict=True))]
    assert bucket_order(list(reversed(user)), spec) == by_edge
    assert bucket_order([*user, "unknown", *user], spec) == [*by_edge, "unknown"]


def test_bucket_order_of_a_spec_that_does_not_read_falls_back_to_the_names() -> None:
    # a hand-edited spec the parser rejects (as Buckets.parse does) gives no edges: the names
    # are read as ranges, and a name that is no range goes last
    assert bucket_order(["<4K", "long", ">=4K"], "long:4K-2K,<4K:<4K") == ["<4K", ">=4K", "long"]


def test_forest_null_row_carries_its_reason() -> None:
    rows = forest_rows(_cells(), ROLE, relative=False, buckets=DEFAULT_BUCKETS)
    null = [r for r in rows if r.point is None]
    assert [r.label.split("  (n=")[0] for r in null] == [" · ".join(NULL_CELL)]
    assert null[0].note is not None and WHY in null[0].note
    assert null[0].lo is None and null[0].hi is None and null[0].verdict is None
    # absolute: the rows hold Δ itself
    cell = _find(_cells(), Level.POOLED, None, None)
    assert rows[0].point == pytest.approx(cell.deltas[0].point)


def test_forest_rows_without_buckets_are_pooled_and_families() -> None:
    cells = tuple(c for c in _cells() if c.bucket is None)
    rows = forest_rows(cells, ROLE, relative=True)
    assert [r.label.split("  (n=")[0] for r in rows] == ["pooled", *FAMILIES]


def test_context_series_equal_the_cells_r_and_interval() -> None:
    cells = _cells()
    panels = context_series(_result(cells))
    assert [p.title for p in panels] == ["all families", *FAMILIES]
    for p in panels:
        fam = None if p.title == "all families" else p.title
        level = Level.BUCKET if fam is None else Level.FAMILY_BUCKET
        assert [t.split("\n")[0] for t in p.ticks] == NUMERIC
        assert [s.arm for s in p.series] == ["base", "cand", "base (MEASURED)"]
        for s in p.series:
            assert list(s.x) == NUMERIC
            for b, y, lo, hi in zip(s.x, s.y, s.lo, s.hi, strict=True):
                fig = _find(cells, level, fam, b).arms[s.arm]
                assert (y, lo, hi) == (fig.R, fig.lo, fig.hi)
                assert s.label == fig.label


def test_context_series_need_two_buckets() -> None:
    cells = tuple(c for c in _cells() if c.bucket in (None, "<4K"))
    assert context_series(_result(cells)) == []


def test_survival_series_equal_the_cells_survival() -> None:
    cells = _cells()
    panels = survival_series(_result(cells))
    assert [p.title for p in panels] == ["pooled", *FAMILIES]
    for p in panels:
        cell = _find(cells, Level.POOLED if p.title == "pooled" else Level.FAMILY,
                     None if p.title == "pooled" else p.title, None)  # fmt: skip
        assert [s.arm for s in p.series] == ["base", "cand"]
        for s in p.series:
            want = {v.position: v.value for v in cell.survival if v.arm == s.arm}
            assert dict(zip((int(x) for x in s.x), s.y, strict=True)) == want
    assert [p.title for p in survival_series(_result(cells), max_families=1)] == ["pooled"]


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


@pytest.mark.parametrize("command", ["requalify", "interval"])
def test_render_writes_each_plot_as_a_png(tmp_path: Path, command: str) -> None:
    cells = _cells()
    if command == "interval":  # interval's delta role
        cells = tuple(
            Cell(c.level, c.family, c.bucket, c.n_requests, c.arms, deltas=tuple(
                Delta(**{**d.__dict__, "role": Role.B_VS_A}) for d in c.deltas),
                survival=c.survival)
            for c in cells
        )  # fmt: skip
    written = render(_result(cells, command), tmp_path)
    for name in ("forest.png", "context.png", "survival.png"):
        assert name in written and name in PLOT_CAPTIONS
        width, height = _png_size(tmp_path / name)
        assert 500 <= width <= 3000 and 300 <= height <= 4000, (name, width, height)
        assert (tmp_path / name).stat().st_size > 10_000
    assert not list(tmp_path.glob(".*tmp*"))


def test_forest_limits_cut_an_unbounded_bar_and_count_it() -> None:
    """A bar to ±1e300 (replicates of one request) is cut at the edge, not drawn to scale."""
    from specreplay.render.plots import ForestRow, _forest_clipped, _forest_limits

    rows = [ForestRow(f"c{i}", Level.FAMILY, 0.1 * i, 0.1 * i - 1, 0.1 * i + 1, "INCONCLUSIVE",
                      None, 0) for i in range(5)]  # fmt: skip
    wide = ForestRow("wide", Level.FAMILY, 0.0, -1e300, 2.0, "INCONCLUSIVE", None, 0)
    left, right = _forest_limits([*rows, wide], 0.5)
    # every dot and bounded bar inside (no pooled row: the budget is 6 × the median width, 2)
    assert left <= -1.0 and right >= 1.4 and left > -10.0
    assert _forest_clipped([*rows, wide], 0.5) == (0, 1)  # (finite ends, an unbounded end)
    assert _forest_clipped(rows, 0.5) == (0, 0)


@pytest.mark.parametrize("figure", ["forest", "context", "survival"])
def test_a_plot_is_drawn_once_when_saved_and_its_png_is_unchanged(
    tmp_path: Path, figure: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_save`` draws the figure once (no layout engine is left on it: ``tight_layout``'s
    placeholder made ``savefig`` draw it twice; issue 18 lays these plots out from their texts'
    sizes instead), and writes the same PNG bytes as ``savefig`` at zlib level 1."""
    from matplotlib.figure import Figure

    from specreplay.render import plots

    cells = _cells()
    result = _result(cells)

    def make() -> object:
        if figure == "forest":
            return plots.forest_figure(cells, role=ROLE, relative=True, margin=0.005, title="t",
                                       buckets=DEFAULT_BUCKETS)  # fmt: skip
        return getattr(plots, f"{figure}_figure")(result)

    reference = make()
    assert reference.get_layout_engine() is None
    reference.savefig(tmp_path / "reference.png", dpi=100, format="png",
                      pil_kwargs={"compress_level": 1})  # fmt: skip
    draws = []
    inner = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, r: draws.append(1) or inner(self, r))
    plots._save(make(), tmp_path / "saved.png", dpi=100)
    assert len(draws) == 1
    saved, ref = (tmp_path / "saved.png").read_bytes(), (tmp_path / "reference.png").read_bytes()
    assert saved == ref

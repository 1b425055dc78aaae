"""Issue 16, item 7: a requalification holds the MEASURED survival, and survival.png draws it.

SPEC 3.5: S_j = #(rounds with A ≥ j) / #rounds, pooled counts over a cell's rounds, A the round's
leading accepted positions. A requalification writes it per cell for ``ARM (MEASURED)`` (the
logging arm's MEASURED figures, the name the path-bias diagnostic gives them), on the rounds the
MEASURED R counts: under the default ``--short-rounds capped`` a request's last round that records
fewer positions than the deepest arm is left out of both; a round recording fewer than j
positions left in the cell nulls S_j there, as it does the SIMULATED arms'.

The expected figures are computed here with polars from the parquet file the run reads (rows
grouped into rounds by hand), never from the code under test; survival.png is drawn in memory and
its MEASURED (solid) line read back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import polars as pl
import pytest
from archive_factory import FAMILIES, LOGGING_ARM, valid_rows, write_parquet

from specreplay import api
from specreplay.render.plots import survival_figure, survival_gap
from specreplay.results.model import Label, Level, Result

BASE, CAND = "top4:t1@5", "top4:t1:dyadic8@5"
DEPTH = 5  # the arms' depth, the positions every round of the archive records
MID_SHORT = ("req-1", 1, 3)  # a mid-request round cut to 3 positions: kept, nulls S_4 and S_5
LAST_SHORT = ("req-2", 3, 2)  # a request's last round cut to 2 positions: capped, left out
RUN = {"estimator": "analytic", "n_boot": 100, "min_requests": 2}


def _rows() -> list[dict[str, Any]]:
    """12 requests × 4 rounds × 5 positions (families chat, code, math in turn), two rounds cut."""
    rows = valid_rows(n_requests=12, n_rounds=4, depth=DEPTH)
    for req, rnd, keep in (MID_SHORT, LAST_SHORT):
        rows = [
            r for r in rows
            if not (r["request_id"] == req and r["round"] == rnd and r["position"] > keep)
        ]  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_parquet(tmp_path_factory.mktemp("surv") / "a.parquet", _rows())


@pytest.fixture(scope="module")
def result(archive: Path) -> Result:
    return api.requalify(archive, baseline=BASE, candidate=CAND, **RUN)


def _rounds(archive: Path) -> pl.DataFrame:
    """One row per archived round: family, A (leading accepted positions), positions recorded,
    and whether ``--short-rounds capped`` leaves it out (a request's last round, short of 5)."""
    rounds = (
        pl.read_parquet(archive)
        .sort("request_id", "round", "position")
        .group_by("request_id", "round", maintain_order=True)
        .agg(
            pl.col("family").first(),
            pl.col("accepted").cast(pl.Int64).cum_prod().sum().alias("A"),
            pl.len().alias("positions"),
        )
    )
    last = pl.col("round") == pl.col("round").max().over("request_id")
    return rounds.with_columns(capped=last & (pl.col("positions") < DEPTH))


def _expected(archive: Path, family: str | None) -> list[float | None]:
    """S_j, j = 1..5, over the kept rounds of ``family`` (all families: None); None where a kept
    round records fewer than j positions."""
    kept = _rounds(archive).filter(~pl.col("capped"))
    if family is not None:
        kept = kept.filter(pl.col("family") == family)
    n = kept.height
    out: list[float | None] = []
    for j in range(1, DEPTH + 1):
        if (kept.get_column("positions") < j).any():
            out.append(None)
        else:
            out.append(kept.filter(pl.col("A") >= j).height / n)
    return out


def _measured(result: Result, level: Level, family: str | None) -> list[Any]:
    cell = next(c for c in result.cells if (c.level, c.family, c.bucket) == (level, family, None))
    return [s for s in cell.survival if s.arm == _name(result)]


def _name(result: Result) -> str:
    """The MEASURED arm's name: the logging arm's canonical name (the archive's column spells it
    ``top4:t1@3``), as the path-bias diagnostic gives it."""
    assert result.logging_arm == "top4@3" and LOGGING_ARM == "top4:t1@3"
    path_bias = result.path_bias
    assert path_bias is not None and path_bias.a == "top4@3 (MEASURED)"
    return path_bias.a


def test_the_archive_is_what_the_test_says(archive: Path) -> None:
    """The two cut rounds are there, one capped, and the pooled S_1, S_2, S_3 differ (an
    off-by-one in j shows), S_4 and S_5 null."""
    rounds = _rounds(archive)
    assert rounds.height == 48 and int(rounds.get_column("capped").sum()) == 1
    assert sorted(rounds.get_column("positions").unique().to_list()) == [2, 3, 5]
    assert len(set(_expected(archive, None))) == 4  # three values and None


@pytest.mark.parametrize("family", [None, *FAMILIES])
def test_measured_survival_is_the_share_of_kept_rounds_with_a_at_least_j(
    result: Result, archive: Path, family: str | None
) -> None:
    level = Level.POOLED if family is None else Level.FAMILY
    got = _measured(result, level, family)
    assert [s.position for s in got] == list(range(1, DEPTH + 1))
    assert {s.label for s in got} == {Label.MEASURED}
    want = _expected(archive, family)
    values = [s.value for s in got]
    assert [v is None for v in values] == [w is None for w in want]
    # counts of whole rounds divided once: the same float as the division here
    assert [v for v in values if v is not None] == [w for w in want if w is not None]
    kept = _rounds(archive).filter(~pl.col("capped"))
    n = kept.height if family is None else kept.filter(pl.col("family") == family).height
    assert {s.rounds for s in got} == {n}
    for s, w in zip(got, want, strict=True):
        assert (s.null_reason is None) == (w is not None)
        if w is None:
            assert s.null_reason == f"1 rounds record fewer than {s.position} positions"


def test_the_mid_request_short_round_nulls_only_its_familys_cells(result: Result) -> None:
    """req-1 (family FAMILIES[1]) holds the kept short round: its family cell is null at
    j = 4, 5 (as the pooled one, above); the other families are complete."""
    short_family = FAMILIES[1]
    for family in FAMILIES:
        values = [s.value for s in _measured(result, Level.FAMILY, family)]
        nulls = [j for j, v in enumerate(values, 1) if v is None]
        assert nulls == ([4, 5] if family == short_family else [])


def test_survival_png_draws_the_measured_values(result: Result, archive: Path) -> None:
    fig = survival_figure(result)
    try:
        axes = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
        solid = {
            title: [ln for ln in ax.get_lines() if ln.get_linestyle() == "-"]
            for title, ax in axes.items()
        }
        title = fig._suptitle.get_text()
        legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    finally:
        plt.close(fig)
    assert survival_gap(result) is None and "No MEASURED" not in title
    assert any(_name(result) in t for t in legend)
    for panel, family in [("pooled", None), *((f, f) for f in FAMILIES)]:
        want = _expected(archive, family)
        (line,) = solid[panel]  # the one MEASURED curve of the panel
        assert list(line.get_xdata()) == [j - 1 for j, w in enumerate(want, 1) if w is not None]
        assert list(line.get_ydata()) == pytest.approx([w for w in want if w is not None])


def test_a_request_sample_nulls_the_measured_survival_with_the_reason(archive: Path) -> None:
    """The per-position MEASURED counts are kept per family, over every request read: a
    --sample-requests sample cannot be taken out of them, and the figures say so."""
    result = api.requalify(archive, baseline=BASE, candidate=CAND, sample_requests=6, **RUN)
    got = _measured(result, Level.POOLED, None)
    assert [s.value for s in got] == [None] * DEPTH
    why = "per-position MEASURED counts cover every request, not the --sample-requests sample"
    assert {s.null_reason for s in got} == {why}
    # survival.png draws no MEASURED curve and says why
    fig = survival_figure(result)
    try:
        styles = {ln.get_linestyle() for ax in fig.axes for ln in ax.get_lines()}
        title = fig._suptitle.get_text()
    finally:
        plt.close(fig)
    assert "-" not in styles
    assert survival_gap(result) == f"No MEASURED curve: its P(A ≥ j) is null ({why})."
    assert f"({why})" in title


def test_families_left_out_are_left_out_of_the_measured_survival(archive: Path) -> None:
    """--families: the pooled MEASURED survival counts the named families' rounds only."""
    named = FAMILIES[1:]
    result = api.requalify(archive, baseline=BASE, candidate=CAND, families=",".join(named), **RUN)
    got = [s.value for s in _measured(result, Level.POOLED, None)]
    kept = _rounds(archive).filter(~pl.col("capped") & pl.col("family").is_in(named))
    want = [
        None if (kept.get_column("positions") < j).any() else
        kept.filter(pl.col("A") >= j).height / kept.height
        for j in range(1, DEPTH + 1)
    ]  # fmt: skip
    assert got == want and None in got and got[0] is not None

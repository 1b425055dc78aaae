"""``sweep --policy`` rendered (issue 14): TABLES.md, REPORT.md and policies.png tell its figures.

A small archive whose draft law varies by round and position (so stop rules at different τ draft
different lengths) is swept once with a cost model and once without (module fixtures). Every
check reads results.json independently (``json``) and formats or compares the figures itself:
the table rows, the held-out choice, the REPORT.md verdict line, the series policies.png is built
from and the lines and bands actually drawn in the figure.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest
from archive_factory import write_parquet

from specreplay import api
from specreplay.render.files import render
from specreplay.render.markdown import figure_block, figure_label
from specreplay.render.plots import depth_figure, plot_caption
from specreplay.render.policy_plot import policy_caption, policy_figure, policy_series, stop_rule
from specreplay.render.policy_tables import POLICY_HEADER, WINNERS_CURSE
from specreplay.results.io import read_result
from specreplay.results.model import Result

ARM = "t1@5"
POLICIES = [
    "stop-below:{0.3,0.5,0.8}@5",
    "stop-cum:{0.1,0.3,0.6}@5",
    "depth-by-bucket:<4K=4/>=4K=2",
    "stop-below:0.5@6",  # past the 5 recorded positions: UNSUPPORTED, with its reason
]
Q_TOP = (0.95, 0.75, 0.55, 0.4)  # the top candidate's draft probability, cycling


def _rows(n_requests: int = 24, n_rounds: int = 3) -> list[dict[str, Any]]:
    rows = []
    for r in range(n_requests):
        for rnd in range(n_rounds):
            for pos in range(1, 6):
                q = Q_TOP[(r + 2 * rnd + pos) % len(Q_TOP)]
                rows.append(
                    {
                        "request_id": f"q{r}",
                        "family": ("chat", "code")[r % 2],
                        "context_tokens": 100 + 50 * rnd + 5000 * (r % 3 == 0),
                        "round": rnd,
                        "position": pos,
                        "cand_ids": [2 * pos, 2 * pos + 1],
                        "draft_logprobs": [math.log(q), math.log(1.0 - q)],
                        "target_probs": [0.6, 0.3],
                    }
                )
    return rows


def _sweep(tmp: Path, cost: str | None) -> Path:
    path = tmp / "a.parquet"
    if not path.exists():
        write_parquet(path, _rows())
    out = tmp / ("cost" if cost else "free")
    api.sweep(
        path, arms=ARM, depths="1..5", policies=POLICIES, cost=cost, estimator="analytic",
        n_boot=200, out=out,
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _sweep(tmp_path_factory.mktemp("policies"), "linear:1:0.25")


@pytest.fixture(scope="module")
def free_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _sweep(tmp_path_factory.mktemp("policies-free"), None)


def _doc(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "results.json").read_text(encoding="utf-8"))


def _pooled(doc: dict[str, Any]) -> dict[str, Any]:
    cell: dict[str, Any] = doc["cells"][0]
    assert cell["level"] == "pooled"
    return cell


def _table(text: str, heading: str) -> list[list[str]]:
    """The rows (cells stripped) of the first Markdown table after the line ``heading``."""
    lines = text.split("\n")
    start = next(i for i, ln in enumerate(lines) if ln.startswith(heading))
    first = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))
    rows = []
    for ln in lines[first:]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip("|").split("|")])
    return [rows[0], *rows[2:]]  # the header, then the rows (the rule line dropped)


# -- TABLES.md -------------------------------------------------------------------------------


def test_policy_table_rows_are_the_results_json_figures(run: Path) -> None:
    pooled = _pooled(_doc(run))
    header, *rows = _table((run / "TABLES.md").read_text(), f"## {ARM}: policies, pooled")
    assert header == POLICY_HEADER
    figs = [p for p in pooled["policies"] if p["arm"] == ARM]
    assert [r[0] for r in rows[: len(figs)]] == [p["policy"] for p in figs]
    unsupported = 0
    for row, p in zip(rows, figs, strict=False):
        if not p["supported"]:
            unsupported += 1
            assert row[2] == "UNSUPPORTED" and row[3] == "—" and row[-1] == p["null_reason"]
            assert "fewer positions" in p["null_reason"] or "record" in p["null_reason"]
            continue
        assert row[1] == f"{p['E_L']:.4f}"
        assert row[2] == f"{p['R']:.4f} [{p['lo']:+.4f}, {p['hi']:+.4f}]"
        tps = p["tokens_per_s"], p["tokens_per_s_lo"], p["tokens_per_s_hi"]
        assert row[3] == "{:.1f} [{:.1f}, {:.1f}]".format(*tps)
        assert row[4] == f"{p['p_best']:.3f}"
        assert row[5] == f"{p['label']}; tokens/s ESTIMATED" and p["label"] == "SIMULATED"
    assert unsupported == 1
    # the last row: the best fixed depth, the line a policy has to beat
    best = pooled["best_depth"][ARM]
    d = next(x for x in pooled["depths"] if x["arm"] == ARM and x["depth"] == best)
    assert rows[-1][0] == f"fixed depth {best} (the best depth)"
    tps = d["tokens_per_s"], d["tokens_per_s_lo"], d["tokens_per_s_hi"]
    assert rows[-1][3] == "{:.1f} [{:.1f}, {:.1f}]".format(*tps)
    # the stop rules do differ at different τ here (else the plot would be a flat line)
    below = [p["E_L"] for p in figs if p["policy"].startswith("stop-below") and p["supported"]]
    assert len(set(below)) == 3


def test_held_out_choice_and_the_in_sample_figure_beside_it(run: Path) -> None:
    doc = _doc(run)
    (choice,) = doc["policy_choice"]
    held, ins = choice["held_out"], choice["in_sample"]
    text = (run / "TABLES.md").read_text()
    header, held_row, ins_row = _table(text, f"## {ARM}: does a policy pay?")
    assert header[0] == "figure" and held_row[0] == "held-out" and ins_row[0] == "in-sample"

    def expect(fig: dict[str, Any]) -> list[str]:
        return [
            fig["policy"], str(fig["depth"]), f"{fig['n_requests']:,}",
            f"{fig['tokens_per_s_policy']:.1f}", f"{fig['tokens_per_s_depth']:.1f}",
            f"{fig['delta_tokens_per_s']:+.1f} [{fig['lo']:+.1f}, {fig['hi']:+.1f}]",
        ]  # fmt: skip

    assert held_row[1:7] == expect(held) and ins_row[1:7] == expect(ins)
    why = held["verdict_reason"]
    verdict = f"{held['verdict']} ({why})" if why else held["verdict"]
    assert held_row[7:] == [f"{held['margin_tokens_per_s']:.1f}", verdict, "ESTIMATED"]
    assert ins_row[8].startswith("—") and ins_row[9] == ins["label"] and "in-sample" in ins_row[9]
    assert f"policy {choice['selected_policy']} against fixed depth {choice['selected_depth']}" in (
        text
    )
    assert WINNERS_CURSE in text and "winner's curse" in WINNERS_CURSE
    # REPORT.md: the verdict line, the same figures; its tables are TABLES.md's
    report = (run / "REPORT.md").read_text()
    verdicts = report.split("\n## Verdicts\n")[1].split("\n## ")[0]
    line = next(ln for ln in verdicts.split("\n") if "held-out requests" in ln)
    assert f"**{verdict}**" in line and "(ESTIMATED)" in line
    delta = f"{held['delta_tokens_per_s']:+.1f} tokens/s [{held['lo']:+.1f}, {held['hi']:+.1f}]"
    assert f"Δ {delta}" in line
    assert f"in-sample Δ {ins['delta_tokens_per_s']:+.1f}" in line and ins["label"] in line
    assert WINNERS_CURSE in report


def test_without_a_cost_model_no_tokens_per_s_no_choice_no_plot(free_run: Path) -> None:
    doc = _doc(free_run)
    text = (free_run / "TABLES.md").read_text()
    _, *rows = _table(text, f"## {ARM}: policies, pooled")
    figs = _pooled(doc)["policies"]
    assert len(rows) == len(figs)  # no best-depth row: nothing is priced
    for row, p in zip(rows, figs, strict=True):
        assert row[3] == "—" and row[4] == "—"
        if p["supported"]:
            assert row[2] == f"{p['R']:.4f} [{p['lo']:+.4f}, {p['hi']:+.4f}]"
    why = doc["policy_choice"][0]["null_reason"]
    assert f"— ({why})" in text and why.endswith("(--cost)")
    assert "policies.png: not written (no policy has tokens/s: no cost model, --cost)." in text
    assert not (free_run / "policies.png").exists()
    assert "](policies.png)" not in (free_run / "REPORT.md").read_text()  # not embedded


def test_a_saved_result_renders_the_same_bytes(run: Path, tmp_path: Path) -> None:
    written = render(read_result(run / "results.json"), tmp_path)
    assert "policies.png" in written
    for name in ("TABLES.md", "REPORT.md"):
        assert (tmp_path / name).read_bytes() == (run / name).read_bytes(), name


# -- policies.png ----------------------------------------------------------------------------


def _expected_curves(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """From results.json: per ``family@D``, the priced stop rules in ascending τ."""
    out: dict[str, list[dict[str, Any]]] = {}
    for p in _pooled(doc)["policies"]:
        family, _, rest = p["policy"].partition(":")
        if family.startswith("stop-") and p["tokens_per_s"] is not None:
            tau, _, depth = rest.partition("@")
            out.setdefault(f"{family}@{depth}", []).append({**p, "tau": float(tau)})
    return {k: sorted(v, key=lambda p: p["tau"]) for k, v in out.items()}


def test_policy_series_are_the_figures_of_results_json(run: Path) -> None:
    doc = _doc(run)
    pooled = _pooled(doc)
    (panel,) = policy_series(read_result(run / "results.json"))
    want = _expected_curves(doc)
    assert [c.name for c in panel.curves] == ["stop-below@5", "stop-cum@5"] == list(want)
    for c in panel.curves:
        pts = want[c.name]
        assert c.tau == tuple(p["tau"] for p in pts)
        assert c.y == tuple(p["tokens_per_s"] for p in pts)
        assert c.lo == tuple(p["tokens_per_s_lo"] for p in pts)
        assert c.hi == tuple(p["tokens_per_s_hi"] for p in pts)
    best = pooled["best_depth"][ARM]
    d = next(x for x in pooled["depths"] if x["arm"] == ARM and x["depth"] == best)
    assert panel.depth is not None and panel.depth.name == f"best fixed depth {best}"
    assert (panel.depth.y, panel.depth.lo, panel.depth.hi) == (
        d["tokens_per_s"],
        d["tokens_per_s_lo"],
        d["tokens_per_s_hi"],
    )
    (table,) = panel.tables
    t = next(p for p in pooled["policies"] if p["policy"].startswith("depth-by-bucket"))
    assert (table.name, table.y, table.lo, table.hi) == (
        t["policy"],
        t["tokens_per_s"],
        t["tokens_per_s_lo"],
        t["tokens_per_s_hi"],
    )
    null = next(p for p in pooled["policies"] if not p["supported"])
    assert panel.omitted == (f"{null['policy']}: {null['null_reason']}",)


def _artists(fig: Any) -> dict[str, Any]:
    return {a.get_gid(): a for ax in fig.axes for a in ax.get_children() if a.get_gid()}


def test_policies_png_draws_the_figures(run: Path) -> None:
    """The lines and bands in the figure are tokens/s and its interval at each τ (not an end)."""
    doc = _doc(run)
    fig = policy_figure(read_result(run / "results.json"))
    try:
        drawn = _artists(fig)
        for name, pts in _expected_curves(doc).items():
            line = drawn[f"{ARM}: curve {name}"]
            assert list(line.get_xdata()) == [p["tau"] for p in pts]
            assert list(line.get_ydata()) == [p["tokens_per_s"] for p in pts]
            ys = drawn[f"{ARM}: band {name}"].get_paths()[0].vertices
            for p in pts:
                at = {float(y) for x, y in ys if x == p["tau"]}
                assert {p["tokens_per_s_lo"], p["tokens_per_s_hi"]} <= at, (name, p["tau"])
        pooled = _pooled(doc)
        best = pooled["best_depth"][ARM]
        d = next(x for x in pooled["depths"] if x["arm"] == ARM and x["depth"] == best)
        assert set(drawn[f"{ARM}: depth"].get_ydata()) == {d["tokens_per_s"]}
        span = drawn[f"{ARM}: depth band"]  # axhspan: a Rectangle (matplotlib ≥ 3.9) or a Polygon
        ends = (
            [span.get_y(), span.get_y() + span.get_height()]
            if hasattr(span, "get_height")
            else list(span.get_xy()[:, 1])
        )
        assert min(ends) == pytest.approx(d["tokens_per_s_lo"], rel=1e-12)
        assert max(ends) == pytest.approx(d["tokens_per_s_hi"], rel=1e-12)
        t = next(p for p in pooled["policies"] if p["policy"].startswith("depth-by-bucket"))
        assert set(drawn[f"{ARM}: {t['policy']}"].get_ydata()) == {t["tokens_per_s"]}
        legend = [tx.get_text() for ax in fig.axes for tx in ax.get_legend().get_texts()]
        assert all(x.endswith("(ESTIMATED)") for x in legend)
        assert fig.axes[0].get_ylabel().startswith("tokens/s")
    finally:
        plt.close(fig)


def _keep(result: Result, prefix: str) -> Result:
    pooled = result.cells[0]
    kept = tuple(p for p in pooled.policies if p.policy.startswith(prefix))
    return dataclasses.replace(
        result, cells=(dataclasses.replace(pooled, policies=kept), *result.cells[1:])
    )


@pytest.mark.parametrize("prefix", ["", "stop-below", "depth-by-bucket"])
def test_the_caption_names_only_the_series_drawn(run: Path, prefix: str) -> None:
    result = _keep(read_result(run / "results.json"), prefix)
    fig = policy_figure(result)
    try:
        legend = {tx.get_text() for ax in fig.axes for tx in ax.get_legend().get_texts()}
    finally:
        plt.close(fig)
    caption = figure_block("policies.png", figure_label(result, "policies.png"), result=result)
    assert caption == figure_block("policies.png", "tokens/s ESTIMATED", result=result)
    assert policy_caption(result) in caption
    for series, words in (("stop-below@5", "stop-below@5"), ("stop-cum@5", "stop-cum@5"),
                          ("depth-by-bucket", "depth-by-bucket policy")):  # fmt: skip
        is_drawn = any(x.startswith(series) for x in legend)
        assert (words in caption) == is_drawn, (series, caption)
    assert ("95% interval as a band" in caption) == any("stop-" in x for x in legend)
    assert ("not drawn" in caption) == (prefix in ("", "stop-below"))  # the @6 rule, unpriced


def test_stop_rule_reads_canonical_spellings() -> None:
    assert stop_rule("stop-below:0.1@5") == ("stop-below", 0.1, 5)
    assert stop_rule("stop-cum:1e-05@12") == ("stop-cum", 1e-05, 12)
    assert stop_rule("stop-below:0@5") == ("stop-below", 0.0, 5)
    assert stop_rule("depth-by-bucket:<4K=5/>=4K=3") is None


# -- issue 16, item 7: the plots say what they draw ------------------------------------------


def test_policies_png_says_its_figures_are_in_sample(run: Path) -> None:
    """What policies.png draws is each policy measured on every request (the in-sample
    figure of the held-out table), and its title and axes say so; the held-out verdict is
    named as not drawn (the title pointed to it as if the plot showed it)."""
    doc = _doc(run)
    (choice,) = doc["policy_choice"]
    chosen, ins = choice["selected_policy"], choice["in_sample"]
    fig = policy_figure(read_result(run / "results.json"))
    try:
        drawn = _artists(fig)
        title = fig._suptitle.get_text()
        ax = fig.axes[0]
        panel, ylabel = ax.get_title(), ax.get_ylabel()
    finally:
        plt.close(fig)
    rule = stop_rule(chosen)
    if rule is None:  # a policy without τ: its line across the panel
        (y,) = set(drawn[f"{ARM}: {chosen}"].get_ydata())
    else:
        line = drawn[f"{ARM}: curve {rule[0]}@{rule[2]}"]
        (y,) = [b for a, b in zip(line.get_xdata(), line.get_ydata(), strict=True) if a == rule[1]]
    assert ins["policy"] == chosen
    assert y == pytest.approx(ins["tokens_per_s_policy"], rel=1e-9)  # the in-sample figure
    assert "IN-SAMPLE" in title and "held-out verdict in TABLES.md, not drawn" in title
    assert "in-sample" in panel and "in-sample" in ylabel


def test_a_policy_without_tau_is_not_placed_at_a_tau(run: Path) -> None:
    """The depth-by-bucket policy has no τ: its line spans the panel and its interval sits
    right of the τ axis, at the same place whatever τ range is shown (it was drawn at the
    largest τ, 0.5 in the demo)."""
    result = read_result(run / "results.json")
    t = next(p for p in result.cells[0].policies if p.policy.startswith("depth-by-bucket"))
    assert t.tokens_per_s is not None
    fig = policy_figure(result)
    try:
        drawn = _artists(fig)
        ax = fig.axes[0]
        line = drawn[f"{ARM}: {t.policy}"]
        marks = drawn[f"{ARM}: {t.policy} interval"], drawn[f"{ARM}: {t.policy} point"]

        def display_x() -> list[float]:
            return [float(a.get_transform().transform((a.get_xdata()[0], 0.0))[0]) for a in marks]

        before = display_x()
        ax.set_xlim(-10.0, 50.0)  # another τ range
        after = display_x()
        right = float(ax.transAxes.transform((1.0, 0.0))[0])
        span = [float(line.get_transform().transform((x, 0.0))[0]) for x in line.get_xdata()]
        edges = [float(ax.transAxes.transform((x, 0.0))[0]) for x in (0.0, 1.0)]
        legend = [tx.get_text() for tx in ax.get_legend().get_texts()]
    finally:
        plt.close(fig)
    assert before == pytest.approx(after, abs=1e-9) and min(after) > right
    assert sorted(span) == pytest.approx(edges)  # a line across the whole panel
    assert list(marks[0].get_ydata()) == [t.tokens_per_s_lo, t.tokens_per_s_hi]
    assert list(marks[1].get_ydata()) == [t.tokens_per_s]
    assert f"{t.policy}, no τ (ESTIMATED)" in legend


def _policy_gids(fig: Any) -> set[str]:
    families = ("stop-below", "stop-cum", "depth-by-bucket")
    return {g for g in _artists(fig) if any(g.endswith(f" {f}") for f in families)}


def test_depths_png_adds_the_policies_and_names_the_cost_model(run: Path) -> None:
    """The demo's sweep/depths.png and policies/depths.png were one image: a sweep with
    --policy now draws each policy on the pooled panels at E[L] (positions drafted per round),
    the same sweep without it does not, and both name the cost model."""
    doc = _doc(run)
    pooled = _pooled(doc)
    result = read_result(run / "results.json")
    fig = depth_figure(result)
    try:
        drawn = _artists(fig)
        gids = _policy_gids(fig)
        cost_title = next(ax.get_title() for ax in fig.axes if "tokens/s" in ax.get_title())
        title = fig._suptitle.get_text()
    finally:
        plt.close(fig)
    cost = doc["options"]["cost"]
    assert f"cost model {cost}" in cost_title and f"cost model {cost}" in title
    want_gids = set()
    for key in ("R", "tokens_per_s"):
        for family in ("stop-below", "stop-cum", "depth-by-bucket"):
            want = [
                p
                for p in pooled["policies"]
                if p["policy"].startswith(f"{family}:") and p["supported"] and p["E_L"] is not None
            ]
            assert want
            gid = f"pooled {key}: {ARM} {family}"
            want_gids.add(gid)
            assert list(drawn[gid].get_xdata()) == [p["E_L"] for p in want]
            assert list(drawn[gid].get_ydata()) == [p[key] for p in want]
    assert gids == want_gids  # the pooled panels only
    assert "--policy at E[L]" in title
    caption = plot_caption("depths.png", result)
    assert "--policy at its mean drafted positions" in caption and "[" not in caption  # alt text
    # the same sweep without --policy (its depth figures are these): no policy drawn
    bare = dataclasses.replace(
        result, cells=tuple(dataclasses.replace(c, policies=()) for c in result.cells)
    )
    fig = depth_figure(bare)
    try:
        assert _policy_gids(fig) == set()
        assert "--policy" not in fig._suptitle.get_text()
        assert f"cost model {cost}" in fig._suptitle.get_text()
    finally:
        plt.close(fig)
    assert "--policy" not in plot_caption("depths.png", bare)

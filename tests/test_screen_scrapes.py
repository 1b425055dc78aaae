"""Issue 12 item 4: ``screen`` from two vLLM scrapes alone, ``--engine``, ``--vs``, the latency
histogram's binned median and the ``[[vllm]]`` shapes.

The exposition in tests/data/vllm-scrapes/ is written by hand after vLLM 0.33.0 (its README gives
the counts and the sources). Every expected figure below is typed from a hand computation (the
fractions in the comments), never recomputed by :mod:`specreplay.stats.scrapes`; the histogram
median is also checked against :func:`reference_quantile`, an independent implementation of
Prometheus' ``histogram_quantile`` written here from its documentation.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from corpus import assert_clean, assert_refused, invoke, tree_digest

from specreplay import api
from specreplay.errors import SpecReplayError
from specreplay.pipelines.options import ScreenOptions
from specreplay.results.io import read_result
from specreplay.stats.scrapes import bucket_quantile

DATA = Path(__file__).parent / "data" / "vllm-scrapes"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
REL = 1e-12  # a handful of float operations on exact counts

# Both engines (README): Δdrafts 7000, Δdraft_tokens 21000, Δaccepted 11500,
# Δper_pos (5500, 3700, 2300), inter-token latency Δ per bucket 1200 | 4300 | 900 | ….
BOTH = {
    "drafts": 7000,
    "draft_tokens": 21000,
    "accepted": 11500,
    "mal": 1 + 11500 / 7000,  # 2.642857…
    "rates": [5500 / 7000, 3700 / 7000, 2300 / 7000],  # 11/14, 37/70, 23/70
    "draft_rate": 11500 / 21000,  # 23/42
    "step_ms": 25 + 575 / 43,  # 25 + 25·(3500 − 1200)/4300 = 38.372093…
    "printed": ["2.6429", "0.7857, 0.5286, 0.3286", "0.5476 (54.8%)", "7,000", "38.372 ms"],
}
# Engine "1" alone: Δdrafts 3000, Δdraft_tokens 9000, Δaccepted 4700, Δper_pos (2300, 1500, 900);
# latency cumulative Δ 500 at 0.025 s, 2300 at 0.05 s: rank 1500 → 25 + 25·1000/1800 ms.
ENGINE1 = {
    "drafts": 3000,
    "draft_tokens": 9000,
    "accepted": 4700,
    "mal": 1 + 4700 / 3000,  # 2.566667
    "rates": [2300 / 3000, 1500 / 3000, 900 / 3000],  # .766667, .5, .3
    "draft_rate": 4700 / 9000,
    "step_ms": 25 + 25 * 1000 / 1800,  # 38.888889
    "printed": ["2.5667", "0.7667, 0.5000, 0.3000", "0.5222 (52.2%)", "3,000", "38.889 ms"],
}


def reference_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' histogram_quantile for cumulative buckets, from its documentation.

    "interpolates quantile values by assuming a linear distribution within a bucket. The highest
    bucket must have an upper bound of +Inf (otherwise NaN). If a quantile is located in the
    highest bucket, the upper bound of the second highest bucket is returned. A lower limit of
    the lowest bucket is assumed to be 0 if the upper bound of that bucket is greater than 0."
    Written as a walk over per-bucket counts (not cumulative ones, unlike the code under test).
    """
    bounds = sorted(buckets)
    if len(bounds) < 2 or bounds[-1][0] != math.inf or bounds[-1][1] == 0:
        return math.nan
    per_bucket, last = [], 0.0
    for bound, cum in bounds:
        per_bucket.append((bound, cum - last))
        last = cum
    rank, below, lower = q * bounds[-1][1], 0.0, 0.0
    for i, (bound, n) in enumerate(per_bucket):
        if below + n >= rank:
            if bound == math.inf:
                return per_bucket[i - 1][0]
            if i == 0 and bound <= 0:
                return bound
            if n == 0:  # q = 0 and an empty lowest bucket: Go's 0/0
                return math.nan
            return lower + (bound - lower) * (rank - below) / n
        below += n
        lower = bound
    return math.nan  # not reached: the +Inf bucket holds every observation


def _doc(out: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((out / "results.json").read_text())
    return doc


def _ok(args: list[str], *roots: Path) -> Any:
    before = tree_digest(*roots)
    res = invoke(args)
    assert res.exit_code == 0, res.output
    assert_clean(res, before, list(roots))
    return res


def _copy(tmp: Path) -> tuple[Path, Path]:
    b, a = tmp / "before.prom", tmp / "after.prom"
    shutil.copy(DATA / "before.prom", b)
    shutil.copy(DATA / "after.prom", a)
    return b, a


def _check_figures(fig: dict[str, Any], want: dict[str, Any]) -> None:
    assert (fig["drafts"], fig["draft_tokens"], fig["accepted_tokens"]) == (
        want["drafts"],
        want["draft_tokens"],
        want["accepted"],
    )
    assert fig["mean_acceptance_length"] == pytest.approx(want["mal"], rel=REL)
    assert [s["value"] for s in fig["per_position"]] == pytest.approx(want["rates"], rel=REL)
    assert [s["position"] for s in fig["per_position"]] == [1, 2, 3]
    assert fig["draft_acceptance_rate"] == pytest.approx(want["draft_rate"], rel=REL)
    assert fig["step"]["median_ms"] == pytest.approx(want["step_ms"], rel=REL)
    assert fig["step"]["metric"] == "vllm:inter_token_latency_seconds"
    assert fig["step"]["observations"] == want["drafts"]  # one latency per step here
    assert fig["step"]["label"] == "MEASURED" and fig["step"]["binned"] is True
    assert fig["label"] == "MEASURED" and fig["per_position_null_reason"] is None


def _check_printed(stdout: str, want: dict[str, Any]) -> None:
    mal, rates, draft, drafts, step = want["printed"]
    assert f"Mean acceptance length (R, retained tokens per round): {mal}\n" in stdout
    assert f"Per-position acceptance rate (survival P(A ≥ j), j = 1..3): {rates}\n" in stdout
    assert f"Avg Draft acceptance rate (accepted/draft tokens; not α): {draft}\n" in stdout
    assert f"Drafts (rounds): {drafts};" in stdout
    assert f"Step time (median): {step}, MEASURED (binned)" in stdout
    assert "not SP2's median per-request step p50" in stdout


# -- no --config: the MEASURED figures ---------------------------------------------------------


def test_two_scrapes_without_config_print_vllms_figures(tmp_path: Path) -> None:
    b, a = _copy(tmp_path)
    out = tmp_path / "out"
    res = _ok(["screen", str(b), str(a), "--out", str(out)], b, a)
    _check_printed(res.stdout, BOTH)
    doc = _doc(out)
    (fig,) = doc["scrapes"]
    _check_figures(fig, BOTH)
    assert fig["engines"] == ["0", "1"] and fig["engine"] is None
    assert fig["model_name"] == MODEL and fig["name"] == "A"
    assert doc["cells"] == [] and "scrape_delta" not in doc
    tables = (out / "TABLES.md").read_text()
    rows = {
        cells[0]: cells[1:]
        for line in tables.splitlines()
        if line.startswith("| ")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    assert rows["Mean acceptance length; R"] == ["2.6429"]
    assert rows["Per-position acceptance rate, position 0; survival P(A ≥ 1)"] == ["0.7857"]
    assert rows["Per-position acceptance rate, position 2; survival P(A ≥ 3)"] == ["0.3286"]
    assert rows["Avg Draft acceptance rate (not α)"] == ["0.5476 (54.8%)"]
    assert rows["drafts; rounds"] == ["7,000"]
    assert rows["step time median, ms (MEASURED (binned))"] == ["38.372"]
    report = (out / "REPORT.md").read_text()
    assert "**mean acceptance length 2.6429**" in report
    assert read_result(out / "results.json").scrapes == api.screen([b, a]).scrapes


@pytest.mark.parametrize(("engine", "want"), [("1", ENGINE1)])
def test_engine_filter_keeps_one_engine(tmp_path: Path, engine: str, want: dict[str, Any]) -> None:
    b, a = _copy(tmp_path)
    out = tmp_path / "out"
    res = _ok(["screen", str(b), str(a), "--engine", engine, "--out", str(out)], b, a)
    _check_printed(res.stdout, want)
    doc = _doc(out)
    _check_figures(doc["scrapes"][0], want)
    assert doc["scrapes"][0]["engines"] == [engine] and doc["options"]["engine"] == engine


def test_engine_zero_by_hand(tmp_path: Path) -> None:
    """Engine 0: 1 + 6800/4000 = 2.7; .8, .55, .35; 6800/12000; 25 + 25·(2000 − 700)/2500 = 38."""
    b, a = _copy(tmp_path)
    res = api.screen([b, a], engine="0")
    (fig,) = res.scrapes or ()
    assert fig.mean_acceptance_length == pytest.approx(2.7, rel=REL)
    assert [s.value for s in fig.per_position] == pytest.approx([0.8, 0.55, 0.35], rel=REL)
    assert fig.draft_acceptance_rate == pytest.approx(6800 / 12000, rel=REL)
    assert fig.step is not None and fig.step.median_ms == pytest.approx(38.0, rel=REL)


def test_model_name_filter_with_and_without_config(tmp_path: Path) -> None:
    b, a = _copy(tmp_path)
    res = api.screen([b, a], model_name=MODEL)
    assert res.scrapes is not None
    assert res.scrapes[0].mean_acceptance_length == pytest.approx(BOTH["mal"], rel=REL)
    with pytest.raises(SpecReplayError, match=r"no vllm:spec_decode_num_drafts_total\{model_name"):
        api.screen([b, a], model_name="other")
    cfg = tmp_path / "screen.toml"
    cfg.write_text(ENTRY_CONFIG)
    res = api.screen([b, a], config=cfg, model_name=MODEL, engine="1")
    (cell,) = res.cells
    assert [s.value for s in cell.survival] == pytest.approx(ENGINE1["rates"], rel=REL)
    assert cell.screen is not None
    assert cell.screen.step_p50_ms == pytest.approx(ENGINE1["step_ms"], rel=REL)


def test_unknown_engine_is_refused(tmp_path: Path) -> None:
    b, a = _copy(tmp_path)
    before = tree_digest(tmp_path)
    res = invoke(["screen", str(b), str(a), "--engine", "2", "--out", str(tmp_path / "out")])
    assert_refused(
        res, f'{b}: no vllm:spec_decode_num_drafts_total{{engine="2"}} series', "'0', '1'"
    )
    assert_clean(res, before, [tmp_path])


# -- the latency histogram ---------------------------------------------------------------------

ITL_BOTH = [  # the data's Δ cumulative buckets, both engines (README)
    (0.01, 0.0), (0.025, 1200.0), (0.05, 5500.0), (0.075, 6400.0), (0.1, 6800.0),
    (0.15, 6950.0), (0.2, 6990.0), (0.3, 7000.0), (0.4, 7000.0), (math.inf, 7000.0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("buckets", "hand"),
    [
        (ITL_BOTH, 0.025 + 0.025 * 2300 / 4300),  # in (0.025, 0.05]
        ([(0.1, 3.0), (0.2, 4.0), (math.inf, 10.0)], 0.2),  # rank 5 in +Inf: highest finite
        ([(0.1, 8.0), (0.2, 9.0), (math.inf, 10.0)], 0.1 * 5 / 8),  # lowest bucket from 0
        ([(-1.0, 8.0), (0.2, 9.0), (math.inf, 10.0)], -1.0),  # lowest bound ≤ 0: itself
        ([(0.2, 4.0), (0.1, 2.0), (math.inf, 4.0)], 0.1),  # unsorted; rank 2 ends bucket 0.1
        ([(0.1, 1.0), (0.2, 4.0)], math.nan),  # no +Inf bucket
        ([(0.1, 0.0), (math.inf, 0.0)], math.nan),  # no observation
        ([(math.inf, 5.0)], math.nan),  # a single bucket
    ],
)
def test_binned_median_is_histogram_quantile(
    buckets: list[tuple[float, float]], hand: float
) -> None:
    got = bucket_quantile(0.5, buckets)
    ref = reference_quantile(0.5, buckets)
    if math.isnan(hand):
        assert math.isnan(got) and math.isnan(ref)
    else:
        assert got == pytest.approx(hand, rel=REL) and ref == pytest.approx(hand, rel=REL)


@pytest.mark.parametrize("q", [0.0, 0.1, 0.25, 0.5, 0.9, 0.99, 1.0])
def test_quantiles_match_the_reference(q: float) -> None:
    got, ref = bucket_quantile(q, ITL_BOTH), reference_quantile(q, ITL_BOTH)
    if q == 0.0:  # rank 0 lands in the empty (0, 0.01] bucket: 0/0
        assert math.isnan(got) and math.isnan(ref)
    else:
        assert got == pytest.approx(ref, rel=REL)


def test_older_histogram_name_and_empty_histogram(tmp_path: Path) -> None:
    """vllm:time_per_output_token_seconds (older vLLM) is read when the V1 name is absent; a
    histogram without new observations gives a null median with the reason."""
    b, a = _copy(tmp_path)
    for p in (b, a):
        text = p.read_text().replace(
            "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"
        )
        p.write_text(text)
    (fig,) = api.screen([b, a]).scrapes or ()
    assert fig.step is not None and fig.step.metric == "vllm:time_per_output_token_seconds"
    assert fig.step.median_ms == pytest.approx(BOTH["step_ms"], rel=REL)
    drafts = "vllm:spec_decode_num_drafts_total"
    same = tmp_path / "earlier.prom"  # 10 drafts earlier, every latency series the same: Δcount 0
    line = f'{drafts}{{engine="0",model_name="{MODEL}"}} '
    same.write_text(b.read_text().replace(line + "1200.0", line + "1190.0"))
    res = api.screen([same, b])
    (fig,) = res.scrapes or ()
    assert fig.step is not None and fig.step.median_ms is None
    assert fig.step.null_reason == "no observation between the scrapes"


# -- --vs ----------------------------------------------------------------------------------------


def _b_scrape(drafts: int, per_pos: tuple[int, int, int], draft_tokens: int | None = None) -> str:
    """A one-engine scrape for side B, with HELP/TYPE lines and _created samples."""
    lab = f'engine="0",model_name="{MODEL}"'
    tokens = 3 * drafts if draft_tokens is None else draft_tokens
    rows = [
        ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", [(lab, drafts)]),
        ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", [(lab, tokens)]),
        ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
         [(lab, sum(per_pos))]),
        ("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
         [(f'{lab},position="{i}"', v) for i, v in enumerate(per_pos)]),
    ]  # fmt: skip
    lines = []
    for name, help_, series in rows:
        lines += [f"# HELP {name}_total {help_}", f"# TYPE {name}_total counter"]
        lines += [f"{name}_total{{{lb}}} {float(v)}" for lb, v in series]
        lines += [f"# HELP {name}_created {help_}", f"# TYPE {name}_created gauge"]
        lines += [f"{name}_created{{{lb}}} 1.7646264e+09" for lb, _ in series]
    return "\n".join(lines) + "\n"


def _vs_files(tmp: Path, short: bool = False) -> list[Path]:
    b, a = _copy(tmp)
    # B: Δdrafts 5000, Δper_pos (4000, 2500, 1000): S = .8, .5, .2, R_B = 1 + 7500/5000 = 2.5
    bb, ab = tmp / "b-before.prom", tmp / "b-after.prom"
    bb.write_text(_b_scrape(1000, (700, 400, 100), 3000))
    ab.write_text(_b_scrape(6000, (4700, 2900, 1100), 13000 if short else 18000))
    return [b, a, bb, ab]


def test_vs_gives_the_delta_and_a_lower_bound_se(tmp_path: Path) -> None:
    b, a, bb, ab = _vs_files(tmp_path)
    out = tmp_path / "out"
    res = _ok(["screen", str(b), str(a), "--vs", str(bb), str(ab), "--out", str(out)], b, a, bb, ab)
    # A: S = 11/14, 37/70, 23/70; ΣS = 23/14; Σ(2i − 1)S_i = (55 + 111 + 115)/70 = 281/70;
    #    Var_A = 281/70 − (23/14)² = (3934 − 2645)/980 = 1289/980, N_A = 7000.
    # B: S = .8, .5, .2; Var_B = .8 + 1.5 + 1.0 − 1.5² = 1.05, N_B = 5000.
    # Δ = R_B − R_A = 2.5 − 18.5/7 = −1/7; SE = √(1289/980/7000 + 1.05/5000) = 0.019947…
    var_a, var_b = 1289 / 980, 1.05
    se = math.sqrt(var_a / 7000 + var_b / 5000)
    d = _doc(out)["scrape_delta"]
    assert d["point"] == pytest.approx(-1 / 7, rel=1e-12)
    assert d["var_a"] == pytest.approx(var_a, rel=REL) and d["var_b"] == pytest.approx(var_b)
    assert d["se_a"] == pytest.approx(math.sqrt(var_a / 7000), rel=REL)
    assert d["se"] == pytest.approx(se, rel=REL) and round(se, 4) == 0.0199
    assert d["se_is_lower_bound"] is True and d["se_null_reason"] is None
    assert (d["a"], d["b"]) == ("A", "B")
    assert "Δ mean acceptance length R_B − R_A = -0.1429 (MEASURED), SE ≥ 0.0199" in res.stdout
    assert "a LOWER BOUND: rounds cluster by request" in res.stdout
    scrapes = _doc(out)["scrapes"]
    assert [s["name"] for s in scrapes] == ["A", "B"]
    assert scrapes[1]["mean_acceptance_length"] == pytest.approx(2.5, rel=REL)


def test_round_variance_by_enumeration() -> None:
    """Var(A) from the law of A itself: P(A = a) = S_a − S_{a+1} (S_0 = 1, S_4 = 0)."""
    from specreplay.pipelines.screen import scrape_delta
    from specreplay.results.model import Label, ScrapeFigures, Survival

    def fig(name: str, surv: list[float], n: int) -> ScrapeFigures:
        per = tuple(Survival(name, i + 1, s, Label.MEASURED, None, n) for i, s in enumerate(surv))
        return ScrapeFigures(name, "b", "a", None, None, ("0",), n, 3 * n, 0,
                             1 + sum(surv), None, per, None, Label.MEASURED, None)  # fmt: skip

    s = [0.9, 0.6, 0.25]
    law = [1 - s[0], s[0] - s[1], s[1] - s[2], s[2]]
    mean = sum(a * p for a, p in enumerate(law))
    var = sum(a * a * p for a, p in enumerate(law)) - mean**2
    d = scrape_delta(fig("A", s, 400), fig("B", [0.5], 100))
    assert d.var_a == pytest.approx(var, rel=1e-12) and d.var_b == pytest.approx(0.25)
    assert d.se == pytest.approx(math.sqrt(var / 400 + 0.25 / 100), rel=1e-12)


def test_vs_with_short_proposals_nulls_the_se_only(tmp_path: Path) -> None:
    b, a, bb, ab = _vs_files(tmp_path, short=True)  # B: Δdraft_tokens 10000 < 5000 × 3
    res = api.screen([b, a], vs=[bb, ab])
    d = res.scrape_delta
    assert d is not None and d.point == pytest.approx(-1 / 7, rel=1e-12)
    assert d.se is None and d.se_b is None and d.se_a is not None
    assert d.se_null_reason is not None and d.se_null_reason.startswith("B: no survivals (short")


# -- short proposals and missing per-position counters ----------------------------------------


def test_short_proposals_without_config_keep_the_mean_acceptance_length(tmp_path: Path) -> None:
    # One engine, Δdrafts 5000, Δper_pos (4000, 2500, 1000), Δdraft_tokens 10000 < 15000:
    # per-position rates null; R = 1 + 7500/5000 = 2.5 and draft rate 7500/10000 = .75 stand.
    bb, ab = tmp_path / "b.prom", tmp_path / "a.prom"
    bb.write_text(_b_scrape(1000, (700, 400, 100), 3000))
    ab.write_text(_b_scrape(6000, (4700, 2900, 1100), 13000))
    out = tmp_path / "out"
    res = _ok(["screen", str(bb), str(ab), "--out", str(out)], bb, ab)
    (fig,) = _doc(out)["scrapes"]
    assert fig["mean_acceptance_length"] == pytest.approx(2.5, rel=REL)
    assert fig["draft_acceptance_rate"] == pytest.approx(0.75, rel=REL)
    assert [s["value"] for s in fig["per_position"]] == [None, None, None]
    assert fig["per_position_null_reason"].startswith("short proposals: Δdraft_tokens = 10000")
    assert "Per-position acceptance rate (survival P(A ≥ j), j = 1..3): null (short" in res.stdout
    assert "Mean acceptance length (R, retained tokens per round): 2.5000" in res.stdout
    assert fig["step"] is None


def test_scrapes_without_per_position_counters(tmp_path: Path) -> None:
    bb, ab = tmp_path / "b.prom", tmp_path / "a.prom"
    keep = "per_pos"
    for p, text in (
        (bb, _b_scrape(1000, (700, 400, 100))),
        (ab, _b_scrape(6000, (4700, 2900, 1100))),
    ):
        p.write_text("".join(x + "\n" for x in text.splitlines() if keep not in x))
    (fig,) = api.screen([bb, ab]).scrapes or ()
    assert fig.per_position == () and fig.mean_acceptance_length == pytest.approx(2.5)
    assert fig.per_position_null_reason == (
        "the scrapes hold no vllm:spec_decode_num_accepted_tokens_per_pos_total series"
    )


# -- the [[vllm]] shapes -----------------------------------------------------------------------

ENTRY_CONFIG = """[draft_p50_ms]
1 = 2.0
[[vllm]]
suite = "sharegpt"
worker = "eagle3"
batch = 1
context = 0
"""


def _cell(res: Any) -> dict[str, Any]:
    (cell,) = res["cells"]
    return cell  # type: ignore[no-any-return]


def test_entry_without_scrapes_takes_the_command_line_pair(tmp_path: Path) -> None:
    """Each scrape named once: on the command line; the step time from the histogram."""
    b, a = _copy(tmp_path)
    cfg = tmp_path / "screen.toml"
    cfg.write_text(ENTRY_CONFIG)
    out = tmp_path / "out"
    _ok(["screen", str(b), str(a), "--config", str(cfg), "--out", str(out)], b, a, cfg)
    doc = _doc(out)
    cell = _cell(doc)
    assert [s["value"] for s in cell["survival"]] == pytest.approx(BOTH["rates"], rel=REL)
    assert cell["screen"]["step_p50_ms"] == pytest.approx(BOTH["step_ms"], rel=REL)
    assert cell["arms"]["eagle3"]["n_rounds"] == 7000
    assert doc["scrapes"][0]["mean_acceptance_length"] == pytest.approx(BOTH["mal"], rel=REL)


def test_entry_naming_its_scrapes_needs_no_command_line(tmp_path: Path) -> None:
    b, a = _copy(tmp_path)
    cfg = tmp_path / "screen.toml"
    cfg.write_text(
        ENTRY_CONFIG + 'before = "before.prom"\nafter = "after.prom"\nstep_p50_ms = 40.0\n'
    )
    out = tmp_path / "out"
    _ok(["screen", "--config", str(cfg), "--out", str(out)], b, a, cfg)
    new = _cell(_doc(out))
    assert new["screen"]["step_p50_ms"] == 40.0  # the entry's own step wins over the histogram
    # the old shape (the scrapes on the command line too) gives the same cell
    out2 = tmp_path / "out2"
    _ok(["screen", str(b), str(a), "--config", str(cfg), "--out", str(out2)], b, a, cfg)
    assert _cell(_doc(out2)) == new
    assert [Path(i["path"]).name for i in _doc(out)["inputs"]] == [
        "before.prom", "after.prom", "screen.toml"
    ]  # fmt: skip


# -- bad input: one line, nothing written ------------------------------------------------------


def _refused(tmp: Path, args: list[str], *fragments: str) -> None:
    before = tree_digest(tmp)
    res = invoke([*args, "--out", str(tmp / "out")])
    assert_refused(res, *fragments)
    assert_clean(res, before, [tmp])


def test_bad_scrape_arguments_are_one_line(tmp_path: Path) -> None:
    b, a = _copy(tmp_path)
    _refused(tmp_path, ["screen", str(b)], f"{b}: a scrape without its pair", "BEFORE AFTER")
    _refused(tmp_path, ["screen", str(b), str(a), str(b)], f"{b}: a scrape without its pair")
    _refused(
        tmp_path,
        ["screen", str(b), str(a), str(b), str(a), "--vs", str(b), str(a)],
        "--vs",
        "compares one BEFORE AFTER pair with another; 2 pairs given",
    )
    _refused(tmp_path, ["screen", str(b), str(a), "--vs", str(b), str(tmp_path / "nope.prom")],
             f"{tmp_path / 'nope.prom'}: no such file")  # fmt: skip
    with pytest.raises(SpecReplayError, match=r"--vs: takes two scrapes, BEFORE_B AFTER_B; got 1"):
        ScreenOptions.build(vs=[str(b)])
    with pytest.raises(SpecReplayError, match="--engine: should be a non-empty label value"):
        ScreenOptions.build(engine="")


def test_bad_config_shapes_are_one_line(tmp_path: Path) -> None:
    b, a = _copy(tmp_path)
    cfg = tmp_path / "screen.toml"
    cfg.write_text(ENTRY_CONFIG + 'before = "before.prom"\n')
    _refused(tmp_path, ["screen", "--config", str(cfg)],
             f"{cfg}: [[vllm]] #1: give both before and after")  # fmt: skip
    cfg.write_text(ENTRY_CONFIG)
    _refused(tmp_path, ["screen", "--config", str(cfg)],
             f"{cfg}: [[vllm]] #1: names no before/after, and the command line has no BEFORE "
             "AFTER scrape pair left")  # fmt: skip
    # no step_p50_ms and no latency histogram
    for p in (b, a):
        p.write_text(
            "".join(x + "\n" for x in p.read_text().splitlines() if "inter_token" not in x)
        )
    _refused(tmp_path, ["screen", str(b), str(a), "--config", str(cfg)],
             f"{cfg}: [[vllm]] #1: no step_p50_ms, and the scrapes give no step time",
             "set step_p50_ms")  # fmt: skip


def test_out_may_not_hold_a_scrape_named_only_by_the_config(tmp_path: Path) -> None:
    """--force never replaces a folder holding a scrape that only a [[vllm]] entry names."""
    sub = tmp_path / "scrapes"
    sub.mkdir()
    _copy(sub)
    cfg = tmp_path / "screen.toml"
    cfg.write_text(ENTRY_CONFIG + 'before = "scrapes/before.prom"\nafter = "scrapes/after.prom"\n')
    before = tree_digest(tmp_path)
    res = invoke(["screen", "--config", str(cfg), "--out", str(sub), "--force"])
    assert_refused(res, str(sub), "before.prom")
    assert_clean(res, before, [tmp_path])


def test_more_one_line_refusals(tmp_path: Path) -> None:
    b, a = _copy(tmp_path)
    _refused(tmp_path, ["screen"], "screen: no input: give run counters or BEFORE AFTER")
    cfg = tmp_path / "screen.toml"
    cfg.write_text(ENTRY_CONFIG + 'before = "before.prom"\nafter = "gone.prom"\n')
    _refused(tmp_path, ["screen", "--config", str(cfg)],
             f"{tmp_path / 'gone.prom'}: no such file (named by {cfg}: [[vllm]] #1)")  # fmt: skip
    bucket = f'vllm:inter_token_latency_seconds_bucket{{engine="0",le="0.05",model_name="{MODEL}"}}'
    text = a.read_text()
    assert bucket in text
    a.write_text(text.replace(bucket, bucket.replace('le="0.05"', 'le="fast"')))
    line = 1 + text.splitlines().index(next(x for x in text.splitlines() if x.startswith(bucket)))
    where = f"{a}:line {line}"
    _refused(tmp_path, ["screen", str(b), str(a)],
             f"{where}: vllm:inter_token_latency_seconds_bucket needs a label le=")  # fmt: skip


def test_a_run_without_scrapes_writes_no_new_key(tmp_path: Path) -> None:
    """Run counters and a config alone: results.json has no ``scrapes``, ``scrape_delta``,
    ``engine`` or ``vs`` (they exist only when used), so it is what it was before them."""
    run = {"suite": "s", "worker": "w", "batch": 2, "context": 0, "request_rounds": 100,
           "accepted_position": [80, 60, 40, 20, 10], "step_p50_ms": 40.0}  # fmt: skip
    counters, cfg = tmp_path / "runs.jsonl", tmp_path / "screen.toml"
    counters.write_text(json.dumps(run) + "\n")
    cfg.write_text("[draft_p50_ms]\n2 = 2.0\n")
    out = tmp_path / "out"
    _ok(["screen", str(counters), "--config", str(cfg), "--out", str(out)], counters, cfg)
    doc = _doc(out)
    assert "scrapes" not in doc and "scrape_delta" not in doc
    assert list(doc["options"]) == [
        "counters", "config", "model_name", "trained_block", "depths", "h_ms", "caps",
        "draft_p50_ms", "central", "envelope",
    ]  # fmt: skip
    assert not any(a.startswith(("Scrapes:", "Step time:", "--vs:")) for a in doc["assumptions"])

"""Issue 16, items 4, 5 and 8 (in part): the verdict first, one vocabulary of sizes, help texts.

The verbs that give verdicts (``requalify``, ``interval``, ``sweep``, ``demo``) run through the
command line on small synthetic archives and the Spec-Bench fixture; what they print is checked
against their own results.json (written beside it, read independently of the console text):

- line 1 is at most 160 characters and holds the pooled verdict results.json records;
- line 2 says what the run excluded (the rounds ``--short-rounds`` left out, with the MEASURED R
  of results.json's ``excluded`` entry) or reused (``--cache``), ``Excluded: nothing`` if neither;
- no line is longer than 160 characters unless it holds a name the user gave (an arm, a path);
- one estimator line per arm, each with the worst Pareto k̂ and the smallest ESS share that
  results.json's pooled importance diagnostics give for that arm;
- an absolute and a relative interval of one Δ that disagree in sign are printed with the reason;
- REPORT.md's Verdicts section starts with a verdict;
- ``--help`` names the three sizes with the statistics' own constants and the interval that
  decides.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from archive_factory import valid_rows, write_parquet
from corpus import invoke

from specreplay.render.console import WIDTH, fold
from specreplay.render.interval_text import sign_note, small_sample_text
from specreplay.results.model import CoverageAtSize, Delta, Label, Role, Tost
from specreplay.stats.cr2 import MIN_REQUESTS
from specreplay.stats.studied import NOMINAL_REQUESTS

ROOT = Path(__file__).resolve().parents[1]
SPEC_BENCH = ROOT / "tests" / "data" / "spec-bench"
BASE, CAND, REF = "top32:t0.7@5", "top32:t0.7:dyadic24@5", "greedy@5"
VERDICTS = ("EQUIVALENT", "DIFFERENT", "INCONCLUSIVE", "QUALIFIED", "NOT QUALIFIED")


def _doc(out: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((out / "results.json").read_text(encoding="utf-8"))
    return doc


def _check_widths(text: str, names: list[str]) -> None:
    """Every line is at most WIDTH characters but for the user-given ``names`` it holds."""
    for line in text.splitlines():
        bare = line
        for n in sorted(names, key=len, reverse=True):
            bare = bare.replace(n, "")
        assert len(bare) <= WIDTH, (len(line), line)


@pytest.fixture(scope="module")
def requalified(small_archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """requalify on the session's small archive (auto: importance), with a reference arm."""
    out = tmp_path_factory.mktemp("rq") / "o"
    res = invoke(["requalify", str(small_archive), "--baseline", BASE, "--candidate", CAND,
                  "--reference", REF, "--out", str(out), "-q", "--n-boot", "200"])  # fmt: skip
    assert res.exit_code == 0, res.output
    return res.stdout, _doc(out), out, [str(small_archive), str(out), BASE, CAND, REF]


def test_requalify_line_1_is_the_pooled_verdict(requalified: Any) -> None:
    text, doc, _, names = requalified
    first = text.splitlines()[0]
    assert len(first) <= WIDTH
    verdict = doc["requalification"]["verdict"]
    pooled = next(d for d in doc["cells"][0]["deltas"] if d["role"] == "candidate-vs-baseline")
    assert first.startswith(f"REQUALIFICATION (pooled, SIMULATED): {verdict} — {CAND} vs {BASE}")
    assert f"Δ {pooled['verdict']} at margin 0.5%" in first
    _check_widths(text, names)


def test_requalify_line_2_says_nothing_was_excluded(requalified: Any) -> None:
    text, doc, _, _ = requalified
    assert doc["excluded"] == [] and "replay_backend" not in doc
    assert text.splitlines()[1] == "Excluded: nothing"


def test_one_estimator_line_per_arm_with_its_worst_khat_and_smallest_ess(
    requalified: Any,
) -> None:
    """The figures come from results.json's pooled importance diagnostics, read here."""
    text, doc, _, _ = requalified
    assert doc["options"]["estimator_used"] == "importance"
    lines = [x for x in text.splitlines() if x.startswith("Estimator importance for ")]
    assert len(lines) == len(doc["arms"]) == 3
    for arm in doc["arms"]:
        line = next(x for x in lines if x.startswith(f"Estimator importance for {arm}: "))
        diags = [d for d in doc["cells"][0]["importance"] if d["arm"] == arm]
        ks = [(d["pareto_k"], d["depth"]) for d in diags if d["pareto_k"] is not None]
        if ks:
            k, depth = max(ks)
            assert f"worst k̂ {k:.2f} at depth {depth}" in line
        else:
            assert "k̂ —" in line
        share, depth = min((d["ess_share"], d["depth"]) for d in diags)
        assert f"smallest ESS share {100 * share:.1f}% at depth {depth}" in line
    # the importance table by depth is not on the console (it is in TABLES.md)
    assert "Importance tail diagnostics" not in text
    assert "Importance tail diagnostics" in (requalified[2] / "TABLES.md").read_text()


def test_auto_tail_figures_stay_in_tables_md(requalified: Any) -> None:
    """The console names auto's rule; the figures per arm and depth are in TABLES.md only."""
    text, doc, out, _ = requalified
    reasons = [d["verdict_reason"] for c in doc["cells"] for d in c["deltas"]
               if d["verdict_reason"] and "--estimator auto" in d["verdict_reason"]]  # fmt: skip
    assert reasons, "the small archive's dyadic24 tails are accepted by the bound"
    assert "exact ratio bound/mean" not in text
    assert "exact ratio bound/mean" in (out / "TABLES.md").read_text()


def test_requalify_report_verdicts_start_with_a_verdict(requalified: Any) -> None:
    _, doc, out, _ = requalified
    report = (out / "REPORT.md").read_text()
    section = report.split("\n## Verdicts\n", 1)[1]
    first = next(x for x in section.splitlines() if x.strip())
    assert first.startswith("- pooled (64 requests): **")
    assert f"**{doc['requalification']['verdict']}**" in first
    # the auto estimator's tail figures are not in the Verdicts section
    assert "exact ratio bound/mean" not in section.split("\n## ", 1)[0]


def _short_rows() -> list[dict[str, Any]]:
    """24 requests × 4 rounds × 5 positions (laws scaled per row, seeded), req-4's last round
    cut to 3 positions: a request's last round, which the default leaves out."""
    rows = valid_rows(n_requests=24, n_rounds=4, depth=5)
    rng = np.random.default_rng(20261207)
    for r in rows:
        scale = float(rng.uniform(0.3, 1.0))
        r["target_probs"] = [p * scale for p in r["target_probs"]]
    return [r for r in rows if not (r["request_id"] == "req-4" and r["round"] == 3
                                    and r["position"] > 3)]  # fmt: skip


def test_line_2_is_what_the_run_excluded_and_then_what_it_reused(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    path = write_parquet(tmp_path / "in" / "a.parquet", _short_rows())
    base, cand = "top4:t1@5", "top4:t1:dyadic8@5"
    args = ["requalify", str(path), "--baseline", base, "--candidate", cand, "--estimator",
            "analytic", "--n-boot", "200", "--min-requests", "2", "-q",
            "--cache", str(tmp_path / "cache")]  # fmt: skip
    first = invoke([*args, "--out", str(tmp_path / "o1")])
    assert first.exit_code == 0, first.output
    (entry,) = _doc(tmp_path / "o1")["excluded"]
    lines = first.stdout.splitlines()
    assert len(lines[0]) <= WIDTH and "REQUALIFICATION (pooled, SIMULATED): " in lines[0]
    assert lines[1].startswith("Excluded: 1 round in 1 request (--short-rounds capped")
    assert (
        f"MEASURED R {entry['measured_R_kept']:.4f} over the rounds kept, "
        f"{entry['measured_R_all']:.4f} over every round"
    ) in " ".join(x.strip() for x in lines[1:3])
    again = invoke([*args, "--out", str(tmp_path / "o2")])
    assert again.exit_code == 0, again.output
    cache = _doc(tmp_path / "o2")["replay_backend"]["cache"]
    assert cache["reused"] == cache["shards"] >= 1
    reused = next(x for x in again.stdout.splitlines() if x.startswith("Reused: "))
    assert (
        reused == f"Reused: cache: {cache['shards']} of {cache['shards']} shards reused, 0 replayed"
    )
    assert again.stdout.splitlines().index(reused) <= 3  # right after the excluded line
    assert "shards reused" not in again.stderr  # moved, not repeated
    _check_widths(again.stdout, [str(tmp_path), base, cand])


def test_interval_on_spec_bench_line_1_and_the_sign_disagreement(tmp_path: Path) -> None:
    """The 6-request Spec-Bench pair: Δ's absolute interval excludes 0, its relative one holds
    it; wherever the console prints both, the reason is beside them."""
    out = tmp_path / "sb"
    args = ["interval", str(SPEC_BENCH / "sps.jsonl"), str(SPEC_BENCH / "eagle.jsonl"),
            "--min-requests", "2", "--stratify", "none", "--out", str(out), "-q"]  # fmt: skip
    res = invoke(args)
    assert res.exit_code == 0, res.output
    doc = _doc(out)
    d = next(x for x in doc["cells"][0]["deltas"] if x["role"] == "b-vs-a")
    assert d["lo"] > 0 > d["rel_lo"]  # the fixture's disagreement, read from results.json
    lines = res.stdout.splitlines()
    assert lines[0] == f"VERDICT (pooled, MEASURED): {d['verdict']} at margin 0.5% — eagle vs sps"
    assert lines[1] == "Excluded: nothing"
    why = "the relative interval holds 0 and the absolute one does not"
    both = [i for i, x in enumerate(lines) if "[+0.3245, +3.7147]" in x and "[-11.2" in x]
    assert both, res.stdout
    for i in both:  # the Δ line is followed by the reason; a table row points to its footnote
        marker = re.search(r"\[-11\.25%, \+60\.77%\] (\[\d+\])", lines[i])
        if marker is None:
            assert why in lines[i + 1]
        else:
            assert any(x.startswith(f"{marker.group(1)} {why}") for x in lines)
    _check_widths(res.stdout, [str(tmp_path)])
    report = (out / "REPORT.md").read_text()
    verdicts = report.split("\n## Verdicts\n", 1)[1].split("\n## ", 1)[0]
    first = next(x for x in verdicts.splitlines() if x.strip())
    assert first.startswith(f"- pooled (6 requests): **{d['verdict']}**")
    assert why in first


def test_sweep_line_1_names_the_best_depth_of_results_json(
    small_archive: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sw"
    res = invoke(["sweep", str(small_archive), "--arm", BASE, "--depths", "1..5", "--cost",
                  "linear:20:3", "--out", str(out), "-q", "--n-boot", "200",
                  "--estimator", "analytic"])  # fmt: skip
    assert res.exit_code == 0, res.output
    pooled = _doc(out)["cells"][0]
    best = pooled["best_depth"][BASE]
    fig = next(f for f in pooled["depths"] if f["arm"] == BASE and f["depth"] == best)
    lines = res.stdout.splitlines()
    assert len(lines[0]) <= WIDTH
    assert lines[0].startswith("SWEEP (pooled, tokens/s ESTIMATED, cost linear:20:3): ")
    assert f"best depth {best} for {BASE} ({fig['tokens_per_s']:.1f} tokens/s" in lines[0]
    assert lines[1] == "Excluded: nothing"
    assert [x for x in lines if x.startswith("Estimator analytic for ")] == [
        f"Estimator analytic for {BASE}: no weight diagnostics in this run"
    ]
    _check_widths(res.stdout, [str(small_archive), str(tmp_path), BASE])


def test_sweep_with_policies_keeps_its_lines_short(small_archive: Path, tmp_path: Path) -> None:
    """With --policy the held-out verdict follows line 2 and its wide table stays in TABLES.md."""
    out = tmp_path / "pol"
    policy = "stop-below:0.5@5"
    res = invoke(["sweep", str(small_archive), "--arm", BASE, "--depths", "1..5", "--cost",
                  "linear:1:0.05", "--policy", policy, "--out", str(out), "-q", "--n-boot", "200",
                  "--estimator", "analytic"])  # fmt: skip
    assert res.exit_code == 0, res.output
    (entry,) = [e for e in _doc(out)["policy_choice"] if e["arm"] == BASE]
    choice = entry["held_out"]
    lines = res.stdout.splitlines()
    assert lines[1] == "Excluded: nothing"
    assert lines[2].startswith(f"pooled, {BASE}, best policy against best fixed depth on ")
    assert f"{choice['n_requests']:,} held-out requests" in lines[2]
    assert not any(x.startswith("| held-out") for x in lines)
    assert any(x.startswith("| held-out") for x in (out / "TABLES.md").read_text().splitlines())
    _check_widths(res.stdout, [str(small_archive), str(tmp_path), BASE, policy])


def test_demo_terminal_opens_with_the_requalification(tmp_path: Path) -> None:
    """The demo's smallest run: line 1 is its requalification's verdict, line 2 what it left
    out; no line over 160 characters but those naming the output folder."""
    out = tmp_path / "demo"
    res = invoke(["demo", "--out", str(out), "--requests", "40", "--n-boot", "200", "-q"])
    assert res.exit_code == 0, res.output
    rq = _doc(out / "requalify")
    lines = res.stdout.splitlines()
    assert len(lines[0]) <= WIDTH
    assert lines[0].startswith(
        f"REQUALIFICATION (pooled, SIMULATED): {rq['requalification']['verdict']} — "
    )
    assert lines[1] == "Excluded: nothing"
    block = lines[lines.index("VERDICTS (pooled; SIMULATED replays of the MEASURED archive)") + 1]
    assert block.startswith("- requalification ")
    assert len([x for x in lines if x.startswith("Estimator importance for ")]) == len(rq["arms"])
    _check_widths(res.stdout, [str(out)])
    report = (out / "REPORT.md").read_text()
    section = report.split("\n## Verdicts\n", 1)[1]
    assert next(x for x in section.splitlines() if x.strip()).startswith("- requalification ")


# -- the words --------------------------------------------------------------------------------


@pytest.mark.parametrize("verb", ["interval", "requalify", "sweep"])
def test_help_names_the_three_sizes_and_the_interval_that_decides(verb: str) -> None:
    res = invoke([verb, "--help"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.stdout.split())
    assert "Reporting minimum: a cell with fewer requests gets no Δ" in flat
    assert (
        f"the verdict minimum ({MIN_REQUESTS} requests: below it no EQUIVALENT, and DIFFERENT "
        "only where the CR2 and sign-flip tests both reject at α/2)"
    ) in flat
    assert f"the nominal-coverage size ({NOMINAL_REQUESTS} requests: below it a Δ is" in flat
    if verb != "sweep":
        assert "The interval that decides" in flat and "cr2-eff-hall" in flat
        assert "bootstrap interval" not in flat.lower().replace("bootstrap bca interval", "")


def _delta(lo: float, hi: float, rel_lo: float, rel_hi: float, **kw: Any) -> Delta:
    tost = kw.pop("tost", None)
    return Delta("a", "b", Role.B_VS_A, (lo + hi) / 2, (rel_lo + rel_hi) / 2, lo, hi, rel_lo,
                 rel_hi, "cr2-eff-hall", 0.95, False, None, None, tost, None, None,
                 "INCONCLUSIVE", None, None, 0, None, None, Label.MEASURED, None, **kw)  # fmt: skip


def test_sign_note_only_where_the_two_intervals_disagree() -> None:
    tost = Tost(0.05, 0.005, "relative", "0.5%", -0.1, 0.6, 0.9)
    note = sign_note(_delta(0.3245, 3.7147, -0.1125, 0.6077, tost=tost))
    assert note is not None
    assert note.startswith("the relative interval holds 0 and the absolute one does not")
    assert note.endswith("the verdict is judged on the relative scale")
    assert sign_note(_delta(0.1, 0.2, 0.01, 0.02)) is None  # both above 0
    assert sign_note(_delta(-0.1, 0.2, -0.01, 0.02)) is None  # both hold 0
    opposite = sign_note(_delta(0.1, 0.2, -0.03, -0.01))
    assert opposite is not None
    assert opposite.startswith("the relative interval lies below 0 and the absolute one lies above")


def test_small_sample_mark_says_what_the_study_covered() -> None:
    cov = CoverageAtSize(0.93, 0.004, 96, "heavy/skew+/free, family cell, Δ")
    d = _delta(0.1, 0.2, 0.01, 0.02, small_sample=True, coverage_at_size=cov)
    assert small_sample_text(d, setting=False) == (
        "small sample: in the study's hardest setting, 95% intervals of 96 requests covered 0.93"
    )
    assert small_sample_text(d) == (
        "small sample: in the study's hardest setting (heavy/skew+/free, family cell, Δ), 95% "
        "intervals of 96 requests covered 0.93 ± 0.004"
    )
    assert small_sample_text(_delta(0.1, 0.2, 0.01, 0.02, small_sample=False)) is None


def test_fold_keeps_every_piece_and_every_interval_whole() -> None:
    by_semicolon = "; ".join(
        f"part {k} [+0.{k:04d}, +1.{k:04d}], a few more words" for k in range(40)
    )
    by_comma = ", ".join(f"item {k} [+0.{k:04d}, +1.{k:04d}] (a, b)" for k in range(40))
    for line in (by_semicolon, by_comma, f"{by_comma}; {by_semicolon}"):
        lines = fold(line)
        assert len(lines) > 1 and all(len(x) <= WIDTH for x in lines)
        assert " ".join(x.strip() for x in lines) == line
        for x in lines:  # no interval or parenthesis is cut
            assert x.count("[") == x.count("]") and x.count("(") == x.count(")"), x


def test_path_bias_lines_name_the_estimator_of_their_figure(requalified: Any) -> None:
    """Issue 16, item 8: each path-bias line says which estimator produced its SIMULATED side,
    from the delta's own ``estimator`` field in results.json."""
    text, doc, out, _ = requalified
    pb = next(d for d in doc["cells"][0]["deltas"] if d["role"] == "path-bias")
    assert pb["estimator"] == "importance"
    line = next(x for x in text.splitlines() if x.startswith("Path bias of the logging arm"))
    assert f"(SIMULATED by {pb['estimator']} − MEASURED R): {pb['point']:+.4f}" in line
    report = (out / "REPORT.md").read_text()
    costs = [x for x in report.splitlines() if x.startswith("- Path assumption's cost for ")]
    by_arm = [d for d in doc["cells"][0]["deltas"] if d["role"] == "path-bias-importance"]
    assert len(costs) == len(by_arm) == 3
    for d in by_arm:
        arm = d["b"].split(" (")[0]
        assert any(x.startswith(f"- Path assumption's cost for {arm} (R {d['estimator']}): ")
                   for x in costs)  # fmt: skip
    assert f"(SIMULATED by {pb['estimator']} − MEASURED R)" in report

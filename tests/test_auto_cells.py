"""``--estimator auto`` per cell and per comparison: the exact ratio bound, the depth count,
the support check, the tail rule per cell, the far arm and the estimator on every delta.

Every archive here is written row by row from dyadic laws, so each figure the tests check is
computed independently in the test from the rows themselves (policy ratios, their exact bounds,
ESS shares): no figure is read back from the code under test and compared with itself.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from archive_factory import write_parquet
from typer.testing import CliRunner

from specreplay.cli import app
from specreplay.pipelines.importance import importance_diagnostics
from specreplay.replay.choice import BOUND_MAX, auto_passes, choose, resolve_auto
from specreplay.replay.engine import replay_archive
from specreplay.sim.arms import parse_arm

LOGGING = "top4@3"  # top4:t1@3 (temperature 1 is the canonical default)
# Draft law over 4 candidates (Σ = 15/16: 1/16 off-candidate); the arm top4:t1 drafts from it
# renormalised to the candidates: 8/15, 4/15, 2/15, 1/15.
DRAFT = np.array([0.5, 0.25, 0.125, 0.0625])
TARGET = np.array([0.25, 0.25, 0.25, 0.125])
Q_ARM = DRAFT / DRAFT.sum()
Law = tuple[Sequence[float], Sequence[float], Sequence[float]]
"""(draft law over the candidates, target law, logging law emitted_q), before the row's shuffle."""


def rows_of(
    laws: dict[str, Sequence[Law]],
    *,
    requests: int,
    rounds: int,
    depth: Callable[[int, int], int] = lambda r, rnd: 3,
    seed: int = 5,
) -> list[dict[str, Any]]:
    """Rows of ``requests`` requests per family: each position's law cycles through the family's.

    The drafted candidate is drawn from the logging law (what a logging arm drafting from
    ``emitted_q`` archives); ``depth(request, round)`` positions per round.
    """
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for family, cycle in laws.items():
        for r in range(requests):
            ctx = 100
            for rnd in range(rounds):
                n_acc = int(rng.integers(0, 4))
                ctx += 5
                for pos in range(1, depth(r, rnd) + 1):
                    q, p, e = (np.asarray(x, float) for x in cycle[(rnd + pos) % len(cycle)])
                    perm = rng.permutation(4)
                    cand = rng.choice(1000, size=4, replace=False)
                    j = int(rng.choice(4, p=e[perm]))
                    rows.append({
                        "request_id": f"{family}-{r}", "family": family,
                        "context_tokens": ctx, "round": rnd, "position": pos,
                        "cand_ids": [int(x) for x in cand],
                        "draft_logprobs": [math.log(x) if x > 0 else -math.inf for x in q[perm]],
                        "target_probs": [float(x) for x in p[perm]],
                        "drafted_id": int(cand[j]), "accepted": pos <= n_acc,
                        "logging_arm": LOGGING, "emitted_q": [float(x) for x in e[perm]],
                    })  # fmt: skip
    return rows


Round = tuple[str, list[float], list[float], list[float]]
"""(family, policy ratios r_1.., exact bounds b_1.., second-moment bounds m_1..) of a round."""


def by_round(rows: list[dict[str, Any]], arm_q: Callable[[np.ndarray], np.ndarray]) -> list[Round]:
    """Per round, its family, r_k, b_k and m_k, computed from the rows.

    ``arm_q`` maps a row's draft law over the candidates to the arm's drafting law q^s. Over
    the candidates with q^L(x) > 0, the bound's factor is max_x q^s(x)/q^L(x) and the second
    moment's Σ_x q^s(x)²/q^L(x).
    """
    out: dict[tuple[str, int], Round] = {}
    for row in rows:
        key = (row["request_id"], row["round"])
        _, ratios, bounds, moments = out.setdefault(key, (row["family"], [], [], []))
        qs = arm_q(np.exp(np.array(row["draft_logprobs"])))
        ql = np.array(row["emitted_q"])
        x = row["cand_ids"].index(row["drafted_id"])
        r = qs[x] / ql[x] if ql[x] > 0 else 0.0
        b = float(np.max(qs[ql > 0] / ql[ql > 0]))
        m = float(np.sum(qs[ql > 0] ** 2 / ql[ql > 0]))
        ratios.append((ratios[-1] if ratios else 1.0) * r)
        bounds.append((bounds[-1] if bounds else 1.0) * b)
        moments.append((moments[-1] if moments else 1.0) * m)
    return list(out.values())


def t1(q: np.ndarray) -> np.ndarray:
    """top4:t1's drafting law: the draft law renormalised to the candidates."""
    return q / q.sum()


def requalify(archive: Path, out: Path, *args: str) -> dict[str, Any]:
    cli = CliRunner().invoke(
        app, ["requalify", str(archive), "--out", str(out), "-q", "--n-boot", "300",
              "--min-requests", "3", *args], env={"COLUMNS": "300"},
    )  # fmt: skip
    assert cli.exit_code in (0, 1), cli.output
    doc: dict[str, Any] = json.loads((out / "results.json").read_text())
    doc["stdout"] = cli.stdout  # what the terminal showed, beside results.json
    doc["tables"] = (out / "TABLES.md").read_text(encoding="utf-8")
    return doc


def pooled_diag(doc: dict[str, Any], arm: str, family: str | None = None) -> dict[int, Any]:
    cell = next(c for c in doc["cells"] if c["family"] == family and c["bucket"] is None)
    return {d["depth"]: d for d in cell["importance"] if d["arm"] == arm}


# Logging laws (dyadic, Σ = 1) that move the arm's ratio: (8/15)/(1/2) = 16/15 is the largest
# factor of the first; the second gives 8/15 ÷ 1/4 = 32/15 on the top candidate.
E_NEAR = [0.5, 0.25, 0.125, 0.125]
E_FLAT = [0.25, 0.25, 0.25, 0.25]
E_TOP = [0.75, 0.125, 0.0625, 0.0625]


def test_exact_bounds_over_mean_ratio_match_the_rows_by_hand(tmp_path: Path) -> None:
    """The pooled bound/mean at each depth equals max over rounds of Π_j max_x q^s/q^L divided
    by the mean r_k, and second moment/mean² max over rounds of Π_j Σ_x q^s²/q^L divided by the
    squared mean, all computed here from the rows (exact dyadic laws: 1e-12 relative).

    A bound computed as max/sum instead of max/mean (14.5 shown as 0.00113) is off by the
    round count here, 60 (or its square).
    """
    laws = {"code": [(DRAFT, TARGET, E_NEAR), (DRAFT, TARGET, E_FLAT), (DRAFT, TARGET, E_TOP)]}
    rows = rows_of(laws, requests=6, rounds=10)
    path = write_parquet(tmp_path / "a.parquet", rows)
    arm = "top4:t0.5@3"
    doc = requalify(path, tmp_path / "o", "--baseline", LOGGING, "--candidate", arm)
    assert doc["options"]["estimator_used"] == "importance"
    diag = pooled_diag(doc, LOGGING)
    rounds = by_round(rows, t1)
    assert len(rounds) == 60
    for k in (1, 2, 3):
        r = np.array([x[1][k - 1] for x in rounds])
        b = np.array([x[2][k - 1] for x in rounds])
        m = np.array([x[3][k - 1] for x in rounds])
        assert diag[k]["bound_ratio"] == pytest.approx(b.max() / r.mean(), rel=1e-12)
        assert diag[k]["moment_ratio"] == pytest.approx(m.max() / r.mean() ** 2, rel=1e-12)
        assert diag[k]["rounds"] == 60
        assert diag[k]["ess_share"] == pytest.approx(r.sum() ** 2 / (60 * (r**2).sum()), rel=1e-12)
    # the hand values themselves: at depth 1 the largest factor over the three logging laws is
    # (8/15)/(1/4) = 32/15 (E_FLAT's top candidate), and it is reached in this archive
    assert max(x[2][0] for x in rounds) == pytest.approx(32 / 15, rel=1e-15)
    # and the largest second moment at depth 1 is E_FLAT's: 4·(64 + 16 + 4 + 1)/225 = 340/225
    assert max(x[3][0] for x in rounds) == pytest.approx(340 / 225, rel=1e-15)


def test_depth_count_on_an_archive_of_varying_depth(tmp_path: Path) -> None:
    """At depth k, ``auto``'s diagnostics count only the rounds that recorded k positions.

    Rounds 0, 3, 6 and 9 of each request record 2 positions, the others 3: at depth 3 the
    pooled cell has 36 of its 60 rounds, and its ESS share, bound/mean and second moment/mean²
    are those of these 36 (computed here). Counting every round would give 60 rounds, shares
    and means diluted by 60/36.
    """
    laws = {"code": [(DRAFT, TARGET, E_NEAR), (DRAFT, TARGET, E_FLAT), (DRAFT, TARGET, E_TOP)]}
    rows = rows_of(laws, requests=6, rounds=10, depth=lambda r, rnd: 2 if rnd % 3 == 0 else 3)
    path = write_parquet(tmp_path / "a.parquet", rows)
    arms = [parse_arm(LOGGING), parse_arm("top4:t0.5@3")]
    res, choice = resolve_auto(replay_archive(path, arms, **_auto()), arms)
    assert choice.used == "importance"
    s = res.sums[LOGGING]
    every = np.ones(s.n.shape[0], bool)
    diag = importance_diagnostics(res, arms[0], every, (0,), tuple(range(len(res.buckets.names))))
    rounds = by_round(rows, t1)
    for k, want_rounds in ((1, 60), (2, 60), (3, 36)):
        r = np.array([x[1][k - 1] for x in rounds if len(x[1]) >= k])
        b = np.array([x[2][k - 1] for x in rounds if len(x[2]) >= k])
        m = np.array([x[3][k - 1] for x in rounds if len(x[3]) >= k])
        d = diag[k - 1]
        assert (d.depth, d.rounds, r.shape[0]) == (k, want_rounds, want_rounds)
        assert d.ess_share == pytest.approx(r.sum() ** 2 / (r.shape[0] * (r**2).sum()), rel=1e-12)
        assert d.bound_ratio == pytest.approx(b.max() / r.mean(), rel=1e-12)
        assert d.moment_ratio == pytest.approx(m.max() / r.mean() ** 2, rel=1e-12)


def _auto() -> dict[str, Any]:
    est, comp = auto_passes("auto")
    return {"estimator": est, "companion": comp}


@pytest.mark.parametrize(("target_zero", "flagged"), [(True, False), (False, True)])
def test_support_check_ignores_candidates_the_arm_can_never_accept(
    tmp_path: Path, target_zero: bool, flagged: bool
) -> None:
    """A candidate the logging law never drafts (q^L = 0) but the arm drafts (q^s > 0) is a
    support problem only if the arm can accept it (target probability > 0): with p = 0 there,
    no row is flagged and the arm's figures stand; with p > 0, every row is (its count).

    The exact bound leaves that candidate out (the logging arm never drafts it): 16/15 per
    position over the other three, computed here.
    """
    e = [0.5, 0.25, 0.25, 0.0]  # the fourth candidate is never drafted by the logging law
    p = [0.25, 0.25, 0.375, 0.0 if target_zero else 0.125]
    rows = rows_of({"code": [(DRAFT, p, e)]}, requests=4, rounds=5)
    path = write_parquet(tmp_path / "a.parquet", rows)
    arms = [parse_arm("top4@3"), parse_arm("top4:t0.5@3")]
    res = replay_archive(path, arms, **_auto())
    c = choose(res, arms)
    assert c.used == "importance"
    for arm in arms:
        rows_off = int(res.replays["importance"].unlogged[arm.canonical].sum())
        assert rows_off == (len(rows) if flagged else 0)
    imp = res.with_estimator("importance")
    s = imp.sums[LOGGING]
    assert float(s.bound_max[:, 0].max()) == pytest.approx((8 / 15) / (1 / 2), rel=1e-12)
    assert float(s.bound_max[:, 2].max()) == pytest.approx(((8 / 15) / (1 / 2)) ** 3, rel=1e-12)
    # Σ q^s²/q^L over the three drafted candidates: (64·2 + 16·4 + 4·4)/225 = 208/225
    assert float(s.moment_max[:, 1].max()) == pytest.approx((208 / 225) ** 2, rel=1e-12)
    if flagged:
        assert f"{LOGGING} ({len(rows)} position rows)" in c.reason
    else:
        assert "every arm's support holds" in c.reason


# One family where the policy ratio of top4:t1 is tame (logging law = its own law: ratio 1),
# one where the logging law rarely drafts what the arm drafts: E r_1² = 16 + 4 + 1/2 + 1/60, so
# the ESS share of r_1 is about 1/20.5 ≈ 0.05.
E_FAR = [1 / 64, 1 / 64, 1 / 32, 15 / 16]
TWO_FAMILIES: dict[str, Sequence[Law]] = {
    "chat": [([0.5, 0.25, 0.125, 0.125], TARGET, [0.5, 0.25, 0.125, 0.125])],
    "math": [([0.5, 0.25, 0.125, 0.125], TARGET, E_FAR)],
}


def _reasons(doc: dict[str, Any]) -> dict[str | None, dict[str, Any]]:
    out = {}
    for c in doc["cells"]:
        if c["bucket"] is None:
            out[c["family"]] = next(d for d in c["deltas"] if d["role"] == "candidate-vs-baseline")
    return out


def test_a_family_failing_the_ess_rule_is_inconclusive_the_others_keep_their_verdicts(
    tmp_path: Path,
) -> None:
    """The math family's ESS share of top4:t1's ratio at depth 1 (computed here from its rows)
    is below 0.1: its Δ stays, its verdict is INCONCLUSIVE with the arm, depth, share, k̂ and
    bound/mean in the reason, and its requalification follows. The chat family (ratio 1) keeps
    the verdict the explicit importance run gives; every delta carries its estimator.
    """
    rows = rows_of(TWO_FAMILIES, requests=50, rounds=10, seed=11)
    path = write_parquet(tmp_path / "a.parquet", rows)
    arms = ["--baseline", LOGGING, "--candidate", "top4:t0.9@3", "--reference", "greedy@3"]
    auto = requalify(path, tmp_path / "auto", *arms)
    named = requalify(path, tmp_path / "named", *arms, "--estimator", "importance")
    assert auto["options"]["estimator_used"] == "importance"
    math_rounds = [x for x in by_round(rows, t1) if x[0] == "math"]
    r1 = np.array([x[1][0] for x in math_rounds])
    share = r1.sum() ** 2 / (r1.shape[0] * (r1**2).sum())
    assert share < 0.1
    a, n = _reasons(auto), _reasons(named)
    why = a["math"]["verdict_reason"]
    assert a["math"]["verdict"] == "INCONCLUSIVE"
    assert f"{LOGGING} at depth 1: ESS share {share:.3g}, k̂ " in why
    assert "(ESS share < 0.1)" in why
    for key in ("point", "lo", "hi", "rel"):
        assert a["math"][key] == n["math"][key]
    assert a["chat"]["verdict"] == n["chat"]["verdict"] is not None
    assert "fails" not in (a["chat"]["verdict_reason"] or "")
    changed = sum(
        x["verdict"] != y["verdict"]
        for c, m in zip(auto["cells"], named["cells"], strict=True)
        for x, y in zip(c["deltas"], m["deltas"], strict=True)
    )
    ruled = sum(x["verdict"] is not None for c in auto["cells"] for x in c["deltas"])
    assert changed >= 1
    summary = f"per cell: {changed} of {ruled} comparisons with a verdict INCONCLUSIVE by"
    assert summary in auto["options"]["estimator_reason"]
    assert f"- math: {why}" in auto["tables"].split("Why INCONCLUSIVE:")[1]
    # the console names the rule and leaves its figures to TABLES.md (issue 16, item 5)
    brief = "--estimator auto: the importance tail fails in this cell (figures in TABLES.md)"
    assert brief in auto["stdout"] and why not in auto["stdout"]
    math_cell = next(c for c in auto["cells"] if c["family"] == "math" and c["bucket"] is None)
    assert math_cell["requalification"]["verdict"] in ("INCONCLUSIVE", "NOT QUALIFIED")
    for c in auto["cells"]:
        for d in c["deltas"]:
            want = "analytic − importance" if d["role"] == "path-bias-importance" else "importance"
            assert d["estimator"] == want, (c["family"], d["role"])


def test_a_far_arm_leaves_the_baseline_candidate_comparison_on_importance(tmp_path: Path) -> None:
    """The reference top4:t1 can accept a candidate the logging law never drafts (q^L = 0,
    p > 0): its figures and its deltas are null with the count, while the baseline and the
    candidate (which never draft that candidate: top-2) keep importance figures equal to an
    explicit importance run's, and the run's estimator stays importance.
    """
    e = [0.5, 0.5, 0.0, 0.0]
    rows = rows_of({"code": [(DRAFT, TARGET, e)]}, requests=6, rounds=6)
    path = write_parquet(tmp_path / "a.parquet", rows)
    arms = ["--baseline", "top2@3", "--candidate", "top2:t0.8@3", "--reference", "top4@3"]
    auto = requalify(path, tmp_path / "auto", *arms)
    named = requalify(path, tmp_path / "named", *arms, "--estimator", "importance")
    assert auto["options"]["estimator_used"] == "importance"
    assert f"top4@3 ({len(rows)} position rows)" in auto["options"]["estimator_reason"]
    pooled = auto["cells"][0]
    main = next(d for d in pooled["deltas"] if d["role"] == "candidate-vs-baseline")
    ref = next(d for d in pooled["deltas"] if d["role"] == "candidate-vs-reference")
    named_main = next(d for d in named["cells"][0]["deltas"] if d["role"] == main["role"])
    assert main["estimator"] == "importance" and main["point"] is not None
    assert (main["point"], main["lo"], main["hi"]) == (
        named_main["point"], named_main["lo"], named_main["hi"],
    )  # fmt: skip
    assert ref["point"] is None and f"{len(rows)} position rows" in ref["null_reason"]
    assert pooled["arms"]["top4@3"]["R"] is None


def test_the_moment_bound_decides_where_k_hat_is_high(small_archive: Path, tmp_path: Path) -> None:
    """Both sides of the 10× rule on the toy archive, with k̂ above its threshold in both.

    dyadic12 (its rounded-up candidates are rarely drafted: second moment/mean² ≈ 1): in every
    cell with a verdict whose k̂ exceeds its threshold the verdict is the explicit importance
    run's and the reason says k̂ was accepted by the bound. top32 at temperature 1 (far from the
    logging arm's 0.7: second moment/mean² above 10 at depth 4–5): cells where k̂ exceeds its
    threshold there (ESS share ≥ 0.1) are INCONCLUSIVE. Each reason's figures are the cell's.
    """
    base = ["--baseline", "top32:t0.7@5", "--reference", "greedy@5"]
    seen = {"accepted": 0, "blocked": 0}
    for cand in ("top32:t0.7:dyadic12@5", "top32@5"):
        auto = requalify(small_archive, tmp_path / cand, *base, "--candidate", cand)
        named = requalify(small_archive, tmp_path / f"n{cand}", *base, "--candidate", cand,
                          "--estimator", "importance")  # fmt: skip
        for c, n in zip(auto["cells"], named["cells"], strict=True):
            d = next(x for x in c["deltas"] if x["role"] == "candidate-vs-baseline")
            nd = next(x for x in n["deltas"] if x["role"] == "candidate-vs-baseline")
            diags = [x for x in c["importance"] if x["arm"] == cand]
            if nd["verdict"] is None or any(x["ess_share"] < 0.1 for x in diags):
                continue
            high = [x for x in diags if x["pareto_k"] is not None
                    and x["pareto_k"] > x["khat_threshold"]]  # fmt: skip
            over = [x for x in high if x["moment_ratio"] > BOUND_MAX]
            if over:
                x = over[0]
                assert d["verdict"] == "INCONCLUSIVE", (c["family"], c["bucket"])
                assert f"at depth {x['depth']}: ESS share" in d["verdict_reason"]
                assert f"k̂ {x['pareto_k']:.2f}" in d["verdict_reason"]
                assert f"second moment/mean² {x['moment_ratio']:.3g}" in d["verdict_reason"]
                assert "(k̂ > " in d["verdict_reason"]
                seen["blocked"] += 1
            elif high:
                assert d["verdict"] == nd["verdict"], (c["family"], c["bucket"])
                why = d["verdict_reason"]
                assert "accepted only because the exact second moment/mean² ≤ 10" in why
                assert f"second moment/mean² {high[0]['moment_ratio']:.3g}" in why
                seen["accepted"] += 1
    assert seen["accepted"] >= 3 and seen["blocked"] >= 3, seen


def test_the_bits_walk_stops_where_auto_makes_the_pooled_verdict_inconclusive(
    tmp_path: Path,
) -> None:
    """The math family alone: the baseline's ESS share at depth 1 is below 0.1 (computed here),
    so every pooled bits comparison is INCONCLUSIVE under auto and the fixed-sequence walk stops
    at its first arm; the explicit importance run (dyadic laws quantized exactly: identical
    figures) walks on. The walk's verdicts are the pooled cell's.
    """
    rows = rows_of({"math": TWO_FAMILIES["math"]}, requests=50, rounds=10, seed=11)
    r1 = np.array([x[1][0] for x in by_round(rows, t1)])
    assert r1.sum() ** 2 / (r1.shape[0] * (r1**2).sum()) < 0.1
    path = write_parquet(tmp_path / "a.parquet", rows)
    docs = {}
    for est in ("auto", "importance"):
        out = tmp_path / est
        cli = CliRunner().invoke(
            app, ["sweep", str(path), "--out", str(out), "-q", "--n-boot", "300",
                  "--arm", "top4:dyadic{8,12}@3", "--baseline", LOGGING, "--depths", "3",
                  "--min-requests", "3", "--estimator", est], env={"COLUMNS": "300"},
        )  # fmt: skip
        assert cli.exit_code == 0, cli.output
        docs[est] = json.loads((out / "results.json").read_text())
    seq = docs["auto"]["fewest_bits"]["sequence"]
    assert [s["verdict"] for s in seq] == ["INCONCLUSIVE"]
    assert docs["auto"]["fewest_bits"]["stopped_at"] == seq[0]["arm"] == "top4:dyadic12@3"
    pooled = next(d for d in docs["auto"]["cells"][0]["deltas"] if d["b"] == seq[0]["arm"])
    assert pooled["verdict"] == "INCONCLUSIVE" and "(ESS share < 0.1)" in pooled["verdict_reason"]
    assert pooled["estimator"] == "importance"
    named = docs["importance"]["fewest_bits"]["sequence"]
    assert [s["verdict"] for s in named] == ["EQUIVALENT", "EQUIVALENT"]


def test_a_far_arm_in_a_sweep_has_null_figures_the_others_keep_theirs(tmp_path: Path) -> None:
    """Sweeps null an arm outside the logging law's support too (every row here: the count),
    at every depth and in every cell, while the supported arm keeps importance figures."""
    rows = rows_of({"code": [(DRAFT, TARGET, [0.5, 0.5, 0.0, 0.0])]}, requests=6, rounds=6)
    path = write_parquet(tmp_path / "a.parquet", rows)
    cli = CliRunner().invoke(
        app, ["sweep", str(path), "--out", str(tmp_path / "o"), "-q", "--n-boot", "300",
              "--arm", "top2@3", "--arm", "top4@3", "--depths", "1..3", "--min-requests", "3"],
        env={"COLUMNS": "300"},
    )  # fmt: skip
    assert cli.exit_code == 0, cli.output
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    assert doc["options"]["estimator_used"] == "importance"
    for c in doc["cells"]:
        for f in c["depths"]:
            if f["arm"].startswith("top4"):
                assert f["R"] is None and f"{len(rows)} position rows" in f["null_reason"]
            elif c["level"] == "pooled":
                assert f["R"] is not None, f

"""``specreplay demo``: the built-in archive's story, verdicts first.

One replay pass over the generated archive serves every chapter: the MEASURED figures, the
requalification of dyadic24 (with greedy as reference and the path-bias diagnostic), the bits
sweep (dyadic 8, 12, 16) and the law tests (positions sampled by hash in the same pass) are built
from it; the archive is read once after it is written (and once more to hash it for ``inputs``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from specreplay.replay.archive.sources import archive_rows
from specreplay.replay.choice import AUTO, auto_passes, resolve_auto
from specreplay.replay.engine import ReplayResult, replay_archive
from specreplay.replay.scan import ArchiveScan, Progress, no_progress
from specreplay.results.budget import budget_result, cells_from_requalify
from specreplay.results.builders import measured_result, write_synth_archive
from specreplay.results.lawtests import lawtest_result
from specreplay.results.model import LawTest, Result, Role
from specreplay.results.output import output_dir
from specreplay.results.render import write_all
from specreplay.results.requalification import (
    RequalifyArms,
    RequalifyOptions,
    check_replayable,
    requalify_result,
)
from specreplay.results.sweep import SweepOptions, sweep_result
from specreplay.results.tables import (
    archive_summary,
    budget_tables,
    estimator_line,
    lawtest_table,
    measured_tables,
    sweep_tables,
)
from specreplay.results.tables import requalify_tables as requalify_text
from specreplay.sim.arms import Arm, parse_arm
from specreplay.stats.buckets import DEFAULT_BUCKETS, Buckets

__all__ = ["run_demo"]


DEMO_BASELINE = "top32:t0.7@5"
DEMO_CANDIDATE = "top32:t0.7:dyadic24@5"
DEMO_REFERENCE = "greedy@5"
DEMO_BITS = (8, 12, 16)
DEMO_MISMATCHED = "top32:t0.7:dyadic8/float64@5"
DEMO_COST = "linear:1:0.05"  # ms per round: 1 + 0.05·d
DEMO_PRICE_MS = 1.25  # that cost model's ms per round at the production depth 5


def _arms(candidate: str, reference: str | None) -> RequalifyArms:
    base, cand = parse_arm(DEMO_BASELINE), parse_arm(candidate)
    ref = parse_arm(reference) if reference else None
    every: dict[str, Arm] = {}
    for a in (base, cand, ref, base):  # the baseline is the archive's logging arm
        if a is not None:
            every.setdefault(a.canonical, a)
    return RequalifyArms(base, cand, ref, base, every)


def _relocated(result: Result, tmp: Path, out: Path) -> Result:
    """Return ``result`` with paths under the temporary folder named by their final place."""
    inputs = tuple(
        dataclasses.replace(f, path=f.path.replace(str(tmp), str(out), 1)) for f in result.inputs
    )
    options = {
        k: v.replace(str(tmp), str(out), 1) if isinstance(v, str) else v
        for k, v in result.options.items()
    }
    return dataclasses.replace(result, inputs=inputs, options=options)


def _replay(archive: Path, seed: int, estimator: str, progress: Progress) -> ReplayResult:
    """One pass for every arm of the story; it also samples the law-test positions.

    With ``auto`` one estimator is chosen for every arm of the story (every chapter's deltas
    use it), from the diagnostics of all of them (:mod:`specreplay.replay.choice`).
    """
    arms: dict[str, Arm] = {}
    for text in (DEMO_BASELINE, DEMO_CANDIDATE, DEMO_REFERENCE, DEMO_MISMATCHED,
                 *[f"top32:t0.7:dyadic{b}@5" for b in DEMO_BITS]):  # fmt: skip
        arm = parse_arm(text)
        arms.setdefault(arm.canonical, arm)
    est, companion = auto_passes(estimator)
    with progress("replaying", archive_rows(archive)) as advance:
        res = replay_archive(archive, list(arms.values()), seed=seed, estimator=est,
                             buckets=Buckets.parse(DEFAULT_BUCKETS), law_positions=8,
                             progress=advance, companion=companion)  # fmt: skip
    return resolve_auto(res, list(arms.values()))[0] if estimator == AUTO else res


def _requalification(
    res: ReplayResult,
    archive: Path,
    candidate: str,
    reference: str | None,
    n_boot: int,
    estimator: str,
) -> Result:
    arms = _arms(candidate, reference)
    check_replayable(res, arms)
    opts = RequalifyOptions(DEMO_BASELINE, candidate, reference, estimator=estimator,
                            n_boot=n_boot, seed=res.seed)  # fmt: skip
    return requalify_result(res, arms, opts, archive)


def run_demo(
    out: Path,
    *,
    n_requests: int,
    seed: int,
    force: bool,
    n_boot: int = 10_000,
    estimator: str = AUTO,
    progress: Progress = no_progress,
) -> str:
    """Generate the built-in archive into ``out/archive`` and tell its story, verdicts first.

    1. the archive (MEASURED acceptance by family × bucket, per-position survival);
    2. requalification of dyadic24 against float64 sampling, greedy as reference, with the law
       test and the path-bias diagnostic (``out/requalify``);
    3. a bits sweep (dyadic 8, 12, 16, 24: ``out/bits-dyadicN``) and the mismatched verifier
       ``dyadic8/float64`` failing the law test (``out/lawtest``).
    """
    with output_dir(out, force=force) as tmp:
        archive = tmp / "archive"
        write_synth_archive(archive, n_requests, 64, 250, seed, progress)
        res = _replay(archive, seed, estimator, progress)
        scan = ArchiveScan.of_replay(archive, res)
        options = {"requests": n_requests, "archive": str(out / "archive")}
        measured = measured_result(scan, command="demo", seed=seed, options=options,
                                   rename=(tmp, out))  # fmt: skip
        write_all(measured, tmp)
        results: dict[str, Result] = {
            "requalify": _requalification(
                res, archive, DEMO_CANDIDATE, DEMO_REFERENCE, n_boot, estimator
            )
        }
        for bits in DEMO_BITS:
            cand = f"top32:t0.7:dyadic{bits}@5"
            results[f"bits-dyadic{bits}"] = _requalification(
                res, archive, cand, None, n_boot, estimator
            )
        results["sweep"] = sweep_result(
            res, [parse_arm(DEMO_BASELINE)],
            SweepOptions(arms=(DEMO_BASELINE,), depths=tuple(range(1, 6)), cost=DEMO_COST,
                         seed=res.seed, estimator=estimator),
            archive,
        )  # fmt: skip
        results["budget"] = budget_result(
            cells_from_requalify(results["requalify"], "requalify", DEMO_PRICE_MS, ()), None,
            inputs=results["requalify"].inputs,
            options={"from": f"{out}/requalify/results.json", "price_ms": DEMO_PRICE_MS,
                     "known_ms": []},
        )  # fmt: skip
        results["lawtest"] = lawtest_result(
            [DEMO_MISMATCHED, DEMO_CANDIDATE], archive=archive, seed=seed, replayed=res
        )
        for name, result in results.items():
            results[name] = _relocated(result, tmp, out)
            (tmp / name).mkdir()
            write_all(results[name], tmp / name)
    return _demo_text(out, n_requests, seed, measured, results)


def _demo_text(
    out: Path, n_requests: int, seed: int, measured: Result, results: dict[str, Result]
) -> str:
    sweep = {24: results["requalify"]} | {b: results[f"bits-dyadic{b}"] for b in DEMO_BITS}
    law = results["lawtest"]
    assert measured.archive is not None  # measured_result always describes the archive
    summary = archive_summary(
        measured.archive, f"{out}/archive", measured.pooled.arms[DEMO_BASELINE]
    )
    return "\n".join(
        [
            f"specreplay demo: built-in synthetic archive, {n_requests:,} requests, seed {seed} "
            f"(written to {out}/archive)",
            "",
            _demo_verdicts(results["requalify"], sweep, law.law_tests)
            + _depth_line(results["sweep"])
            + _budget_line(results["budget"]),
            "",
            "# 1. The archive (MEASURED)",
            "",
            summary,
            "",
            measured_tables(measured),
            f"# 2. Requalification of {DEMO_CANDIDATE} against {DEMO_BASELINE} ({out}/requalify)",
            "",
            requalify_text(results["requalify"])
            + f"\nOutputs: {out}/requalify/ (results.json, TABLES.md, cells.parquet, forest.png)",
            f"# 3. Mismatched verifier {DEMO_MISMATCHED} ({out}/lawtest)",
            "",
            lawtest_table(law) + f"\nOutputs: {out}/lawtest/ (results.json, TABLES.md)",
            f"# 4. Depth sweep of {DEMO_BASELINE}, cost {DEMO_COST} ms per round ({out}/sweep)",
            "",
            sweep_tables(results["sweep"])
            + f"\nOutputs: {out}/sweep/ (results.json, TABLES.md, cells.parquet, depths.png)",
            f"# 5. Budget of the gain over {DEMO_REFERENCE} at {DEMO_PRICE_MS:g} ms per round "
            f"({out}/budget)",
            "",
            budget_tables(results["budget"])
            + f"\nOutputs: {out}/budget/ (results.json, TABLES.md)",
            f"Outputs: {out}/",
        ]
    )


def _budget_line(budget: Result) -> str:
    """Return the budget chapter's verdict line: the break-even added cost of the gain."""
    b = budget.pooled.budget
    if b is None or b.break_even_ms is None:
        return ""
    return (
        f"\n- budget of {DEMO_CANDIDATE}'s gain over {DEMO_REFERENCE} (lower bound) at "
        f"{DEMO_PRICE_MS:g} ms per round: it pays for up to {b.break_even_ms:.4f} ms more per "
        "round (ESTIMATED)"
    )


def _depth_line(sweep: Result) -> str:
    """Return the depth chapter's verdict line: the logging arm's best depth under the cost."""
    best = (sweep.pooled.best_depth or {}).get(DEMO_BASELINE)
    fig = next((f for f in sweep.pooled.depths if f.depth == best), None)
    if best is None or fig is None or fig.tokens_per_s is None:
        return ""
    return (
        f"\n- depth sweep of {DEMO_BASELINE} at {DEMO_COST} ms per round: best depth {best} of "
        f"1..5, {fig.tokens_per_s:.0f} tokens/s (ESTIMATED), P(best) {fig.p_best:.2f}"
    )


def _demo_verdicts(main: Result, sweep: dict[int, Result], law: tuple[LawTest, ...]) -> str:
    lines = ["VERDICTS (pooled; SIMULATED replays of the MEASURED archive)"]
    if main.options.get("estimator_used"):
        lines.append(f"- {estimator_line(main)}")
    d = main.pooled.delta(Role.CANDIDATE_VS_BASELINE)
    rq = main.requalification
    if d is not None and d.point is not None and rq is not None:
        lines.append(
            f"- requalification {DEMO_CANDIDATE} vs {DEMO_BASELINE}: {rq.verdict} "
            f"(Δ {d.point:+.2e} tokens/round, {100 * (d.rel or 0.0):+.4f}%; {rq.because})"
        )
    parts = []
    for bits in sorted(sweep):
        db = sweep[bits].pooled.delta(Role.CANDIDATE_VS_BASELINE)
        rqb = sweep[bits].requalification
        if db is not None and db.point is not None and rqb is not None:
            lo, hi, rel = (100 * (x or 0.0) for x in (db.rel_lo, db.rel_hi, db.rel))
            parts.append(f"dyadic{bits} {rqb.verdict} ({rel:+.3f}% [{lo:+.3f}%, {hi:+.3f}%])")
    lines.append("- bits sweep at margin 0.5%: " + "; ".join(parts))
    mism = [t for t in law if t.arm == DEMO_MISMATCHED and t.passed is not None]
    if mism:
        failed = sum(1 for t in mism if not t.passed)
        tv = max(t.tv or 0.0 for t in mism)
        lines.append(
            f"- mismatched verifier {DEMO_MISMATCHED}: law test FAILED at {failed} of "
            f"{len(mism)} archive positions (exact TV up to {tv:.3g})"
        )
    g = main.pooled.delta(Role.CANDIDATE_VS_REFERENCE)
    if g is not None and g.point is not None:
        lines.append(
            f"- gain of {DEMO_CANDIDATE} over {DEMO_REFERENCE}: {g.point:+.4f} tokens/round "
            f"[{g.lo or 0.0:+.4f}, {g.hi or 0.0:+.4f}] ({100 * (g.rel or 0.0):+.2f}%)"
        )
    pb = main.pooled.delta(Role.PATH_BIAS)
    if pb is not None and pb.point is not None:
        lines.append(
            f"- path bias of the logging arm (SIMULATED − MEASURED R): {pb.point:+.4f} "
            f"[{pb.lo or 0.0:+.4f}, {pb.hi or 0.0:+.4f}] tokens/round"
        )
    cost = [d for d in main.pooled.deltas
            if d.role is Role.PATH_BIAS_IMPORTANCE and DEMO_BASELINE in (d.a, d.b)]  # fmt: skip
    if cost and cost[0].point is not None:
        d = cost[0]  # Δ = b − a = analytic − importance, whichever estimator the run used
        lines.append(
            f"- the path assumption's cost for the logging arm (analytic − importance R): "
            f"{d.point:+.4f} [{d.lo or 0.0:+.4f}, {d.hi or 0.0:+.4f}] tokens/round"
        )
    return "\n".join(lines)

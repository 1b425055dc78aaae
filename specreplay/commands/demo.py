"""``specreplay demo``: the built-in archive's story, verdicts first.

One replay pass over the generated archive serves every chapter: the MEASURED figures, the
requalification of dyadic24 (with greedy as reference and the path-bias diagnostic), the bits
sweep (dyadic 8, 12, 16) and the law tests (positions sampled by hash in the same pass) are built
from it; the archive is read once after it is written (and once more to hash it for ``inputs``).

Every chapter is written as a sub-run folder with its own results.json (``requalify``,
``bits-dyadicN``, ``lawtest``, ``sweep``, ``budget``), and the archive's MEASURED result goes to
the top level last. What the demo says (the VERDICTS block, the chapters) is a function of those
results alone (:mod:`specreplay.render.demo_story`): the terminal text here and the top-level
REPORT.md, which :func:`~specreplay.render.files.render` writes with the MEASURED result by
reading the sub-runs back, share that one source, so ``specreplay report DEMO_DIR`` re-renders the
story from the files on disk (the bits sweep included: its runs are sub-runs too).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from specreplay.pipelines.budget import budget_result, cells_from_requalify
from specreplay.pipelines.builders import measured_result, write_synth_archive
from specreplay.pipelines.lawtest import lawtest_result
from specreplay.pipelines.requalify import (
    RequalifyArms,
    RequalifyOptions,
    check_replayable,
    requalify_result,
)
from specreplay.pipelines.sweep import SweepOptions, sweep_result
from specreplay.render.demo_story import BITS_PREFIX, DemoRuns, terminal_text
from specreplay.render.files import write_all
from specreplay.replay.archive.sources import archive_rows
from specreplay.replay.choice import AUTO, auto_passes, resolve_auto
from specreplay.replay.engine import ReplayResult, replay_archive
from specreplay.replay.scan import ArchiveScan, Progress, no_progress
from specreplay.results.model import Result
from specreplay.results.output import output_dir
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

    With ``auto`` importance is used for every arm of the story when the archive supports it
    (every chapter's deltas use it); each chapter's cells then apply its per-cell tail rule
    (:mod:`specreplay.replay.choice`).
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
        results: dict[str, Result] = {
            "requalify": _requalification(
                res, archive, DEMO_CANDIDATE, DEMO_REFERENCE, n_boot, estimator
            )
        }
        for bits in DEMO_BITS:
            cand = f"top32:t0.7:dyadic{bits}@5"
            results[f"{BITS_PREFIX}{bits}"] = _requalification(
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
        outputs: dict[str, list[str]] = {}
        for name, result in results.items():
            results[name] = _relocated(result, tmp, out)
            (tmp / name).mkdir()
            outputs[name] = write_all(results[name], tmp / name)
        write_all(measured, tmp)  # last: its REPORT.md reads the sub-runs written above
    return terminal_text(DemoRuns(measured, results), out, outputs)

"""The demo pipeline: one replay pass over the built-in archive, every chapter's result from it.

One replay pass over the generated archive serves every chapter: the MEASURED figures, the
requalification of dyadic24 (with greedy as reference and the path-bias diagnostic), the bits
sweep (dyadic 8, 12, 16) and the law tests (positions sampled by hash in the same pass) are built
from it; the archive is read once after it is written (and once more to hash it for ``inputs``).
Each requalification chapter is built by :func:`~specreplay.pipelines.requalify.requalify_replayed`
with the arms :func:`~specreplay.pipelines.requalify.requalify_arms` sets up, as
``specreplay requalify`` does (the archive's logging arm is the baseline).

The built-in archive records 8 positions: its logging arm ``top32:t0.7@8`` drafts 8 and the
target verifies all of them (:mod:`specreplay.sim.synth` says why), so every arm of the story is
at depth 8 too. The baseline must be the logging arm: the path-bias diagnostic sets the baseline's
SIMULATED R beside the archive's MEASURED R, which only means something at the depth the archive
was drafted; the candidate, the reference and the bits sweep are compared with it at that depth.

The depth chapter sweeps the logging arm over depths 1..8 under :data:`DEMO_COST`, 1 + 0.05·d ms
per round: the target's forward pass is the unit (1 ms), and each drafted position adds 0.05 ms, a
draft step (about 0.03 ms: a draft about 30 times cheaper per token than its target) and the growth
of the verification pass with the d + 1 tokens it scores (about 0.02 ms per token, memory-bound at
small batch). Were the verification pass not to grow, 0.05 would be the cost coefficient c of
Leviathan et al. 2023 (Theorem 3.8). On the archive of 5 positions this model could only say that
5, the deepest recorded, was best. With 8 recorded, the same model finds an interior optimum: the
5th position adds 6.2% to R for 4.2% more time per round, the 6th 3.9% for 4.0%, so the best depth
is 5 (2510 tokens/s), 6 a close second (2507) and 7 and 8 slower; the cells' best depths run from 4
(translation) to 7 (code), the question a stop rule or a depth per cell can answer.
:data:`DEMO_PRICE_MS` prices a round at the logging arm's depth 8 for the budget chapter.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from specreplay.pipelines.budget import budget_result, cells_from_requalify
from specreplay.pipelines.builders import measured_result
from specreplay.pipelines.lawtest import lawtest_result
from specreplay.pipelines.options import (
    POSITIONS,
    SYNTH_DEPTH,
    Estimator,
    LawtestOptions,
    RequalifyOptions,
    SweepOptions,
    parse_buckets,
    parse_policies,
)
from specreplay.pipelines.policies import policy_arms, policy_choice
from specreplay.pipelines.requalify import requalify_arms, requalify_replayed
from specreplay.pipelines.shortrounds import ShortRounds, exclude_below
from specreplay.pipelines.sweep import sweep_result
from specreplay.render.demo_story import BITS_PREFIX
from specreplay.replay.archive.sources import archive_rows
from specreplay.replay.choice import AUTO, auto_passes, resolve_auto
from specreplay.replay.engine import ReplayResult, replay_archive
from specreplay.replay.scan import ArchiveScan, Progress
from specreplay.results.model import Result
from specreplay.sim.arms import Arm, parse_arm

__all__ = [
    "DEMO_BASELINE",
    "DEMO_BITS",
    "DEMO_CANDIDATE",
    "DEMO_COST",
    "DEMO_DEPTH",
    "DEMO_MISMATCHED",
    "DEMO_POLICIES",
    "DEMO_PRICE_MS",
    "DEMO_REFERENCE",
    "demo_results",
]

DEMO_DEPTH = SYNTH_DEPTH.default  # the built-in archive's logging arm drafts 8 positions
DEMO_BASELINE = f"top32:t0.7@{DEMO_DEPTH}"  # the archive's logging arm
DEMO_CANDIDATE = f"top32:t0.7:dyadic24@{DEMO_DEPTH}"
DEMO_REFERENCE = f"greedy@{DEMO_DEPTH}"
DEMO_BITS = (8, 12, 16)
DEMO_MISMATCHED = f"top32:t0.7:dyadic8/float64@{DEMO_DEPTH}"
DEMO_COST = "linear:1:0.05"  # ms per round: 1 + 0.05·d (module docstring)
DEMO_POLICIES = (
    f"stop-below:{{0.05,0.1,0.2,0.3,0.4,0.5}}@{DEMO_DEPTH}",
    f"stop-cum:{{0.05,0.1,0.2,0.3,0.4,0.5}}@{DEMO_DEPTH}",
    "depth-by-bucket:<16K=7/16K-64K=6/>=64K=5",
)
"""The policy chapter's grid (docs/commands.md#demo): each stop rule up to the 8 recorded
positions at six thresholds, and a depth by context length."""
DEMO_PRICE_MS = 1.4  # that cost model's ms per round at the logging arm's depth 8


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


def _replay(archive: Path, seed: int, estimator: Estimator, progress: Progress) -> ReplayResult:
    """One pass for every arm of the story; it also samples the law-test positions.

    With ``auto`` importance is used for every arm of the story when the archive supports it
    (every chapter's deltas use it); each chapter's cells then apply its per-cell tail rule
    (:mod:`specreplay.replay.choice`).
    """
    arms: dict[str, Arm] = {}
    for text in (
        DEMO_BASELINE,
        DEMO_CANDIDATE,
        DEMO_REFERENCE,
        DEMO_MISMATCHED,
        *[f"top32:t0.7:dyadic{b}@{DEMO_DEPTH}" for b in DEMO_BITS],
    ):
        arm = parse_arm(text)
        arms.setdefault(arm.canonical, arm)
    for ruled in policy_arms([parse_arm(DEMO_BASELINE)], parse_policies(DEMO_POLICIES)):
        arms.setdefault(ruled.canonical, ruled)
    est, companion = auto_passes(estimator)
    with progress("replaying", archive_rows(archive)) as advance:
        res = replay_archive(
            archive,
            list(arms.values()),
            seed=seed,
            estimator=est,
            buckets=parse_buckets(None),
            law_positions=POSITIONS.default,
            progress=advance,
            companion=companion,
            auto=estimator == AUTO,
            # the default --short-rounds capped, as each verb's own run (the demo's archive
            # records every round whole: nothing is left out)
            exclude_below=exclude_below(ShortRounds.CAPPED, arms.values()),
            capped_only=True,
        )
    return resolve_auto(res, list(arms.values()))[0] if estimator == AUTO else res


def _requalification(
    res: ReplayResult,
    archive: Path,
    candidate: str,
    reference: str | None,
    n_boot: int,
    estimator: Estimator,
) -> Result:
    opts = RequalifyOptions.build(
        baseline=DEMO_BASELINE,
        candidate=candidate,
        reference=reference,
        estimator=estimator,
        n_boot=n_boot,
        seed=res.seed,
    )
    arms = requalify_arms(opts.baseline, opts.candidate, opts.reference, opts.baseline)
    return requalify_replayed(res, arms, opts, archive)


def _policies(res: ReplayResult, archive: Path, estimator: Estimator) -> Result:
    """Return the policy chapter: the depth sweep with :data:`DEMO_POLICIES`, held-out choice."""
    opts = SweepOptions.build(
        arms=DEMO_BASELINE,
        depths=range(1, DEMO_DEPTH + 1),
        cost=DEMO_COST,
        seed=res.seed,
        estimator=estimator,
        policies=DEMO_POLICIES,
    )
    arms = list(opts.arms)
    result = sweep_result(res, arms, opts, archive)
    choice = policy_choice(res, arms, opts)
    return dataclasses.replace(result, extra={**result.extra, "policy_choice": choice})


def demo_results(
    archive: Path,
    *,
    tmp: Path,
    out: Path,
    n_requests: int,
    seed: int,
    n_boot: int,
    estimator: Estimator,
    progress: Progress,
) -> tuple[Result, dict[str, Result]]:
    """Return the demo's MEASURED result and its chapters' results by sub-run name.

    ``archive`` is the generated archive inside the temporary output folder ``tmp``, which
    becomes ``out``: every path a result records is named by its final place. The chapters:
    ``requalify`` (dyadic24 against float64 sampling, greedy as reference), ``bits-dyadicN``,
    ``sweep``, ``policies`` (would adaptive drafting pay?), ``budget`` and ``lawtest`` (the
    mismatched verifier ``dyadic8/float64``).
    """
    res = _replay(archive, seed, estimator, progress)
    scan = ArchiveScan.of_replay(archive, res)
    options = {"requests": n_requests, "archive": str(out / "archive")}
    measured = measured_result(scan, command="demo", seed=seed, options=options, rename=(tmp, out))
    results: dict[str, Result] = {
        "requalify": _requalification(
            res, archive, DEMO_CANDIDATE, DEMO_REFERENCE, n_boot, estimator
        )
    }
    for bits in DEMO_BITS:
        cand = f"top32:t0.7:dyadic{bits}@{DEMO_DEPTH}"
        results[f"{BITS_PREFIX}{bits}"] = _requalification(
            res, archive, cand, None, n_boot, estimator
        )
    sweep = SweepOptions.build(
        arms=DEMO_BASELINE,
        depths=range(1, DEMO_DEPTH + 1),
        cost=DEMO_COST,
        seed=res.seed,
        estimator=estimator,
    )
    results["sweep"] = sweep_result(res, list(sweep.arms), sweep, archive)
    results["policies"] = _policies(res, archive, estimator)
    results["budget"] = budget_result(
        cells_from_requalify(results["requalify"], "requalify", DEMO_PRICE_MS, ()),
        None,
        inputs=results["requalify"].inputs,
        options={
            "from": f"{out}/requalify/results.json",
            "price_ms": DEMO_PRICE_MS,
            "known_ms": [],
        },
    )
    law = LawtestOptions.build(arms=[DEMO_MISMATCHED, DEMO_CANDIDATE], seed=seed)
    results["lawtest"] = lawtest_result(law, archive=archive, replayed=res)
    return measured, {name: _relocated(r, tmp, out) for name, r in results.items()}

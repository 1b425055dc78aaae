"""``specreplay requalify``: does a drafting-path change keep acceptance? (SPEC §3.1–3.4).

The archive is replayed under baseline, candidate and reference arms; the change (typically a
quantizer) is requalified when the candidate's acceptance stays equivalent to the baseline's.

Figures: R per arm per cell (SIMULATED, with its Monte Carlo standard error), Δ(candidate −
baseline) with intervals and the verdict, Δ(candidate − reference) (the gain a budget uses; no
verdict), the path-bias diagnostic of the archive's logging arm (its MEASURED R beside its
SIMULATED R, with a paired interval of the gap), per-position survival P(A ≥ j) per arm, the
off-path rates, the law test of the candidate (and baseline) on sampled archive positions, and
the requalification: QUALIFIED when the candidate is EQUIVALENT to the baseline and its law test
passes, NOT QUALIFIED when it is DIFFERENT or its law test fails, else INCONCLUSIVE.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.sources import archive_rows
from specreplay.replay.engine import OpenArchive
from specreplay.replay.scan import Progress
from specreplay.results.gates import fail_on_code
from specreplay.results.model import Result
from specreplay.results.output import check_out, output_dir
from specreplay.results.render import write_all
from specreplay.results.requalification import RequalifyArms, check_replayable, requalify_result
from specreplay.results.tables import requalify_tables
from specreplay.sim.arms import Arm, parse_arm
from specreplay.stats.buckets import DEFAULT_BUCKETS, Buckets
from specreplay.stats.compare import parse_margin

__all__ = ["run_requalify", "sample_requests"]


def sample_requests(ids: list[str], n: int, seed: int) -> set[str]:
    """Choose ``n`` request ids deterministically: the n smallest seeded hashes of their keys."""
    from specreplay.sim.rng import STREAM_REQUALIFY_SAMPLE, request_key, uniform_py

    ranked = sorted(
        ids,
        key=lambda r: (uniform_py(seed, int(request_key(r)), 0, 0, STREAM_REQUALIFY_SAMPLE), r),
    )
    return set(ranked[:n])


def run_requalify(
    archive: Path,
    *,
    baseline: str,
    candidate: str,
    reference: str | None,
    out: Path,
    force: bool,
    estimator: str = "analytic",
    replicates: int = 16,
    margin: str = "0.5%",
    fail_on: frozenset[str] = frozenset(),
    families: set[str] | None = None,
    n_sample_requests: int | None = None,
    n_boot: int = 10_000,
    seed: int = 0,
    stratify: str = "family",
    level: float = 0.95,
    min_requests: int = 10,
    buckets: str = "",
    logging_arm: str | None = None,
    law_positions: int = 8,
    progress: Progress | None = None,
) -> tuple[str, int, Result]:
    """Requalify ``candidate`` against ``baseline``; return (terminal text, exit code, result)."""
    check_out(out, force=force, inputs=[archive])
    options: dict[str, Any] = {
        "archive": str(archive),
        "baseline": baseline,
        "candidate": candidate,
        "reference": reference,
        "estimator": estimator,
        "replicates": replicates,
        "margin": parse_margin(margin).to_json(),
        "fail_on": sorted(fail_on),
        "families": sorted(families) if families else None,
        "sample_requests": n_sample_requests,
        "n_boot": n_boot,
        "stratify": stratify,
        "level": level,
        "min_requests": min_requests,
        "buckets": Buckets.parse(buckets or DEFAULT_BUCKETS).spec,
        "logging_arm": logging_arm,
    }
    # the first batch is read here, through the validating reader: the logging arm is known
    # before the pass, which then goes on from the same reader (one read of every file)
    opened = OpenArchive(
        archive, buckets=Buckets.parse(options["buckets"]), logging_arm=logging_arm
    )
    arms = _arms(baseline, candidate, reference, opened.logging_arm)
    ctx = progress("replaying", archive_rows(archive)) if progress else nullcontext(None)
    with output_dir(out, force=force, inputs=[archive]) as tmp:
        with ctx as advance:
            res = opened.replay(list(arms.all.values()), estimator=estimator,
                                replicates=replicates, seed=seed, law_positions=law_positions,
                                progress=advance)  # fmt: skip
        wanted = (
            sample_requests(res.requests, n_sample_requests, seed) if n_sample_requests else None
        )
        if families is not None or wanted is not None:
            res = res.select(families, wanted)
        check_replayable(res, arms)
        result = requalify_result(res, arms, options)
        write_all(result, tmp)
    text = requalify_tables(result)
    text += f"\nOutputs: {out}/ (results.json, TABLES.md, cells.parquet, forest.png)"
    rq = result.requalification
    return text, fail_on_code(rq.verdict if rq is not None else None, fail_on), result


def _arms(
    baseline: str, candidate: str, reference: str | None, logged: str | None
) -> RequalifyArms:
    base, cand = parse_arm(baseline), parse_arm(candidate)
    ref = parse_arm(reference) if reference else None
    if base.canonical == cand.canonical:
        raise SpecReplayError(f"baseline and candidate are the same arm ({base.canonical})")
    log = parse_arm(logged) if logged is not None else None  # the reader checked it is an arm
    every: dict[str, Arm] = {}
    for a in (base, cand, ref, log):
        if a is not None:
            every.setdefault(a.canonical, a)
    return RequalifyArms(base, cand, ref, log, every)

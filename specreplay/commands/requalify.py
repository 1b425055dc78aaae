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

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.sources import archive_rows
from specreplay.replay.backend import Backend, BackendRun, backend_runner
from specreplay.replay.choice import AUTO, auto_passes, pass_columns, resolve_auto
from specreplay.replay.engine import OpenArchive, ReplayResult
from specreplay.replay.scan import Progress
from specreplay.results.gates import fail_on_code
from specreplay.results.grouping import check_by, with_by_cells
from specreplay.results.model import Result
from specreplay.results.output import check_out, output_dir
from specreplay.results.privacy import IdHasher, hash_result
from specreplay.results.render import outputs_line, write_all
from specreplay.results.requalification import (
    RequalifyArms,
    RequalifyOptions,
    check_replayable,
    requalify_result,
)
from specreplay.results.shortrounds import exclude_below
from specreplay.results.tables import requalify_tables
from specreplay.sim.arms import Arm, parse_arm, parse_arm_option
from specreplay.stats.buckets import DEFAULT_BUCKETS, Buckets
from specreplay.stats.compare import parse_margin

__all__ = ["requalify_run", "run_requalify", "sample_requests"]


def sample_requests(ids: list[str], n: int, seed: int) -> set[str]:
    """Choose ``n`` request ids deterministically: the n smallest seeded hashes of their keys."""
    from specreplay.sim.rng import STREAM_REQUALIFY_SAMPLE, request_key, uniform_py

    ranked = sorted(
        ids,
        key=lambda r: (uniform_py(seed, int(request_key(r)), 0, 0, STREAM_REQUALIFY_SAMPLE), r),
    )
    return set(ranked[:n])


def requalify_run(
    archive: Path,
    opts: RequalifyOptions,
    *,
    progress: Progress | None = None,
    backend: Backend | None = None,
) -> Result:
    """Replay ``archive`` under the arms of ``opts``, requalify the candidate; return the result.

    ``backend``: who replays the shards (Dask, the per-shard cache; default this process).
    """
    return _requalified(_opened(archive, opts), archive, opts, progress, backend)


def _opened(archive: Path, opts: RequalifyOptions) -> tuple[OpenArchive, RequalifyArms]:
    """Check the options and open the archive (its first batch read): errors before any work."""
    check_by(opts.by)
    if opts.by is not None and opts.families is not None:
        raise SpecReplayError("--by and --families: give one of them (--by cells span families)")
    parse_margin(opts.margin)
    # the first batch is read here, through the validating reader: the logging arm is known
    # before the pass, which then goes on from the same reader (one read of every file)
    opened = OpenArchive(
        archive,
        buckets=Buckets.parse(opts.buckets or DEFAULT_BUCKETS),
        logging_arm=opts.logging_arm,
        by=opts.by,
        columns=pass_columns(opts.estimator, opts.by),
        ignore=opts.ignore,
    )
    return opened, _arms(opts.baseline, opts.candidate, opts.reference, opened.logging_arm)


def _requalified(
    opened: tuple[OpenArchive, RequalifyArms],
    archive: Path,
    opts: RequalifyOptions,
    progress: Progress | None,
    backend: Backend | None = None,
) -> Result:
    """Run the pass, the ``--by`` cells and ``--hash-ids``: return the result to write."""
    filters = {"families": sorted(opts.families) if opts.families else None,
               "sample_requests": opts.sample_requests}  # fmt: skip
    with backend_runner(backend, filters, inputs=[archive]) as run:
        result, res = _passes(opened, archive, opts, progress, run)
        entry = run.to_json()
    if entry is not None:
        result = replace(result, extra={**result.extra, "replay_backend": entry})
    return hash_result(result, IdHasher(res.requests) if opts.hash_ids else None)


def _passes(
    opened: tuple[OpenArchive, RequalifyArms],
    archive: Path,
    opts: RequalifyOptions,
    progress: Progress | None,
    run: BackendRun,
) -> tuple[Result, ReplayResult]:
    """Run the one pass (shards replayed by ``run``); build the result and its ``--by`` cells."""
    reader, arms = opened
    rows = archive_rows(archive, opts.ignore)
    ctx = progress("replaying", rows) if progress else nullcontext(None)
    estimator, companion = auto_passes(opts.estimator)
    with ctx as advance:
        res = _replay(reader, arms, opts, estimator, companion, advance, run)
    if opts.estimator == AUTO:
        res, _ = resolve_auto(res, list(arms.all.values()))
    result = requalify_result(res, arms, opts, archive)
    if opts.by is not None:
        result = with_by_cells(
            result, opts.by, lambda level: requalify_result(res.grouped(level), arms, opts, archive)
        )
    return result, res


def _replay(
    opened: OpenArchive,
    arms: RequalifyArms,
    opts: RequalifyOptions,
    estimator: str,
    companion: str | None,
    advance: Callable[[int], None] | None,
    run: BackendRun,
) -> ReplayResult:
    """Replay the arms once and select requests (``--families``, ``--sample-requests``)."""
    res = opened.replay(
        list(arms.all.values()),
        estimator=estimator,
        replicates=opts.replicates,
        seed=opts.seed,
        law_positions=opts.law_positions,
        progress=advance,
        companion=companion,
        runner=run.runner,
        exclude_below=exclude_below(opts.short_rounds, arms.all.values()),
    )
    n = opts.sample_requests
    wanted = sample_requests(res.requests, n, opts.seed) if n else None
    if opts.families is not None or wanted is not None:
        res = res.select(set(opts.families) if opts.families else None, wanted)
    check_replayable(res, arms)
    return res


def run_requalify(
    archive: Path,
    opts: RequalifyOptions,
    *,
    out: Path,
    force: bool,
    progress: Progress | None = None,
    backend: Backend | None = None,
) -> tuple[str, int, Result]:
    """Requalify ``opts.candidate`` against ``opts.baseline``; return (text, exit code, result)."""
    check_out(out, force=force, inputs=[archive])
    if backend is not None:
        backend.check(inputs=[archive])
    opened = _opened(archive, opts)
    with output_dir(out, force=force, inputs=[archive]) as tmp:
        result = _requalified(opened, archive, opts, progress, backend)
        files = write_all(result, tmp)
    text = requalify_tables(result)
    text += "\n" + outputs_line(out, files)
    rq = result.requalification
    return text, fail_on_code(rq.verdict if rq is not None else None, opts.fail_on), result


def _arms(
    baseline: str, candidate: str, reference: str | None, logged: str | None
) -> RequalifyArms:
    base = parse_arm_option("--baseline", baseline)
    cand = parse_arm_option("--candidate", candidate)
    ref = parse_arm_option("--reference", reference) if reference else None
    if base.canonical == cand.canonical:
        raise SpecReplayError(f"baseline and candidate are the same arm ({base.canonical})")
    log = parse_arm(logged) if logged is not None else None  # the reader checked it is an arm
    every: dict[str, Arm] = {}
    for a in (base, cand, ref, log):
        if a is not None:
            every.setdefault(a.canonical, a)
    return RequalifyArms(base, cand, ref, log, every)

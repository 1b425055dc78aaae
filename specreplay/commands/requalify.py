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

import polars as pl

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.sources import archive_rows, check_parquet_schema, list_archive
from specreplay.replay.engine import replay_archive
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

__all__ = ["peek_logging_arm", "run_requalify", "sample_requests"]


def peek_logging_arm(path: Path) -> str | None:
    """Return the archive's logging_arm value from its first batch, if it has that column.

    Read through the validating reader, so a broken first shard is a one-line error.
    """
    from specreplay.replay.archive.reader import ArchiveReader

    reader = ArchiveReader(path, batch_rows=1, chunk_rows=4096)
    next(iter(reader), None)
    return reader.logging_arm


def sample_requests(path: Path, n: int, seed: int) -> set[str]:
    """Choose ``n`` request ids deterministically: the n smallest seeded hashes of their keys."""
    from specreplay.replay.archive.reader import ArchiveReader
    from specreplay.sim.rng import STREAM_REQUALIFY_SAMPLE, request_key, uniform_py

    ids: set[str] = set()
    for f in list_archive(path):
        if f.kind == "parquet":
            check_parquet_schema(f)  # a broken shard is a one-line error, not a polars traceback
            try:
                lf = pl.scan_parquet(f.path).select("request_id").unique()
                ids.update(lf.collect().to_series())
            except pl.exceptions.PolarsError as exc:
                msg = (str(exc).splitlines() or [type(exc).__name__])[0]
                raise SpecReplayError(f"{f.path}: cannot read as Parquet: {msg}") from None
        else:
            reader = ArchiveReader(f.path)
            for _ in reader:
                pass
            ids.update(reader.requests)
    ranked = sorted(
        ids, key=lambda r: (uniform_py(seed, int(request_key(r)), 0, 0, STREAM_REQUALIFY_SAMPLE), r)
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
    arms = _arms(archive, baseline, candidate, reference, logging_arm)
    wanted = sample_requests(archive, n_sample_requests, seed) if n_sample_requests else None
    ctx = progress("replaying", archive_rows(archive)) if progress else nullcontext(None)
    with output_dir(out, force=force, inputs=[archive]) as tmp:
        with ctx as advance:
            res = replay_archive(archive, list(arms.all.values()), estimator=estimator,
                                 replicates=replicates, seed=seed,
                                 buckets=Buckets.parse(options["buckets"]), families=families,
                                 requests=wanted, logging_arm=logging_arm,
                                 progress=advance)  # fmt: skip
        check_replayable(res, arms)
        result = requalify_result(archive, res, arms, options, seed, law_positions)
        write_all(result, tmp)
    text = requalify_tables(result)
    text += f"\nOutputs: {out}/ (results.json, TABLES.md, cells.parquet, forest.png)"
    rq = result.requalification
    return text, fail_on_code(rq.verdict if rq is not None else None, fail_on), result


def _arms(
    archive: Path, baseline: str, candidate: str, reference: str | None, logging_arm: str | None
) -> RequalifyArms:
    base, cand = parse_arm(baseline), parse_arm(candidate)
    ref = parse_arm(reference) if reference else None
    if base.canonical == cand.canonical:
        raise SpecReplayError(f"baseline and candidate are the same arm ({base.canonical})")
    logged_text = peek_logging_arm(archive) or logging_arm
    log = None
    if logged_text is not None:
        try:
            log = parse_arm(logged_text)
        except SpecReplayError:
            log = None
    every: dict[str, Arm] = {}
    for a in (base, cand, ref, log):
        if a is not None:
            every.setdefault(a.canonical, a)
    return RequalifyArms(base, cand, ref, log, every)

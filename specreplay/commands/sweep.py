"""``specreplay sweep``: R at every fixed depth per arm and cell, from one replay pass (SPEC §3.5).

One pass replays every arm at depths 1..max(``--depths``, the arms' own depths) with one
estimator (``--estimator auto`` by default: importance for every arm where the archive supports
it, its per-cell tail rule on the bits sweep's verdicts: :mod:`specreplay.replay.choice`);
:mod:`specreplay.results.sweep` builds the cells. ``--arm`` values are expanded for brace lists
(``'top32:t0.7:dyadic{8,12,16}@5'``, quoted so the shell leaves them alone).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.importers import detect_kind, drafted_depths, read_arm
from specreplay.replay.archive.sources import archive_listing, archive_rows
from specreplay.replay.backend import Backend, BackendRun, backend_runner
from specreplay.replay.choice import AUTO, auto_passes, pass_columns, resolve_auto
from specreplay.replay.engine import OpenArchive
from specreplay.replay.scan import Progress
from specreplay.results.grouping import check_by, with_by_cells
from specreplay.results.model import Result
from specreplay.results.output import check_out, output_dir
from specreplay.results.privacy import IdHasher, hash_result
from specreplay.results.render import outputs_line, write_all
from specreplay.results.shortrounds import exclude_below
from specreplay.results.sweep import (
    CostModel,
    SweepOptions,
    expand_braces,
    proxy_result,
    sweep_result,
)
from specreplay.results.tables import sweep_tables
from specreplay.sim.arms import Arm, parse_arm_option
from specreplay.stats.buckets import DEFAULT_BUCKETS, Buckets

__all__ = ["expand_arms", "run_sweep", "sweep_run"]


def expand_arms(texts: list[str]) -> list[Arm]:
    """Parse ``--arm`` values, brace lists expanded, distinct by canonical form, in order."""
    arms: dict[str, Arm] = {}
    for text in texts:
        for one in expand_braces(text):
            arm = parse_arm_option("--arm", one)
            arms.setdefault(arm.canonical, arm)
    if not arms:
        raise SpecReplayError("sweep: give at least one --arm")
    return list(arms.values())


@dataclass(frozen=True)
class _Prepared:
    """A sweep's checked inputs: the archive opened (its first batch read) and the arms."""

    opened: OpenArchive
    arms: list[Arm]
    baseline: Arm | None
    replayed: list[Arm]


def sweep_run(
    archive: Path,
    opts: SweepOptions,
    *,
    progress: Progress | None = None,
    backend: Backend | None = None,
) -> Result:
    """Sweep ``opts.arms`` over ``opts.depths``; return the typed result.

    Round traces (the inputs of ``interval``) give the survival truncation proxy instead.
    ``backend``: who replays the shards (Dask, the per-shard cache; default this process).
    """
    if _is_round_traces(archive, opts.ignore):
        _no_backend(archive, backend)
        return _proxy(archive, opts, _proxy_depths(archive, opts))
    return _swept(archive, opts, _prepare(archive, opts), progress, backend)


def _no_backend(archive: Path, backend: Backend | None) -> None:
    """Refuse Dask and cache options for round traces (nothing is replayed)."""
    if backend is not None and not backend.default:
        raise SpecReplayError(
            f"{archive}: round traces are not replayed: --scheduler, --workers and --cache "
            "apply to position traces"
        )


def _prepare(archive: Path, opts: SweepOptions) -> _Prepared:
    """Check the arms and the cost model and open the archive: errors before any work."""
    check_by(opts.by)
    arms = expand_arms(list(opts.arms))
    baseline = parse_arm_option("--baseline", opts.baseline) if opts.baseline else None
    replayed = list({a.canonical: a for a in [*arms, *([baseline] if baseline else [])]}.values())
    if opts.cost:
        CostModel.parse(opts.cost)  # a bad cost model is an error before any work
    opened = OpenArchive(archive, buckets=Buckets.parse(opts.buckets or DEFAULT_BUCKETS),
                         logging_arm=opts.logging_arm, ignore=opts.ignore, by=opts.by,
                         columns=pass_columns(opts.estimator, opts.by))  # fmt: skip
    return _Prepared(opened, arms, baseline, replayed)


def _swept(
    archive: Path,
    opts: SweepOptions,
    prep: _Prepared,
    progress: Progress | None,
    backend: Backend | None = None,
) -> Result:
    filters: dict[str, object] = {"families": None, "sample_requests": None}
    with backend_runner(backend, filters, inputs=[archive]) as run:
        result, requests = _swept_passes(archive, opts, prep, progress, run)
        entry = run.to_json()
    if entry is not None:
        result = replace(result, extra={**result.extra, "replay_backend": entry})
    return hash_result(result, IdHasher(requests) if opts.hash_ids else None)


def _swept_passes(
    archive: Path, opts: SweepOptions, prep: _Prepared, progress: Progress | None, run: BackendRun
) -> tuple[Result, list[str]]:
    """Run the one pass (shards replayed by ``run``); build the result and its ``--by`` cells."""
    estimator, companion = auto_passes(opts.estimator)
    depth = max([*opts.depths, *(a.depth for a in prep.replayed)])
    below = exclude_below(opts.short_rounds, prep.replayed)
    rows = archive_rows(archive, opts.ignore)
    ctx = progress("replaying", rows) if progress else nullcontext(None)
    with ctx as advance:
        res = prep.opened.replay(prep.replayed, estimator=estimator,
                                 replicates=opts.replicates, seed=opts.seed, max_depth=depth,
                                 progress=advance, companion=companion,
                                 runner=run.runner, exclude_below=below)  # fmt: skip
    if opts.estimator == AUTO:
        res, _ = resolve_auto(res, prep.replayed)
    result = sweep_result(res, prep.arms, opts, archive, prep.baseline)
    if opts.by is not None:
        result = with_by_cells(
            result,
            opts.by,
            lambda level: sweep_result(res.grouped(level), prep.arms, opts, archive, prep.baseline),
        )
    return result, res.requests


def run_sweep(
    archive: Path,
    opts: SweepOptions,
    *,
    out: Path,
    force: bool,
    progress: Progress | None = None,
    backend: Backend | None = None,
) -> tuple[str, Result]:
    """Sweep ``opts.arms`` over ``opts.depths``; return (text, result).

    Round traces (the inputs of ``interval``) give the survival truncation proxy instead.
    """
    check_out(out, force=force, inputs=[archive])
    if backend is not None:
        backend.check(inputs=[archive])
    if _is_round_traces(archive, opts.ignore):
        _no_backend(archive, backend)
        depths = _proxy_depths(archive, opts)
        with output_dir(out, force=force, inputs=[archive]) as tmp:
            result = _proxy(archive, opts, depths)
            files = write_all(result, tmp)
    else:
        prep = _prepare(archive, opts)
        with output_dir(out, force=force, inputs=[archive]) as tmp:
            result = _swept(archive, opts, prep, progress, backend)
            files = write_all(result, tmp)
    text = sweep_tables(result) + "\n" + outputs_line(out, files)
    return text, result


def _is_round_traces(path: Path, ignore: tuple[str, ...]) -> bool:
    """Whether ``path`` holds round traces (anything else is read as a position archive).

    A folder's entries are judged first, so a bad entry is reported as itself whichever kind
    the folder holds (not hidden behind a position-archive option error).
    """
    if path.is_dir():
        archive_listing(path, ignore)
    try:
        return detect_kind(path, ignore) == "round-traces"
    except SpecReplayError:  # not an observed-arm format: the position-archive reader decides
        return False


def _proxy_depths(archive: Path, opts: SweepOptions) -> tuple[int, int | None, int]:
    """Check a proxy's options; return (top supported depth, lowest drafted, rounds unknown)."""
    check_by(opts.by)
    if opts.by is not None:
        raise SpecReplayError(
            f"--by {opts.by!r}: round traces carry no grouping columns (position traces only)"
        )
    if opts.arms or opts.baseline:
        raise SpecReplayError(
            f"{archive}: round traces hold observed rounds, not archived laws: --arm and "
            "--baseline apply to position traces (the proxy needs neither)"
        )
    if opts.cost:
        CostModel.parse(opts.cost)
    Buckets.parse(opts.buckets or DEFAULT_BUCKETS)
    lowest, unknown = drafted_depths(archive, opts.ignore)
    top = 0 if unknown or lowest is None else lowest
    return top, lowest, unknown


def _proxy(archive: Path, opts: SweepOptions, depths: tuple[int, int | None, int]) -> Result:
    """Return the survival truncation proxy of a round-trace arm at every depth (SPEC §3.5)."""
    top, lowest, unknown = depths
    buckets = Buckets.parse(opts.buckets or DEFAULT_BUCKETS)
    supported = [d for d in opts.depths if d <= top]
    reference = top if top else max(opts.depths)
    by_depth = {d: read_arm(archive, buckets=buckets, truncate=d, ignore=opts.ignore)
                for d in sorted({*supported, *([reference] if top else [])})}  # fmt: skip
    if not by_depth:
        raise SpecReplayError(
            f"{archive}: the proxy is valid only up to the depth every round drafted "
            + (f"({unknown} rounds record none)" if unknown else f"({lowest})")
            + f"; --depths {list(opts.depths)} lies beyond it"
        )
    result = proxy_result(by_depth, reference, (lowest, unknown), opts, archive)
    ids = {r for a in by_depth.values() for r in a.sums.get_column("request_id").to_list()}
    return hash_result(result, IdHasher(ids) if opts.hash_ids else None)

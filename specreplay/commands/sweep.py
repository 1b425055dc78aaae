"""``specreplay sweep``: R at every fixed depth per arm and cell, from one replay pass (SPEC §3.5).

One pass replays every arm at depths 1..max(``--depths``, the arms' own depths) with one
estimator (``--estimator auto`` by default: :mod:`specreplay.replay.choice`, over every arm);
:mod:`specreplay.results.sweep` builds the cells. ``--arm`` values are expanded for brace lists
(``'top32:t0.7:dyadic{8,12,16}@5'``, quoted so the shell leaves them alone).
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.importers import detect_kind, drafted_depths, read_arm
from specreplay.replay.archive.sources import archive_rows
from specreplay.replay.choice import AUTO, auto_passes, resolve_auto
from specreplay.replay.engine import OpenArchive
from specreplay.replay.scan import Progress
from specreplay.results.model import Result
from specreplay.results.output import check_out, output_dir
from specreplay.results.render import write_all
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

__all__ = ["expand_arms", "run_sweep"]


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


def run_sweep(
    archive: Path,
    opts: SweepOptions,
    *,
    out: Path,
    force: bool,
    progress: Progress | None = None,
) -> tuple[str, Result]:
    """Sweep ``opts.arms`` over ``opts.depths``; return (text, result).

    Round traces (the inputs of ``interval``) give the survival truncation proxy instead.
    """
    check_out(out, force=force, inputs=[archive])
    if _is_round_traces(archive):
        return _run_proxy(archive, opts, out=out, force=force)
    arms = expand_arms(list(opts.arms))
    baseline = parse_arm_option("--baseline", opts.baseline) if opts.baseline else None
    replayed = list({a.canonical: a for a in [*arms, *([baseline] if baseline else [])]}.values())
    if opts.cost:
        CostModel.parse(opts.cost)  # a bad cost model is an error before any work
    opened = OpenArchive(archive, buckets=Buckets.parse(opts.buckets or DEFAULT_BUCKETS),
                         logging_arm=opts.logging_arm)  # fmt: skip
    estimator, companion = auto_passes(opts.estimator)
    depth = max([*opts.depths, *(a.depth for a in replayed)])
    ctx = progress("replaying", archive_rows(archive)) if progress else nullcontext(None)
    with output_dir(out, force=force, inputs=[archive]) as tmp:
        with ctx as advance:
            res = opened.replay(replayed, estimator=estimator, replicates=opts.replicates,
                                seed=opts.seed, max_depth=depth, progress=advance,
                                companion=companion)  # fmt: skip
        if opts.estimator == AUTO:
            res, _ = resolve_auto(res, replayed)
        result = sweep_result(res, arms, opts, archive, baseline)
        write_all(result, tmp)
    text = sweep_tables(result) + f"\nOutputs: {out}/ (results.json, TABLES.md, cells.parquet)"
    return text, result


def _is_round_traces(path: Path) -> bool:
    """Whether ``path`` holds round traces (anything else is read as a position archive)."""
    try:
        return detect_kind(path) == "round-traces"
    except SpecReplayError:  # not an observed-arm format: the position-archive reader decides
        return False


def _run_proxy(archive: Path, opts: SweepOptions, *, out: Path, force: bool) -> tuple[str, Result]:
    """Return the survival truncation proxy of a round-trace arm at every depth (SPEC §3.5)."""
    if opts.arms or opts.baseline:
        raise SpecReplayError(
            f"{archive}: round traces hold observed rounds, not archived laws: --arm and "
            "--baseline apply to position traces (the proxy needs neither)"
        )
    if opts.cost:
        CostModel.parse(opts.cost)
    buckets = Buckets.parse(opts.buckets or DEFAULT_BUCKETS)
    lowest, unknown = drafted_depths(archive)
    top = 0 if unknown or lowest is None else lowest
    supported = [d for d in opts.depths if d <= top]
    reference = top if top else max(opts.depths)
    with output_dir(out, force=force, inputs=[archive]) as tmp:
        by_depth = {d: read_arm(archive, buckets=buckets, truncate=d)
                    for d in sorted({*supported, *([reference] if top else [])})}  # fmt: skip
        if not by_depth:
            raise SpecReplayError(
                f"{archive}: the proxy is valid only up to the depth every round drafted "
                + (f"({unknown} rounds record none)" if unknown else f"({lowest})")
                + f"; --depths {list(opts.depths)} lies beyond it"
            )
        result = proxy_result(by_depth, reference, (lowest, unknown), opts, archive)
        write_all(result, tmp)
    return sweep_tables(
        result
    ) + f"\nOutputs: {out}/ (results.json, TABLES.md, cells.parquet)", result

"""``specreplay interval``: paired bootstrap interval between two observed arms.

:mod:`specreplay.pipelines.interval` builds the result (:func:`interval_result`, the Python API's
``interval``); :func:`run_interval` writes and renders it, prints the pooled verdict and gives the
exit code.
"""

from __future__ import annotations

from pathlib import Path

from specreplay.pipelines.gates import fail_on_code
from specreplay.pipelines.interval import (
    IntervalOptions,
    interval_compared,
    interval_inputs,
    interval_kinds,
    interval_memory_result,
    interval_result,
    short_names,
)
from specreplay.render.files import outputs_line, write_all
from specreplay.render.tables import comparison_tables
from specreplay.replay.scan import Progress, no_progress
from specreplay.results.model import Delta, Level, Result, Role
from specreplay.results.output import check_out, output_dir
from specreplay.stats.compare import Margin

__all__ = [
    "IntervalOptions",
    "interval_inputs",
    "interval_memory_result",
    "interval_result",
    "run_interval",
    "short_names",
]


def run_interval(
    path_a: Path,
    path_b: Path,
    opts: IntervalOptions,
    *,
    out: Path,
    force: bool,
    progress: Progress = no_progress,
) -> tuple[str, int]:
    """Paired interval between two observed arms; return (terminal text, exit code).

    The exit code is 1 when the pooled verdict is in ``opts.fail_on`` (a null verdict counts as
    INCONCLUSIVE), else 0.
    """
    inputs = interval_inputs(path_a, path_b, opts)
    check_out(out, force=force, inputs=inputs)
    kinds = interval_kinds(path_a, path_b, opts)
    with output_dir(out, force=force, inputs=inputs) as tmp:
        result = interval_compared(path_a, path_b, opts, kinds, progress)
        files = write_all(result, tmp)
    text = _interval_text(result, opts.boot.margin, out, files)
    return text, _exit_code(result, opts.fail_on)


def _exit_code(result: Result, fail_on: frozenset[str]) -> int:
    d = result.pooled.delta(Role.B_VS_A)
    return fail_on_code(d.verdict if d is not None else None, fail_on)


def _interval_text(result: Result, mg: Margin, out: Path, files: list[str]) -> str:
    pooled = result.pooled.delta(Role.B_VS_A)
    assert pooled is not None  # every interval result has its b-vs-a delta
    head = _verdict_line(pooled, mg.text)
    short = comparison_tables(result, levels=(Level.POOLED, Level.FAMILY))
    n_bucket = sum(1 for c in result.cells if c.level in (Level.BUCKET, Level.FAMILY_BUCKET))
    more = (
        f"{n_bucket} bucket and family × bucket cells are in {out}/TABLES.md and cells.parquet.\n"
        if n_bucket
        else ""
    )
    return f"{head}\n\n{short}\n{more}{outputs_line(out, files)}"


def _verdict_line(d: Delta, margin: str) -> str:
    if d.null_reason is not None:
        return f"VERDICT (pooled): — ({d.null_reason})"
    return (
        f"VERDICT (pooled, {d.label}): {d.verdict} at margin {margin} — "
        f"{d.b} vs {d.a}: Δ = {d.point:+.4f} tokens/round "
        f"[{d.lo:+.4f}, {d.hi:+.4f}] ({100 * (d.rel or 0.0):+.2f}% "
        f"[{100 * (d.rel_lo or 0.0):+.2f}%, {100 * (d.rel_hi or 0.0):+.2f}%]), 95% {d.method}"
    )

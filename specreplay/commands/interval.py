"""``specreplay interval``: the paired interval of Δ between two observed arms, with verdicts.

:mod:`specreplay.pipelines.interval` builds the result (:func:`interval_result`, the Python API's
``interval``); :func:`run_interval` writes and renders it, prints the pooled verdict first
(:func:`~specreplay.render.console.interval_console`) and gives the exit code.
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
from specreplay.render.console import interval_console
from specreplay.render.files import write_all
from specreplay.replay.scan import Progress, no_progress
from specreplay.results.model import Result, Role
from specreplay.results.output import check_out, output_dir

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
    text = interval_console(result, out, files)
    return text, _exit_code(result, opts.fail_on)


def _exit_code(result: Result, fail_on: frozenset[str]) -> int:
    d = result.pooled.delta(Role.B_VS_A)
    return fail_on_code(d.verdict if d is not None else None, fail_on)

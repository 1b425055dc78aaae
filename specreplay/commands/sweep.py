"""``specreplay sweep``: R at every fixed depth per arm and cell, from one replay pass.

See docs/methods.md#the-sweep-cost-model-and-the-best-depth.

One pass replays every arm at depths 1..max(``--depths``, the arms' own depths) with one
estimator (``--estimator auto`` by default: importance for every arm where the archive supports
it, its per-cell tail rule on the bits sweep's verdicts: :mod:`specreplay.replay.choice`);
:mod:`specreplay.pipelines.sweep` builds the result (:func:`sweep_run`, the Python API's
``sweep``). ``--arm`` values are expanded for brace lists (``'top32:t0.7:dyadic{8,12,16}@5'``,
quoted so the shell leaves them alone).
"""

from __future__ import annotations

from pathlib import Path

from specreplay.pipelines.sweep import SweepOptions, sweep_prepare, sweep_prepared, sweep_run
from specreplay.render.console import sweep_console
from specreplay.render.files import write_all
from specreplay.replay.backend import Backend
from specreplay.replay.scan import Progress, phase
from specreplay.results.model import Result
from specreplay.results.output import check_out, output_dir

__all__ = ["run_sweep", "sweep_run"]


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
    prepared = sweep_prepare(archive, opts, backend)
    with output_dir(out, force=force, inputs=[archive]) as tmp:
        result = sweep_prepared(prepared, archive, opts, progress=progress, backend=backend)
        with phase(progress, "plots and files"):
            files = write_all(result, tmp)
    text = sweep_console(result, out, files)
    return text, result

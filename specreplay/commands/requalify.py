"""``specreplay requalify``: whether a drafting-path change keeps acceptance.

See docs/methods.md#requalification and docs/commands.md#requalify.

The archive is replayed under baseline, candidate and reference arms; the change (typically a
quantizer) is requalified when the candidate's acceptance stays equivalent to the baseline's.

Figures: R per arm per cell (SIMULATED, with its Monte Carlo standard error), Δ(candidate −
baseline) with intervals and the verdict, Δ(candidate − reference) (the gain a budget uses; no
verdict), the path-bias diagnostic of the archive's logging arm (its MEASURED R beside its
SIMULATED R, with a paired interval of the gap), per-position survival P(A ≥ j) per arm, the
off-path rates, the law test of the candidate (and baseline) on sampled archive positions, and
the requalification: QUALIFIED when the candidate is EQUIVALENT to the baseline and its law test
passes, NOT QUALIFIED when it is DIFFERENT or its law test fails, else INCONCLUSIVE.

:mod:`specreplay.pipelines.requalify` builds the result (:func:`requalify_run`, the Python API's
``requalify``); :func:`run_requalify` writes and renders it and gives the exit code.
"""

from __future__ import annotations

from pathlib import Path

from specreplay.pipelines.gates import fail_on_code
from specreplay.pipelines.requalify import (
    RequalifyOptions,
    requalify_open,
    requalify_opened,
    requalify_run,
)
from specreplay.render.console import requalify_console
from specreplay.render.files import write_all
from specreplay.replay.backend import Backend
from specreplay.replay.scan import Progress, phase
from specreplay.results.model import Result
from specreplay.results.output import check_out, output_dir

__all__ = ["requalify_run", "run_requalify"]


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
    opened = requalify_open(archive, opts)
    with output_dir(out, force=force, inputs=[archive]) as tmp:
        result = requalify_opened(opened, archive, opts, progress=progress, backend=backend)
        with phase(progress, "plots and files"):
            files = write_all(result, tmp)
    text = requalify_console(result, out, files)
    rq = result.requalification
    return text, fail_on_code(rq.verdict if rq is not None else None, opts.fail_on), result

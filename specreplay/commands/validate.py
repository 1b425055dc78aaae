"""``specreplay validate``: check an archive and report its MEASURED acceptance.

:func:`~specreplay.pipelines.validate.validate_result` returns the typed result or raises
:class:`~specreplay.errors.InvalidArchive` with every error line (the Python API's
``validate``); :func:`run_validate` turns both into the terminal text.
"""

from __future__ import annotations

from pathlib import Path

from specreplay.errors import InvalidArchive
from specreplay.pipelines.options import ValidateOptions
from specreplay.pipelines.validate import validate_result
from specreplay.render.files import outputs_line, write_all
from specreplay.render.tables import (
    archive_summary,
    capture_line,
    ignored_summary,
    measured_tables,
)
from specreplay.replay.scan import Progress, no_progress
from specreplay.results.output import check_out, output_dir

__all__ = ["run_validate", "validate_result"]


def run_validate(
    path: Path,
    opts: ValidateOptions,
    *,
    out: Path | None,
    force: bool,
    progress: Progress = no_progress,
) -> tuple[bool, str]:
    """Validate an archive; return (valid, text): counts and MEASURED R, or the error lines.

    Error lines name requests (they go to stderr, never into an output); ``hash_ids`` hashes
    request ids in what ``out`` holds (:mod:`specreplay.results.privacy`). The text lists the
    folder entries ``opts.ignore`` skipped, one line each, after the archive's summary.
    """
    if out is not None:
        check_out(out, force=force, inputs=[path])
    try:
        result = validate_result(path, opts, progress=progress)
    except InvalidArchive as bad:
        more = " (stopped there; --all lists every one)" if bad.truncated else ""
        return False, "\n".join([*bad.errors, f"{len(bad.errors)} error(s) in {path}{more}"])
    assert result.archive is not None  # measured_result always describes the archive
    text = archive_summary(result.archive, str(path), result.pooled.arms[result.arms[0]])
    text += capture_line(result.extra.get("capture"))
    text += ignored_summary(result.inputs_ignored)
    written = ""
    if out is not None:
        with output_dir(out, force=force, inputs=[path]) as tmp:
            written = "\n" + outputs_line(out, write_all(result, tmp))
    return True, text + "\n\n" + measured_tables(result) + written

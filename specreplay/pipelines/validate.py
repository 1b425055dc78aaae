"""The validate pipeline: check an archive and return its MEASURED acceptance as a typed result.

:func:`validate_result` returns the typed result or raises
:class:`~specreplay.errors.InvalidArchive` with every error line (the Python API's ``validate``).
"""

from __future__ import annotations

from pathlib import Path

from specreplay.errors import InvalidArchive
from specreplay.pipelines.builders import measured_result
from specreplay.pipelines.options import ValidateOptions
from specreplay.replay.scan import Progress, no_progress, scan_archive
from specreplay.results.model import Result
from specreplay.results.privacy import IdHasher, hash_result

__all__ = ["validate_result"]


def validate_result(
    path: Path, opts: ValidateOptions, *, progress: Progress = no_progress
) -> Result:
    """Validate an archive; return its counts and MEASURED R as a typed result.

    ``opts.ignore``: ``--ignore`` globs, entries of a folder archive to skip
    (``inputs_ignored``).

    Raises
    ------
    InvalidArchive
        When the archive has errors (up to ``max_errors`` of them; None: every one).
    """
    logging_arm = opts.logging_arm.spelled if opts.logging_arm is not None else None
    scan = scan_archive(
        path,
        buckets=opts.buckets,
        logging_arm=opts.logging_arm,
        max_errors=opts.max_errors,
        progress=progress,
        ignore=opts.ignore,
    )
    if scan.errors:
        raise InvalidArchive(str(path), tuple(scan.errors), scan.truncated)
    options = {"path": str(path), "buckets": opts.buckets.spec, "logging_arm": logging_arm}
    result = measured_result(scan, command="validate", seed=0, options=options)
    return hash_result(result, IdHasher() if opts.hash_ids else None)  # holds no id today

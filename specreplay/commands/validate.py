"""``specreplay validate``: check an archive and report its MEASURED acceptance."""

from __future__ import annotations

from pathlib import Path

from specreplay.replay.scan import Progress, no_progress, scan_archive
from specreplay.results.builders import measured_result
from specreplay.results.output import check_out, output_dir
from specreplay.results.privacy import IdHasher, hash_result
from specreplay.results.render import write_all
from specreplay.results.tables import archive_summary, measured_tables

__all__ = ["run_validate"]


def run_validate(
    path: Path,
    *,
    max_errors: int | None,
    buckets: str,
    logging_arm: str | None,
    out: Path | None,
    force: bool,
    progress: Progress = no_progress,
    hash_ids: bool = False,
) -> tuple[bool, str]:
    """Validate an archive; return (valid, text): counts and MEASURED R, or the error lines.

    Error lines name requests (they go to stderr, never into an output); ``hash_ids`` hashes
    request ids in what ``out`` holds (:mod:`specreplay.results.privacy`).
    """
    if out is not None:
        check_out(out, force=force, inputs=[path])
    scan = scan_archive(
        path, buckets=buckets, logging_arm=logging_arm, max_errors=max_errors, progress=progress
    )
    errors = scan.errors
    if errors:
        more = " (stopped there; --all lists every one)" if scan.truncated else ""
        return False, "\n".join([*errors, f"{len(errors)} error(s) in {path}{more}"])
    options = {"path": str(path), "buckets": buckets, "logging_arm": logging_arm}
    result = measured_result(scan, command="validate", seed=0, options=options)
    result = hash_result(result, IdHasher() if hash_ids else None)  # holds no id today
    assert result.archive is not None  # measured_result always describes the archive
    text = archive_summary(result.archive, str(path), result.pooled.arms[result.arms[0]])
    if out is not None:
        with output_dir(out, force=force, inputs=[path]) as tmp:
            write_all(result, tmp)
    written = (
        f"\nOutputs: {out}/ (results.json, TABLES.md, cells.parquet)" if out is not None else ""
    )
    return True, text + "\n\n" + measured_tables(result) + written

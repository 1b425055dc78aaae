"""The validate pipeline: check an archive and return its MEASURED acceptance as a typed result.

:func:`validate_result` returns the typed result or raises
:class:`~specreplay.errors.InvalidArchive` with every error line (the Python API's ``validate``).
A folder a recorder wrote (its ``CAPTURE.json`` writers carry a ``"capture"`` object,
docs/api.md#recorder) adds ``extra["capture"]`` (results.json ``capture``): the writers' counts
summed, without the incomplete request ids (outputs hold no request id), with the bad rounds
its recorders dropped (:mod:`specreplay.replay.archive.dropped`): above ``opts.max_dropped``
(``--max-dropped``, 1 % by default) of them the capture is refused before any row is read.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from specreplay.errors import InvalidArchive
from specreplay.pipelines.builders import measured_result
from specreplay.pipelines.options import ValidateOptions
from specreplay.replay.archive.dropped import check_dropped, dropped_of, recorded_writers
from specreplay.replay.archive.validated import force_full
from specreplay.replay.scan import Progress, no_progress, scan_archive
from specreplay.results.model import Result
from specreplay.results.privacy import IdHasher, hash_result

__all__ = ["capture_summary", "validate_result"]

_COUNTS = (
    "requests_seen",
    "requests_sampled",
    "requests_incomplete",
    "rounds_offered",
    "rounds_recorded",
    "rounds_dropped_queue_full",
    "rows",
)


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
    SpecReplayError
        When a capture's recorders dropped more than ``opts.max_dropped`` of its rounds as bad.
    """
    check_dropped(path, opts.max_dropped)
    force_full()  # validate checks every row, always (and writes the marks of clean files)
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
    capture = capture_summary(path)
    if capture is not None:
        result = dataclasses.replace(result, extra={**result.extra, "capture": capture})
    return hash_result(result, IdHasher() if opts.hash_ids else None)  # holds no id today


def capture_summary(path: Path) -> dict[str, Any] | None:
    """Return the recorders' counts of a folder's ``CAPTURE.json``, summed over its writers.

    None when the path is not a folder with a manifest whose writers carry a ``"capture"``
    object (a TraceWriter run that no recorder wrote, synth, a single file), or when the
    manifest cannot be read (validate has already checked the rows; this is a note).

    Returns
    -------
    dict or None
        ``writers`` (with a capture object), ``sample`` (the distinct fractions),
        ``writers_open`` (still recording, or ended without closing: killed; their rows are
        those of their last periodic commit), ``writers_failed`` (stopped on an error after
        committing), and each of the counts (requests_seen … rows) summed, as of each writer's
        last commit; ``rounds_dropped_bad``, ``rounds_dropped_after_bad`` (ints) and
        ``dropped_reasons`` (reason → bad rounds) summed, absent from a manifest written before
        issue 17 (no bad round was counted then).
    """
    recorded = recorded_writers(path)
    captures = [w["capture"] for w in recorded]
    counts = [c.get("counts") for c in captures]
    if not captures or not all(isinstance(c, dict) for c in counts):
        return None
    # before issue 15 a manifest listed closed writers only
    states = [str(w.get("state", "closed")) for w in recorded]
    out: dict[str, Any] = {
        "writers": len(captures),
        "sample": sorted({float(c.get("sample", 1.0)) for c in captures}),
        # a writer still recording, or whose process ended without closing (killed): its rows
        # are those up to its last periodic commit; a failed one stopped on an error
        "writers_open": sum(st == "open" for st in states),
        "writers_failed": sum(st.startswith("failed") for st in states),
    }
    for key in _COUNTS:
        out[key] = sum(int(c.get(key, 0)) for c in counts if isinstance(c, dict))
    dropped = dropped_of(recorded)
    if dropped is not None and any(isinstance(c, dict) and "rounds_dropped_bad" in c
                                   for c in counts):  # fmt: skip
        out["rounds_dropped_bad"] = dropped.bad
        out["rounds_dropped_after_bad"] = dropped.after
        out["dropped_reasons"] = dropped.reasons
    outside = [c["draft_mass_outside"] for c in captures if isinstance(c.get("draft_mass_outside"),
                                                                       dict)]  # fmt: skip
    if outside:  # a capture that renormalised emitted_q on its candidates (the vLLM plugin, v1)
        n = sum(int(o.get("positions", 0)) for o in outside)
        out["draft_mass_outside"] = {
            "positions": n,
            "mean": sum(float(o.get("mean", 0.0)) * int(o.get("positions", 0)) for o in outside)
            / max(n, 1),
            "max": max(float(o.get("max", 0.0)) for o in outside),
            "renormalised": any(bool(o.get("renormalised", True)) for o in outside),
        }
    return out

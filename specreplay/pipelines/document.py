"""Assembling a :class:`~specreplay.results.model.Result`: inputs, environment, timestamp."""

from __future__ import annotations

import datetime as dt
import platform
from collections.abc import Iterable, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import numba
import numpy as np
import polars as pl

from specreplay import __version__
from specreplay.replay.archive.filehash import file_sha256, hash_stats, recorded_digest
from specreplay.replay.archive.validated import commit as commit_mark
from specreplay.replay.archive.validated import summary as validation_summary
from specreplay.results.model import (
    Cell,
    Excluded,
    InputFile,
    InputIgnored,
    InputValidation,
    IntervalMethod,
    LawTest,
    Result,
)
from specreplay.stats.cr2 import METHOD, MIN_DIFFERING, MIN_REQUESTS
from specreplay.stats.studied import STUDY

__all__ = [
    "INTERVAL_METHOD",
    "cache_entry",
    "environment",
    "excluded_entries",
    "ignored_inputs",
    "input_files",
    "new_result",
    "sha256_file",
    "validation_entry",
]


def sha256_file(path: Path) -> str:
    """Return the hex SHA-256 of a file (cached: :mod:`specreplay.replay.archive.filehash`)."""
    return file_sha256(path)


def input_files(files: Sequence[tuple[Path, int | None]]) -> tuple[InputFile, ...]:
    """Return the ``inputs`` entries (path, sha256, bytes, rows) of the files read.

    Called after the replay: each digest is that of the whole file as it was during the run
    (:func:`~specreplay.replay.archive.filehash.recorded_digest`).

    Raises
    ------
    SpecReplayError
        ``PATH: changed during the run`` when a file's stamp moved since the run first took it.
    """
    out = []
    for p, rows in files:
        d = recorded_digest(p)
        commit_mark(p, d.sha256)  # a file this run checked in full: validated once per content
        out.append(InputFile(path=str(p), sha256=d.sha256, bytes=d.bytes, rows=rows))
    return tuple(out)


def validation_entry(inputs: Sequence[InputFile]) -> InputValidation | None:
    """Return results.json ``validation``: how many input files were validated earlier.

    None (the key is left out) when the command read no position archive through the reader.
    See :mod:`~specreplay.replay.archive.validated`.
    """
    v = validation_summary([Path(f.path) for f in inputs])
    if v is None:
        return None
    return InputValidation(
        files=v.files, validated_earlier=v.validated_earlier, validator=v.validator
    )


def cache_entry() -> dict[str, Any]:
    """Return the ``cache`` entry of results.json: input-hash cache entries that failed a check.

    ``recomputed`` counts the cache entries of this run that failed their check (a changed
    payload byte, truncated, header only) and were computed again; ``recomputed_files`` names
    their input files. The per-shard cache of ``--cache`` reports its own under
    ``replay_backend.cache``.
    """
    files = hash_stats().recomputed
    return {"recomputed": len(files), "recomputed_files": list(files)}


def ignored_inputs(entries: Iterable[tuple[str | PathLike[str], str]]) -> tuple[InputIgnored, ...]:
    """Return the ``inputs_ignored`` entries: (path, glob) of what ``--ignore`` skipped."""
    return tuple(InputIgnored(path=str(p), glob=g) for p, g in entries)


def environment() -> dict[str, Any]:
    """Return the ``environment`` entry of results.json."""
    return {
        "python": platform.python_version(),
        "numba": numba.__version__,
        "polars": pl.__version__,
        "numpy": np.__version__,
        "threads": int(numba.get_num_threads()),
    }


def excluded_entries(items: Iterable[dict[str, Any]]) -> tuple[Excluded, ...]:
    """Return typed ``excluded`` entries from the dicts the lower layers count."""
    return tuple(
        Excluded(
            reason=str(e["reason"]),
            rows=e.get("rows"),
            rounds=e.get("rounds"),
            requests=e.get("requests"),
            measured_R_kept=e.get("measured_R_kept"),
            measured_R_all=e.get("measured_R_all"),
        )
        for e in items
    )


INTERVAL_METHOD = IntervalMethod(
    method=METHOD,
    description=(
        "CR2 (Bell-McCaffrey) variance, requests as clusters, t with effective degrees of "
        "freedom after Hall's cubic skewness correction; EQUIVALENT when the Holm-adjusted "
        "TOST p < alpha, else DIFFERENT when the Holm-adjusted p of delta = 0 < alpha, else "
        "INCONCLUSIVE. Below min_requests requests (the verdict minimum) never EQUIVALENT, "
        "and DIFFERENT only where the CR2 and sign-flip tests both reject at alpha/2 (the hull "
        "of their intervals is shown, method cr2-eff-hall+sign-flip); below min_differing "
        "differing requests decided by the conservative hull (EQUIVALENT only inside the "
        "margin, never DIFFERENT); EQUIVALENT with zero width only for identical inputs"
    ),
    min_requests=MIN_REQUESTS,
    min_differing=MIN_DIFFERING,
    study=STUDY,
)
"""The ``interval_method`` of every result whose cells carry deltas."""


def new_result(
    *,
    command: str,
    seed: int,
    inputs: tuple[InputFile, ...],
    options: dict[str, Any],
    assumptions: Sequence[str],
    excluded: tuple[Excluded, ...] = (),
    arms: Sequence[str] = (),
    cells: tuple[Cell, ...] = (),
    law_tests: tuple[LawTest, ...] = (),
    **fields: Any,
) -> Result:
    """Return a :class:`Result` stamped with this version, the time and the environment.

    Its ``extra`` holds the ``cache`` entry (:func:`cache_entry`) beside any ``extra`` given.
    """
    more = fields.pop("extra", None) or {}
    if "validation" not in fields:
        fields["validation"] = validation_entry(inputs)
    if "interval_method" not in fields and any(c.deltas for c in cells):
        fields["interval_method"] = INTERVAL_METHOD
    return Result(
        command=command,
        version=__version__,
        created_utc=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        seed=seed,
        environment=environment(),
        inputs=inputs,
        options=options,
        assumptions=tuple(assumptions),
        excluded=excluded,
        arms=tuple(arms),
        law_tests=law_tests,
        cells=cells,
        extra={"cache": cache_entry(), **more},
        **fields,
    )

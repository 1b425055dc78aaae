"""The interval pipeline: a paired bootstrap interval between two observed arms.

:func:`interval_result` reads both inputs (round traces, Spec-Bench or Medusa answers), pairs their
requests, bootstraps Δ = R_B − R_A per cell and returns the typed result; the command checks the
inputs' kinds first (:func:`interval_kinds`), before it makes its output folder.
:func:`interval_memory_result` does the same for two arms given in memory (the Python API's
arrays or frames, :mod:`specreplay.replay.archive.memory`). Both keep the comparison's bootstrap
replicates on the result (``Result.replicates``, never written) for ``Result.to_arviz()``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from specreplay.errors import SpecReplayError
from specreplay.pipelines.builders import comparison_cells
from specreplay.pipelines.document import excluded_entries, ignored_inputs, input_files, new_result
from specreplay.pipelines.options import IntervalOptions
from specreplay.replay.scan import Progress, no_progress
from specreplay.results.model import Result
from specreplay.results.privacy import IdHasher, hash_result
from specreplay.stats.armdata import ArmData
from specreplay.stats.buckets import Buckets
from specreplay.stats.compare import Comparison

__all__ = [
    "IntervalOptions",
    "interval_compared",
    "interval_inputs",
    "interval_kinds",
    "interval_memory_result",
    "interval_result",
    "short_names",
]


def interval_result(
    path_a: Path, path_b: Path, opts: IntervalOptions, *, progress: Progress = no_progress
) -> Result:
    """Read both arms, pair them and bootstrap Δ = R_B − R_A per cell; return the typed result."""
    return interval_compared(path_a, path_b, opts, interval_kinds(path_a, path_b, opts), progress)


def interval_kinds(path_a: Path, path_b: Path, opts: IntervalOptions) -> tuple[str, str]:
    """Check the options against the inputs' kinds (before any work); return the kinds."""
    from specreplay.replay.archive.importers import detect_kind

    kinds = (detect_kind(path_a, opts.ignore), detect_kind(path_b, opts.ignore))
    _check_flags(kinds, question_file=opts.question_file, choice=opts.choice, drafted=opts.drafted)
    return kinds


def interval_compared(
    path_a: Path,
    path_b: Path,
    opts: IntervalOptions,
    kinds: tuple[str, str],
    progress: Progress,
) -> Result:
    """Read both arms, pair them and bootstrap Δ per cell (kinds from :func:`interval_kinds`)."""
    bk = opts.buckets
    arm_a = _load(path_a, kinds[0], opts.names[0], opts, bk)
    arm_b = _load(path_b, kinds[1], opts.names[1], opts, bk)
    if opts.names == (None, None):
        short_a, short_b = short_names(arm_a.name, arm_b.name)
        arm_a = dataclasses.replace(arm_a, name=short_a)
        arm_b = dataclasses.replace(arm_b, name=short_b)
    # one file read the same way twice: one computation by construction ("identical inputs")
    same = Path(path_a).resolve() == Path(path_b).resolve() and kinds[0] == kinds[1]
    return _paired_result(arm_a, arm_b, opts, opts.to_json(path_a, path_b), progress, same)


def interval_memory_result(
    data_a: object, data_b: object, opts: IntervalOptions, *, progress: Progress = no_progress
) -> Result:
    """Pair two arms given in memory and bootstrap Δ = R_B − R_A per cell; return the result.

    Each arm is a ``(rounds, retained_tokens)`` pair of 1-D arrays, a mapping or a polars
    DataFrame (``ArmInMemory``, :mod:`specreplay.replay.archive.memory`; anything else is an
    error): the figures are those of the same requests read from a per-request sums file. The
    arms are named ``opts.names`` (default ``A`` and ``B``); results.json records no input file
    and ``options.a``/``b`` null. The options for input files (``question_file``, ``choice``,
    ``drafted``, ``ignore``) are errors.
    """
    from specreplay.replay.archive.memory import memory_arms

    if any(isinstance(d, str | os.PathLike) for d in (data_a, data_b)):
        raise SpecReplayError(
            "interval: give both arms as paths or both in memory (arrays, a mapping or a frame)"
        )
    for key, given in (
        ("question_file", opts.question_file is not None),
        ("choice", opts.choice != 0),
        ("drafted", opts.drafted is not None),
        ("ignore", bool(opts.ignore)),
    ):
        if given:
            raise SpecReplayError(f"{key} applies to input files, not to arms given in memory")
    names = (opts.names[0] or "A", opts.names[1] or "B")
    arm_a, arm_b = memory_arms(data_a, data_b, names=names, buckets=opts.buckets)
    return _paired_result(arm_a, arm_b, opts, opts.to_json(None, None), progress)


def _paired_result(
    arm_a: ArmData,
    arm_b: ArmData,
    opts: IntervalOptions,
    options: dict[str, Any],
    progress: Progress,
    same: bool = False,
) -> Result:
    """Pair two read arms, bootstrap Δ per cell and return the result (replicates kept).

    ``same``: the arms are one file read the same way twice (:func:`compare`'s ``same``).
    """
    from specreplay.stats.arviz_bridge import ComparisonReplicates, hdi_eti
    from specreplay.stats.compare import compare
    from specreplay.stats.pairing import pair_arms

    bk = opts.buckets
    if arm_a.name == arm_b.name:
        arm_b = dataclasses.replace(arm_b, name=arm_b.name + " (B)")
    ps, excluded = pair_arms(arm_a, arm_b, buckets=bk, drop_unpaired=opts.drop_unpaired)
    boot = opts.boot
    with progress(f"bootstrap ({boot.n_boot:,} resamples)", None):
        comp = compare(
            ps,
            arm_a=arm_a.name,
            arm_b=arm_b.name,
            n_boot=boot.n_boot,
            seed=opts.seed,
            stratify=boot.stratify,
            level=boot.level,
            margin=boot.margin,
            min_requests=boot.min_requests,
            label=arm_a.label,
            same=same,
        )
    comp = hdi_eti(comp, prob=boot.level)
    result = _interval_result(comp, arm_a, arm_b, excluded, options, opts.seed)
    ids = [*arm_a.sums.get_column("request_id"), *arm_b.sums.get_column("request_id")]
    result = dataclasses.replace(result, replicates=ComparisonReplicates(comp))
    return hash_result(result, IdHasher(ids) if opts.hash_ids else None)


def interval_inputs(path_a: Path, path_b: Path, opts: IntervalOptions) -> list[Path]:
    """Return the input paths of an interval run (``--out`` may not touch them)."""
    return [p for p in (path_a, path_b, opts.question_file) if p is not None]


def _load(path: Path, kind: str, name: str | None, opts: IntervalOptions, bk: Buckets) -> ArmData:
    """Read one arm, passing each input option only to the kinds that use it."""
    from specreplay.replay.archive.importers import read_arm

    return read_arm(
        path,
        buckets=bk,
        question_file=opts.question_file if kind == "medusa" else None,
        choice=opts.choice if kind in ("spec-bench", "medusa") else 0,
        drafted=opts.drafted if kind == "spec-bench" else None,
        name=name,
        ignore=opts.ignore,
    )


def _check_flags(
    kinds: tuple[str, str], *, question_file: Path | None, choice: int, drafted: int | None
) -> None:
    """Refuse an input option that neither input kind uses (it would be silently ignored)."""
    for flag, used_by, given in (
        ("--question-file", ("medusa",), question_file is not None),
        ("--choice", ("spec-bench", "medusa"), choice != 0),
        ("--drafted", ("spec-bench",), drafted is not None),
    ):
        if given and not set(kinds) & set(used_by):
            raise SpecReplayError(
                f"{flag} applies to {' and '.join(used_by)} inputs; A is {kinds[0]}, "
                f"B is {kinds[1]}"
            )


def _interval_result(
    comp: Comparison,
    arm_a: ArmData,
    arm_b: ArmData,
    excluded: list[dict[str, Any]],
    options: dict[str, Any],
    seed: int,
) -> Result:
    files = list(dict.fromkeys([*arm_a.files, *arm_b.files]))
    notes = list(dict.fromkeys([*arm_a.notes, *arm_b.notes]))
    return new_result(
        command="interval",
        seed=seed,
        inputs=input_files(files),
        options=options,
        assumptions=[
            "Requests are the bootstrap unit (clusters): all rounds of a request are "
            "resampled together; strata = " + str(options["stratify"]) + ".",
            "R = Σ retained tokens / Σ rounds over the cell (ratio of sums, pooled); "
            "each arm keeps its own round counts.",
            *notes,
        ],
        excluded=excluded_entries([*arm_a.excluded, *arm_b.excluded, *excluded]),
        arms=[arm_a.name, arm_b.name],
        cells=comparison_cells(comp),
        sources={arm_a.name: arm_a.kind, arm_b.name: arm_b.kind},
        inputs_ignored=ignored_inputs([*arm_a.ignored, *arm_b.ignored]),
    )


def short_names(a: str, b: str, longest: int = 40) -> tuple[str, str]:
    """Shorten two default arm labels (file stems) to what tells them apart.

    The stems are split on ``-``; the tokens both end with are dropped, and of the tokens both
    start with only the last is kept (it usually names the model family). Labels that are
    already short (≤ ``longest``) or that would become empty are kept whole.

    Examples
    --------
    >>> short_names("medusa-vicuna-7b-v1.3-temperature-0.0-posterior_alpha-0.3",
    ...             "medusa-vicuna-13b-v1.3-temperature-0.0-posterior_alpha-0.3")
    ('vicuna-7b', 'vicuna-13b')
    >>> short_names("baseline", "candidate")
    ('baseline', 'candidate')
    """
    if len(a) <= longest and len(b) <= longest:
        return a, b
    ta, tb = a.split("-"), b.split("-")
    tail = 0
    while tail < min(len(ta), len(tb)) - 1 and ta[-1 - tail] == tb[-1 - tail]:
        tail += 1
    ta, tb = ta[: len(ta) - tail], tb[: len(tb) - tail]
    head = 0
    while head < min(len(ta), len(tb)) - 1 and ta[head] == tb[head]:
        head += 1
    keep = max(head - 1, 0)
    sa, sb = "-".join(ta[keep:]), "-".join(tb[keep:])
    if not sa or not sb or sa == sb:
        return a, b
    return sa, sb
